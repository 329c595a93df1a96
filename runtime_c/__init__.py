"""C99 kernels pasted into every generated trainer, shipped inside the package.

Each header names the headers it uses with `#include "et_<name>.h"` (under that header's guard), so
their order is computed here from those lines rather than written down anywhere.
"""

import re
from importlib import resources

_INCLUDE = re.compile(r'^#include "(et_\w+\.h)"', re.M)


def _uses() -> dict[str, tuple[str, ...]]:
    """Each header of the package and the headers it #includes."""
    files = [f for f in resources.files(__name__).iterdir() if f.name.endswith(".h")]
    return {f.name: tuple(_INCLUDE.findall(f.read_text())) for f in files}


def headers(*roots: str) -> tuple[str, ...]:
    """The headers `roots` use (all of them when none is named) and the roots themselves, each after
    every header it uses, ties taken by name: the order in which pasting them makes one translation unit."""
    uses = _uses()
    order: list[str] = []
    visiting: set[str] = set()

    def visit(name: str) -> None:
        if name in order:
            return
        if name not in uses:
            raise ValueError(f"no runtime header {name}")
        if name in visiting:
            raise ValueError(f"runtime headers include each other in a cycle through {name}")
        visiting.add(name)
        for used in sorted(uses[name]):
            visit(used)
        order.append(name)

    for root in sorted(roots or uses):
        visit(root)
    return tuple(order)
