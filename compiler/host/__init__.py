from .build import CFLAGS, load_library

__all__ = ["CFLAGS", "load_library"]
