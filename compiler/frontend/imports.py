"""Faithful imports: what torch's exporters do to a model that the ONNX file does not say, undone or
reported before anything compiles.

torch's dynamo exporter records, on each node, the PyTorch module it came from (`name_scopes`) and
the aten call with the parameters it read (`fx_node`, `namespace`), and its optimizer records the
rewrites it made and the values it folded; those records are what let edgetrain give parameters
their `state_dict` names back, split what the optimizer merged, restore the biases it dropped, and
see BatchNormalization and parameters that were folded away. The TorchScript exporter records
nothing, but names the weights it folds in an eval-mode export (onnx::Conv_*). Each finding is reported
once, in one line (`ImportNote` warnings, also listed in report.json), or refused when training it
would silently differ from what the user wrote.
"""

from __future__ import annotations

import ast
import collections
import itertools
import re
import warnings
from collections.abc import Collection, Container
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from ..errors import EdgetrainError, ImportNote
from ..ops import REGISTRY
from ..ops.random import DRAWS, eval_mean

# Inputs that hold a layer's weight, bias or scale (slots by op): what "a parameter" means by default.
PARAMETER_SLOTS = {
    "Conv": (1, 2),
    "ConvTranspose": (1, 2),
    "Gemm": (0, 1, 2),
    "MatMul": (0, 1),
    "BatchNormalization": (1, 2),
    "LayerNormalization": (1, 2),
    "InstanceNormalization": (1, 2),
    "GroupNormalization": (1, 2),
    "RMSNormalization": (1,),
    "Gather": (0,),
    "PRelu": (1,),
    "GRU": (1, 2, 3),
    "LSTM": (1, 2, 3),
    "RNN": (1, 2, 3),
    "QuantizeLinear": (0,),  # a weight quantization-aware training fake-quantizes
}
# Names exporters give the constants they make (dynamo's val_12, lifted tensors); a state_dict name
# is a dotted path of identifiers; these buffer names are state, not parameters.
_EXPORTER_NAME = re.compile(
    r"_?val_\d+|_?tensor_constant\d*|c?_?lifted_tensor_\d+|new_ones(_\d+)?|"
    r"scalar_tensor_default(_\d+)?|.*_output_\d+|expand(_\d+)?"
)
_SIGNATURE_KIND = "pkg.torch.export.graph_signature.InputSpec.kind"  # PARAMETER, BUFFER, CONSTANT_TENSOR, ...
_SIGNATURE = "pkg.torch.export.ExportedProgram.graph_signature"  # the graph's: every input, with its kind and target
_SIGNATURE_PARAMETER = re.compile(r"^\w+: PARAMETER target='([^']+)'$", re.M)
_SIGNATURE_STATISTIC = re.compile(r"^\w+: BUFFER target='([^']+\.running_(?:mean|var))'", re.M)
_FOLDED_FROM = "pkg.onnxscript.optimizer.folded_from"  # a constant dynamo's optimizer computed from others
# (torch.nn.Sequential's submodules are numbered: `0.weight`, `layers.0.bias`; a bare number is a value)
_STATE_DICT_NAME = re.compile(r"(\d+\.)*[A-Za-z_]\w*(\.\w+)*")
_BUFFER_LEAF = {
    "running_mean",
    "running_var",
    "num_batches_tracked",
    "inv_freq",
    "position_ids",
    "token_type_ids",
    "mask",
    "relative_coords_table",  # torchvision's Swin V2
    "final_logits_bias",  # HuggingFace's BART family: a buffer of zeros added to the LM's logits
}

_SHAPE_ONLY = {("CastLike", 1), ("Expand", 1), ("Reshape", 1)}
# Scales and zero points: constants the compiler fixes, never parameters a layer trains.
_QUANTIZATION_CONSTANTS = {(op, slot) for op in ("QuantizeLinear", "DequantizeLinear") for slot in (1, 2)}
_FOLDED_BN = "FuseBatchNorm"
_REMOVED_BIAS = "RemoveOptionalBias"
_RULE = "pkg.onnxscript.rewriter.rule_name"  # the dynamo optimizer's rewrite that made a node
_FX_NODE = "pkg.torch.onnx.fx_node"  # the PyTorch call a dynamo-exported node came from, with its arguments
# The TorchScript exporter's name for a weight it computed: an eval-mode export folds BatchNorm into
# the convolution before it and names the result after the input it feeds, the Conv's or, in a
# quantization-aware model (torch.ao's fused ConvBn), its weight's fake quantization.
_TORCHSCRIPT_FOLDED = re.compile(r"onnx::(Conv|ConvTranspose|QuantizeLinear)_\d+")
_FOLDED_READERS = {"Conv": 1, "ConvTranspose": 1, "QuantizeLinear": 0}
# Its name for a Linear layer's weight that constant folding transposed (do_constant_folding=True,
# its default, in a training-mode export too).
_TORCHSCRIPT_TRANSPOSED = re.compile(r"onnx::(MatMul|Gemm)_\d+")
# Its name for any other constant it computed, after the op that reads it (onnx::Mul_301).
_TORCHSCRIPT_COMPUTED = re.compile(r"onnx::\w+_\d+")
# Set on the weights' QuantizeLinear nodes that quantize="int8" inserts (frontend.quantize): what they
# read is the float weight as the export has it, which edgetrain, not the model, chose to quantize.
QUANTIZED_HERE = "edgetrain.quantize"
_TRAINING_BN = ("_native_batch_norm_legit_functional", "batch_norm_with_update", "_native_batch_norm_legit.")


def unused_name(name: str, taken: Container[str]) -> str:
    """`name`, with underscores appended until no name in `taken` is it."""
    while name in taken:
        name += "_"
    return name


def names_in(graph: onnx.GraphProto) -> set[str]:
    """Every name the graph gives a tensor (initializers, graph inputs, node outputs): what a new one
    must not be."""
    return (
        {i.name for i in graph.initializer} | {i.name for i in graph.input} | {o for n in graph.node for o in n.output}
    )


def readers_of(graph: onnx.GraphProto) -> dict[str, list[onnx.NodeProto]]:
    """value name -> the nodes that read it, once per input slot, in graph order."""
    readers: dict[str, list[onnx.NodeProto]] = collections.defaultdict(list)
    for node in graph.node:
        for name in node.input:
            readers[name].append(node)
    return readers


def _attributes(node: onnx.NodeProto) -> dict[str, Any]:
    """A node's attributes by name, as Python values."""
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def note(message: str) -> None:
    warnings.warn(ImportNote(message), stacklevel=2)


def default_trainable(nodes, params, not_parameters=frozenset()) -> set[str]:
    """The float initializers that train unless the user says otherwise: those a layer reads as its
    weight, bias or scale, and those named as a PyTorch state_dict names a parameter, except those
    the exporter recorded as buffers or constants (`not_parameters`). `nodes` are IR nodes (op,
    inputs)."""
    read_as_parameter = {
        node.inputs[slot] for node in nodes for slot in PARAMETER_SLOTS.get(node.op, ()) if slot < len(node.inputs)
    }
    return {
        p
        for p in params
        if p not in not_parameters and not _buffer_name(p) and (p in read_as_parameter or _looks_like_parameter(p))
    }


def _buffer_name(name: str) -> bool:
    """A module's buffer by its name (the TorchScript exporter records no other sign): a running
    statistic, a position table, a mask."""
    leaf = name.rsplit(".", 1)[-1]
    return leaf in _BUFFER_LEAF or leaf.endswith("_mask")


def _looks_like_parameter(name: str) -> bool:
    leaf = name.rsplit(".", 1)[-1]  # a module's lifted constant: "attn.lifted_tensor_2"
    return bool(_STATE_DICT_NAME.fullmatch(name)) and not _EXPORTER_NAME.fullmatch(leaf) and not _buffer_name(name)


def not_parameters(proto: onnx.ModelProto) -> frozenset[str]:
    """The initializers torch's dynamo exporter recorded, in its graph signature, as a module's
    buffers or as constant tensors rather than parameters (a non-persistent `embed_scale`, a lifted
    mask value), and those its optimizer folded from other values (a mask of `zeros`): PyTorch does
    not train them, so by default neither does edgetrain."""
    return frozenset(
        value.name
        for value in proto.graph.value_info
        if any(
            (p.key == _SIGNATURE_KIND and p.value != "PARAMETER") or p.key == _FOLDED_FROM for p in value.metadata_props
        )
    )


def _meta(node) -> dict[str, str]:
    return {p.key: p.value for p in node.metadata_props}


def _module_path(node) -> str | None:
    """The PyTorch module a dynamo-exported node came from ("encoder.layer.0.attention.self.query")."""
    scopes = _meta(node).get("pkg.torch.onnx.name_scopes")
    if not scopes:
        return None
    try:
        names = [s for s in ast.literal_eval(scopes) if s]
    except (ValueError, SyntaxError):
        return None
    modules = names[:-1]  # the last scope is the aten call itself
    return modules[-1] if modules else None


