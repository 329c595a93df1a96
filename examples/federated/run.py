"""Federated learning of a digits classifier with Flower's deployment engine, on loopback: one
SuperLink, one SuperNode per client, and `flwr run` of the app in this directory. Each client is
edgetrain's generated C trainer on its own non-IID share of scikit-learn's digits; the server
aggregates with FedAvg (or FedAdam) and scores the global model after every round.

Prints `round <r> accuracy <a>` per round, then the same model trained centrally on the pooled
data for comparison. Every process it starts is stopped when it ends, also on errors and timeouts.

Run: python examples/federated/run.py   (or `make federated`). Needs the `federated` extra.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path

APP = Path(__file__).resolve().parent
sys.path.insert(0, str(APP))

from edgetrain_fl import task  # noqa: E402

ROUND = re.compile(r"^round \d+ accuracy [0-9.]+$")
CLIENTS = re.compile(r"^clients' held-out digits: ")


def _tool(name: str) -> str:
    """Flower's commands from this interpreter's environment, else from PATH."""
    local = Path(sys.executable).parent / name
    found = str(local) if local.exists() else shutil.which(name)
    if not found:
        sys.exit(f"{name} not found: pip install 'edgetrain[federated]'")
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _children() -> dict[int, list[int]]:
    """parent pid -> child pids, from /proc."""
    tree: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # exited meanwhile
        tree.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    return tree


class Processes:
    """The background processes started here and everything they start (Flower detaches its
    SuperExec into a session of its own, which spawns the ServerApp and ClientApp processes)."""

    def __init__(self, logs: Path, env: dict):
        self.logs, self.env, self.running = logs, env, []

    def start(self, name: str, args: list[str]) -> subprocess.Popen:
        with open(self.logs / f"{name}.log", "w") as log:
            proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True)
        self.running.append(proc)
        return proc

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM lets Flower shut down in order; whatever is left after `grace` is killed."""
        tree, family = _children(), []
        pending = [p.pid for p in self.running]
        while pending:
            pid = pending.pop()
            family.append(pid)
            pending += tree.get(pid, [])
        for proc in reversed(self.running):  # SuperNodes before the SuperLink
            _signal(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for proc in self.running:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        while time.monotonic() < deadline and any(_alive(pid) for pid in family):
            time.sleep(0.2)
        for pid in family:
            _signal(pid, signal.SIGKILL)
        for proc in self.running:
            proc.wait()
        self.running.clear()


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _wait_for_port(port: int, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the SuperLink exited with status {proc.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise TimeoutError(f"the SuperLink did not listen on port {port} within {timeout:.0f} s")


def _flwr_run(flwr: str, env: dict, run_config: str, log: Path, result: Path, timeout: float) -> list[float]:
    """`flwr run --stream`, echoing the round lines as they come; the ServerApp's result file is
    the record (a log stream can end before its run does). Returns the accuracy of every round."""
    deadline = time.monotonic() + timeout
    printed, run_id = 0, None
    result.unlink(missing_ok=True)
    proc = subprocess.Popen(
        [flwr, "run", str(APP), "edgetrain", "--stream", "--run-config", run_config],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    watchdog = threading.Timer(timeout, proc.kill)  # ends the stream below, too
    watchdog.start()
    try:
        with open(log, "w") as out:
            for line in proc.stdout:
                out.write(line)
                text = line.strip()
                if ROUND.match(text):
                    print(text, flush=True)
                    printed += 1
                elif CLIENTS.match(text):
                    print(text, flush=True)
                elif run_id is None and (started := re.search(r"started run (\d+)", text)):
                    run_id = started.group(1)
        proc.wait()
    finally:
        watchdog.cancel()
        proc.kill()
        proc.wait()
    while run_id and not result.exists() and time.monotonic() < deadline:
        listing = subprocess.run(
            [flwr, "ls", "edgetrain", "--run-id", run_id, "--format", "json"], capture_output=True, text=True, env=env
        ).stdout
        try:
            if json.loads(listing)["runs"][0]["status"].startswith("finished"):
                break
        except (ValueError, KeyError, IndexError):
            pass  # not listed yet
        time.sleep(2)
    if not result.exists():
        raise RuntimeError(
            f"the federated run ended without a result (flwr run status {proc.returncode}; logs: {log.parent})"
        )
    record = json.loads(result.read_text())
    for r, accuracy in enumerate(record["accuracy"][printed:], start=printed + 1):
        print(f"round {r} accuracy {accuracy:.4f}", flush=True)
    return record["accuracy"]


def run(
    work: Path,
    clients: int,
    rounds: int,
    local_epochs: int,
    strategies: list[str],
    send_delta: bool,
    timeout: float,
    seed: int = 0,
) -> dict:
    started = time.monotonic()
    info = task.prepare(work, clients, seed)
    central = task.centralized_accuracy(work, rounds * local_epochs, seed)  # also builds the C library once
    print(
        f"{clients} clients, non-IID digits (training examples per client: "
        f"{', '.join(str(sum(c)) for c in info['class_counts'])}); {rounds} rounds of {local_epochs} local epochs",
        flush=True,
    )

    home, logs = work / "flwr", work / "logs"
    home.mkdir(exist_ok=True)
    logs.mkdir(exist_ok=True)
    port = _free_port()
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "edgetrain"\n\n[superlink.edgetrain]\naddress = "127.0.0.1:{port}"\ninsecure = true\n'
    )
    # Everything Flower keeps (installed apps, configuration) stays in the work directory; the
    # clients share one build of the trainer; Flower starts its helpers (flower-superexec) from PATH.
    env = {
        **os.environ,
        "FLWR_HOME": str(home),
        "EDGETRAIN_CACHE": str(work / "cache"),
        "PYTHONUNBUFFERED": "1",
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
        "FLWR_SUPEREXEC_TASK_POLL_INTERVAL": "0.2",
    }  # launch each ClientApp sooner (default 1 s)
    results = {"central": central}
    with ExitStack() as stack:
        procs = Processes(logs, env)
        stack.callback(procs.stop)
        superlink = procs.start(
            "superlink",
            [_tool("flower-superlink"), "--insecure", "--port", str(port), "--disable-runtime-dependency-installation"],
        )
        _wait_for_port(port, superlink, timeout=30)
        for cid in range(clients):
            procs.start(
                f"supernode{cid}",
                [
                    _tool("flower-supernode"),
                    "--insecure",
                    "--superlink",
                    f"127.0.0.1:{port}",
                    "--port",
                    str(_free_port()),
                    "--max-wait-time",
                    "60",
                    "--node-config",
                    f"partition-id={cid} num-partitions={clients}",
                ],
            )
        for strategy in strategies:
            print(f"strategy {strategy}", flush=True)
            config = (
                f'work-dir="{work}" num-server-rounds={rounds} local-epochs={local_epochs} '
                f'strategy="{strategy}" send-delta={"true" if send_delta else "false"} min-clients={clients}'
            )
            remaining = timeout - (time.monotonic() - started)
            results[strategy] = _flwr_run(
                _tool("flwr"), env, config, logs / f"run-{strategy}.log", work / f"result-{strategy}.json", remaining
            )
    for strategy in strategies:
        final = results[strategy][-1]
        print(
            f"{strategy}: final global accuracy {final:.4f}; centralized training on the same data "
            f"{central:.4f} ({100 * (final - central):+.1f} points)"
        )
    print(f"({time.monotonic() - started:.0f} s)")
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--local-epochs", type=int, default=5)
    parser.add_argument("--strategy", default="fedavg", help="fedavg, fedadam, or both comma-separated")
    parser.add_argument("--send-parameters", action="store_true", help="clients send parameters, not deltas")
    parser.add_argument("--timeout", type=float, help="seconds for the whole run (default: 280 per strategy)")
    parser.add_argument("--out", type=Path, help="keep the work directory (logs, results) here")
    args = parser.parse_args()
    strategies = [s.strip() for s in args.strategy.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        work = args.out.resolve() if args.out else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        try:
            run(
                work,
                args.clients,
                args.rounds,
                args.local_epochs,
                strategies,
                not args.send_parameters,
                args.timeout or 280 * len(strategies),
            )
        except (RuntimeError, TimeoutError) as exc:
            for log in sorted((work / "logs").glob("*.log")):  # the work directory may be temporary
                tail = log.read_text(errors="replace").splitlines()[-15:]
                print(f"--- {log.name} (last lines)", *tail, sep="\n", file=sys.stderr)
            sys.exit(f"federated run failed: {exc}")


if __name__ == "__main__":
    main()
