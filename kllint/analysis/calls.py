"""What calls mean: project functions are followed, tensor-library functions and tensor methods
are modelled (`kllint.analysis.tensor_calls`, with the API tables of `frameworks`), model
forwards produce log-prob-like tensors of the model's role, and a few APIs are observed for the
rules (`kllint.rules.api`): kl_div arguments and reductions, optax's KL, reference forwards.
The interpreter hands itself to these handlers (`kllint.analysis.protocols`).
"""
from __future__ import annotations

from typing import Any

import libcst as cst

from kllint.analysis import frameworks as fw
from kllint.analysis import keyed
from kllint.analysis import roles
from kllint.analysis.autograd import frozen_networks, records_gradients, without_grad_at
from kllint.analysis.callables import MAPPING_VIEWS, BoundMethod, KLDivModule, UnresolvedAttribute, mapping_view, string_method
from kllint.analysis.definitions import parameter_names
from kllint.analysis.engines import BACKWARD_METHODS, FlaxApply, Returns, flax_apply, wrapper_call
from kllint.analysis.facts import KlDivCall, KlDivLossConstruction, OptaxKlCall, ReferenceForward, SinkKind
from kllint.analysis.fields import KEY_FIELD, constructor_fields
from kllint.analysis.grad_transforms import grad_call, grad_transform
from kllint.analysis.module import dotted_name
from kllint.analysis.protocols import FrameLike, InterpreterLike
from kllint.analysis.symbolic import LP, LPD, REF
from kllint.analysis.tensor_calls import (
    reward_to_go,
    argument, literal_value, model_argument, negative_logprob, tensor_function, tensor_method,
)
from kllint.analysis.values import (
    ClassRef, FunctionRef, GradOf, Instance, Keyed, Literal, Mapping, Model, ModuleRef, Partial,
    Sequence, Tensor, Unknown, Value, alternatives, join,
)

ROLE_SYMBOL = {"policy": LP, "reference": REF}
# Methods returning a part of the same network (HF, PEFT): its role is the network's.
SUBMODULE_GETTERS = frozenset({"get_decoder", "get_encoder", "get_base_model", "get_model", "get_submodule",
                               "get_input_embeddings", "get_output_embeddings"})
FORWARD_METHODS = ("forward", "__call__", "get_logits", "compute_logits", "apply")