def check_batchnorm(proto: onnx.ModelProto, frozen_bn: bool) -> None:
    """An export for inference changes BatchNorm. dynamo's optimizer, and the TorchScript exporter in
    eval mode, fold it into the convolution before it, so a model trained in train() mode would
    compile with its BatchNorm gone: refused, naming the ways out, unless frozen_bn says it is meant.
    dynamo writes BatchNorm in inference form even in training: where its record says the PyTorch
    call was a training-mode batch norm, it is restored to training mode, with one note. Any other
    BatchNorm in inference form (an eval-mode export) trains frozen, with one note."""
    graph = proto.graph
    quantized = _folded_into_quantized(graph)
    folded = [n.name for n in graph.node if _FOLDED_BN in _meta(n).get(_RULE, "") and n.name not in quantized]
    # quantize="int8" reads the folded weights too: its own QuantizeLinear nodes are no fake quantization
    ours = {q.name for q in _quantized_here(graph).values()}
    weights = _torchscript_weights(proto, _FOLDED_READERS, _TORCHSCRIPT_FOLDED)
    computed = [node for node, _ in weights if node not in ours]
    if quantized:
        note(
            f"BatchNormalization folded into {len(quantized)} convolution(s) of the quantized model, whose int8 "
            "weights hold it, trains as the folded convolution, as the model is deployed"
        )
    if (folded or computed) and not frozen_bn:
        nodes = folded or computed
        how = (
            "torch's exporter folded BatchNormalization into"
            if folded
            else "the TorchScript exporter's constant folding replaced with constants it computed (BatchNorm folded "
            "in: onnx::Conv_* in an eval-mode export, onnx::QuantizeLinear_* in a quantization-aware model) the "
            "weights of"
        )
        raise EdgetrainError(
            f"{how} {len(nodes)} convolution(s) (nodes {', '.join(map(repr, nodes[:3]))}"
            f"{', ...' if len(nodes) > 3 else ''}), so BatchNorm's scale, bias and running statistics would not "
            "train: export with torch.onnx.export(..., dynamo=False, training=torch.onnx.TrainingMode.TRAINING, "
            "do_constant_folding=False) or with dynamo=True, optimize=False to train BatchNorm, or pass "
            "frozen_bn=True (--frozen-bn) to train the folded model on purpose"
        )
    if folded or computed:
        note(
            f"BatchNormalization folded into {len(folded or computed)} convolution(s) trains as the folded "
            "convolution (frozen_bn=True)"
        )
    restored, frozen, last_batch = [], [], []
    for node in graph.node:
        if node.op_type != "BatchNormalization":
            continue
        attrs = {a.name: a for a in node.attribute}
        if ("training_mode" in attrs and attrs["training_mode"].i) or len(node.output) > 1:
            if "momentum" in attrs and attrs["momentum"].f == 0.0:
                last_batch.append(node.name)
            continue
        training = any(key in _meta(node).get(_FX_NODE, "") for key in _TRAINING_BN)
        if not training or frozen_bn:
            frozen.append(node.name)
            continue
        node.attribute.append(onnx.helper.make_attribute("training_mode", 1))
        node.output.extend([f"{node.output[0]}__running_mean", f"{node.output[0]}__running_var"])
        restored.append(node.name)
    if restored:
        note(
            f"{len(restored)} BatchNormalization node(s) that torch's exporter wrote in inference form were "
            "training-mode batch norms in PyTorch: they train with batch statistics and update their running "
            "statistics (frozen_bn=True keeps them frozen)"
        )
    if last_batch:
        # PyTorch's momentum=None (a cumulative average) has no ONNX form: the TorchScript exporter writes 0
        note(
            f"{len(last_batch)} BatchNormalization node(s) (first {last_batch[0]!r}) have momentum 0: their running "
            "statistics become each batch's own, not an average (PyTorch's BatchNorm with momentum=None, a "
            "cumulative average, exports so; give it a momentum such as 0.1 to train one)"
        )
    if frozen and not frozen_bn:
        note(
            f"{len(frozen)} BatchNormalization node(s) are in inference form, as an export in eval mode writes "
            "them: they normalize with their running statistics, which training leaves as they are (export in "
            "training mode to train with batch statistics; frozen_bn=True says this is meant)"
        )


def _folded_into_quantized(graph: onnx.GraphProto) -> set[str]:
    """The convolutions of a quantized model into which an export folded BatchNorm before the model
    was quantized: dynamo's record says so, and the TorchScript exporter's name for the folded weight
    (onnx::Conv_<n>) survives in quantize_static's integers (onnx::Conv_<n>_quantized) or is the
    float weight that quantize="int8" quantized. BatchNorm cannot come back from those weights; the
    deployed model is the folded one."""
    weights = {dq: name.removesuffix("_quantized") for dq, name in _stored_weights(graph).items()}
    return {
        node.name
        for node in graph.node
        if _FOLDED_READERS.get(node.op_type) == 1
        and len(node.input) > 1
        and node.input[1] in weights
        and (_FOLDED_BN in _meta(node).get(_RULE, "") or _TORCHSCRIPT_FOLDED.fullmatch(weights[node.input[1]]))
    }


def _stored_weights(graph: onnx.GraphProto) -> dict[str, str]:
    """{a DequantizeLinear's output: the initializer its weight is stored in}: quantize_static's
    integers and the float weights that quantize="int8" quantizes."""
    return _integer_weights(graph) | {dq: q.input[0] for dq, q in _quantized_here(graph).items()}


def _quantized_here(graph: onnx.GraphProto) -> dict[str, onnx.NodeProto]:
    """{a DequantizeLinear's output: the QuantizeLinear before it} for the weights quantize="int8"
    quantized."""
    tagged = {n.output[0]: n for n in graph.node if n.op_type == "QuantizeLinear" and QUANTIZED_HERE in _meta(n)}
    return {
        n.output[0]: tagged[n.input[0]] for n in graph.node if n.op_type == "DequantizeLinear" and n.input[0] in tagged
    }


def _integer_weights(graph: onnx.GraphProto) -> dict[str, str]:
    """{a DequantizeLinear's output: the integer initializer it reads}: the weights of a model
    quantized after its export (quantize_static), as the layers read them."""
    inits = {i.name: i for i in graph.initializer}
    return {
        n.output[0]: n.input[0]
        for n in graph.node
        if n.op_type == "DequantizeLinear" and n.input[0] in inits and inits[n.input[0]].data_type in _QUANTIZED_WEIGHTS
    }


def _torchscript_weights(proto: onnx.ModelProto, readers: dict[str, int], pattern: re.Pattern) -> list[tuple[str, str]]:
    """(node, weight) for each node whose op `readers` names with the input slot of its weight, where
    that input is an initializer named as `pattern` says the TorchScript exporter names a weight it
    computed."""
    inits = {i.name for i in proto.graph.initializer}
    return [
        (node.name or node.output[0], node.input[slot])
        for node in proto.graph.node
        if (slot := readers.get(node.op_type)) is not None
        and len(node.input) > slot
        and node.input[slot] in inits
        and pattern.fullmatch(node.input[slot])
    ]


def check_transposed_weights(proto: onnx.ModelProto) -> None:
    """The TorchScript exporter's constant folding replaces a Linear layer's weight, read only there,
    by its transpose under a name of its own (onnx::MatMul_374), in a training-mode export too. It
    trains as the layer's weight, elementwise the same, but under that name and layout, which
    PyTorch's state_dict, requires_grad and frozen_params do not know: one note names them."""
    readers = _torchscript_weights(proto, {"MatMul": 1, "Gemm": 1}, _TORCHSCRIPT_TRANSPOSED)
    if readers:
        shown = ", ".join(f"{name} (read by '{node}')" for node, name in readers[:2])
        note(
            f"{len(readers)} weight(s) are transposed copies that the TorchScript exporter's constant folding "
            f"made: {shown}{', ...' if len(readers) > 2 else ''}; they train as the layers' weights, under these "
            "names and transposed (export with do_constant_folding=False to keep PyTorch's names)"
        )


