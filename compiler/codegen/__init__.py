from .emit import render

__all__ = ["render"]