def dispatch(it: InterpreterLike, func: Value, args: list[Value], kwargs: dict[str, Value], node: cst.Call,
             frame: FrameLike) -> Value:
    """The value of calling `func` (any callable value) with these arguments in `frame`."""
    vocabulary = vocab_call(it, node, args, frame)
    if vocabulary is not None:
        return vocabulary
    if isinstance(func, FunctionRef):
        return it.call_function(func, args, kwargs, node, frame)
    if isinstance(func, Keyed):
        it.choosing_calls.add(id(node))  # a callee a run-time key picks: the caller's choice
        result = it.call(func.function, args, kwargs, node, frame.child(conditions=frame.conditions + (func.condition,)))
        return keyed.under(result, (func.condition,))  # an instance made, a class returned: still chosen by the key
    if isinstance(func, FlaxApply):
        return flax_apply(it, func, args, kwargs, node, frame)
    if isinstance(func, Returns):
        return func.value  # `f.options(num_gpus=1)`: the same remote function
    if isinstance(func, Partial):
        return it.call(func.function, list(func.args) + list(args), {**dict(func.kwargs), **kwargs}, node, frame)
    if isinstance(func, ClassRef):
        init = it.find_method(func, "__init__")
        for name, value in constructor_fields(func, init.definition if init is not None else None, args, kwargs):
            it.fields.write(name, it.detach_value(value) if frame.no_grad else value, id(node))
        return Instance(func)
    if isinstance(func, Instance):
        # a callable object: `__call__`, or the `forward` of a module
        method = it.find_method(func.cls, "__call__") or it.find_method(func.cls, "forward")
        return it.call_function(method, args, kwargs, node, frame) if method is not None else Unknown(func.cls.name)
    if isinstance(func, ModuleRef):
        return library_call(it, func.qualname, args, kwargs, node, frame)
    if isinstance(func, BoundMethod):
        if isinstance(func.obj, Literal):
            return string_method(func.obj.value, func.name, args)
        if isinstance(func.obj, Mapping) and func.name in MAPPING_VIEWS:
            return mapping_view(func.obj, func.name)
        if isinstance(func.obj, Tensor):
            return tensor_method(it, func.obj, func.name, args, kwargs, node, frame)
        if isinstance(func.obj, Model):
            if func.name in FORWARD_METHODS:
                # Flax `module.apply(variables, x)`: the weights passed decide whose forward it is
                weights = model_argument([argument(args, kwargs, 0, "variables")]) if func.name == "apply" else None
                return forward(it, weights or func.obj, node, frame)
            if literal_value(argument(args, kwargs, 0, "method_name", "method")) in FORWARD_METHODS:
                # remote dispatch by name: `group.async_run_method_batch(method_name="forward", ...)`
                return forward(it, func.obj, node, frame)
            if func.name == "backward" and args:  # a DeepSpeed engine: `model_engine.backward(loss)`
                it.loss_sink(args[0], node, frame, SinkKind.BACKWARD_CALL, dotted_name(node.func) or func.name)
                return Unknown("backward")
            if func.name in ("eval", "train", "to", "cuda", "requires_grad_", "module") or func.name in SUBMODULE_GETTERS:
                return func.obj
            if (roles.is_logprob_name(func.name) and not roles.names_a_quantity(func.name) and (args or kwargs)
                    and roles.logprob_role(func.name) in ("policy", func.obj.role)):
                # `ref_net.token_logps(ids)`: a method named for the network's log-probs runs its
                # forward (one whose name gives another role, `actor.get_init_policy_logprobs(ids)`,
                # is no forward of the receiver: its name decides, names last)
                value = forward(it, func.obj, node, frame)
                return value.with_(space="logits" if roles.is_logits_name(func.name) else "logprob") \
                    if isinstance(value, Tensor) else value
            return Unknown(func.name)
    if isinstance(func, Model):
        if roles.is_getter_name(func.name):
            return func  # `self.get_base_model(model)`: a getter hands back the network, no forward runs
        return forward(it, func, node, frame)
    model = flax_parameters(args)
    if model is not None and not isinstance(func, ModuleRef):
        # `apply_fn({"params": params}, x)`: a forward of the parameters' model
        return Tensor(ROLE_SYMBOL.get(model.role, LP), space="logits")
    if isinstance(func, Tensor) and func.expr in (LP, REF) and node.args:  # `reference(x)`; not `ref()`
        return named_callee(it, func, node, frame)
    if isinstance(func, GradOf):
        return grad_call(it, func, args, kwargs, node, frame)
    if isinstance(func, KLDivModule):
        return kl_div(it, args[0] if args else kwargs.get("input"), args[1] if len(args) > 1 else kwargs.get("target"),
                      func.reduction, func.explicit, func.log_target, node, frame, "nn.KLDivLoss")
    if isinstance(func, UnresolvedAttribute):
        return unknown_call(it, func.attr, args, kwargs, node, frame)
    if isinstance(func, Unknown):
        return unknown_call(it, func.name, args, kwargs, node, frame)
    # a callable the analysis cannot resolve (a loss function read from a registry or an
    # attribute, a Flax `apply_fn`): given a network, it is a forward of it; else its result
    # still depends on its tensor arguments
    network = model_argument(list(args))
    if network is not None:
        value = Tensor(ROLE_SYMBOL.get(network.role, LP), space="logits")
        return it.algebra.detach(value) if frame.no_grad else value

    return unknown_call(it, (dotted_name(node.func) or "call").rsplit(".", 1)[-1], args, kwargs, node, frame)


def named_callee(it: InterpreterLike, func: Tensor, node: cst.Call, frame: FrameLike) -> Value:
    """Calling a value the analysis knows only by the role its name gives. A callee named for a
    network (`reference(x)`, `self.policy(ids)`) is that network: a forward of it runs. A callee
    named for what it returns (`self._compute_ref_log_prob(batch)`, `ref_logps_fn(x)`,
    `get_ref_logits(ids)`) is a function whose body is not in sight (a method inherited from a
    class outside the project, a callback): its result keeps the role and space the name gives,
    but no forward, with or without gradients, is seen, so none is observed."""
    callee = (dotted_name(node.func) or "").rsplit(".", 1)[-1]
    if not roles.is_logprob_name(callee):
        return forward(it, Model("reference" if func.expr == REF else "policy"), node, frame)
    value = Tensor(func.expr, space=func.space, assumed=func.assumed)
    return it.algebra.detach(value) if frame.no_grad else value


