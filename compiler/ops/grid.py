"""GridSample over 2-D planes (torch.nn.functional.grid_sample, spatial transformers): bilinear or
nearest sampling, zeros, border or reflection padding, either align_corners; X and the grid both
train (runtime_c/et_grid.h). Cubic sampling and volumes are refused."""

import numpy as np

from ..errors import EdgetrainError
from ..ir import ET_DOMAIN
from .registry import op

PADDING = {"zeros": 0, "border": 1, "reflection": 2}
MODES = {"bilinear": 0, "linear": 0, "nearest": 1}  # opset 16's names, then opset 20's


def _options(node_name: str, x_shape, attrs) -> tuple[int, int, int]:
    """(nearest, padding, align_corners) as the kernels take them; refuses what they do not compute."""
    mode, padding = attrs.get("mode", "linear"), attrs.get("padding_mode", "zeros")
    where = f"node '{node_name}' (GridSample)"
    if len(x_shape) != 4:
        raise EdgetrainError(f"{where}: only 2-D planes (a 4-D input) are supported, got {len(x_shape)}-D")
    if mode not in MODES:
        raise EdgetrainError(f"{where}: mode '{mode}' is not supported; only bilinear (linear) and nearest")
    if padding not in PADDING:
        raise EdgetrainError(f"{where}: padding_mode '{padding}' is not supported")
    return MODES[mode], PADDING[padding], int(attrs.get("align_corners", 0))


def _sizes(x_shape, grid_shape) -> tuple[int, ...]:
    n, c, h, w = x_shape
    return n, c, h, w, grid_shape[1], grid_shape[2]


@op("GridSample")
class GridSample:
    @staticmethod
    def kernel(k, node):
        x, grid = node.inputs
        options = _options(node.name, k.shape(x), node.attrs)
        sizes = _sizes(k.shape(x), k.shape(grid))
        return [k.call("et_grid_sample_f32", *sizes, *options, x, grid, node.outputs[0])]

    @staticmethod
    def grad(g, node, dy):
        dx, dgrid = g.emit("GridSampleGrad", [dy[0], *node.inputs], dict(node.attrs), domain=ET_DOMAIN, outputs=2)
        return [dx, dgrid]


def _coord(g, n: int, align_corners: int, padding: int) -> tuple[float, float]:
    """et_grid_coord_ in float64: the input coordinate and its derivative by g."""
    x = (g + 1) / 2 * (n - 1) if align_corners else ((g + 1) * n - 1) / 2
    d = (n - 1) / 2 if align_corners else n / 2
    if padding == PADDING["reflection"]:
        low, span = (0.0, n - 1.0) if align_corners else (-0.5, float(n))
        if span <= 0:
            return 0.0, 0.0
        x -= low
        if x < 0:
            x, d = -x, -d
        extra = np.fmod(x, span)
        if np.floor(x / span) % 2:
            x, d = span - extra + low, -d
        else:
            x = extra + low
    if padding != PADDING["zeros"]:
        if x <= 0 or x >= n - 1:
            d = 0.0
        x = min(max(x, 0.0), n - 1.0)
    return x, d


@op("GridSampleGrad", domain=ET_DOMAIN)
class GridSampleGrad:
    """(dY, X, grid) -> (dX, d grid) of a GridSample with the same attributes."""

    @staticmethod
    def kernel(k, node):
        dy, x, grid = node.inputs
        options = _options(node.name, k.shape(x), node.attrs)
        sizes = _sizes(k.shape(x), k.shape(grid))
        return [k.call("et_grid_sample_grad_f32", *sizes, *options, dy, x, grid, *node.outputs)]

    @staticmethod
    def shape(graph, node):
        return [graph.shape(node.inputs[1]), graph.shape(node.inputs[2])]

    @staticmethod
    def reference(dy, x, grid, **attrs):
        nearest, padding, align_corners = _options("GridSampleGrad", x.shape, attrs)
        n_, c_, h, w = x.shape
        dx, dgrid = np.zeros(x.shape), np.zeros(grid.shape)
        for n in range(n_):
            for i in range(grid.shape[1]):
                for j in range(grid.shape[2]):
                    (ix, mx), (iy, my) = (
                        _coord(float(grid[n, i, j, 0]), w, align_corners, padding),
                        _coord(float(grid[n, i, j, 1]), h, align_corners, padding),
                    )
                    if nearest:
                        xi, yi = int(np.rint(ix)), int(np.rint(iy))
                        if 0 <= xi < w and 0 <= yi < h:
                            dx[n, :, yi, xi] += dy[n, :, i, j]
                        continue
                    x0, y0 = int(np.floor(ix)), int(np.floor(iy))
                    fx, fy = ix - x0, iy - y0
                    for xk, yk, wx, wy, sx, sy in (
                        (x0, y0, 1 - fx, 1 - fy, -1, -1),
                        (x0 + 1, y0, fx, 1 - fy, 1, -1),
                        (x0, y0 + 1, 1 - fx, fy, -1, 1),
                        (x0 + 1, y0 + 1, fx, fy, 1, 1),
                    ):
                        if 0 <= xk < w and 0 <= yk < h:
                            d = dy[n, :, i, j]
                            dx[n, :, yk, xk] += wx * wy * d
                            v = float(np.dot(x[n, :, yk, xk], d))
                            dgrid[n, i, j] += (sx * wy * v * mx, sy * wx * v * my)
        return dx.astype(np.float32), dgrid.astype(np.float32)
