"""torchvision on the CPU torch of this venv: `from tests.zoo.torchvision_shim import torchvision`.

torchvision's PyPI wheel is a CUDA build; installed with --no-deps beside torch's CPU build, its C++
operators do not load, and `import torchvision` fails where its Python code registers fake kernels for
them. Defining their schemas first is enough for the model definitions; calling one of these operators
(nms, roi_align) still fails."""

import torch

_library = torch.library.Library("torchvision", "DEF")  # the definitions last as long as this object
_library.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
_library.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
_library.define(
    "roi_align(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, "
    "SymInt pooled_width, int sampling_ratio, bool aligned) -> Tensor"
)

import torchvision  # noqa: E402  (after the definitions above)

__all__ = ["torchvision"]
