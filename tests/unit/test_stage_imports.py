"""The compiler's stages, in the order data flows through them, and a check over every import in
compiler/ (each module parsed, imports inside functions included) that no stage imports a later
one. A new package must be placed in one of the lists below, or the test fails."""

from __future__ import annotations

import ast
from pathlib import Path

COMPILER = Path(__file__).resolve().parents[2] / "compiler"

# Each stage may import the stages before it; generate_artifacts calls them in this order
# (frontend, trainer, lower, memory, codegen), ir, ops, autodiff and optim being what they build on.
STAGES = [
    "ir",  # the graph: values, nodes
    "ops",  # the op registry: shapes, gradients, kernel bindings, references
    "frontend",  # ONNX -> ir.Graph
    "autodiff",  # the backward pass
    "optim",  # losses and optimizers (optimizer ops are registry blocks)
    "trainer",  # forward + loss + backward + recomputation -> Trainer
    "lower",  # Trainer -> Program: each C function's kernel calls
    "memory",  # Program -> MemoryPlan: liveness, in-place, arena offsets, RAM; policies and the budget
    "codegen",  # Program + MemoryPlan -> C text
    "host",  # builds and loads the C on this machine
]
# Used by every stage, and importing no stage.
COMMON = {"errors", "files", "checkpoint"}
# The entry points and tools around the pipeline: they may import any stage; no stage imports them.
TOP = {
    "__init__",
    "api",
    "artifacts",
    "cli",
    "demo",
    "export",
    "firmware",
    "package",
    "targets",
    "wasm",
    "ort_checkpoint",
    "onnxblock",
}
# Shipped beside the compiler (package data with a module of their own), not stages.
LIBRARIES = {"runtime_c", "templates", "target_files"}


def _unit(path: Path) -> str:
    """The top-level part of compiler/ a file belongs to: its package, or its module's name."""
    return path.relative_to(COMPILER).parts[0].removesuffix(".py")


def _package_parts(path: Path) -> list[str]:
    """The package a module's relative imports start from, as edgetrain's dotted parts."""
    parts = list(path.relative_to(COMPILER).with_suffix("").parts)
    return ["edgetrain"] + parts[:-1]


def _imported(path: Path) -> set[str]:
    """The top-level parts of edgetrain (package or module name) that `path` imports."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[list[str]] = []
        if isinstance(node, ast.Import):
            names = [alias.name.split(".") for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = _package_parts(path)[: len(_package_parts(path)) - node.level + 1]
            else:
                base = []
            module = base + (node.module.split(".") if node.module else [])
            # `from .. import targets` names a module; `from ..ir import Graph` a name in one
            names = [module + [alias.name] for alias in node.names] if not node.module else [module]
        for parts in names:
            if parts[:1] == ["edgetrain"] and len(parts) > 1:
                found.add(parts[1])
    return found


def _modules() -> list[Path]:
    return sorted(COMPILER.rglob("*.py"))


def test_every_package_of_the_compiler_is_placed():
    units = {_unit(p) for p in _modules()}
    placed = set(STAGES) | COMMON | TOP
    assert units - placed == set(), "place these in test_stage_imports.py's lists"
    assert set(STAGES) | COMMON <= units, "a listed stage or common module no longer exists"


def test_no_stage_imports_a_later_one():
    order = {stage: i for i, stage in enumerate(STAGES)}
    wrong = []
    for path in _modules():
        unit = _unit(path)
        for target in _imported(path) - {unit} - LIBRARIES:
            if unit in COMMON:
                allowed = target in COMMON
            elif unit in order:
                allowed = target in COMMON or (target in order and order[target] < order[unit])
            else:
                allowed = True
            if not allowed:
                wrong.append(f"{path.relative_to(COMPILER)} imports edgetrain.{target}")
    assert not wrong, "\n".join(wrong)


def test_the_import_check_sees_relative_imports():
    """The parser above resolves `from ..x import y` and `from .. import x` (so the check can fail)."""
    imported = _imported(COMPILER / "codegen" / "emit.py")
    assert {"lower", "memory", "ops"} <= imported
    assert "targets" not in _imported(COMPILER / "memory" / "report.py")
    assert "lower" in _imported(COMPILER / "memory" / "plan.py")
