"""One benchmark case (a model at a batch: its graph, data and every system's artifacts) and the
processes that prepare and measure it, shared by speed.py and instructions.py."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import torch

BENCH = Path(__file__).resolve().parent
ORT_PYTHON = BENCH / ".venv-ort" / "bin" / "python"
LEARNING_RATE = 1e-3

sys.path.insert(0, str(BENCH))
from models import HELD_OUT, MODELS, TAGGERS, VOCABULARY, export, torch_model  # noqa: E402
from instructions import c_type  # noqa: E402
from workers import cache_dir  # noqa: E402


GATES = {"GRU": 3, "LSTM": 4}


def step_flops(graph: onnx.ModelProto) -> int:
    """FLOPs of a training step's Conv, Gemm, MatMul, GRU and LSTM nodes (static shapes): 2 per
    multiply-accumulate, for the forward product, the weight gradient and the input gradient, which a
    node reading the graph's input does not need. A recurrent node's products are its gates' over
    the input and the hidden state, at every position and in every direction."""
    graph = onnx.shape_inference.infer_shapes(graph).graph
    shapes = {
        v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
        for v in [*graph.input, *graph.output, *graph.value_info]
    }
    shapes.update({t.name: list(t.dims) for t in graph.initializer})
    data_inputs = {i.name for i in graph.input} - {t.name for t in graph.initializer}
    flops = 0
    for node in graph.node:
        out = int(np.prod(shapes[node.output[0]]))
        if node.op_type == "Conv":
            macs = out * int(np.prod(shapes[node.input[1]][1:]))
        elif node.op_type == "Gemm":
            trans_a = next((a.i for a in node.attribute if a.name == "transA"), 0)
            macs = out * shapes[node.input[0]][0 if trans_a else 1]
        elif node.op_type == "MatMul":
            macs = out * shapes[node.input[0]][-1]
        elif node.op_type in GATES:  # Y: (positions, directions, batch, hidden); X: (.., .., input)
            macs = out * GATES[node.op_type] * (shapes[node.input[0]][-1] + shapes[node.output[0]][-1])
        else:
            continue
        flops += 2 * macs * (2 if node.input[0] in data_inputs else 3)
    return flops


def build_mode(system: str) -> str:
    return "fast" if system.endswith("-fast") else "reproducible"


class Case:
    """One model at one batch: its graph, data and every system's artifacts under `directory`."""

    def __init__(self, name: str, batch: int, directory: Path):
        self.name, self.batch, self.directory = name, batch, directory
        self.key = f"{name}/{batch}"

    def prepare(self) -> None:
        """The graph every system trains, the data, and PyTorch's copy of the weights."""
        d = self.directory
        d.mkdir(parents=True, exist_ok=True)
        model = torch_model(self.name)
        graph, trainable, frozen = export(model, self.name, self.batch)
        self.flops = step_flops(graph)
        self.batch_norm = any(node.op_type == "BatchNormalization" for node in graph.graph.node)
        onnx.save(graph, d / "model.onnx")
        _, sample, classes = {**MODELS, **HELD_OUT}[self.name]
        rng = np.random.default_rng(0)
        if self.name in TAGGERS:  # token ids in, a label per position
            x = rng.integers(0, VOCABULARY, (self.batch, *sample))
            y = rng.integers(0, classes, x.size)
        else:
            x = rng.standard_normal((self.batch, *sample), dtype=np.float32)
            y = rng.integers(0, classes, self.batch) if classes else x  # no classes: reconstruct the input
        np.save(d / "x.npy", x)
        np.save(d / "y.npy", y)
        for name, values in (("x", x), ("y", y)):  # the C driver's copies, in the types the trainer takes
            values.astype(np.int32 if c_type(values) == "int32_t" else np.float32).tofile(d / f"{name}.bin")
        (d / "spec.json").write_text(
            json.dumps(
                {
                    "model": self.name,
                    "lr": LEARNING_RATE,
                    "requires_grad": trainable,
                    "frozen": frozen,
                    "loss": "CrossEntropyLoss" if classes else "MSELoss",
                }
            )
        )
        for system in ("ort", "torch", "current", "start"):
            (d / system).mkdir(exist_ok=True)
        torch.save(model.state_dict(), d / "torch" / "state.pt")

    def ours(self, system: str) -> Path:
        return self.directory / ("start" if system == "c-start" else "current")

    def env(self, system: str) -> dict:
        """The edgetrain the system runs (a copy of its sources, see prepare())."""
        return {"PYTHONPATH": str(self.trees[system == "c-start"])}

    def library(self, system: str) -> Path:
        """The shared library the system's build made (workers.py keeps one cache per build mode)."""
        (library,) = cache_dir(self.ours(system), build_mode(system)).glob("*.so")
        return library

    def build_driver(self, system: str) -> None:
        library = self.library(system)
        x_type, label = (c_type(np.load(self.directory / name)) for name in ("x.npy", "y.npy"))
        x_size, y_size = ((self.directory / name).stat().st_size // 4 for name in ("x.bin", "y.bin"))
        cc = os.environ.get("CC", "cc")
        subprocess.run(
            [
                cc,
                "-std=c99",
                "-O2",
                "-Wall",
                "-Wextra",
                "-Werror",
                "-pedantic",
                f"-DET_INPUT={x_type}",
                f"-DET_LABEL={label}",
                f"-DET_X_COUNT={x_size}",
                f"-DET_Y_COUNT={y_size}",
                f"-I{self.ours(system)}",
                "-o",
                str(library.parent / "driver"),
                str(BENCH / "driver.c"),
                str(library),
                f"-Wl,-rpath,{library.parent}",
            ],
            check=True,
        )

    def run(self, system: str, budget: float) -> dict:
        d = self.directory
        if system == "ort":
            return measure_process([ORT_PYTHON, BENCH / "workers.py", "ort", d / "ort", budget])
        if system == "torch":
            return measure_process([sys.executable, BENCH / "workers.py", "torch", d / "torch", budget])
        if system.startswith("python"):
            return measure_process(
                [sys.executable, BENCH / "workers.py", "edgetrain", self.ours(system), budget],
                build_mode(system),
                self.env(system),
            )
        return measure_process([self.library(system).parent / "driver", d / "x.bin", d / "y.bin", budget])


def build_env(mode: str) -> dict:
    return {"EDGETRAIN_BUILD": "fast"} if mode == "fast" else {}


def _run(args: list, mode: str = "reproducible", env=None, cwd=None) -> str:
    """What the process printed; single-threaded, in the build mode given (and no other). A fixed hash
    seed: the generated C's layout (the order of its constants) changes with it, and with the layout
    the instructions counted per step, by a few hundred."""
    args = [str(a) for a in args]
    environ = {k: v for k, v in os.environ.items() if k != "EDGETRAIN_BUILD"}
    result = subprocess.run(
        args,
        env={**environ, **build_env(mode), "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0", **(env or {})},
        capture_output=True,
        text=True,
        cwd=cwd,
    )
    if result.returncode != 0:
        raise RuntimeError(f"{shlex.join(args)} failed:\n{result.stderr.strip()[-3000:]}")
    return result.stdout


def run_worker(python, command: str, directories: list[Path], mode: str = "reproducible", env=None, cwd=None) -> None:
    _run([python, BENCH / "workers.py", command, *directories], mode, env, cwd)


def generated(names: list[str], directory: Path) -> list[Case]:
    """Each model's batch-1 case under `directory`, prepared, with the current edgetrain's trainer."""
    cases = [Case(name, 1, directory / name) for name in names]
    for case in cases:
        case.prepare()
    run_worker(sys.executable, "edgetrain-generate", [case.ours("c") for case in cases])
    return cases


def measure_process(args: list, mode: str = "reproducible", env=None) -> dict:
    """Run one measuring process; it prints one JSON line."""
    return json.loads(_run(args, mode, env).strip().splitlines()[-1])
