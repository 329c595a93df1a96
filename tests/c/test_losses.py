"""edgetrain's built-in losses (mean reduction) against torch.nn.functional: the loss value and the
gradient with respect to the logits, computed by the generated C."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from edgetrain.artifacts import LossType
from gradcheck import check_loss_gradients

torch = pytest.importorskip("torch")

F = torch.nn.functional


def _rng(request):
    return np.random.default_rng(zlib.crc32(request.node.callspec.id.encode()))


@pytest.mark.parametrize("shape", [(4,), (3, 5), (2, 3, 4)], ids=lambda s: "x".join(map(str, s)))
def test_mse(shape, tmp_path, request):
    rng = _rng(request)
    logits, target = rng.normal(size=(2,) + shape).astype(np.float32)
    err = check_loss_gradients(LossType.MSELoss, logits, target, F.mse_loss, tmp_path=tmp_path)
    print(f"max |C - torch| = {err:.3g}")


@pytest.mark.parametrize("shape", [(4,), (3, 5), (2, 3, 4)], ids=lambda s: "x".join(map(str, s)))
def test_l1(shape, tmp_path, request):
    rng = _rng(request)
    target = rng.normal(size=shape).astype(np.float32)
    diff = rng.normal(size=shape).astype(np.float32)
    logits = target + np.sign(diff) * (np.abs(diff) + 0.1)  # |logits - target| >= 0.1: no kink
    err = check_loss_gradients(LossType.L1Loss, logits.astype(np.float32), target, F.l1_loss, tmp_path=tmp_path)
    print(f"max |C - torch| = {err:.3g}")


CE_CASES = [
    # id, logits shape, label dtype, ignore_index, weighted
    ("NC-int64", (4, 5), np.int64, None, False),
    ("NC-int32", (4, 5), np.int32, None, False),
    ("NC-ignore", (6, 3), np.int64, 1, False),
    ("NC-ignore-neg100", (6, 3), np.int32, -100, False),
    ("NC-weights", (5, 4), np.int64, None, True),
    ("NC-weights-ignore", (6, 4), np.int32, 2, True),
    ("NCT-int64", (2, 4, 3), np.int64, None, False),
    ("NCT-int32-ignore-weights", (3, 4, 5), np.int32, 0, True),
    ("NCT4d", (2, 3, 2, 2), np.int64, None, True),
]


def _check_cross_entropy(logits, labels, torch_loss, ignore_index, weights, tmp_path):
    err = check_loss_gradients(
        LossType.CrossEntropyLoss,
        logits,
        labels,
        torch_loss,
        tmp_path=tmp_path,
        ignore_index=ignore_index,
        class_weights=weights,
    )
    print(f"max |C - torch| = {err:.3g}")


@pytest.mark.parametrize("shape,dtype,ignore_index,weighted", [pytest.param(*c[1:], id=c[0]) for c in CE_CASES])
def test_cross_entropy(shape, dtype, ignore_index, weighted, tmp_path, request):
    rng = _rng(request)
    n, c = shape[:2]
    logits = (2 * rng.normal(size=shape)).astype(np.float32)
    labels = rng.integers(0, c, size=(n,) + shape[2:]).astype(dtype)
    if ignore_index is not None:
        flat = labels.reshape(-1)
        flat[::3] = ignore_index  # some positions ignored, most kept
        if ignore_index >= 0:
            flat[1] = (ignore_index + 1) % c
    weights = rng.uniform(0.2, 2.0, size=c).astype(np.float32) if weighted else None

    def torch_loss(x, y):
        kwargs = {} if ignore_index is None else {"ignore_index": ignore_index}
        w = None if weights is None else torch.from_numpy(weights)
        return F.cross_entropy(x, y, weight=w, reduction="mean", **kwargs)

    _check_cross_entropy(logits, labels, torch_loss, ignore_index, weights, tmp_path)


@pytest.mark.parametrize("case", ["3x4", "2x3x2", "extreme"])
def test_bce_with_logits(case, tmp_path, request):
    rng = _rng(request)
    if case == "extreme":
        # |logit| = 100: exp overflows a naive formula; the stable one must stay finite and exact.
        logits = np.array([[100.0, -100.0, 100.0, -100.0], [100.0, -100.0, 3.0, -0.5]], np.float32)
        target = np.array([[1.0, 0.0, 0.0, 1.0], [0.3, 0.7, 1.0, 0.0]], np.float32)
    else:
        shape = tuple(int(d) for d in case.split("x"))
        logits = (3 * rng.normal(size=shape)).astype(np.float32)
        target = rng.uniform(0, 1, size=shape).astype(np.float32)
    err = check_loss_gradients(
        LossType.BCEWithLogitsLoss, logits, target, F.binary_cross_entropy_with_logits, tmp_path=tmp_path
    )
    print(f"max |C - torch| = {err:.3g}")


@pytest.mark.parametrize("nothing_counts", ["every-label-ignored", "every-weight-zero"])
def test_cross_entropy_of_a_batch_in_which_no_target_counts_is_zero(nothing_counts, tmp_path, request):
    """PyTorch's mean is then 0/0 = NaN; edgetrain's loss and gradients are 0 (README: Losses): its
    sum, which PyTorch gives as 0 with zero gradients."""
    rng = _rng(request)
    logits = (2 * rng.normal(size=(4, 3))).astype(np.float32)
    labels = rng.integers(0, 3, size=4).astype(np.int64)
    ignore_index, weights = None, None
    if nothing_counts == "every-label-ignored":
        labels[:], ignore_index = 1, 1
    else:
        weights = np.zeros(3, np.float32)

    def torch_loss(x, y):
        w = None if weights is None else torch.from_numpy(weights)
        return F.cross_entropy(x, y, weight=w, reduction="sum", ignore_index=-100 if ignore_index is None else 1)

    _check_cross_entropy(logits, labels, torch_loss, ignore_index, weights, tmp_path)
