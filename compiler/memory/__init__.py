from .planner import ALIGN, Interval, liveness_lower_bound, place

__all__ = ["ALIGN", "Interval", "liveness_lower_bound", "place"]