def flax_parameters(args: list[Value]) -> Model | None:
    """`{"params": params}` as the first argument: Flax's variables of a network."""
    if args and isinstance(args[0], Mapping):
        found = model_argument([v for _, v in args[0].items])
        return found
    return None


def vocab_call(it: InterpreterLike, node: cst.Call, args: list[Value], frame: FrameLike) -> Value | None:
    """Calls of names the project declared in `[tool.kllint.vocab]` (matched on the last name)."""
    vocab = it.vocab
    if vocab is None or not args:
        return None
    name = (dotted_name(node.func) or "").rsplit(".", 1)[-1]
    if name in vocab.stop_gradient_functions:
        return it.detach_value(args[0])
    if name in vocab.loss_sinks:
        it.loss_sink(args[0], node, frame, SinkKind.CONFIGURED, dotted_name(node.func) or name)
        return Unknown(name)
    if name in vocab.logprob_functions:
        for candidate in args:
            for option in alternatives(candidate):
                if isinstance(option, (Model, Tensor)) and (isinstance(option, Model) or it.algebra.has_roles(option.expr)):
                    tensor = it.as_tensor(option)
                    return it.algebra.detach(tensor) if frame.no_grad else tensor.with_(space="logprob")
    return None


def forward(it: InterpreterLike, model: Model, node: cst.Call, frame: FrameLike) -> Value:
    """A network's forward pass: logits of the model's role; reference forwards are observed."""
    model = it.forwarded_network(model, node, frame)  # the reference by dataflow, when it is one
    if frame.adapters_off and model.role == "policy":
        value = Tensor(REF, space="logits")  # the base weights under the adapters: the reference
        return it.algebra.detach(value) if frame.no_grad else value
    symbol = ROLE_SYMBOL.get(model.role, LP)
    if model.role == "reference" and node.args:  # a forward takes inputs
        observe_reference_forward(it, model, node, frame)
    value = Tensor(symbol, space="logits")
    return it.algebra.detach(value) if frame.no_grad else value


def observe_reference_forward(it: InterpreterLike, model: Model, node: cst.Call, frame: FrameLike) -> None:
    """Record a reference network's forward (`ReferenceForward`): whether autograd records it
    (PyTorch code, gradient tracking on, the network not frozen). One that it records is
    recorded within one call of the entry point only: that decision depends on the depth, so
    it is taken through `depth_matters` (which makes the memo of the enclosing helper call
    depth-specific), and only for such forwards."""
    taped = records_gradients(frame.module, frame.root)
    is_frozen = frozen(it, model, frame)
    if not frame.no_grad and taped and not is_frozen and it.depth_matters(frame) > 1:
        return
    anchor = it.anchor(node, frame)
    tracking = not frame.no_grad and not without_grad_at(frame.module, anchor.span.line)
    configured = it.vocab is not None and model.name in it.vocab.reference_names
    weak = bool(model.name) and not configured and not roles.names_reference_strongly(model.name)
    it.emit(frame, ReferenceForward(anchor, model.name, taped, tracking, is_frozen, call_stack=frame.call_stack,
                                    weak_name=weak, handed_in=_handed_in(_network_expression(node) or model.name, frame.root)))


def _network_expression(node: cst.Call) -> str | None:
    """The network a forward call runs, as that call's code names it (`model` of `model(ids)`,
    `self.ref` of `self.ref.forward(ids)`)."""
    func = node.func
    if isinstance(func, cst.Attribute) and func.attr.value in FORWARD_METHODS:
        func = func.value
    return dotted_name(func)


def _handed_in(name: str, root: cst.CSTNode | None) -> bool:
    """Whether the network named `name` (as the code holds it) is a parameter of the function
    `root` running the forward; unknown (no function, no name) counts as handed in."""
    if not isinstance(root, cst.FunctionDef) or not name:
        return True
    head = name.split(".")[0]
    return head in parameter_names(root) and head not in ("self", "cls")


def frozen(it: InterpreterLike, model: Model, frame: FrameLike) -> bool:
    """Whether the network was frozen by `requires_grad_(False)` (on it, or on its parameters) in
    the checked module or in the module running the forward: the frozen network is this one by
    name or, when the value lost its name, by being a reference network."""
    name = model.name.rsplit(".", 1)[-1]
    for module in {id(it.entry): it.entry, id(frame.module): frame.module}.values():
        names = frozen_networks(module)
        if name in names or any(roles.model_role(n) == "reference" or roles.logprob_role(n) == "reference"
                                for n in names):
            return True
    return model.frozen


