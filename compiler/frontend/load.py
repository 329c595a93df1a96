"""ONNX model -> IR with static shapes: opset normalization, batch fixing, shape-subgraph folding,
onnx shape inference, and validation that names every problem at once."""

from __future__ import annotations

import collections
import dataclasses
import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import onnx
import onnx.inliner
import onnx.version_converter
from onnx import numpy_helper, shape_inference
from onnx.reference import ReferenceEvaluator
from onnx.reference.op_run import OpRun
from onnx.reference.ops import op_max_pool

from ..errors import DynamicShapeError, EdgetrainError
from ..ir import QUANTIZED, Graph, Node, Value
from ..ir.graph import frozen_attrs
from ..ops import lookup, require
from . import dims, imports, spectral
from .validate import check_model, check_tensor_size, read_model

# ONNX's version converter lifts older models (Upsample to Resize, attributes to inputs), back to
# opset 7, where BatchNormalization lost is_test and broadcasting became NumPy's.
MIN_OPSET = 7
IR_OPSET = 18  # gradient rules emit opset-18 forms (axes and split sizes as inputs)
TRAINING_MODE_OPSET = 14  # BatchNormalization's training_mode attribute


def load_model(
    model: str | os.PathLike | onnx.ModelProto,
    batch_size: int | None = None,
    dim_values: dict[str, int] | None = None,
    *,
    untie: bool = False,
    frozen_bn: bool = False,
) -> Graph:
    """dim_values fixes symbolic input dimensions by their name ("seq") or by "input:axis"; untie and
    frozen_bn: see frontend.imports."""
    proto = _read(model)
    check_model(proto)
    not_parameters, folded = imports.not_parameters(proto), imports.folded_sources(proto)
    proto = _normalize_opset(proto)
    proto = onnx.inliner.inline_local_functions(proto)
    imports.normalize_transpose_perms(proto)
    imports.explicit_squeeze_axes(proto)
    imports.check_batchnorm(proto, frozen_bn)
    imports.restore_names(proto)
    imports.restore_reshaped_parameters(proto)
    imports.check_transposed_weights(proto)
    imports.check_computed_constants(proto)
    imports.restore_removed_biases(proto)
    imports.restore_expanded_parameters(proto)
    imports.restore_folded_copies(proto)
    imports.bernoulli_patterns(proto)
    imports.note_draws(proto)
    imports.quantized_parameters(proto)
    floats = {i.name for i in proto.graph.initializer if i.data_type == onnx.TensorProto.FLOAT}
    imports.tied_parameters(proto, floats - not_parameters, untie)
    folded |= imports.check_recorded_parameters(proto, folded)
    imports.check_dropped_statistics(proto)
    imports.check_divisor_override(proto)
    imports.check_label_smoothing(proto)
    imports.note_buffer_updates(proto)
    detached = imports.detached_values(proto)  # before shape inference rewrites value_info, and its records
    _fix_dims(proto, dim_values or {})
    dims.tie_to_constants(proto, _data_inputs(proto))
    _fix_batch(proto, batch_size)
    proto = _expand_function_ops(proto)
    proto, constants = _fold_constants(proto)
    graph = _to_ir(proto, constants)
    graph.not_parameters = not_parameters & set(graph.params)
    graph.folded = folded - graph.values.keys()
    graph.recorded = imports.recorded_parameters(proto)
    graph.detached = detached & graph.values.keys()
    graph.padding_rows = {v: row for v, row in imports.padding_rows(proto).items() if v in graph.values}
    for value in graph.values.values():
        check_tensor_size(value.name, value.shape)
    return graph


def _read(model) -> onnx.ModelProto:
    if isinstance(model, onnx.ModelProto):
        return model
    return read_model(model)