def restore_reshaped_parameters(proto: onnx.ModelProto) -> None:
    """The TorchScript exporter's constant folding computes a PReLU's slope and a GroupNorm's scale
    and bias, reshaped to broadcast, into constants named after their readers (onnx::PRelu_34,
    onnx::Mul_32 and onnx::Add_33 after GroupNorm's InstanceNormalization and Reshape). Where the
    node's scope names a module that has no initializer of that name, the parameter gets its
    state_dict name (`<module>.weight`, `<module>.bias`) and shape back, read through a Reshape."""
    graph = proto.graph
    inits = {i.name: i for i in graph.initializer}
    producers = {output: node for node in graph.node for output in node.output}
    readers = collections.Counter(name for node in graph.node for name in node.input)
    found = {}
    for node in graph.node:
        module = _torchscript_module(node, inits)
        if module is None or len(node.input) < 2 or readers[node.input[1]] != 1:
            continue
        if node.op_type == "PRelu" and re.fullmatch(r"onnx::PRelu_\d+", node.input[1]):
            found[node.input[1]] = f"{module}.weight"
        scaled = producers.get(node.input[0])
        normalized = producers.get(scaled.input[0]) if scaled is not None and scaled.op_type == "Reshape" else None
        if node.op_type == "Mul" and normalized is not None and normalized.op_type == "InstanceNormalization":
            shift = [n for n in graph.node if n.op_type == "Add" and n.input[0] == node.output[0]]
            if re.fullmatch(r"onnx::Mul_\d+", node.input[1]) and len(shift) == 1:
                found[node.input[1]] = f"{module}.weight"
                if re.fullmatch(r"onnx::Add_\d+", shift[0].input[1]) and readers[shift[0].input[1]] == 1:
                    found[shift[0].input[1]] = f"{module}.bias"
    taken = names_in(graph)
    for name, public in found.items():
        if name not in inits or public in taken:
            continue
        values = numpy_helper.to_array(inits[name])
        graph.initializer.remove(inits[name])
        shape = f"{public}__shape"
        graph.initializer.extend(
            [
                numpy_helper.from_array(values.reshape(-1), public),
                numpy_helper.from_array(np.array(values.shape), shape),
            ]
        )
        graph.node.insert(0, onnx.helper.make_node("Reshape", [public, shape], [name], name=f"{public}__reshaped"))
        taken.update((public, shape))


def _torchscript_module(node, inits: Collection[str] = ()) -> str | None:
    """The module a TorchScript-exported node belongs to, from the scope in its name
    ('/encoder/layer.0/query/MatMul' -> 'encoder.layer.0.query'); None for a node of the top module.
    An nn.Sequential's child is scoped under the container and again under its own name
    ('/blocks/blocks.0/fc1' for blocks.0.fc1): the two are one, unless `inits` holds a parameter of
    the module they would be apart (a module `x` holding a ModuleList `x`) and none of the other."""
    scopes = node.name.split("/")
    if len(scopes) <= 2 or scopes[0]:
        return None
    apart = ".".join(scopes[1:-1])
    merged: list[str] = []
    for scope in scopes[1:-1]:
        if merged and scope.startswith(f"{merged[-1]}."):
            merged.pop()
        merged.append(scope)
    module = ".".join(merged)
    if module == apart:
        return module
    owns = [any(name.startswith(f"{path}.") for name in inits) for path in (module, apart)]
    return apart if owns == [False, True] else module


def check_computed_constants(proto: onnx.ModelProto) -> None:
    """The TorchScript exporter's constant folding also computes, from a parameter, any other tensor
    a call makes of it before use (GroupNorm's `weight.unsqueeze(-1)`, a layer scale's
    `gamma.reshape(1, -1, 1, 1)`, PReLU's broadcast slope, a GRU's weights with its gates reordered)
    into a constant named after the op that reads it (onnx::Mul_301), and from constants alike, with
    nothing to tell the two apart. Beyond the folded BatchNorm and the weights restored above
    (transposed, reshaped), such tensors (more than one value: a folded scalar is an attention scale
    or the like) are said in one note each: those a layer reads as its weight train under these
    names, the others stay frozen as constants."""
    inits = {i.name: i for i in proto.graph.initializer}
    read_as_parameter: set[str] = set()
    readers: dict[str, str] = {}
    for node in proto.graph.node:
        for slot, name in enumerate(node.input):
            readers.setdefault(name, node.name or node.output[0])
            if slot in PARAMETER_SLOTS.get(node.op_type, ()):
                read_as_parameter.add(name)
    computed = [
        name
        for name, init in inits.items()
        if _TORCHSCRIPT_COMPUTED.fullmatch(name)
        and not (_TORCHSCRIPT_FOLDED.fullmatch(name) or _TORCHSCRIPT_TRANSPOSED.fullmatch(name))
        and init.data_type == onnx.TensorProto.FLOAT
        and int(np.prod(init.dims)) > 1
        and name in readers
    ]
    trained = [name for name in computed if name in read_as_parameter]
    frozen = [name for name in computed if name not in read_as_parameter]

    def shown(names: list[str]) -> str:
        listed = ", ".join(f"{name} (read by '{readers[name]}')" for name in names[:2])
        return f"{listed}{', ...' if len(names) > 2 else ''}"

    if trained:
        note(
            f"{len(trained)} layer weight(s) are constants that the TorchScript exporter's constant folding "
            f"computed (a PReLU's broadcast slope, a GRU's or LSTM's gates reordered): {shown(trained)}; they "
            "train under these names (export with do_constant_folding=False to keep PyTorch's names)"
        )
    if frozen:
        note(
            f"{len(frozen)} tensor(s) are constants that the TorchScript exporter's constant folding computed, "
            f"from parameters or from constants: {shown(frozen)}; they stay frozen, so a parameter folded into "
            "one (a layer scale reshaped) does not train: export with do_constant_folding=False, or name it in "
            "requires_grad"
        )


def _parameter_of(node, module: str, usual: str) -> str:
    """The state_dict name of the first parameter of `module` that a node's PyTorch call read, as its
    record names it (MultiheadAttention's linear reads `<module>.in_proj_weight`); `<module>.<usual>`
    where nothing records it."""
    read = re.findall(re.escape(f"%{_placeholder(module)}_") + r"(\w+)", _meta(node).get(_FX_NODE, ""))
    return f"{module}.{read[0] if read else usual}"


def normalize_transpose_perms(proto: onnx.ModelProto) -> None:
    """A Transpose's perm written with negative axes, as torch's TorchScript exporter writes
    `x.permute(0, -2, -1, 1)` (HuggingFace's Mamba2): ONNX's perm counts from 0 only, and shape
    inference refuses it. A perm lists every axis once, so its length is the rank."""
    for node in proto.graph.node:
        for attr in node.attribute:
            if node.op_type == "Transpose" and attr.name == "perm" and any(p < 0 for p in attr.ints):
                attr.ints[:] = [p % len(attr.ints) for p in attr.ints]


def explicit_squeeze_axes(proto: onnx.ModelProto) -> None:
    """A Squeeze without axes removes every axis of size 1, so its result's rank can depend on the
    batch. torch.export traces with symbolic sizes of at least 2, and writes the graph after such a
    Squeeze for the axes that were 1 in the trace (MBart's shift of its labels, `.squeeze()` of a
    (batch, 1) tensor): at a batch of 1, the batch axis would go too, and shape inference fails. Where
    the input's shape has a symbolic size, the Squeeze gets the axes its shape gives as 1, as traced."""
    graph = proto.graph
    unnamed = [n for n in graph.node if n.op_type == "Squeeze" and len([i for i in n.input if i]) == 1]
    if not unnamed:
        return
    try:  # the exporter's shapes, completed by inference: symbolic sizes stay by name
        inferred = onnx.shape_inference.infer_shapes(proto).graph
    except Exception:
        inferred = graph
    shapes = {v.name: v.type.tensor_type.shape for v in [*inferred.value_info, *inferred.input, *graph.value_info]}
    for node in unnamed:
        shape = shapes.get(node.input[0])
        if shape is None or not shape.dim or not all(d.HasField("dim_value") or d.dim_param for d in shape.dim):
            continue  # an unknown size, which may be 1
        if all(d.HasField("dim_value") for d in shape.dim):
            continue  # known in full: the axes do not depend on the batch
        axes = [axis for axis, d in enumerate(shape.dim) if d.HasField("dim_value") and d.dim_value == 1]
        name = f"{node.name or node.output[0]}__axes"
        graph.initializer.append(numpy_helper.from_array(np.array(axes, np.int64), name))
        del node.input[1:]
        node.input.append(name)


