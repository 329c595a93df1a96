"""The ServerApp: FedAvg or FedAdam over the clients' updates; after every round the global model
is scored on the held-out test digits by an edgetrain trainer (the generated C's infer)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAdam, FedAvg

from edgetrain_fl.task import Trainer

app = ServerApp()


class FromDeltas:
    """Clients send the change since the model they received (edgetrain's get_delta); turn each
    back into parameters so any Flower strategy aggregates as usual."""

    def configure_train(self, server_round, arrays, config, grid):
        self._sent = {k: v.numpy() for k, v in arrays.items()}
        return super().configure_train(server_round, arrays, config, grid)

    def aggregate_train(self, server_round, replies):
        replies = list(replies)
        for reply in replies:
            if reply.has_content():
                delta = reply.content["arrays"]
                reply.content["arrays"] = ArrayRecord({k: Array(self._sent[k] + v.numpy()) for k, v in delta.items()})
        return super().aggregate_train(server_round, replies)


class EvaluateLastRound:
    """Federated evaluation (each client scores the global model on its own held-out digits) after
    the last round only: every Flower exchange costs seconds of polling, and the server scores the
    global model on the test digits after every round anyway."""

    last_round = 0

    def configure_evaluate(self, server_round, arrays, config, grid):
        if server_round < self.last_round:
            return []
        return super().configure_evaluate(server_round, arrays, config, grid)


class QuickPoll:
    """The Grid, with replies polled every 0.2 s instead of Grid.send_and_receive's 3 s: on
    loopback most of a round would otherwise be spent waiting."""

    def __init__(self, grid: Grid):
        self._grid = grid

    def __getattr__(self, name):
        return getattr(self._grid, name)

    def send_and_receive(self, messages, *, timeout=None):
        pending = set(self._grid.push_messages(messages))
        end = time.monotonic() + (timeout if timeout is not None else float("inf"))
        replies = []
        while pending and time.monotonic() < end:
            got = list(self._grid.pull_messages(pending))
            replies += got
            pending -= {m.metadata.reply_to_message_id for m in got}
            if pending:
                time.sleep(0.2)
        return replies


STRATEGIES = {"fedavg": FedAvg, "fedadam": FedAdam}


@app.main()
def main(grid: Grid, context: Context) -> None:
    cfg = context.run_config
    work = Path(str(cfg["work-dir"]))
    clients = int(cfg["min-clients"])
    rounds = int(cfg["num-server-rounds"])
    base = STRATEGIES[str(cfg["strategy"])]
    mixins = (EvaluateLastRound,) + ((FromDeltas,) if cfg["send-delta"] else ())
    strategy = type(base.__name__, (*mixins, base), {"last_round": rounds})(
        min_train_nodes=clients, min_evaluate_nodes=clients, min_available_nodes=clients
    )

    server = Trainer(work)
    test = np.load(work / "test.npz")
    history = []

    def evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        server.load({k: v.numpy() for k, v in arrays.items()})
        loss, accuracy = server.evaluate(test["x"], test["y"])
        if server_round:
            history.append(accuracy)
            print(f"round {server_round} accuracy {accuracy:.4f}", flush=True)
        return MetricRecord({"loss": loss, "accuracy": accuracy})

    initial = ArrayRecord({k: Array(v) for k, v in server.arrays().items()})
    result = strategy.start(
        grid=QuickPoll(grid),
        initial_arrays=initial,
        num_rounds=rounds,
        timeout=float(cfg["round-timeout"]),
        evaluate_fn=evaluate,
        train_config=ConfigRecord({}),
        evaluate_config=ConfigRecord({}),
    )
    federated_eval = {r: dict(m) for r, m in result.evaluate_metrics_clientapp.items()}
    if rounds in federated_eval:
        m = federated_eval[rounds]
        print(f"clients' held-out digits: accuracy {m['eval-accuracy']:.4f} loss {m['eval-loss']:.4f}", flush=True)
    partial = work / f"result-{cfg['strategy']}.json.partial"
    partial.write_text(json.dumps({"accuracy": history, "client_evaluation": federated_eval}, default=float))
    partial.replace(partial.with_suffix(""))  # whole, or not there: run.py polls for it