def _opset(proto) -> int:
    versions = [o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")]
    if not versions:
        raise EdgetrainError("model imports no default ONNX opset")
    return versions[0]


def _normalize_opset(proto):
    opset = _opset(proto)
    if opset < MIN_OPSET:
        raise EdgetrainError(f"model uses opset {opset}; edgetrain needs opset {MIN_OPSET} or newer")
    if opset > onnx.defs.onnx_opset_version():
        raise EdgetrainError(
            f"model uses opset {opset}, newer than this onnx supports ({onnx.defs.onnx_opset_version()})"
        )
    if opset >= IR_OPSET:
        return proto
    training = _batchnorm_in_training_form(proto) if opset < TRAINING_MODE_OPSET else set()
    try:
        proto = onnx.version_converter.convert_version(proto, IR_OPSET)
    except Exception as exc:
        raise EdgetrainError(f"cannot convert opset {opset} model to opset {IR_OPSET}: {exc}".splitlines()[0]) from None
    for node in proto.graph.node:
        if node.op_type == "BatchNormalization" and node.output[0] in training:
            node.attribute.append(onnx.helper.make_attribute("training_mode", 1))
    return proto


def _batchnorm_in_training_form(proto) -> set[str]:
    """Before opset 14, a BatchNormalization in training mode is one that writes its running
    statistics (outputs 2 and 3) and, optionally, the batch's saved mean and variance (4 and 5), as
    the TorchScript exporter's training export does there. Opset 14 says training_mode=1 and has
    only the first three outputs: the saved statistics go, which edgetrain's own gradient does not
    read. Returns the Y outputs of these nodes (the converter keeps them)."""
    read = {name for node in proto.graph.node for name in node.input} | {o.name for o in proto.graph.output}
    training = set()
    for node in proto.graph.node:
        if node.op_type != "BatchNormalization" or len(node.output) < 3 or not all(node.output[1:3]):
            continue
        if any(name in read for name in node.output[3:] if name):
            raise EdgetrainError(
                f"BatchNormalization '{node.name}': its saved mean or variance (outputs 4 and 5, before opset "
                f"{TRAINING_MODE_OPSET}) is read by the model; export at opset {TRAINING_MODE_OPSET} or newer"
            )
        del node.output[3:]
        training.add(node.output[0])
    return training


def _data_inputs(proto):
    initializers = {i.name for i in proto.graph.initializer}
    return [value for value in proto.graph.input if value.name not in initializers]


def _fix_dims(proto, dim_values: dict[str, int]) -> None:
    """Pin the symbolic dimensions dim_values names, by dim_param or as "input:axis"."""
    unused = dict(dim_values)
    known = sorted({d.dim_param for v in _data_inputs(proto) for d in v.type.tensor_type.shape.dim if d.dim_param})
    for value in _data_inputs(proto):
        for axis, dim in enumerate(value.type.tensor_type.shape.dim):
            for key in (f"{value.name}:{axis}", dim.dim_param):
                if key and key in dim_values and not dim.HasField("dim_value"):
                    size = dim_values[key]
                    if not isinstance(size, (int, np.integer)) or isinstance(size, bool) or size < 1:
                        raise EdgetrainError(f"dim_values[{key!r}] must be a positive integer, got {size!r}")
                    dim.dim_value = int(size)
                    unused.pop(key, None)
    if unused:
        raise EdgetrainError(
            f"dim_values names no symbolic input dimension: {', '.join(map(repr, unused))}; the "
            f"model's are: {', '.join(map(repr, known)) or 'none'} (or 'input:axis')"
        )


def _fix_batch(proto, batch_size):
    """Pin symbolic leading dimensions to batch_size; any other symbolic dimension is an error."""
    dynamic = []
    for value in _data_inputs(proto):
        for axis, dim in enumerate(value.type.tensor_type.shape.dim):
            if dim.HasField("dim_value") and dim.dim_value > 0:
                continue
            if dim.HasField("dim_value") and dim.dim_value == 0:
                raise EdgetrainError(
                    f"input '{value.name}' is empty (axis {axis} has size 0); edgetrain computes non-empty tensors"
                )
            if axis == 0 and batch_size is not None:
                dim.dim_value = int(batch_size)
            else:
                dynamic.append((value.name, axis, dim.dim_param))
    if dynamic:
        raise DynamicShapeError(dynamic, batch_size is None)
    _forget_shapes(proto)  # those the exporter recorded may still be symbolic


def _forget_shapes(proto) -> None:
    """Drop the shapes recorded for intermediate values and outputs, for inference to recompute."""
    del proto.graph.value_info[:]
    for value in proto.graph.output:
        value.type.tensor_type.ClearField("shape")


def _infer(proto):
    try:
        return shape_inference.infer_shapes(proto, strict_mode=True, data_prop=True)
    except Exception as exc:
        raise EdgetrainError(f"shape inference failed: {exc}".splitlines()[0]) from None


def _static_shape(type_proto) -> tuple[int, ...] | None:
    tensor = type_proto.tensor_type
    if not tensor.HasField("shape"):
        return None
    dims = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in tensor.shape.dim)
    return None if any(d < 0 for d in dims) else dims