def restore_names(proto: onnx.ModelProto) -> None:
    """dynamo folds a Linear layer's transposed weight into a new constant (val_70 = weight^T) and
    loses its name, and so does the TorchScript exporter's constant folding (onnx::MatMul_302), in a
    training-mode export too. Where the export says the layer (_linear_weight), the parameter gets its
    state_dict name and layout back (`<module>.weight`, or the name dynamo's record gives it), read
    through a Transpose, so gradients, checkpoints and state.parameters use the names PyTorch users
    know. A weight tied to another layer's (GPT-2's output layer and embedding) is read from that
    parameter again, so the tie trains as one: the parameter of the layer's name, or, where the export
    kept the tie under the other layer's name only, the one parameter that holds the same values."""
    graph = proto.graph
    inits = {i.name: i for i in graph.initializer}
    readers = collections.Counter(name for node in graph.node for name in node.input)
    taken = names_in(graph)
    # Each transposed weight, read where first: a layer called more than once (ALBERT's shared
    # layers) reads one, restored once if every call is that layer's.
    layers: dict[str, set[str | None]] = collections.defaultdict(set)
    calls: collections.Counter[str] = collections.Counter()
    first: dict[str, tuple[int, onnx.NodeProto]] = {}
    for index, node in enumerate(graph.node):
        if node.op_type in ("MatMul", "Gemm") and len(node.input) >= 2:
            layers[node.input[1]].add(_linear_weight(node, inits))
            calls[node.input[1]] += 1
            first.setdefault(node.input[1], (index, node))
    for name, (index, node) in sorted(first.items(), key=lambda item: -item[1][0]):  # from the last
        init, public = inits.get(name), next(iter(layers[name])) if len(layers[name]) == 1 else None
        if init is None or readers[name] != calls[name] or len(init.dims) != 2:
            continue
        weight = numpy_helper.to_array(init).T
        if public is None and _TORCHSCRIPT_TRANSPOSED.fullmatch(name):  # no Linear: `x @ embedding.weight.T`
            public = _equal_parameter(inits, weight, name)
        if public is None:
            continue
        tied = inits.get(public)
        if tied is None:  # tied under the other layer's name (a head tied to the embedding, exported as it)
            public = _equal_parameter(inits, weight, name) or public
            tied = inits.get(public)
        if tied is None and public in taken:
            continue
        if tied is not None and not np.array_equal(numpy_helper.to_array(tied), weight):
            continue
        graph.initializer.remove(init)
        if tied is None:
            graph.initializer.append(numpy_helper.from_array(np.ascontiguousarray(weight), public))
            inits[public] = graph.initializer[-1]
        graph.node.insert(
            index, onnx.helper.make_node("Transpose", [public], [name], perm=[1, 0], name=f"{node.name}__weight_t")
        )
        taken.add(public)


def _equal_parameter(inits: dict, weight: np.ndarray, name: str) -> str | None:
    """The one other float initializer that holds exactly `weight`'s values, where they are not all
    one value (fresh zeros or ones in two layers are no tie)."""
    if weight.size < 2 or np.all(weight == weight.flat[0]):
        return None
    raw = np.ascontiguousarray(weight, dtype="<f4").tobytes()  # most initializers hold raw bytes: compared as they are
    equal = [
        other
        for other, init in inits.items()
        if other != name
        and init.data_type == onnx.TensorProto.FLOAT
        and tuple(init.dims) == weight.shape
        and (init.raw_data == raw if init.raw_data else np.array_equal(numpy_helper.to_array(init), weight))
    ]
    return equal[0] if len(equal) == 1 else None


def _linear_weight(node, inits: dict) -> str | None:
    """The state_dict name of the Linear weight that `node` (a MatMul, or a Gemm without transB)
    reads transposed as its second input, where the export says which: dynamo's record of the
    module that called aten.linear, whose optimizer named the transposed weight val_70; or the
    TorchScript exporter's scope in the node's name ('/encoder/layer.0/query/MatMul'), whose
    constant folding named it onnx::MatMul_302, where that module has no other initializer than its
    bias (so a module's own tensor used as `x @ self.w.t()` keeps its exporter name)."""
    name = node.input[1]
    transposed = node.op_type == "MatMul" or not any(a.name == "transB" and a.i for a in node.attribute)
    if not transposed:
        return None
    if "aten.linear" in _meta(node).get("namespace", "") and _EXPORTER_NAME.fullmatch(name):
        module = _module_path(node)
        return _parameter_of(node, module, "weight") if module else None
    module = _torchscript_module(node, inits)
    if not _TORCHSCRIPT_TRANSPOSED.fullmatch(name) or module is None:
        return None
    owned = {i for i in inits if i.startswith(f"{module}.")}
    return f"{module}.weight" if owned <= {f"{module}.bias"} else None


def _placeholder(name: str) -> str:
    """What torch.export calls the parameter `name` in the calls dynamo records: p_<name>, lowercase,
    with underscores for dots (p_bert_embeddings_layernorm_weight)."""
    return "p_" + re.sub(r"\W", "_", name).lower()


def _reads_parameter(node, name: str) -> bool | None:
    """Whether the PyTorch call a dynamo-exported node came from read the parameter `name`; None where
    the node has no record."""
    call = _meta(node).get(_FX_NODE)
    if call is None:
        return None
    return re.search(re.escape(f"%{_placeholder(name)}") + r"\b", call) is not None


def restore_removed_biases(proto: onnx.ModelProto) -> None:
    """dynamo's optimizer drops a Conv's, ConvTranspose's or Gemm's bias that is all zeros, as a fresh
    layer's often is, so a bias PyTorch trains would not exist. Where the node's record shows its
    call read the bias parameter, the bias comes back as those zeros under its state_dict name."""
    graph = proto.graph
    inits = {i.name: i for i in graph.initializer}
    dequantized = _stored_weights(graph)
    restored = 0
    for node in graph.node:
        if _REMOVED_BIAS not in _meta(node).get(_RULE, "") or len(node.input) != 2:
            continue
        stored = dequantized.get(node.input[1], node.input[1])
        module, weight, weight_name = _module_path(node), inits.get(stored), stored.removesuffix("_quantized")
        # Named as its weight is (`out_proj.weight` -> `out_proj.bias`), or after the module.
        named = [weight_name[: -len("weight")] + "bias"] if weight_name.endswith("weight") else []
        names = [*named, *([f"{module}.bias"] if module else [])]
        bias = next((b for b in names if b not in inits and _reads_parameter(node, b)), None)
        if weight is None or bias is None:
            continue
        attrs = _attributes(node)
        if node.op_type == "Conv":
            channels = weight.dims[0]
        elif node.op_type == "ConvTranspose":
            channels = weight.dims[1] * attrs.get("group", 1)
        elif node.op_type == "Gemm":
            channels = weight.dims[0] if attrs.get("transB", 0) else weight.dims[1]
        else:
            continue
        graph.initializer.append(numpy_helper.from_array(np.zeros(channels, np.float32), bias))
        inits[bias] = graph.initializer[-1]
        node.input.append(bias)
        restored += 1
    if restored:
        note(f"restored {restored} zero bias(es) that torch's exporter optimized away: they train as in PyTorch")


def _folded_from(value: onnx.ValueInfoProto) -> list[str]:
    """The tensors dynamo's optimizer computed the constant `value` from, as its record lists them."""
    return [name for p in value.metadata_props if p.key == _FOLDED_FROM for name in re.findall(r"'([^']+)'", p.value)]


def folded_sources(proto: onnx.ModelProto) -> frozenset[str]:
    """Every tensor dynamo's optimizer folded into a constant: one of them the graph no longer has
    (a position table gathered at static positions) was PyTorch's, and is frozen as exported."""
    return frozenset(name for value in proto.graph.value_info for name in _folded_from(value))


_EXPANDED = re.compile(r"expand(_\d+)?")  # what torch.export names the result of a call to aten.expand


def restore_expanded_parameters(proto: onnx.ModelProto) -> None:
    """dynamo's optimizer folds a parameter of the top module expanded over a static batch (the class
    token of timm's and torchvision's ViTs, `cls_token.expand(B, -1, -1)`) into a constant, and the
    record keeps no other trace of it: its name has no module path to tell it from a value's. Where
    the constant is such an `expand`, folded from one tensor that is not an exporter's and that the
    graph no longer has, and all its rows along the batch are one, the parameter comes back as that
    row under its name, read through an Expand to the constant's shape, so it trains as in PyTorch."""
    graph = proto.graph
    inits = {i.name: i for i in graph.initializer}
    taken = names_in(graph)
    restored = []
    for value in graph.value_info:
        init = inits.get(value.name)
        if init is None or init.data_type != onnx.TensorProto.FLOAT or not _EXPANDED.fullmatch(value.name):
            continue
        sources = [name for name in _folded_from(value) if not _EXPORTER_NAME.fullmatch(name)]
        array = numpy_helper.to_array(init)
        if len(sources) != 1 or sources[0] in taken or not _looks_like_parameter(sources[0]) or array.ndim == 0:
            continue
        if not (array == array[:1]).all():
            continue
        name, shape = sources[0], f"{value.name}__shape"
        graph.initializer.remove(init)
        graph.initializer.extend(
            [numpy_helper.from_array(array[:1].copy(), name), numpy_helper.from_array(np.array(array.shape), shape)]
        )
        graph.node.insert(
            0, onnx.helper.make_node("Expand", [name, shape], [value.name], name=f"{value.name}__restored")
        )
        taken.update((name, shape))
        restored.append(name)
    if restored:
        note(
            f"restored {len(restored)} parameter(s) that torch's exporter folded, expanded over the batch, into "
            f"constants ({', '.join(restored[:4])}): they train as in PyTorch"
        )


_TRANSPOSED_COPY = re.compile(r"(permute|t|transpose)(_\d+)?")  # torch.export's names for a transpose's result


