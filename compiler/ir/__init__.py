from .graph import C_BYTES, COUNTER, ET_DOMAIN, QUANTIZED, Graph, Node, Value, int32_in_c

__all__ = ["C_BYTES", "COUNTER", "ET_DOMAIN", "QUANTIZED", "Graph", "Node", "Value", "int32_in_c"]