def _fold_constants(proto):
    """Evaluate every node whose inputs are known at compile time (the Shape/Gather/Concat/Cast
    chains exporters emit), replacing it with a constant, until nothing more folds."""
    graph = proto.graph
    params = {i.name for i in graph.initializer if i.data_type == onnx.TensorProto.FLOAT}
    params -= imports.fake_quantized_constants(graph)
    constants = {i.name: numpy_helper.to_array(i) for i in graph.initializer if i.name not in params}
    while True:
        # Shapes inferred before a fold may be symbolic where they are static now, and those of ops
        # rewritten (onnx infers STFT's wrongly) stale: infer them afresh.
        _forget_shapes(proto)
        proto = _infer(proto)
        infos = list(proto.graph.input) + list(proto.graph.value_info) + list(proto.graph.output)
        shapes = {v.name: _static_shape(v.type) for v in infos} | {
            i.name: tuple(i.dims) for i in proto.graph.initializer
        }
        _cast_like_to_cast(
            proto,
            {v.name: v.type.tensor_type.elem_type for v in infos}
            | {i.name: i.data_type for i in proto.graph.initializer},
        )
        kept, folded = [], _split_sequences(proto, constants, shapes)
        for node in proto.graph.node:
            branch = _taken_branch(node, constants)
            if branch is not None:
                kept.extend(branch)
                folded = True
                continue
            value = _evaluate(node, constants, shapes)
            if value is None:
                kept.append(node)
                continue
            constants.update(value)
            folded = True
        if not folded:
            kept = _clip_by_tensors(kept, constants, params)
            if kept is None:  # DFT and STFT become products once folding has made their shapes static
                kept = spectral.as_products(proto.graph, shapes, constants, _opset(proto))
            if kept is None:
                return proto, constants
        del proto.graph.node[:]
        proto.graph.node.extend(kept)
        live = {name for n in kept for name in _reads(n)}
        for name, array in constants.items():
            if name in live and name not in {i.name for i in proto.graph.initializer}:
                proto.graph.initializer.append(numpy_helper.from_array(np.asarray(array), name))


def _clip_by_tensors(
    nodes: list[onnx.NodeProto], constants: dict, initializers: set[str]
) -> list[onnx.NodeProto] | None:
    """A Clip whose bound is computed (torch.clamp by a tensor) becomes what ONNX defines it as,
    Max by the lower bound then Min by the upper, each bound getting its gradient where it holds.
    A bound held in an initializer stays a constant of Clip's. None when there is none."""
    rewritten, found = [], False
    for node in nodes:
        bounds = list(node.input[1:]) + [""] * (3 - len(node.input))
        if node.op_type != "Clip" or all(not name or name in constants or name in initializers for name in bounds):
            rewritten.append(node)
            continue
        value, found = node.input[0], True
        for op_type, bound in (("Max", bounds[0]), ("Min", bounds[1])):
            if bound:
                out = f"{node.output[0]}/{op_type.lower()}"
                rewritten.append(onnx.helper.make_node(op_type, [value, bound], [out], name=f"{node.name}/{op_type}"))
                value = out
        rewritten.append(onnx.helper.make_node("Identity", [value], [node.output[0]], name=node.name))
    return rewritten if found else None


def _subgraphs(node: onnx.NodeProto) -> Iterator[onnx.GraphProto]:
    """The graphs a node holds (an If's branches)."""
    for attribute in node.attribute:
        yield from [attribute.g] if attribute.type == onnx.AttributeProto.GRAPH else attribute.graphs


def _reads(node: onnx.NodeProto) -> Iterator[str]:
    """The values a node reads: its inputs, and what its subgraphs read."""
    yield from node.input
    for graph in _subgraphs(node):
        for inner in graph.node:
            yield from _reads(inner)
        yield from (output.name for output in graph.output)


def _rename_inputs(node: onnx.NodeProto, renamed) -> None:
    """The node's inputs renamed, and what its subgraphs read from outside them (a nested If's)."""
    node.input[:] = [renamed(name) for name in node.input]
    for graph in _subgraphs(node):
        for inner in graph.node:
            _rename_inputs(inner, renamed)
        for output in graph.output:
            output.name = renamed(output.name)