def restore_folded_copies(proto: onnx.ModelProto) -> None:
    """dynamo's optimizer folds a parameter's transpose, reshape or expansion (`x @ w.T`,
    `scale.view(1, -1, 1, 1)`) into a constant of its own: PyTorch's gradient flows through that copy
    into the parameter, a frozen constant would stop it. A parameter read only through copies is
    gone from the graph: one whose copy is a matrix that torch.export names as a transpose's result
    comes back as that copy transposed, read through a Transpose. Where the parameter is there, a
    copy whose values are the parameter's rearranged in exactly one way (its elements' places decide
    where each gradient goes) is computed from it again by that Transpose, Reshape or Expand. A copy
    that is not, or not in one way (a fresh bias of zeros expanded is zeros however placed), stays
    frozen, and one note says so."""
    graph = proto.graph
    inits = {i.name: i for i in graph.initializer}
    parameters = recorded_parameters(proto)
    copies = []  # (copy, the parameter it was folded from), beside shapes and axes
    for value in graph.value_info:
        sources = [name for name in _folded_from(value) if name in parameters]
        if value.name in inits and len(sources) == 1:
            copies.append((value.name, sources[0]))
    frozen: list[str] = []
    for name, parameter in copies:
        copy = numpy_helper.to_array(inits[name])
        rebuilt: list | None  # [the node that computes the copy, its constant inputs]
        if parameter not in inits and _TRANSPOSED_COPY.fullmatch(name) and copy.ndim == 2:
            graph.initializer.append(numpy_helper.from_array(np.ascontiguousarray(copy.T), parameter))
            inits[parameter] = graph.initializer[-1]
            rebuilt = [onnx.helper.make_node("Transpose", [parameter], [name], perm=[1, 0], name=f"{name}__restored")]
        elif parameter in inits:
            rebuilt = _rearranged(name, numpy_helper.to_array(inits[parameter]), copy, parameter)
        else:
            continue  # said with the other parameters folded away (check_recorded_parameters)
        if rebuilt is None:
            frozen.append(f"{name} (from {parameter})")
            continue
        graph.initializer.remove(inits.pop(name))
        graph.initializer.extend(rebuilt[1:])
        graph.node.insert(0, rebuilt[0])
    if frozen:
        note(
            f"{len(frozen)} constant(s) that torch's exporter computed from a parameter that also trains "
            f"({', '.join(frozen[:3])}{', ...' if len(frozen) > 3 else ''}) stay frozen, where PyTorch's gradient "
            "flows through them into the parameter: export with optimize=False to train them as PyTorch does"
        )


def _rearranged(name: str, source: np.ndarray, copy: np.ndarray, parameter: str) -> list | None:
    """[the node, its constant inputs] that computes `copy` (named `name`) from `source` by one
    Transpose, Reshape or Expand, when exactly one placing of the parameter's elements gives its
    values; None otherwise."""
    places = np.arange(source.size).reshape(source.shape)
    ways: dict[bytes, tuple[str, Any]] = {}  # each placing of the elements -> the first way to it
    if source.ndim == copy.ndim and source.ndim <= 5:
        for perm in itertools.permutations(range(source.ndim)):
            ways.setdefault(places.transpose(perm).tobytes(), ("Transpose", list(perm)))
    if source.size == copy.size:
        ways.setdefault(places.reshape(copy.shape).tobytes(), ("Reshape", copy.shape))
    try:
        ways.setdefault(np.broadcast_to(places, copy.shape).tobytes(), ("Expand", copy.shape))
    except ValueError:
        pass
    fits = [
        way
        for key, way in ways.items()
        if len(key) == copy.size * places.itemsize
        and np.array_equal(source.reshape(-1)[np.frombuffer(key, places.dtype)], copy.reshape(-1))
    ]
    if len(fits) != 1:
        return None
    op, arg = fits[0]
    if op == "Transpose":
        return [onnx.helper.make_node(op, [parameter], [name], perm=arg, name=f"{name}__restored")]
    shape = numpy_helper.from_array(np.array(arg, np.int64), f"{name}__shape")
    return [onnx.helper.make_node(op, [parameter, shape.name], [name], name=f"{name}__restored"), shape]


def _recorded_in(node) -> list[str]:
    """The parameters (p_<name>) that the PyTorch call a dynamo-exported node came from read."""
    return re.findall(r"%(p_\w+)", _meta(node).get(_FX_NODE, ""))


def check_recorded_parameters(proto: onnx.ModelProto, folded: frozenset[str]) -> frozenset[str]:
    """Every parameter a dynamo-exported node's record says its PyTorch call read (%p_<name>) should be
    an initializer by now, and so should every module's tensor (a dotted name) that the exporter's
    optimizer folded a constant from, and every parameter of the export's graph signature of a module
    that ran and not tied to another (the top module's own too, and those whose folded constants the
    optimizer merged as equal, which no folded_from names). One that is not was folded into a
    constant or dropped, so it cannot train: said in one note, never left silent. Returns the
    names of these parameters (frozen_params may name them)."""
    names = {i.name for i in proto.graph.initializer}
    present = {_placeholder(name) for name in names}
    recorded = {p for node in proto.graph.node for p in _recorded_in(node)}
    # A folded constant's sources include the buffers it read (Swin's relative position index, which
    # gathered its bias table): the graph signature, where there is one, says which were parameters.
    signed = recorded_parameters(proto)
    gone = {
        name
        for name in folded
        if "." in name and name not in names and (name in signed if signed else _looks_like_parameter(name))
    }
    unseen = set(signed) - names
    gone |= _ran(proto, unseen) - _tied_away(proto, unseen, names)
    # BatchNorm's, which dynamo's optimizer folded into a convolution, whose record names them:
    # check_batchnorm has refused that or said it, so they are no surprise here
    fused = {p for node in proto.graph.node if _FOLDED_BN in _meta(node).get(_RULE, "") for p in _recorded_in(node)}
    missing = [name for name in sorted(gone) if _placeholder(name) not in fused]
    missing += sorted(recorded - present - fused - {_placeholder(name) for name in gone})
    if missing:
        note(
            f"{len(missing)} PyTorch parameter(s) that torch's exporter folded into constants or optimized away "
            f"({_shown(missing)}) stay as exported and do not train: export with optimize=False to train them"
        )
    # A module the optimizer ran over that left no node: tied to another (T5's `shared`), or a layer
    # it merged into an equal one of the same input (GPT-NeoX's two fresh LayerNorms of one x), whose
    # survivor then takes both gradients. The export cannot tell the two apart; both are said. One the
    # note above named as folded into a constant is neither.
    nodeless = sorted(unseen - _ran(proto, unseen) - gone) if _optimized(proto) else []
    if nodeless:
        note(
            f"{len(nodeless)} PyTorch parameter(s) have no node left in the export ({_shown(nodeless)}): each is "
            "tied to another and trains as that one, or torch's exporter's optimizer merged its layer into an "
            "equal layer of the same input, which then trains for both: export with optimize=False to keep each"
        )
    return frozenset(gone)


def _shown(names: list[str]) -> str:
    return ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")


def _optimized(proto: onnx.ModelProto) -> bool:
    """Whether dynamo's optimizer ran over the export: it records what it folded and rewrote, and a
    node whose call it found equal to another's is gone while the calls recorded as reading its value
    (`%layer_norm_1`) now read the other's."""
    graph = proto.graph
    if any(p.key == _FOLDED_FROM for v in graph.value_info for p in v.metadata_props):
        return True
    values = names_in(graph)
    for node in graph.node:
        meta = _meta(node)
        if _RULE in meta:
            return True
        if node.op_type in ("Constant", "Identity"):
            continue  # the exporter itself writes sizes as constants and elides clones
        call = meta.get(_FX_NODE, "").split("](", 1)[-1]  # the arguments, after the call's target
        if any(v not in values for v in re.findall(r"%(?![pbc]_)(\w+)", call)):
            return True
    return False


def recorded_parameters(proto: onnx.ModelProto) -> frozenset[str]:
    """Every parameter the dynamo export's graph signature lists, whether the graph still has it or
    not (its optimizer merges equal ones and folds others away); empty for other exports."""
    return frozenset(_SIGNATURE_PARAMETER.findall(_signature(proto)))


def check_dropped_statistics(proto: onnx.ModelProto) -> None:
    """Running statistics the export's graph signature lists for a normalization the graph has, but
    that no node reads: the exporter wrote the training-mode call alone (InstanceNorm with
    track_running_stats), so PyTorch's eval normalizes with them and edgetrain's cannot. Said."""
    names = {i.name for i in proto.graph.initializer}
    signature = _signature(proto)
    normalizing = {
        _module_path(node)
        for node in proto.graph.node
        if node.op_type in ("InstanceNormalization", "BatchNormalization")
    }
    dropped = sorted(
        name
        for name in set(_SIGNATURE_STATISTIC.findall(signature)) - names
        if name.rsplit(".", 1)[0] in normalizing  # not a BatchNorm folded into its convolution
    )
    if dropped:
        note(
            f"the export dropped running statistics ({', '.join(dropped[:4])}): eval and inference normalize "
            "with the statistics of their input, where PyTorch's eval uses these"
        )


