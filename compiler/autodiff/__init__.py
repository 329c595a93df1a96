from .driver import GraphBuilder, differentiate

__all__ = ["GraphBuilder", "differentiate"]
