"""edgetrain: compile a forward ONNX model into a dependency-free C99 on-device trainer."""

from .errors import EdgetrainError, ImportNote

__all__ = ["EdgetrainError", "ImportNote"]
