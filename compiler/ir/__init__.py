from .graph import COUNTER, ET_DOMAIN, QUANTIZED, Graph, Node, PER_WORD, Value, int32_in_c

__all__ = ["COUNTER", "ET_DOMAIN", "QUANTIZED", "Graph", "Node", "PER_WORD", "Value", "int32_in_c"]