def library_call(it: InterpreterLike, qualname: str, args: list[Value], kwargs: dict[str, Value], node: cst.Call,
                 frame: FrameLike) -> Value:
    """A call of a library function by its qualified name (`torch.nn.functional.kl_div`)."""
    last = qualname.rsplit(".", 1)[-1]
    if qualname in fw.GRAD_TRANSFORMS:
        return grad_transform(qualname, args, kwargs)
    wrapped = wrapper_call(qualname, args, kwargs)
    if wrapped is not None:
        return wrapped
    if qualname in fw.KL_DIV_FUNCTIONS:
        reduction = argument(args, kwargs, 4, "reduction")
        log_target = argument(args, kwargs, 5, "log_target")
        return kl_div(it, argument(args, kwargs, 0, "input"), argument(args, kwargs, 1, "target"),
                      literal_value(reduction) if reduction is not None else "mean", reduction is not None,
                      bool(literal_value(log_target)), node, frame, "F.kl_div")
    if qualname in fw.KL_DIV_MODULES:
        reduction = argument(args, kwargs, 2, "reduction")
        log_target = argument(args, kwargs, 3, "log_target")
        module = KLDivModule(literal_value(reduction) if reduction is not None else "mean", reduction is not None,
                             bool(literal_value(log_target)))
        it.emit(frame, KlDivLossConstruction(it.anchor(node, frame), module.reduction, module.explicit))
        return module
    if qualname in fw.OPTAX_KL:
        first = argument(args, kwargs, 0, "log_predictions")
        it.emit(frame, OptaxKlCall(it.anchor(node, frame), last, _space(first)))
        second = argument(args, kwargs, 1, "targets", "log_targets")
        if last != "convex_kl_divergence" and isinstance(first, Tensor) and isinstance(second, Tensor):
            # KL(targets || exp(log_predictions)) summed over the classes: with the policy as targets
            # and the reference as predictions, the per-token analytic KL(pi || ref)
            if _policy_against_reference(it, second, first):
                return it.algebra.analytic_kl(LP in it.algebra.table.role_symbols(second.expr), it.anchor(node, frame), assumed=second.assumed)
        return it.algebra.opaque("kl")
    if qualname.startswith("torch.distributions") and last in ("Categorical", "OneHotCategorical", "Bernoulli"):
        logits = argument(args, kwargs, 1, "logits")
        probs = argument(args, kwargs, 0, "probs") if logits is None else None
        if isinstance(probs, Tensor) and probs.space is None:
            probs = probs.with_(space="prob")  # `Categorical(probs)`: the argument is a distribution
        parameter = logits if logits is not None else probs
        return parameter.with_(vocab=True, kind="distribution") if isinstance(parameter, Tensor) else Unknown("distribution")
    if qualname.startswith("torch.distributions") and last == "kl_divergence" and len(args) >= 2:
        return analytic(it, args[0], args[1], node, frame)
    if qualname in BACKWARD_METHODS and args:  # `self.manual_backward(loss)` of a LightningModule
        it.loss_sink(args[0], node, frame, SinkKind.BACKWARD_CALL, qualname.rsplit(".", 1)[-1])
        return Unknown("backward")
    if qualname in ("torch.autograd.grad", "torch.autograd.backward"):
        target = argument(args, kwargs, 0, "outputs", "tensors")
        it.loss_sink(target if target is not None else Unknown(), node, frame, SinkKind.AUTOGRAD, qualname)
        return Unknown("gradients")
    if qualname == "importlib.import_module" and args:
        # a module named by a string the analysis knows is imported as an `import` statement would
        return keyed.lifted(lambda path: it.resolve_import(path.value) if isinstance(path, Literal)
                            and isinstance(path.value, str) and path.value else Unknown(last), args[0])
    if qualname == "functools.partial" and args:
        return join(*(Partial(f, tuple(args[1:]), tuple(kwargs.items())) for f in alternatives(args[0])))
    if qualname in fw.FUNCTION_WRAPPERS and args and any(isinstance(o, (FunctionRef, Partial)) for o in alternatives(args[0])):
        return args[0]  # `torch.compile(fn)`: calling the result runs `fn`
    if qualname in fw.TRANSFER and args:
        return join(*args)
    if last in ("stop_gradient",) or qualname.endswith("lax.stop_gradient"):
        return it.detach_value(args[0]) if args else Unknown()
    if not fw.is_tensor_library(qualname) and qualname.split(".")[0] != "math":
        return unknown_call(it, last, args, kwargs, node, frame)
    if last == "cross_entropy" and args and isinstance(args[0], Tensor) and it.algebra.has_roles(args[0].expr):
        # per-token cross-entropy of the sampled tokens is minus their log-prob (MLX's default
        # reduction is "none", PyTorch's "mean")
        reduction = literal_value(kwargs.get("reduction")) or ("none" if qualname.startswith("mlx") else "mean")
        negated = args[0].with_(expr=-args[0].expr, space="logprob", vocab=False)
        return negated if reduction == "none" else it.algebra.reduce(negated, "sum")
    model = model_argument(list(args))
    if model is not None and last in ("dot", "matmul", "einsum", "tensordot", "linear", "embedding", "conv1d", "conv2d", "dense", "bmm", "mm", "inner"):
        return it.as_tensor(model)
    return tensor_function(it, last, args, kwargs, node, frame)


