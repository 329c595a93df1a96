/* Start, console and trap handling for QEMU's RISC-V virt board, in machine mode with -bios none:
 * a stack, copying initialized data (and the thread-local block picolibc's errno lives in) to RAM,
 * clearing .bss, the FPU switched on where there is one, then main() and exit() through picolibc's
 * semihosting (which ends QEMU with the program's status). */
#include <semihost.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* Arrays, not objects: the loops below walk from one linker symbol to the next. */
extern uint32_t __data_start__[], __data_end__[], __data_load__[], __tdata_start__[], __tdata_end__[],
    __tdata_load__[], __bss_start__[], __bss_end__[];
extern int main(void);

/* The assembler takes CSR instructions only with Zicsr in -march, which rv32imac leaves out (the
 * F extension brings it): named for these instructions alone, so -march still selects picolibc's
 * multilib. */
#define CSR_INSTRUCTION(text) ".option push\n\t.option arch, +zicsr\n\t" text "\n\t.option pop"

void _start(void);
void board_start(void);
void board_trap(void);

/* The board jumps here, the start of RAM (riscv-virt.ld puts .text.start first); C needs a stack. */
__attribute__((naked, section(".text.start"))) void _start(void)
{
    __asm__ volatile("la sp, __stack_top__\n\tj board_start");
}

/* Any trap (illegal instruction, access fault) ends the run with a status instead of hanging until
 * the emulator's timeout. mtvec's direct mode needs the handler 4-byte aligned. */
__attribute__((aligned(4))) void board_trap(void)
{
    _exit(70);
}

/* picolibc's stdio leaves stdin, stdout and stderr to the program. Ours write lines through
 * semihosting to ":tt" opened for writing, which the emulator sends to its stdout, as newlib's
 * rdimon does on the MPS2 boards (picolibc's own console writes a character at a time to QEMU's
 * semihosting console, which is QEMU's stderr, or a character device that, on a terminal, makes
 * the emulator take the terminal). A line at a time: one trap into the emulator per line. */
static char console_line[128];
static size_t console_used;
static int console_handle = -1;

static int console_flush(FILE *stream)
{
    size_t used = console_used;
    (void)stream;
    console_used = 0;
    if (used == 0) return 0;
    if (console_handle < 0) console_handle = sys_semihost_open(":tt", SH_OPEN_W);
    return console_handle >= 0 && sys_semihost_write(console_handle, console_line, used) == 0 ? 0 : EOF;
}

static int console_put(char c, FILE *stream)
{
    console_line[console_used++] = c;
    if ((c == '\n' || console_used == sizeof console_line) && console_flush(stream) != 0) return EOF;
    return (unsigned char)c;
}

static FILE console = FDEV_SETUP_STREAM(console_put, NULL, console_flush, _FDEV_SETUP_WRITE);
FILE *const stdin = &console;
FILE *const stdout = &console;
FILE *const stderr = &console;

/* Registered with atexit(): what is left of the last line goes out before the emulator ends. */
static void console_close(void)
{
    console_flush(&console);
}

static void copy_words(uint32_t *dst, const uint32_t *end, const uint32_t *src)
{
    while (dst < end) *dst++ = *src++;
}

void board_start(void)
{
    uint32_t *dst;
    __asm__ volatile(CSR_INSTRUCTION("csrw mtvec, %0") : : "r"(board_trap));
    copy_words(__data_start__, __data_end__, __data_load__);
    copy_words(__tdata_start__, __tdata_end__, __tdata_load__);
    for (dst = __bss_start__; dst < __bss_end__; dst++) *dst = 0u;
    /* The thread pointer: the local-exec TLS model addresses errno from it. */
    __asm__ volatile("mv tp, %0" : : "r"(__tdata_start__));
#if defined(__riscv_flen)
    /* mstatus.FS = Initial: float instructions trap while it is Off (its reset value). */
    __asm__ volatile(CSR_INSTRUCTION("csrs mstatus, %0") : : "r"(1u << 13));
#endif
    atexit(console_close);
    exit(main());
}
