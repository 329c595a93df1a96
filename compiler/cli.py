"""The `edgetrain` command."""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

import numpy as np

from . import artifacts
from .errors import EdgetrainError, ImportNote
from .memory.report import NO_MATPLOTLIB, can_plot, plot_directory
from .optim import LossType, OptimType


def _dim(text: str) -> tuple[str, int]:
    name, sep, size = text.rpartition("=")
    if not sep or not name or not size.isdigit() or int(size) < 1:
        raise argparse.ArgumentTypeError(f"expected NAME=N with N a positive integer, got {text!r}")
    return name, int(size)


def _calibration(path: str | None) -> list[dict] | None:
    """--calibration's batches: the .npz's arrays by input name, split along their first axis."""
    if path is None:
        return None
    try:
        with np.load(path) as arrays:
            data = {name: arrays[name] for name in arrays.files}
    except Exception as exc:
        raise EdgetrainError(f"cannot read calibration data {path!r}: {exc}".splitlines()[0]) from None
    count = min((len(a) for a in data.values()), default=0)
    return [{name: a[i] for name, a in data.items()} for i in range(count)]


def _add_compile(sub) -> None:
    compile_ = sub.add_parser(
        "compile",
        help="write training artifacts (C trainer, ONNX graphs, checkpoint, memory "
        "report, and memory.png when matplotlib is installed)",
    )
    compile_.add_argument("model", help="forward ONNX model")
    compile_.add_argument("-o", "--output", required=True, help="artifact directory")
    _add_training_options(compile_)
    _add_build_options(compile_)


def _add_training_options(compile_) -> None:
    """What compile trains, how, and on which shapes."""
    compile_.add_argument(
        "--loss",
        choices=[t.value for t in LossType] + ["none"],
        default="CrossEntropyLoss",
        help="loss on the model's first output (or --loss-input's); 'none' if that output already is the loss",
    )
    compile_.add_argument("--loss-input", metavar="OUTPUT", help="the model output the loss reads (default: the first)")
    compile_.add_argument("--optimizer", choices=[t.value for t in OptimType], default="AdamW")
    compile_.add_argument("--lr", type=float, default=1e-3, help="initial learning rate")
    compile_.add_argument("--momentum", type=float, default=0.0, help="SGD momentum")
    compile_.add_argument("--nesterov", action="store_true", help="SGD Nesterov momentum")
    compile_.add_argument("--weight-decay", type=float, default=0.0)
    compile_.add_argument("--max-grad-norm", type=float, help="clip gradients to this global norm")
    compile_.add_argument(
        "--batch-size", type=int, help="the most samples a step takes (default 32); any batch from 1 to it runs"
    )
    compile_.add_argument(
        "--untie",
        action="store_true",
        help="give each layer its own copy of a parameter the export shares between layers",
    )
    compile_.add_argument(
        "--frozen-bn",
        action="store_true",
        help="accept BatchNormalization that the exporter folded or froze, and train it frozen",
    )
    compile_.add_argument(
        "--dim",
        action="append",
        type=_dim,
        default=[],
        metavar="NAME=N",
        help="fixes a symbolic dimension by its name (seq=128) or as input:axis (ids:1=128)",
    )
    compile_.add_argument("--requires-grad", nargs="+", metavar="NAME", help="initializers to train (default: all)")
    compile_.add_argument("--frozen", nargs="+", metavar="NAME", default=None, help="initializers to keep fixed")
    compile_.add_argument("--ignore-index", type=int, help="CrossEntropyLoss label to ignore")


