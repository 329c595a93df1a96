/* The generated trainer timed from C, with no Python in the loop: `driver X.bin Y.bin BUDGET`
 * trains on one batch (inputs of ET_INPUT, labels of ET_LABEL: each int32_t or float) and prints the
 * median step time, the steps timed, the peak RSS and the first steps' losses as one JSON line,
 * like workers.py. It links the very shared library the Python API loads, so the two differ only
 * by the Python around it. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "model.h"

#define WARMUP_NS 50000000LL
#define MIN_STEPS 5
#define MAX_STEPS 5000
#define LOSSES 3 /* as workers.py */

static long long now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void *read_file(const char *path, size_t size)
{
    void *data = malloc(size);
    FILE *f = fopen(path, "rb");
    if (!data || !f || fread(data, 1, size, f) != size) {
        fprintf(stderr, "cannot read %lu bytes from %s\n", (unsigned long)size, path);
        exit(2);
    }
    fclose(f);
    return data;
}

static const ET_INPUT *x;
static const ET_LABEL *y;

static float step(void)
{
    float loss;
    if (model_train_step(MODEL_MAX_BATCH, x, y, &loss) != ET_OK || model_optimizer_step() != ET_OK || model_lazy_reset_grad() != ET_OK) {
        fprintf(stderr, "a training step failed\n");
        exit(1);
    }
    return loss;
}

/* VmHWM of /proc/self/status: ru_maxrss would include the Python process that exec'd this one. */
static long peak_rss_kb(void)
{
    char line[256];
    long kb = -1;
    FILE *f = fopen("/proc/self/status", "r");
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "VmHWM:", 6) == 0) kb = atol(line + 6);
    if (f) fclose(f);
    return kb;
}

static int by_value(const void *a, const void *b)
{
    long long u = *(const long long *)a, v = *(const long long *)b;
    return (u > v) - (u < v);
}

int main(int argc, char **argv)
{
    static long long times[MAX_STEPS];
    float losses[LOSSES];
    long long start, budget_ns;
    int i, n = 0;
    if (argc != 4) {
        fprintf(stderr, "usage: %s X.bin Y.bin BUDGET_SECONDS\n", argv[0]);
        return 2;
    }
    x = read_file(argv[1], ET_X_COUNT * sizeof *x);
    y = read_file(argv[2], ET_Y_COUNT * sizeof *y);
    budget_ns = (long long)(atof(argv[3]) * 1e9);
    if (model_init() != ET_OK) return 1;
    for (i = 0; i < LOSSES; i++) losses[i] = step();
    start = now_ns();
    while (now_ns() - start < WARMUP_NS) step();
    start = now_ns();
    while (n < MAX_STEPS && (n < MIN_STEPS || now_ns() - start < budget_ns)) {
        long long t0 = now_ns();
        step();
        times[n++] = now_ns() - t0;
    }
    qsort(times, (size_t)n, sizeof times[0], by_value);
    printf("{\"median_ns\": %lld, \"steps\": %d, \"peak_rss_kb\": %ld, \"losses\": [",
           n % 2 ? times[n / 2] : (times[n / 2 - 1] + times[n / 2]) / 2, n, peak_rss_kb());
    for (i = 0; i < LOSSES; i++) printf("%s%.9g", i ? ", " : "", (double)losses[i]); /* 9 digits: exact */
    printf("]}\n");
    return 0;
}