def _taken_branch(node: onnx.NodeProto, constants: dict) -> list[onnx.NodeProto] | None:
    """An If whose condition folded (TorchScript's exports test shapes this way: LocalResponseNorm,
    repeat): the nodes of the branch it takes, its own values renamed under the If's name so they
    cannot meet the graph's, and Identity nodes from the branch's outputs to the If's."""
    if node.op_type != "If" or node.input[0] not in constants:
        return None
    taken = "then_branch" if bool(np.asarray(constants[node.input[0]]).reshape(())) else "else_branch"
    branch = next(a.g for a in node.attribute if a.name == taken)
    own = {name for n in branch.node for name in n.output if name} | {i.name for i in branch.initializer}
    prefix = f"{node.name or node.output[0]}/{taken}/"

    def renamed(name: str) -> str:
        return prefix + name if name in own else name

    nodes = [
        onnx.helper.make_node("Constant", [], [renamed(i.name)], name=renamed(i.name), value=i)
        for i in branch.initializer
    ]
    for n in branch.node:
        copy = onnx.NodeProto()
        copy.CopyFrom(n)
        copy.name = prefix + (n.name or n.output[0])
        _rename_inputs(copy, renamed)
        copy.output[:] = [renamed(name) for name in n.output]
        nodes.append(copy)
    nodes += [
        onnx.helper.make_node("Identity", [renamed(out.name)], [name], name=f"{prefix}{name}")
        for out, name in zip(branch.output, node.output)
    ]
    return nodes


_EXPANDED = "edgetrain.expanded"  # the domain of a function op's body while onnx's inliner expands it
_KEPT = {"CastLike"}  # function ops the import rewrites itself, once types are known (_cast_like_to_cast)


def _expand_function_ops(proto: onnx.ModelProto) -> onnx.ModelProto:
    """An op with no kernel here that ONNX defines as a function of other ops (Attention,
    RMSNormalization, RotaryEmbedding, GroupNormalization, Swish at their opsets) becomes that
    function's body, built for the node's attributes and input types as onnx's schema builds it, and
    trains through the gradients of the ops it is made of. Until no such op is left: a body may hold
    one. Types come from a lenient inference, as onnx's strict one fails on some of these ops."""
    while True:
        candidates = [
            node
            for node in proto.graph.node
            if node.domain in ("", "ai.onnx") and node.op_type not in _KEPT and not lookup(Node(node.op_type, (), ()))
        ]
        if not candidates:
            return proto
        graph = shape_inference.infer_shapes(proto).graph
        types = {v.name: v.type for v in [*graph.input, *graph.value_info, *graph.output]} | {
            i.name: onnx.helper.make_tensor_type_proto(i.data_type, i.dims) for i in graph.initializer
        }
        opset, bodies = _opset(proto), list[onnx.FunctionProto]()
        for node in candidates:
            body = _function_body(node, opset, types)
            if body is None:
                continue
            body = _at_opset(body, node, opset, types)
            body.domain, body.name = _EXPANDED, f"{node.op_type}_{len(bodies)}"
            node.domain, node.op_type = body.domain, body.name
            bodies.append(body)
        if not bodies:
            return proto
        proto.functions.extend(bodies)
        proto.opset_import.append(onnx.helper.make_opsetid(_EXPANDED, 1))
        proto = onnx.inliner.inline_local_functions(proto)
        left = sorted({node.op_type.rsplit("_", 1)[0] for node in proto.graph.node if node.domain == _EXPANDED})
        if left:
            raise EdgetrainError(f"cannot expand the function op(s) {', '.join(left)} into their ONNX definition")
        del proto.functions[:]
        kept = [o for o in proto.opset_import if o.domain != _EXPANDED]
        del proto.opset_import[:]
        proto.opset_import.extend(kept)


def _at_opset(body: onnx.FunctionProto, node, opset: int, types: dict) -> onnx.FunctionProto:
    """`body` in the model's opset, which onnx's inliner requires: one written for an older opset
    (GroupNormalization's, 21, in an opset-23 model) goes through onnx's version converter, as a
    graph of the body with the node's input types."""
    if _opset(body) == opset:
        return body
    inputs = [
        onnx.helper.make_value_info(formal, types[actual]) for formal, actual in zip(body.input, node.input) if actual
    ]
    graph = onnx.helper.make_graph(
        list(body.node), body.name, inputs, [onnx.helper.make_empty_tensor_value_info(o) for o in body.output]
    )
    model = onnx.helper.make_model(graph, opset_imports=list(body.opset_import))
    try:
        converted = onnx.version_converter.convert_version(model, opset)
    except Exception as exc:
        raise EdgetrainError(f"cannot expand {node.op_type} '{node.name}': {exc}".splitlines()[0]) from None
    del body.node[:]
    body.node.extend(converted.graph.node)
    del body.opset_import[:]
    body.opset_import.extend(converted.opset_import)
    return body