def _signature(proto: onnx.ModelProto) -> str:
    """The export's graph signature (dynamo's): every input with its kind and target, or ""."""
    return next((p.value for p in proto.graph.metadata_props if p.key == _SIGNATURE), "")


def _ran(proto: onnx.ModelProto, parameters: set[str]) -> set[str]:
    """The parameters of modules whose forward the export recorded (a node in the module or one of
    its submodules; the top module's always): a module that never ran (T5's `shared`, read only as
    its tied `embed_tokens`) or a parameter nothing reads leaves no node."""
    ran = {""}
    for node in proto.graph.node:
        path = _module_path(node) or ""
        ran.update(".".join(path.split(".")[:depth]) for depth in range(1, path.count(".") + 2))
    return {name for name in parameters if (name.rsplit(".", 1)[0] if "." in name else "") in ran}


def _tied_away(proto: onnx.ModelProto, unseen: set[str], names: set[str]) -> set[str]:
    """The parameters of `unseen` that are tied to another and so have no initializer of their own:
    a node of the parameter's module reads, under another module's name, an initializer with its
    leaf name (GPT-2's `transformer.wte` embedding reads `lm_head.weight`)."""
    tied = set()
    for node in proto.graph.node:
        module = _module_path(node)
        for name in node.input if module else ():
            own = f"{module}.{name.rsplit('.', 1)[-1]}"
            if name in names and own != name and own in unseen:
                tied.add(own)
    return tied


# An average pooling's recorded call: its divisor_override, the seventh argument, when one is given.
_DIVISOR_OVERRIDE = re.compile(
    r"aten\.avg_pool[123]d\.default\]\(args = \((?:[^,\[]+|\[[^\]]*\])(?:, (?:[^,\[]+|\[[^\]]*\])){5}, (\d+)\)"
)


def check_divisor_override(proto: onnx.ModelProto) -> None:
    """Refuse an average pooling that PyTorch divides by a divisor_override: ONNX's AveragePool
    cannot say it, so torch's exporters drop it and write a model that divides by the window's size.
    The dynamo exporter's record shows it; the TorchScript exporter's export keeps nothing of it."""
    for node in proto.graph.node:
        found = _DIVISOR_OVERRIDE.search(_meta(node).get(_FX_NODE, ""))
        if node.op_type == "AveragePool" and found:
            raise EdgetrainError(
                f"node '{node.name}' (AveragePool): PyTorch divides by divisor_override={found.group(1)}, which "
                "ONNX's AveragePool cannot say and the export dropped; it would divide by the window's size"
            )


# A cross-entropy's recorded call: its label_smoothing, the sixth argument or a keyword, when one is given.
_LABEL_SMOOTHING = re.compile(
    r"aten\.cross_entropy_loss\.default\]\(args = \((?:[^,]+, ){5}([^,)]+)\)|label_smoothing: ([^,}]+)"
)


def check_label_smoothing(proto: onnx.ModelProto) -> None:
    """Refuse a cross-entropy that PyTorch smooths (label_smoothing): ONNX's SoftmaxCrossEntropyLoss
    cannot say it, and the dynamo exporter drops it, writing the unsmoothed loss. Its record shows it;
    the TorchScript exporter refuses to export it."""
    for node in proto.graph.node:
        found = _LABEL_SMOOTHING.search(_meta(node).get(_FX_NODE, ""))
        value = (found.group(1) or found.group(2)).strip() if found else "0"
        if node.op_type == "SoftmaxCrossEntropyLoss" and value not in ("0", "0.0"):
            raise EdgetrainError(
                f"node '{node.name}' (SoftmaxCrossEntropyLoss): PyTorch smooths its labels by label_smoothing={value}, "
                "which ONNX's SoftmaxCrossEntropyLoss cannot say and the export dropped; it would train the "
                "unsmoothed loss"
            )


_OUTPUT_KIND = "pkg.torch.export.graph_signature.OutputSpec.kind"  # USER_OUTPUT, BUFFER_MUTATION, ...


def _buffer_updates(proto: onnx.ModelProto) -> list[str]:
    """The values the dynamo exporter's record marks as a buffer's new value (BUFFER_MUTATION), where
    the forward itself reads it; an update nothing reads after it leaves no trace. BatchNorm's running
    statistics are left out: check_batchnorm restores them."""
    producers = {out: node for node in proto.graph.node for out in node.output}
    return [
        value.name
        for value in [*proto.graph.value_info, *proto.graph.output]
        if value.type.tensor_type.elem_type == onnx.TensorProto.FLOAT
        and any(p.key == _OUTPUT_KIND and p.value == "BUFFER_MUTATION" for p in value.metadata_props)
        and getattr(producers.get(value.name), "op_type", "") != "BatchNormalization"
    ]


def note_buffer_updates(proto: onnx.ModelProto) -> None:
    """Say where the forward updates a buffer of its own (a running normalizer, an EMA, spectral_norm's
    power iteration): ONNX cannot write a model's state, so neither exporter keeps the update."""
    updated = _buffer_updates(proto)
    if updated:
        note(
            f"the forward updates {len(updated)} buffer(s) of its own (first: value {updated[0]!r}), which the "
            "export does not write back: each step computes the update from the buffer as stored, and training "
            "leaves the buffer as it is "
            "(PyTorch updates it every training step; a TorchScript export drops the update without a record)"
        )


def detached_values(proto: onnx.ModelProto) -> frozenset[str]:
    """The values where PyTorch's gradient stops, and so edgetrain's, as torch's dynamo exporter
    records them: nodes recorded as `aten.detach` (x.detach() in the forward, an Identity in ONNX,
    which has no way to stop a gradient), and a buffer's new value (_buffer_updates). PyTorch cannot
    train through a buffer's update: the buffer would carry the step's graph into the next step, whose
    backward then fails, so modules make it under torch.no_grad() (spectral_norm's power iteration, a
    running mean), which the export does not record. The TorchScript exporter keeps no record of
    either, nor does any exporter for a torch.no_grad() block elsewhere: there the gradient flows on,
    as in ONNX Runtime."""
    detached = {
        name
        for node in proto.graph.node
        if re.search(r"target=torch\.ops\.aten\.detach\.default\b", _meta(node).get(_FX_NODE, ""))
        for name in node.output
    }
    return frozenset(detached.union(_buffer_updates(proto)))


# An embedding's recorded call: aten.embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, ...).
_EMBEDDING = re.compile(r"aten\.embedding\.default\]\(args = \([^,]+, [^,)]+(?:, (-?\d+))?(?:, (True|False))?")


def padding_rows(proto: onnx.ModelProto) -> dict[str, int]:
    """The output of each Gather that torch's dynamo exporter records as an embedding with a
    padding_idx -> that row, whose weight PyTorch's gradient leaves untouched: the index it reads
    gathers its row in the forward pass but adds nothing to the gradient. Refuses an embedding that
    scales its gradient by the indices' frequencies (scale_grad_by_freq), which no ONNX op says. The
    TorchScript exporter keeps no record of either: there, a table with exactly one row of zeros is
    read as one with a padding_idx (_zero_rows)."""
    if not any(_FX_NODE in _meta(node) for node in proto.graph.node):
        return _zero_rows(proto)
    rows = {}
    for node in proto.graph.node:
        found = _EMBEDDING.search(_meta(node).get(_FX_NODE, "")) if node.op_type == "Gather" else None
        if not found:
            continue
        if found.group(2) == "True":
            raise EdgetrainError(
                f"node '{node.name}' (Gather): PyTorch's embedding scales its gradient by how often each index "
                "occurs (scale_grad_by_freq=True), which ONNX cannot say; export it without"
            )
        if found.group(1) is not None and int(found.group(1)) >= 0:
            rows[node.output[0]] = int(found.group(1))
    return rows


