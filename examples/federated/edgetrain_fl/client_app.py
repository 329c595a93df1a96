"""The ClientApp: a device running edgetrain's generated C trainer on its own digits."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from flwr.app import Array, ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from edgetrain_fl.task import Trainer

app = ClientApp()


def _setup(msg: Message, context: Context):
    work = Path(str(context.run_config["work-dir"]))
    cid = int(context.node_config["partition-id"])
    trainer = Trainer(work)
    trainer.load({k: v.numpy() for k, v in msg.content["arrays"].items()})
    return trainer, np.load(work / f"client{cid}.npz"), cid


@app.train()
def train(msg: Message, context: Context) -> Message:
    """Receive the global model, train local epochs, send back the change (or the parameters)."""
    trainer, data, cid = _setup(msg, context)
    trainer.module.set_reference()
    server_round = int(msg.content["config"]["server-round"])
    loss = trainer.fit(
        data["x_train"], data["y_train"], int(context.run_config["local-epochs"]), seed=1000 * server_round + cid
    )
    if context.run_config["send-delta"]:
        values = trainer.split(trainer.module.get_delta())  # what a device would transmit
    else:
        values = trainer.arrays()
    content = RecordDict(
        {
            "arrays": ArrayRecord({k: Array(v) for k, v in values.items()}),
            "metrics": MetricRecord({"num-examples": len(data["x_train"]), "train-loss": loss}),
        }
    )
    return Message(content=content, reply_to=msg)


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    """The global model on this client's held-out digits, through the C's eval_step and infer."""
    trainer, data, _ = _setup(msg, context)
    loss, accuracy = trainer.evaluate(data["x_val"], data["y_val"])
    metrics = MetricRecord({"num-examples": len(data["x_val"]), "eval-loss": loss, "eval-accuracy": accuracy})
    return Message(content=RecordDict({"metrics": metrics}), reply_to=msg)