def _function_body(node, opset: int, types: dict[str, onnx.TypeProto]) -> onnx.FunctionProto | None:
    """The body ONNX defines for `node`'s op at the model's opset, or None (no such function, an
    input whose type is not known yet, or control flow in it)."""
    try:
        schema: Any = onnx.defs.get_schema(node.op_type, opset)  # onnx's stubs omit its function accessors
    except onnx.defs.SchemaError:
        return None
    plain = [v for v in schema.function_opset_versions if v <= opset]
    dependent = [v for v in schema.context_dependent_function_opset_versions if v <= opset]
    body: onnx.FunctionProto | None
    if plain:
        body = _specialized(
            onnx.FunctionProto.FromString(schema.get_function_with_opset_version(max(plain))), node, schema
        )
    elif dependent and all(not name or name in types for name in node.input):
        inputs = [types[name].SerializeToString() if name else b"" for name in node.input]
        built = schema.get_context_dependent_function_with_opset_version(
            max(dependent), node.SerializeToString(), inputs
        )
        body = onnx.FunctionProto.FromString(built) if built else None
    else:
        return None
    # An If (AffineGrid's, on its rank) folds with the constants (_taken_branch); loops cannot.
    if body is None or any(n.op_type in ("Loop", "Scan") for n in body.node):
        return None
    return body


def _specialized(body: onnx.FunctionProto, node, schema) -> onnx.FunctionProto:
    """A function body whose nodes read the op's attributes by reference (Swish's alpha), with each
    reference replaced by the node's attribute or else the schema's default, as the op means it:
    onnx's version converter and inliner know neither the defaults nor, the converter, references."""
    given = {a.name: a for a in node.attribute} | {
        name: attr.default_value
        for name, attr in schema.attributes.items()
        if attr.default_value.type and name not in {a.name for a in node.attribute}
    }
    for inner in body.node:
        attributes = []
        for attr in inner.attribute:
            if not attr.ref_attr_name:
                attributes.append(attr)
            elif attr.ref_attr_name in given:
                value = onnx.AttributeProto()
                value.CopyFrom(given[attr.ref_attr_name])
                value.name = attr.name
                attributes.append(value)
        del inner.attribute[:]
        inner.attribute.extend(attributes)
    del body.attribute[:]
    del body.attribute_proto[:]
    return body


def _cast_like_to_cast(proto, elem_types: dict[str, int]) -> None:
    """CastLike(x, like) is Cast(x, to=like's type) once types are known (dynamo writes it for
    constants of the input's type)."""
    for index, node in enumerate(proto.graph.node):
        if node.op_type == "CastLike" and node.domain in ("", "ai.onnx") and elem_types.get(node.input[1]):
            cast = onnx.helper.make_node(
                "Cast", [node.input[0]], list(node.output), name=node.name, to=elem_types[node.input[1]]
            )
            proto.graph.node[index].CopyFrom(cast)


