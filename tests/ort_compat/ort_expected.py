"""Which of ONNX Runtime's training API tests are expected to fail against edgetrain, and which are
not run, each with its reason. Kept apart from ort_shim so that reading them has no side effects
(importing ort_shim maps onnxruntime.training to edgetrain)."""

PY_BINDINGS = "orttraining_test_ort_apis_py_bindings.py"
ONNXBLOCK = "orttraining_test_ort_apis_onnxblock.py"

# The only way onto a GPU is torch's: every ORT test that builds its torch model with device="cuda"
# fails there, before any edgetrain code runs (torch here is the CPU build).
_TORCH_CUDA = r"Torch not compiled with CUDA enabled|no CUDA GPUs|Found no NVIDIA driver"
_CUDA = "needs CUDA: the test puts its torch model on device='cuda'"

# test name (pytest's, parameters included) -> (why it fails, a pattern its failure message matches)
EXPECTED_FAILURES = {
    PY_BINDINGS: {
        "test_cuda_execution_provider": (
            "needs CUDA: edgetrain's host trainer runs on the CPU and refuses device='cuda'",
            r"device 'cuda'.*CPU",
        ),
        "test_get_and_set_parameter_values[cuda]": (
            "needs CUDA: edgetrain's host trainer runs on the CPU and refuses device='cuda'",
            r"device 'cuda'.*CPU",
        ),
        "test_ort_custom_ops": (
            "needs a custom op library (libcustom_op_library.so and ORT's testdata/custom_op_library model, "
            "built with ORT's tests); edgetrain refuses custom_op_library: it compiles every op from its own kernels",
            r"custom_op_library|custom_op_test\.onnx",
        ),
        "test_string_inputs": (
            "string tensors: the generated C has no string type, so a model with a STRING input is refused",
            r"(?i)input 'input' has dtype (string|object)",
        ),  # numpy's dtype of ONNX STRING is object
    },
    ONNXBLOCK: {
        **{
            f"test_loss_composition[{block}]": (_CUDA, _TORCH_CUDA)
            for block in (
                "SimpleBlockWithMSELoss",
                "SimpleBlockWithCrossEntropyLoss",
                "SimpleTrainingBlockWithMSELoss",
                "SimpleTrainingBlockWithCrossEntropyLoss",
                "SimpleBlockWithBCEWithLogitsLoss",
                "SimpleTrainingBlockWithBCEWithLogitsLoss",
                "SimpleBlockWithL1Loss",
                "SimpleTrainingBlockWithL1Loss",
            )
        },
        "test_mse_loss_execution[SimpleBlockWithMSELoss]": (_CUDA, _TORCH_CUDA),
        "test_mse_loss_execution[SimpleBlockWithL1Loss]": (_CUDA, _TORCH_CUDA),
        "test_crossentropy_loss_execution": (_CUDA, _TORCH_CUDA),
        "test_bcewithlogits_loss_execution": (_CUDA, _TORCH_CUDA),
        "test_retrieve_parameters": (_CUDA, _TORCH_CUDA),
        "test_retrieve_parameters_before_building_gradient_graph": (_CUDA, _TORCH_CUDA),
        "test_set_requires_grad_on_parameters": (_CUDA, _TORCH_CUDA),
        "test_weighted_average_model_composition[ForwardBlock]": (_CUDA, _TORCH_CUDA),
        "test_weighted_average_model_composition[TrainingBlock]": (_CUDA, _TORCH_CUDA),
        "test_save_ort_format": (
            "ort_format=True is refused: edgetrain writes no ORT-format (.ort) models; its artifacts are ONNX and C",
            r"ort_format",
        ),
    },
}

_GRADIENT_GRAPH = (
    "uses the gradient graph ORT's TrainingBlock builds (<name>_grad.accumulation.* inputs and "
    "outputs, lazy_reset_grad); edgetrain's TrainingBlock returns plain ONNX and its compiler "
    "derives the gradients in C"
)
OPTIM_REASON = "uses onnxblock.optim, outside edgetrain's onnxblock: edgetrain writes the optimizer itself"
_ONNXBLOCK_CHECKPOINT = (
    "uses onnxblock.save_checkpoint / load_checkpoint_to_model, outside edgetrain's "
    "onnxblock: checkpoints are edgetrain.api.CheckpointState's"
)

# ORT onnxblock tests not run: they use onnxblock beyond the subset edgetrain implements.
NOT_RUN = {
    ONNXBLOCK: {
        "test_mse_loss_training_graph_execution": _GRADIENT_GRAPH,
        "test_crossentropy_loss_training_graph_execution": _GRADIENT_GRAPH,
        "test_bcewithlogits_loss_training_graph_execution": _GRADIENT_GRAPH,
        "test_set_requires_grad_on_inputs": _GRADIENT_GRAPH,
        "test_adamw_optimizer_composition": OPTIM_REASON,
        "test_adamw_optimizer_execution": OPTIM_REASON,
        "test_sgd_optimizer_composition": OPTIM_REASON,
        "test_grad_clipping_execution": OPTIM_REASON,
        "test_save_checkpoint": _ONNXBLOCK_CHECKPOINT,
        "test_load_checkpoint": _ONNXBLOCK_CHECKPOINT,
        "test_label_encoder_composition": (
            "uses blocks.LabelEncoder (the ai.onnx.ml domain), outside edgetrain's onnxblock"
        ),
    },
}
