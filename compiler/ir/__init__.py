from .graph import COUNTER, ET_DOMAIN, Graph, Node, Value

__all__ = ["COUNTER", "ET_DOMAIN", "Graph", "Node", "Value"]