def _split_sequences(proto, constants, shapes) -> bool:
    """SplitToSequence read only by SequenceAt at constant positions (dynamo's torch.split and
    chunk) is a Split whose outputs are those positions. Returns whether it rewrote any."""
    rewrote = False
    graph = proto.graph
    readers: dict[str, list] = collections.defaultdict(list)
    for node in graph.node:
        for name in node.input:
            readers[name].append(node)
    for node in list(graph.node):
        if node.op_type != "SplitToSequence" or shapes.get(node.input[0]) is None:
            continue
        attrs = {a.name: a.i for a in node.attribute}
        axis, shape = attrs.get("axis", 0), shapes[node.input[0]]
        axis %= len(shape)
        split = constants.get(node.input[1]) if len(node.input) > 1 and node.input[1] else None
        sizes_at_run_time = len(node.input) > 1 and node.input[1] and split is None
        if sizes_at_run_time or (split is None and not attrs.get("keepdims", 1)):
            continue  # sizes known only at run time, or keepdims=0 (each part squeezed): left as it is
        if split is None:
            sizes = [1] * shape[axis]
        elif np.ndim(split) == 0:
            chunk = int(split)
            sizes = [chunk] * (shape[axis] // chunk) + ([shape[axis] % chunk] if shape[axis] % chunk else [])
        else:
            sizes = [int(v) for v in split]
        users = readers[node.output[0]]
        positions = [constants[u.input[1]] for u in users if u.op_type == "SequenceAt" and u.input[1] in constants]
        if not users or len(positions) != len(users):
            continue
        outputs = [f"{node.output[0]}__{i}" for i in range(len(sizes))]
        for user, position in zip(users, positions):
            at = int(position) % len(sizes)
            outputs[at] = user.output[0]
            graph.node.remove(user)
        split_sizes = onnx.numpy_helper.from_array(np.array(sizes, np.int64), f"{node.output[0]}__sizes")
        graph.initializer.append(split_sizes)
        constants[split_sizes.name] = np.array(sizes, np.int64)
        replacement = onnx.helper.make_node(
            "Split", [node.input[0], split_sizes.name], outputs, name=node.name, axis=axis
        )
        graph.node[list(graph.node).index(node)].CopyFrom(replacement)
        rewrote = True
    return rewrote


# Random ops draw new values at every training step, so they are never folded to constants.
RANDOM_OPS = frozenset(
    {"RandomUniform", "RandomNormal", "RandomUniformLike", "RandomNormalLike", "Bernoulli", "Multinomial"}
)


def _evaluate(node, constants, shapes) -> dict[str, np.ndarray] | None:
    if node.op_type in RANDOM_OPS:
        return None
    if node.op_type == "Constant":
        return dict(zip(node.output, run_node(node, {})))
    if node.op_type == "Shape" and shapes.get(node.input[0]) is not None:
        attrs = {a.name: a.i for a in node.attribute}
        dims = shapes[node.input[0]][attrs.get("start", 0) : attrs.get("end", None)]
        return {node.output[0]: np.array(dims, dtype=np.int64)}
    if node.op_type == "Size" and shapes.get(node.input[0]) is not None:
        return {node.output[0]: np.array(int(np.prod(shapes[node.input[0]])), dtype=np.int64)}
    inputs = [name for name in node.input if name]
    if node.domain not in ("", "ai.onnx") or not inputs or not all(name in constants for name in inputs):
        return None
    feeds = {name: constants[name] for name in inputs}
    # QuantizeLinear and DequantizeLinear of a constant that quantize_static quantized, at their opset
    opset = QDQ_OPSET if node.op_type in QUANTIZED_OPS else IR_OPSET
    try:
        return dict(zip(node.output, run_node(node, feeds, opset)))
    except Exception as exc:
        if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
            return None  # a body that reads values computed at run time (EmbeddingBag's Loop): left to run, or refused
        message = f"cannot fold constant node '{node.name}' ({node.op_type}): {exc}"
        raise EdgetrainError(message.splitlines()[0]) from None


class GatherElements(OpRun):
    """onnx.reference's GatherElements wants indices as long as the data along the other axes; ONNX
    lets them be shorter (BERT's token_type_ids buffer, DeBERTa's relative positions), and those read
    the data's leading part."""

    op_domain = ""

    def _run(self, data, indices, axis=None):
        axis = (axis or 0) % data.ndim
        indices = np.where(indices < 0, indices + data.shape[axis], indices)
        if np.any((indices < 0) | (indices >= data.shape[axis])):
            raise ValueError("index out of range")
        window = tuple(slice(None) if a == axis else slice(0, n) for a, n in enumerate(indices.shape))
        return (np.take_along_axis(data[window], indices, axis),)


class MaxPool(op_max_pool.MaxPool):
    """onnx.reference's MaxPool pads twice a window of stride 1 under ceil_mode (6 x 6 in, 3 x 3
    window, pads of 1: 8 x 8 out; GoogLeNet's pooling branches), where ceil_mode changes nothing, as
    every division by the stride is exact: it runs without."""

    def _run(self, x, auto_pad=None, ceil_mode=None, dilations=None, kernel_shape=None, pads=None, **rest):
        if all(s == 1 for s in rest.get("strides") or [1]):
            ceil_mode = 0
        return super()._run(x, auto_pad, ceil_mode, dilations, kernel_shape, pads, **rest)


# onnx.reference with the ops above in place of its own, for folding constants and calibrating.
REFERENCE_FIXES: list[type[OpRun]] = [GatherElements, MaxPool]


def run_node(node: onnx.NodeProto, feeds: dict, opset: int = IR_OPSET) -> list[Any]:
    """The outputs of one node on the arrays `feeds`, as onnx.reference computes them."""
    inputs = [
        onnx.helper.make_tensor_value_info(
            name, onnx.helper.np_dtype_to_tensor_dtype(np.asarray(v).dtype), np.asarray(v).shape
        )
        for name, v in feeds.items()
    ]
    outputs = [onnx.helper.make_empty_tensor_value_info(name) for name in node.output if name]
    graph = onnx.helper.make_graph([node], "fold", inputs, outputs)
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])
    return list(ReferenceEvaluator(model, new_ops=REFERENCE_FIXES).run(None, feeds))