def _space(value: Value | None) -> str | None:
    """What a tensor argument holds ("prob", "logits", "logprob"); None when not known."""
    return value.space if isinstance(value, Tensor) else None


def analytic(it: InterpreterLike, p: Value, q: Value, node: cst.Call, frame: FrameLike) -> Value:
    """`kl_divergence(P, Q)`: the per-token analytic KL(pi || ref) when P is the policy and Q the
    reference (the forward direction, distillation from a fixed teacher, is not judged)."""
    if isinstance(p, Tensor) and isinstance(q, Tensor) and _policy_against_reference(it, p, q):
        return it.algebra.analytic_kl(LP in it.algebra.table.role_symbols(p.expr), it.anchor(node, frame))
    return it.algebra.opaque("kl")


def _policy_against_reference(it: InterpreterLike, p: Tensor, q: Tensor) -> bool:
    """KL(p || q) with `p` of the policy (with or without gradient) and `q` of the reference:
    the direction the penalty means, KL(pi || ref)."""
    p_roles, q_roles = it.algebra.table.role_symbols(p.expr), it.algebra.table.role_symbols(q.expr)
    return (LP in p_roles or LPD in p_roles) and REF in q_roles and REF not in p_roles


def kl_div(it: InterpreterLike, input_: Value | None, target: Value | None, reduction: Any, explicit: bool,
           log_target: bool, node: cst.Call, frame: FrameLike, api: str) -> Value:
    """`F.kl_div(input, target)` computes KL(target || exp(input)): the call is observed with the
    spaces of its arguments and its reduction (`KlDivCall`); with the policy as target and the
    reference as input it is the analytic KL(pi || ref) over the vocabulary."""
    anchor = it.anchor(node, frame)
    it.emit(frame, KlDivCall(anchor, api, _space(input_), _space(target), log_target, reduction, explicit))
    if isinstance(input_, Tensor) and isinstance(target, Tensor) and reduction in ("none", "sum", "batchmean"):
        # `kl_div(ref_logp, logp, log_target=True)` is KL(target || exp(input)): with the policy as
        # target and the reference as input, the analytic KL(pi || ref) over the vocabulary
        target_ok = target.space != "prob" or not log_target
        if _policy_against_reference(it, target, input_) and target_ok:
            value = it.algebra.analytic_kl(LP in it.algebra.table.role_symbols(target.expr), anchor, assumed=target.assumed)
            if reduction == "none":
                return value.with_(kind="analytic_elementwise")  # its sum over classes is the token's KL
            return it.algebra.reduce(value, "sum")
    kind = "kldiv_elementwise" if reduction == "none" else None
    return Tensor(it.algebra.table.fresh("kldiv", positive=True), kind=kind)


