"""The trainer: the forward graph (edgetrain.frontend) with its loss and optimizer (edgetrain.optim)
and its backward pass (edgetrain.autodiff), split into the functions the generated C exposes
(train_step, eval_step, infer) -> Trainer, which lowering (edgetrain.lower) takes. Recomputation
(recompute.py) is decided here, because it changes the training graph itself: forward ops run
again in the backward pass instead of their results being kept."""

from .assemble import Trainer, build_trainer, inference_only

__all__ = ["Trainer", "build_trainer", "inference_only"]