def _values(g, params: dict, constants: dict) -> tuple[dict[str, Value], list[str]]:
    """Every value of the graph with a static shape, and what is wrong with those without one."""
    values: dict[str, Value] = {}
    shapeless = []
    for info in list(g.input) + list(g.value_info) + list(g.output):
        shape = _static_shape(info.type)
        if shape is None:
            shapeless.append(f"'{info.name}' has no static shape")
            continue
        dtype = onnx.helper.tensor_dtype_to_np_dtype(info.type.tensor_type.elem_type)
        values[info.name] = Value(info.name, shape, dtype)
    for name, array in list(params.items()) + list(constants.items()):
        values[name] = Value(name, tuple(np.shape(array)), np.asarray(array).dtype)
    return values, shapeless


def _ir_nodes(g, problems: list[str]) -> list[Node]:
    """The graph's nodes in the IR. Unregistered ops end the import here, with the `problems` found so far."""
    nodes = []
    unsupported: dict[str, list[str]] = {}
    for index, n in enumerate(g.node):
        name = n.name or f"{n.op_type}_{index}"
        if n.domain not in ("", "ai.onnx") or lookup(Node(n.op_type, (), ())) is None:
            unsupported.setdefault(n.op_type if not n.domain else f"{n.domain}.{n.op_type}", []).append(name)
            continue
        attrs = {a.name: _attr(a) for a in n.attribute}
        nodes.append(Node(n.op_type, tuple(n.input), tuple(n.output), frozen_attrs(attrs), name))
    if unsupported:  # values downstream of an unknown op have no shapes: naming the op says it all
        raise EdgetrainError(
            "; ".join(
                [
                    "unsupported ops: "
                    + "; ".join(
                        f"{op} (nodes {', '.join(repr(x) for x in names)})" for op, names in sorted(unsupported.items())
                    )
                ]
                + problems
            )
        )
    return nodes


def _to_ir(proto, constants) -> Graph:
    g = proto.graph
    params = {
        i.name: numpy_helper.to_array(i).astype(np.float32)
        for i in g.initializer
        if i.data_type == onnx.TensorProto.FLOAT and i.name not in constants
    }
    values, shapeless = _values(g, params, constants)
    inputs = [i.name for i in g.input if i.name not in params and i.name not in constants]
    found = (_input_dtype_problem(g, name, values[name].dtype) for name in inputs if name in values)
    problems = [p for p in found if p]
    nodes = _ir_nodes(g, problems)
    problems += shapeless

    nodes = _name_merged_initializers(nodes, params, values)
    _untie(nodes, params, values)

    # A float initializer read as an axis, bound or exponent is a constant, never a parameter.
    for node in nodes:
        for slot in _held_slots(node)[0]:
            if slot < len(node.inputs) and node.inputs[slot] in params:
                constants[node.inputs[slot]] = params.pop(node.inputs[slot])

    # Running statistics and the like: state the training step updates, neither trained nor constant.
    buffers = {}
    for node in nodes:
        spec = require(node)
        for slot in spec.state(node) if spec.state else {}:
            name = node.inputs[slot]
            if name in params:
                buffers[name] = params.pop(name)
            elif name in constants:  # computed in the graph instead, it is not state (the op's variant decides)
                problems.append(f"node '{node.name}' ({node.op}) needs input {slot} '{name}' to be an initializer")

    consumed = {name for node in nodes for name in node.inputs} | {o.name for o in g.output}
    for node in nodes:
        const_slots = _held_slots(node)[0]
        for slot, name in enumerate(node.inputs):
            if name and slot in const_slots and name not in constants:
                problems.append(f"node '{node.name}' ({node.op}) needs input {slot} '{name}' to be a constant")
        read = [
            (values[name], slot)
            for slot, name in enumerate(node.inputs)
            if name and slot not in const_slots and name in values and values[name].dtype in COMPUTED
        ]
        made = [(values[name], None) for name in node.outputs if name in consumed and name in values]
        problems += [p for p in (_dtype_problem(node, *use) for use in read + made) if p][:1]
    if problems:
        raise EdgetrainError("; ".join(problems))
    return Graph(
        values=values,
        nodes=nodes,
        inputs=inputs,
        outputs=[o.name for o in g.output],
        params=params,
        constants=constants,
        buffers=buffers,
        opset=max(_opset(proto), QDQ_OPSET if any(n.op in QUANTIZED_OPS for n in nodes) else IR_OPSET),
    )