def _zero_rows(proto: onnx.ModelProto) -> dict[str, int]:
    """For a model without the dynamo exporter's record: the output of each Gather whose data is a
    2-D float initializer, read at axis 0, with exactly one row of zeros -> that row. nn.Embedding
    makes its padding_idx row zeros and its gradient never changes it (HuggingFace's initializers
    zero it too), and a row of zeros is otherwise improbable in a trained or random table; a model
    whose decoder starts from the padding token (Pegasus, Marian) feeds that row on every step."""
    tables = {i.name: i for i in proto.graph.initializer if i.data_type == onnx.TensorProto.FLOAT and len(i.dims) == 2}
    zeros: dict[str, np.ndarray] = {}  # table -> its rows of zeros
    rows, padded = {}, {}
    for node in proto.graph.node:
        axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
        if node.op_type != "Gather" or node.input[0] not in tables or axis not in (0, -2):
            continue
        table = node.input[0]
        if table not in zeros:
            zeros[table] = np.flatnonzero(~numpy_helper.to_array(tables[table]).any(axis=1))
        if len(zeros[table]) == 1 and tables[table].dims[0] > 1:
            rows[node.output[0]] = padded[table] = int(zeros[table][0])
    if padded:
        note(
            "; ".join(f"row {row} of '{table}'" for table, row in sorted(padded.items()))
            + ": all zeros, as nn.Embedding keeps its padding_idx row, so its lookups add nothing to its gradient, "
            "as in PyTorch (a TorchScript export does not record padding_idx; if it is not one, export with "
            "dynamo=True, whose record says)"
        )
    return rows


def quantized_parameters(proto: onnx.ModelProto) -> None:
    """A quantized model (QDQ, as onnxruntime's quantize_static writes it) keeps its weights as
    integers that DequantizeLinear reads. To train them, each becomes a float master copy holding
    its dequantized values, the parameter that training updates: an 8- or 16-bit weight is quantized
    again from it by a QuantizeLinear of its own scale and zero point, so the forward pass computes
    what the model does and training is quantization-aware (ops/quantize.py); an int32 bias, whose
    steps (input scale times weight scale) are far finer than anything trained, is read as the float
    it stands for, as quantization-aware training keeps biases. The master takes the name of the
    value it replaces (the bias's DequantizeLinear output, the weight without quantize_static's
    `_quantized`), so checkpoints and gradients use the layer's names."""
    graph = proto.graph
    _fold_quantization_casts(graph)
    inits = {i.name: i for i in graph.initializer}
    readers = readers_of(graph)
    taken = names_in(graph)
    masters = 0
    for dq in [n for n in graph.node if n.op_type == "DequantizeLinear"]:
        weight, scale = inits.get(dq.input[0]), inits.get(dq.input[1])
        zero_point = inits.get(dq.input[2]) if len(dq.input) > 2 and dq.input[2] else None
        if weight is None or scale is None or (len(dq.input) > 2 and dq.input[2] and zero_point is None):
            continue
        if len(readers[weight.name]) != 1 or weight.data_type not in _QUANTIZED_WEIGHTS + (onnx.TensorProto.INT32,):
            continue
        values = _dequantized(dq, weight, scale, zero_point)
        # The TorchScript exporter merges equal initializers and gives the other names back through
        # Identity nodes (a fresh BatchNorm's running_var is Identity(its weight)); quantize_static
        # then quantizes the one tensor. Each such name is a tensor of its own again, as in PyTorch,
        # holding the values the export merged.
        for identity in [n for n in readers[dq.output[0]] if n.op_type == "Identity"]:
            graph.initializer.append(numpy_helper.from_array(values.copy(), identity.output[0]))
            graph.node.remove(identity)
            readers[dq.output[0]].remove(identity)
        graph.initializer.remove(weight)
        if weight.data_type == onnx.TensorProto.INT32:
            graph.initializer.append(numpy_helper.from_array(values, dq.output[0]))
            graph.node.remove(dq)
            for name in dq.input[1:]:  # the bias's scale and zero point, when nothing else reads them
                readers[name].remove(dq)
                if not readers[name] and name in inits:
                    graph.initializer.remove(inits.pop(name))
        else:
            master = _master_name(weight.name, readers[dq.output[0]], taken)
            taken.add(master)
            graph.initializer.append(numpy_helper.from_array(values, master))
            quantize = onnx.helper.make_node(
                "QuantizeLinear", [master, *dq.input[1:]], [weight.name], name=f"{dq.name}__quantize"
            )
            quantize.attribute.extend(a for a in dq.attribute if a.name == "axis")
            graph.node.insert(list(graph.node).index(dq), quantize)
        masters += 1
    if masters:
        note(
            f"{masters} quantized weight(s) and bias(es) train quantization-aware: int8 weights as their "
            "integers (QAS) where symmetric, the others as float master copies (report.json's "
            "int8_trained_weights says which)"
        )


def fake_quantized_constants(graph: onnx.GraphProto) -> frozenset[str]:
    """The float initializers of a constant's QuantizeLinear and DequantizeLinear (their scales, and
    the constant itself if it is one) where the DequantizeLinear's value reaches only inputs that ops
    read as compile-time constants (Pad's padding value), as quantize_static quantizes a constant
    there: constants to fold, never parameters to train. A parameter's own are not among them."""
    readers = readers_of(graph)
    inits = {i.name for i in graph.initializer}
    constants = inits | {name for node in graph.node for name in node.output if node.op_type == "Constant"}

    def only(name: str, reads) -> list[onnx.NodeProto]:
        """The nodes reading `name` if there are some and each `reads(node, its slots of name)`."""
        nodes = readers.get(name, [])
        slots = [{slot for slot, read in enumerate(node.input) if read == name} for node in nodes]
        return nodes if nodes and all(map(reads, nodes, slots)) else []

    def as_constant(node, slots) -> bool:
        spec = REGISTRY.get((node.domain, node.op_type))
        return spec is not None and spec.state is None and slots <= spec.const_inputs

    found: set[str] = set()
    for quantize in [n for n in graph.node if n.op_type == "QuantizeLinear" and n.input[0] in constants]:
        dequantizers = only(quantize.output[0], lambda node, slots: node.op_type == "DequantizeLinear" and slots == {0})
        chain = [quantize, *dequantizers]
        held = [name for node in chain for name in node.input if name in inits]
        if (
            dequantizers
            and all(only(d.output[0], as_constant) for d in dequantizers)
            and all(node in chain for name in held for node in readers[name])
        ):
            found.update(held)
    return frozenset(found)


_QUANTIZED_WEIGHTS = (onnx.TensorProto.INT8, onnx.TensorProto.UINT8, onnx.TensorProto.INT16, onnx.TensorProto.UINT16)


def _fold_quantization_casts(graph: onnx.GraphProto) -> None:
    """A scale or zero point that a Cast of an initializer gives (a PyTorch model quantized by
    torch.ao's pt2e flow keeps them as float32 and int64 buffers) becomes that initializer, cast."""
    inits = {i.name: i for i in graph.initializer}
    readers = collections.defaultdict(list)
    for node in graph.node:
        for slot, name in enumerate(node.input):
            readers[name].append((node.op_type, slot))
    for cast in [n for n in graph.node if n.op_type == "Cast" and n.input[0] in inits]:
        if not readers[cast.output[0]] or not set(readers[cast.output[0]]) <= _QUANTIZATION_CONSTANTS:
            continue
        to = onnx.helper.tensor_dtype_to_np_dtype(next(a.i for a in cast.attribute if a.name == "to"))
        graph.initializer.append(
            numpy_helper.from_array(numpy_helper.to_array(inits[cast.input[0]]).astype(to), cast.output[0])
        )
        graph.node.remove(cast)
        readers[cast.input[0]].remove(("Cast", 0))
        if not readers[cast.input[0]]:
            graph.initializer.remove(inits.pop(cast.input[0]))


def _master_name(weight: str, readers: list, taken: set[str]) -> str:
    """The float master's name: the layer's `<module>.weight` where the one node reading the
    dequantized weight records its module (pt2e names its int8 weights `_frozen_param0`), else the
    weight's own without quantize_static's `_quantized`."""
    module = _module_path(readers[0]) if len(readers) == 1 else None
    candidates = ([f"{module}.weight"] if module else []) + [weight.removesuffix("_quantized")]
    return next((name for name in candidates if name not in taken), f"{weight}_float")


def _dequantized(dq, weight, scale, zero_point) -> np.ndarray:
    """What DequantizeLinear makes of the initializer, computed as the C computes it."""
    x = numpy_helper.to_array(weight).astype(np.int64)
    s = numpy_helper.to_array(scale).astype(np.float32)
    z = np.zeros((), np.int64) if zero_point is None else numpy_helper.to_array(zero_point).astype(np.int64)
    if s.size > 1:
        axis = next((a.i for a in dq.attribute if a.name == "axis"), 1) % x.ndim
        shape = [-1 if d == axis else 1 for d in range(x.ndim)]
        s, z = s.reshape(shape), z.reshape(shape)
    return ((x - z).astype(np.float32) * s).astype(np.float32)