def _add_build_options(compile_) -> None:
    """The C compile writes: its target, symbols, extra functions and memory."""
    compile_.add_argument(
        "--target",
        default="host",
        choices=artifacts.TARGETS,
        help="measure flash and RAM with this target's compiler (targets/<name>.mk)",
    )
    compile_.add_argument(
        "--c-prefix",
        "--prefix",
        dest="c_prefix",
        default="model",
        help="C symbol prefix, to link several models together (--prefix is its former name)",
    )
    compile_.add_argument(
        "--federated",
        action="store_true",
        help="add set_reference/get_delta/apply_update (one more copy of the trainable parameters)",
    )
    compile_.add_argument(
        "--fused-update",
        action="store_true",
        help="apply each parameter's update inside the training step, as soon as its gradient "
        "is final: no gradient buffers, and gradients do not accumulate across steps",
    )
    compile_.add_argument(
        "--update-policy",
        metavar="POLICY",
        help="sparse update: 'bias', 'bias:K' (the biases of the K parameterized layers nearest the output), "
        "'last:K' (every parameter of those layers), 'bias+last:K' or 'bias:K+last:J'; instead of --requires-grad",
    )
    compile_.add_argument(
        "--ram-budget",
        type=int,
        metavar="BYTES",
        help="fit the trainer's RAM in BYTES, with fused update, row bands and recomputation if needed",
    )
    compile_.add_argument(
        "--row-bands",
        action="store_true",
        help="run the frozen layers in front of the first trained one a band of output rows at a time where "
        "that lowers the peak RAM (the rows the bands' windows share are computed twice; the same results)",
    )
    compile_.add_argument(
        "--quantize",
        choices=["int8"],
        help="train quantization-aware with int8 weights (per channel) and activations (per tensor), "
        "calibrated on --calibration",
    )
    compile_.add_argument(
        "--calibration",
        metavar="NPZ",
        help="calibration batches for --quantize: arrays by input name, the first axis indexing batches",
    )
    compile_.add_argument(
        "--float-masters",
        action="store_true",
        help="train a quantized model's int8 weights as float32 masters rather than as their integers (QAS)",
    )
    compile_.add_argument(
        "--nominal-checkpoint",
        action="store_true",
        help="also write nominal_checkpoint: the parameter table without values",
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="edgetrain", description="Compile a forward ONNX model into a C99 trainer.")
    sub = parser.add_subparsers(dest="command", required=True)

    _add_compile(sub)

    report = sub.add_parser("report", help="print the memory report of an artifact directory")
    report.add_argument("directory")
    report.add_argument("--json", action="store_true", help="print report.json instead of the table")
    report.add_argument(
        "--plot",
        action="store_true",
        help="draw the arena occupancy plot (memory.png; needs matplotlib: edgetrain[report])",
    )

    run = sub.add_parser(
        "run",
        help="build the trainer with a harness for a target and train on embedded data "
        "(emulated unless host); prints each step's loss and a SHA-256 of the parameters",
    )
    run.add_argument("directory", help="artifact directory (edgetrain compile -o)")
    run.add_argument("--target", default="host", choices=artifacts.TARGETS)
    run.add_argument("--data", required=True, help=".npz with x and y; their first axis indexes batches")
    run.add_argument("--steps", type=int, required=True, help="training steps (train, optimizer step, reset)")
    run.add_argument("--lr", type=float, help="learning rate (default: the compiled one)")
    run.add_argument(
        "--flash",
        metavar="FILE",
        help="two checkpoint slots in FILE (made if missing): resume from the newest intact one",
    )
    run.add_argument(
        "--save-every",
        type=int,
        default=0,
        metavar="K",
        help="with --flash: save a checkpoint (with optimizer state) every K steps",
    )

    package = sub.add_parser(
        "package",
        help="write the trainer as a library to drop into a firmware build: "
        "a CMake static library or an Arduino library with an example sketch",
    )
    package.add_argument("directory", help="artifact directory (edgetrain compile -o)")
    package.add_argument("--format", required=True, metavar="{cmake,arduino}", help="the kind of library")
    package.add_argument("-o", "--output", help="package directory (default: DIRECTORY/FORMAT)")

    imports = sub.add_parser(
        "import-ort-checkpoint",
        help="convert an ONNX Runtime training checkpoint (its "
        "parameters, AdamW moments, step, learning rate and properties) into an edgetrain "
        "checkpoint of a compiled trainer, matching tensors by name",
    )
    imports.add_argument(
        "input",
        help="ONNX Runtime checkpoint (CheckpointState.save_checkpoint; its .data file beside it if it has one)",
    )
    imports.add_argument("output", help="edgetrain checkpoint to write")
    imports.add_argument(
        "--artifacts",
        required=True,
        metavar="DIR",
        help="artifact directory of the trainer (edgetrain compile -o); its checkpoint gives the "
        "tensors, shapes and optimizer",
    )

    demo = sub.add_parser("demo", help="train a digits classifier through the generated C")
    demo.add_argument("--epochs", type=int, default=10)
    demo.add_argument("--output", default="out/demo", help="artifact directory")
    return parser


def main(argv=None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    # What the import noticed is said after a compile that succeeds; a failure says its one line.
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ImportNote)
            _run(args)
    except EdgetrainError as exc:
        parser.exit(2, f"edgetrain: error: {getattr(exc, 'cli_message', exc)}\n")
    except Exception as exc:  # a bug of ours: still one line for the user, never a traceback
        parser.exit(
            2,
            f"edgetrain: error: {EdgetrainError(f'internal error ({type(exc).__name__}: {exc})')}; please report it\n",
        )
    for warning in caught:
        kind = "note" if issubclass(warning.category, ImportNote) else "warning"
        print(f"edgetrain: {kind}: {EdgetrainError(str(warning.message))}", file=sys.stderr)
    return 0