# The dtypes of model inputs: float32 as float, integers and bools as int32_t (et_integer.h).
INPUTS = frozenset(np.dtype(t) for t in (np.float32, np.int32, np.int64, np.bool_))
# The dtypes the C computes at run time: those, and quantized tensors as int32_t (et_quantize.h).
COMPUTED = INPUTS | QUANTIZED
# The ops that compute on quantized tensors, which the C keeps in their own width (ir.Graph.c_type):
# no other kernel reads or writes that width.
QUANTIZED_OPS = ("QuantizeLinear", "DequantizeLinear")
# A graph with QuantizeLinear or DequantizeLinear is written at their opset 19 form at least, the oldest
# that onnx.reference runs (opset 13's, for int8 and uint8, computes the same; nothing else changed at 19
# for the types the IR holds).
QDQ_OPSET = 19


def _input_dtype_problem(g, name: str, dtype) -> str | None:
    """Model inputs are float32, int32, int64 or bool (the C takes integers and bools as int32_t)."""
    if dtype in INPUTS:
        return None
    readers = [f"node '{n.name or f'{n.op_type}_{i}'}' ({n.op_type})" for i, n in enumerate(g.node) if name in n.input]
    read = f", read by {readers[0]}" if readers else ""
    return f"input '{name}' has dtype {dtype}{read}; model inputs must be float32, int32, int64 or bool"


def _dtype_problem(node, value: Value, slot: int | None) -> str | None:
    """What is wrong with `node` reading `value` at input `slot`, or producing it (slot None), at run time."""
    spec = require(node)
    use = (
        f"produces {value.dtype} '{value.name}'"
        if slot is None
        else f"reads {value.dtype} '{value.name}' at input {slot}"
    )
    if value.dtype not in COMPUTED or (value.dtype in QUANTIZED and node.op not in QUANTIZED_OPS):
        return (
            f"node '{node.name}' ({node.op}) {use}; only float32, int32, int64 and bool tensors are computed at "
            "run time (8- and 16-bit integers by QuantizeLinear and DequantizeLinear only)"
        )
    if value.dtype != np.float32 and not spec.integer and slot not in spec.index_inputs:
        return f"node '{node.name}' ({node.op}) {use}; {node.op} computes float32 tensors only"
    if value.dtype == np.float32 and slot in spec.index_inputs:
        # not valid ONNX (torch exports cross-entropy with probability targets this way): the C would
        # read the floats as indices
        return f"node '{node.name}' ({node.op}) {use}; {node.op} takes integer indices there (int32 or int64)"
    return None


def _held_slots(node) -> tuple[set[int], set[int]]:
    """(inputs that must be compile-time constants, state inputs): a state input, such as
    BatchNormalization's running mean in training mode, is a buffer rather than a constant."""
    spec = require(node)
    state = set(spec.state(node) if spec.state else ())
    return set(spec.const_inputs) - state, state


def _name_merged_initializers(nodes: list[Node], params: dict, values: dict) -> list[Node]:
    """Eval-mode exports merge equal initializers and restore the other names through Identity
    nodes (a fresh BatchNorm's running_var becomes Identity(its weight)). An Identity of an
    initializer that a node reads as a constant or as state is that initializer's own copy again."""
    held = {node.inputs[slot] for node in nodes for slot in set().union(*_held_slots(node)) if slot < len(node.inputs)}
    kept = []
    for node in nodes:
        if node.op == "Identity" and node.inputs[0] in params and node.outputs[0] in held:
            params[node.outputs[0]] = params[node.inputs[0]].copy()
            values[node.outputs[0]] = Value(node.outputs[0], values[node.inputs[0]].shape, np.dtype(np.float32))
        else:
            kept.append(node)
    return kept


def _untie(nodes: list[Node], params: dict, values: dict) -> None:
    """Exporters merge equal initializers (a fresh BatchNorm's running_var and weight are both
    ones): a constant or state use of a float initializer that is also read elsewhere gets its own
    copy, so the other uses stay trainable and no two layers share state."""
    uses = collections.Counter(name for node in nodes for name in node.inputs if name in params)
    for i, node in enumerate(nodes):
        inputs = list(node.inputs)
        for slot in sorted(set().union(*_held_slots(node))):
            name = inputs[slot] if slot < len(inputs) else ""
            if uses[name] > 1:
                uses[name] -= 1
                copy = imports.unused_name(f"{name}@{node.name}", values)
                params[copy] = params[name].copy()
                values[copy] = Value(copy, values[name].shape, values[name].dtype)
                inputs[slot] = copy
        nodes[i] = dataclasses.replace(node, inputs=tuple(inputs))


def _attr(a):
    value = onnx.helper.get_attribute_value(a)
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    return tuple(value) if isinstance(value, list) else value