def unknown_call(it: InterpreterLike, name: str, args: list[Value], kwargs: dict[str, Value], node: cst.Call,
                 frame: FrameLike) -> Value:
    """A function the analysis cannot read: its name may still say what it does."""
    tensors = [a for a in list(args) + list(kwargs.values()) if isinstance(a, (Tensor, Model))]
    lowered = name.lower()
    toks = set(roles.tokens(name))
    if lowered == "backward" and args:
        it.loss_sink(args[0], node, frame, SinkKind.BACKWARD_CALL, dotted_name(node.func) or name)
        return Unknown("backward")
    if lowered == "zip" and args:
        return Sequence((Sequence(tuple(it._element(a, node, frame) for a in args)),))
    if lowered == "enumerate" and args:
        return Sequence((Sequence((Unknown("index"), it._element(args[0], node, frame))),))
    if lowered == "getattr" and len(args) >= 2 and any(isinstance(name, Literal) and isinstance(name.value, str)
                                                        for name, _ in keyed.conditioned(args[1])):
        # `getattr(module, "K3")`, `getattr(module, name)` of a name cut from a class path: an
        # attribute read; `getattr(obj, name, default)` also gives the default
        found = keyed.lifted(lambda obj, attr: it.attribute(obj, attr.value, node, frame)
                             if isinstance(attr, Literal) and isinstance(attr.value, str) else Unknown(lowered),
                             args[0], args[1])
        return join(found, args[2]) if len(args) > 2 else found
    if lowered == "getattr" and len(args) >= 2:
        networks = [option for option in alternatives(args[0]) if isinstance(option, Model)
                    or (isinstance(option, Tensor) and it.algebra.has_roles(option.expr))]
        if networks:
            return join(*networks)  # `getattr(model, config.backbone_name)`: a part of that network
    if lowered == "dict" and len(args) == 1 and not kwargs and all(isinstance(o, Mapping) for o in alternatives(args[0])):
        return args[0]  # a copy of a dict the analysis built (`self.paths = dict(paths)`)
    if lowered in ("float", "int", "bool", "len", "print", "str", "repr", "isinstance", "hasattr", "getattr", "range", "enumerate", "zip", "reversed", "sorted", "list", "tuple", "dict", "set", "type", "id", "format"):
        if lowered in ("list", "tuple", "reversed", "sorted") and args:
            return args[0]
        return Unknown(lowered)
    if lowered in ("get", "pop") and node.func is not None and isinstance(node.func, cst.Attribute):
        # a container read (`batch.get("ref_logps")`, `td.get(key, padding_value=...)`): the key
        # names the value; other arguments (defaults, padding options) are not its data
        key = args[0] if args else None
        if isinstance(key, Literal) and isinstance(key.value, str):
            stored = it.fields.read(KEY_FIELD + key.value)
            if stored is not None:
                return stored
            return it.value_from_name(key.value, it.anchor(node, frame), frame, detached_source=True)
        return Unknown(name)
    if lowered == "sum" and len(args) == 1 and isinstance(args[0], Sequence) and args[0].items:
        total = args[0].items[0]  # `sum([pg_loss, kl_loss])`: the terms added up
        for item in args[0].items[1:]:
            total = it.arith("+", total, item, node, frame)
        return total
    if lowered == "sum" and len(args) > 1 and isinstance(args[1], Sequence):
        return args[0]  # `sum(list_of_lists, [])` concatenates lists: their elements, not a reduction
    if not tensors:
        return Unknown(name)
    first = it.as_tensor(tensors[0])
    if lowered in fw.REDUCTION_HELPER_TOKENS or toks & fw.REDUCTION_HELPER_TOKENS or lowered.startswith(("masked_mean", "masked_sum", "agg_loss")):
        if "whiten" not in lowered and "normalize" not in lowered:
            return it.algebra.reduce(first, "sum", frame.call_stack + (it.anchor(node, frame),))
    if toks & fw.RTG_HELPER_TOKENS or "reward_to_go" in lowered:
        return reward_to_go(it, first, it.anchor(node, frame), frame)
    if {"cross", "entropy"} <= toks or "nll" in toks:
        return negative_logprob(it, args, kwargs, node, frame, reduction=literal_value(kwargs.get("reduction", Literal("none"))))
    # a helper that only moves elements, or AMP's `scaler.scale(loss)` (the loss times a positive
    # factor, backpropagated as the loss): the one tensor argument that carries a role passes
    if toks & fw.SHAPE_HELPER_TOKENS or (lowered == "scale" and isinstance(node.func, cst.Attribute)):
        carrying = [t for t in tensors if isinstance(t, Tensor) and it.algebra.has_roles(t.expr)]
        if len(carrying) == 1:
            return carrying[0]
    if roles.is_logprob_name(name) or "log_softmax" in lowered:
        for candidate in tensors:
            tensor = it.as_tensor(candidate)
            if it.algebra.has_roles(tensor.expr):
                return tensor.with_(space="logprob")
        return Unknown(name)
    return it.algebra.opaque_call(name, [it.as_tensor(t) for t in tensors])
