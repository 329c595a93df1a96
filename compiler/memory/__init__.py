from .planner import ALIGN, KINDS, Block, Interval, liveness_lower_bound, place

__all__ = ["ALIGN", "KINDS", "Block", "Interval", "liveness_lower_bound", "place"]
