from .load import MIN_OPSET, load_model

__all__ = ["MIN_OPSET", "load_model"]