def _run(args) -> None:
    if args.command == "compile":
        plot = can_plot()
        out = artifacts.generate_artifacts(
            args.model,
            requires_grad=args.requires_grad,
            frozen_params=args.frozen,
            loss=None if args.loss == "none" else LossType(args.loss),
            loss_input_names=None if args.loss_input is None else [args.loss_input],
            optimizer=OptimType(args.optimizer),
            artifact_directory=args.output,
            batch_size=args.batch_size,
            dim_values=dict(args.dim),
            untie=args.untie,
            frozen_bn=args.frozen_bn,
            target=args.target,
            learning_rate=args.lr,
            c_prefix=args.c_prefix,
            ignore_index=args.ignore_index,
            momentum=args.momentum,
            nesterov=args.nesterov,
            weight_decay=args.weight_decay,
            max_grad_norm=args.max_grad_norm,
            federated=args.federated,
            nominal_checkpoint=args.nominal_checkpoint,
            fused_update=args.fused_update,
            update_policy=args.update_policy,
            ram_budget=args.ram_budget,
            row_bands=args.row_bands,
            quantize=args.quantize,
            calibration_data=_calibration(args.calibration),
            qas=not args.float_masters,
            memory_plot=plot,
            defer_free_dims=False,
        )  # the command line's job is the C
        print((out / "report.txt").read_text(), end="")
        trains = json.loads((out / "report.json").read_text())["import"]
        if trains["trainable"]:
            print(
                f"trains {len(trains['trainable'])} parameter(s): {', '.join(trains['trainable'][:8])}"
                f"{', ...' if len(trains['trainable']) > 8 else ''}; {len(trains['frozen'])} frozen"
            )
        else:
            print(
                f"trains nothing (no trainable parameter: a step computes the loss and updates the buffers); "
                f"{len(trains['frozen'])} frozen"
            )
        print(
            f"wrote {out}/: model.c model.h model_weights.h training_model.onnx eval_model.onnx "
            "optimizer_model.onnx checkpoint report.json report.txt"
            + (" memory.png" if plot else f" ({NO_MATPLOTLIB})")
        )
    elif args.command == "report" and args.plot:
        print(f"wrote {plot_directory(args.directory)}")
    elif args.command == "report":
        path = f"{args.directory}/report.{'json' if args.json else 'txt'}"
        try:
            text = open(path).read()
        except OSError:
            raise EdgetrainError(f"no report in {args.directory}; run `edgetrain compile` first") from None
        print(json.dumps(json.loads(text), indent=2) if args.json else text, end="\n" if args.json else "")
    elif args.command == "run":
        from .firmware import run

        print(
            run(
                [(args.directory, args.data)],
                args.target,
                args.steps,
                args.lr,
                flash=args.flash,
                save_every=args.save_every,
            ),
            end="",
        )
    elif args.command == "package":
        from .package import package

        print(f"wrote {package(args.directory, args.output, args.format)}/")
    elif args.command == "import-ort-checkpoint":
        print(_import_ort_checkpoint(args.input, args.output, args.artifacts))
    else:
        from .demo import run_demo

        run_demo(epochs=args.epochs, directory=args.output)


def _import_ort_checkpoint(source: str, target: str, directory: str) -> str:
    from . import checkpoint, ort_checkpoint
    from .files import write_artifact

    try:
        foreign = ort_checkpoint.load(source)
        template_path = Path(directory) / "checkpoint"
        try:
            template = checkpoint.decode(template_path.read_bytes())
        except OSError as exc:
            raise EdgetrainError(
                f"no trainer checkpoint in {directory} ({exc.strerror}); run `edgetrain compile` first"
            ) from None
        data = checkpoint.adopt(foreign, template)
    except checkpoint.CheckpointError as exc:
        raise EdgetrainError(str(exc)) from None
    write_artifact(Path(target), checkpoint.encode(data))
    moments = "with its optimizer state" if data.optimizer_state else "without optimizer state"
    return (
        f"wrote {target}: {len(data.names)} tensor(s) {moments}, step {data.step}, learning rate "
        f"{data.learning_rate:g}, {len(data.properties)} propert{'y' if len(data.properties) == 1 else 'ies'}"
    )


if __name__ == "__main__":
    sys.exit(main())
