from .graph import ET_DOMAIN, Graph, Node, Value

__all__ = ["ET_DOMAIN", "Graph", "Node", "Value"]