def tied_parameters(proto: onnx.ModelProto, params: set[str], untie: bool) -> None:
    """One tensor can be the parameter of several layers. dynamo's optimizer merges equal
    initializers (every fresh LayerNorm's weight of ones, every zero bias), though PyTorch trains
    each on its own: where a reader's record shows its call read another parameter, it gets its own
    copy, with one note. Models also tie weights on purpose (GPT-2's output layer and embedding),
    which train tied, reported in one line; untie gives each layer its own copy."""
    graph = proto.graph
    uses: dict[str, list[tuple[onnx.NodeProto, int]]] = collections.defaultdict(list)
    for node in graph.node:
        for slot, name in enumerate(node.input):
            if (node.op_type, slot) in _SHAPE_ONLY or node.op_type in ("Shape", "Size"):
                continue  # reads the shape or type, not the values
            if (node.op_type, slot) in _QUANTIZATION_CONSTANTS:
                continue
            if name in params and (slot in PARAMETER_SLOTS.get(node.op_type, ()) or _looks_like_parameter(name)):
                uses[name].append((node, slot))
    tied = {name: readers for name, readers in uses.items() if len({n.name for n, _ in readers}) > 1}
    merged, kept = {}, {}
    for name, readers in tied.items():
        own = [_reads_parameter(node, name) for node, _ in readers]
        # A constant no call read as a parameter (an exporter's val_12) is left as it is.
        other = [any(own) and reads is False for reads in own]
        merged[name] = [r for r, moved in zip(readers, other) if moved]
        kept[name] = [r for r, moved in zip(readers, other) if not moved]
    if any(merged.values()):
        _own_copies(graph, merged)
        note(
            f"torch's exporter merged {sum(map(len, merged.values()))} parameter(s) into equal ones of other "
            "layers: each trains on its own, as in PyTorch"
        )
    tied = {name: readers for name, readers in kept.items() if len({n.name for n, _ in readers}) > 1}
    if not tied:
        return
    if not untie:
        # The nodes by name: one module's nodes reading its own parameter (a bias put together
        # by a Concat) look like a tie across layers (an output layer reading the embedding).
        shown = "; ".join(
            f"'{name}' by {len(r)} nodes: {', '.join(repr(n.name) for n, _ in r[:3])}{', ...' if len(r) > 3 else ''}"
            for name, r in list(tied.items())[:4]
        )
        note(
            f"{len(tied)} parameter(s) are read by more than one node and train as one, as in PyTorch ({shown}"
            f"{'; ...' if len(tied) > 4 else ''}); to untie weights tied across layers, untie=True (--untie) "
            "gives each node its own copy"
        )
        return
    _own_copies(graph, {name: readers[1:] for name, readers in tied.items()})
    note(f"untied {len(tied)} shared parameter(s): each layer trains its own copy")


def _own_copies(graph: onnx.GraphProto, readers_of: dict[str, list[tuple[onnx.NodeProto, int]]]) -> None:
    """Each (node, slot) in readers_of[name] reads a copy of the initializer `name` of its own, named
    after the node's module where the export records it."""
    inits = {i.name: i for i in graph.initializer}
    taken = set(inits) | {o for n in graph.node for o in n.output}
    for name, readers in readers_of.items():
        value = numpy_helper.to_array(inits[name])
        made: dict[str, str] = {}  # a module called more than once (ALBERT's shared layers) reads one copy
        for node, slot in readers:
            module = _module_path(node)
            leaf = name.rsplit(".", 1)[-1] if "." in name else "weight"
            wanted = f"{module}.{leaf}" if module else f"{name}@{node.name}"
            if wanted not in made:
                copy = unused_name(wanted, taken)
                taken.add(copy)
                graph.initializer.append(numpy_helper.from_array(value.copy(), copy))
                made[wanted] = copy
            node.input[slot] = made[wanted]


# (low, high, dtype) of the uniform draw behind a Bernoulli mask
_UNIT_FLOAT = (0.0, 1.0, onnx.TensorProto.FLOAT)


def bernoulli_patterns(proto: onnx.ModelProto) -> None:
    """Exporters write torch's bernoulli(p) (dropout, stochastic depth, drop path) as a uniform draw
    U = RandomUniformLike(t) on [0, 1) and a threshold: dynamo as Cast(Less(U, p), to=float) or
    (newer torch) CastLike(Less(U, CastLike(p, U)), like); TorchScript, for HuggingFace's and older
    timm's drop path, as Floor(U + p) with p a constant in [0, 1]. As written, the eval form would
    draw at the uniform's mean, and the mask divided by p would scale by 1/p; as a Bernoulli of p it
    trains the same way and is exactly p in eval, so the layer is the identity there as in PyTorch."""
    graph = proto.graph
    producer = {o: n for n in graph.node for o in n.output}
    readers = readers_of(graph)
    for uniform in [n for n in graph.node if n.op_type == "RandomUniformLike"]:
        attrs = _attributes(uniform)
        if (attrs.get("low", 0.0), attrs.get("high", 1.0), attrs.get("dtype", onnx.TensorProto.FLOAT)) != _UNIT_FLOAT:
            continue
        like = [
            n
            for n in readers[uniform.output[0]]
            if n.op_type == "CastLike" and list(n.input[1:]) == [uniform.output[0]]
        ]
        threshold = [n for n in readers[uniform.output[0]] if n not in like]
        found = len(threshold) == 1 and _bernoulli_of(threshold[0], uniform, readers, producer, graph)
        if not found:
            continue
        probability, removed, cast_like = found
        for node in like:  # U's type: t's, or float as its dtype says
            if "dtype" in attrs:
                node.op_type = "Cast"
                del node.input[1:]
                node.attribute.append(onnx.helper.make_attribute("to", onnx.TensorProto.FLOAT))
            else:
                node.input[1] = uniform.input[0]
        last = removed[-1]
        shape, probs = f"{last.output[0]}__shape", f"{last.output[0]}__p"
        seed = {"seed": attrs["seed"]} if "seed" in attrs else {}
        drawn = f"{last.output[0]}__drawn" if cast_like else last.output[0]
        replacement = [
            onnx.helper.make_node("Shape", [uniform.input[0]], [shape], name=f"{last.name}__shape"),
            onnx.helper.make_node("Expand", [probability, shape], [probs], name=f"{last.name}__p"),
            onnx.helper.make_node("Bernoulli", [probs], [drawn], name=last.name, dtype=onnx.TensorProto.FLOAT, **seed),
        ]
        if cast_like:
            replacement.append(
                onnx.helper.make_node("CastLike", [drawn, last.input[1]], [last.output[0]], name=last.name)
            )
        at = list(graph.node).index(last) - (len(removed) - 1)  # the nodes removed stand before the last
        for node in removed:
            graph.node.remove(node)
        for offset, node in enumerate(replacement):
            graph.node.insert(at + offset, node)


def note_draws(proto: onnx.ModelProto) -> None:
    """Say which random draws are left once bernoulli_patterns has run: each takes its mean in eval
    and inference, which is what a noise layer means there, but a mask written in a form not read as
    a Bernoulli would then change the eval model."""
    draws = [n for n in proto.graph.node if n.op_type in DRAWS]
    if not draws:
        return
    shown = ", ".join(
        f"'{n.name or n.output[0]}' ({n.op_type}, mean {eval_mean(n.op_type, _attributes(n).get):g})" for n in draws[:4]
    )
    note(
        f"{len(draws)} random draw(s) take their mean in eval and inference: {shown}{'; ...' if len(draws) > 4 else ''}"
    )


def _bernoulli_of(
    first: onnx.NodeProto,
    uniform: onnx.NodeProto,
    readers: dict[str, list[onnx.NodeProto]],
    producer: dict[str, onnx.NodeProto],
    graph: onnx.GraphProto,
) -> tuple[str, list[onnx.NodeProto], bool] | None:
    """If the uniform's one reader `first` starts a threshold of bernoulli_patterns: (p's value name,
    the nodes from the uniform to the 0/1 float mask, whether the last is a CastLike)."""
    after = readers[first.output[0]]
    if len(after) != 1:
        return None
    mask = after[0]
    if first.op_type == "Less" and first.input[0] == uniform.output[0]:
        to = {a.name: a.i for a in mask.attribute}.get("to")
        if mask.op_type == "CastLike" or (mask.op_type == "Cast" and to == onnx.TensorProto.FLOAT):
            return first.input[1], [uniform, first, mask], mask.op_type == "CastLike"
    if first.op_type == "Add" and mask.op_type == "Floor":
        p = next((name for name in first.input if name != uniform.output[0]), None)
        value = None if p is None else _constant(graph, producer, p)
        if p is not None and value is not None and value.size and np.all((value >= 0) & (value <= 1)):
            return p, [uniform, first, mask], False
    return None


def _constant(graph: onnx.GraphProto, producer: dict[str, onnx.NodeProto], name: str) -> np.ndarray | None:
    """The value of `name` if an initializer or a Constant node's tensor gives it."""
    node = producer.get(name)
    if node is not None and node.op_type == "Constant":
        values = _attributes(node)
        if "value" in values:
            return numpy_helper.to_array(values["value"])
        if "value_float" in values:
            return np.array(values["value_float"], np.float32)
        return None
    init = next((i for i in graph.initializer if i.name == name), None) if node is None else None
    return None if init is None else numpy_helper.to_array(init)
