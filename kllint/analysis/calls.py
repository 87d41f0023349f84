"""What calls mean: project functions are followed, tensor-library functions and tensor methods
are modelled (`frameworks`), model forwards produce log-prob-like tensors of the model's role,
and a few APIs are observed for the rules (`kllint.rules.api`): kl_div arguments and reductions,
reference forwards, clamps after exp.
"""
from __future__ import annotations

from typing import Any

import libcst as cst
import sympy as sp
from sympy.core.function import AppliedUndef

from kllint.analysis import frameworks as fw
from kllint.analysis import roles
from kllint.analysis.autograd import frozen_networks, records_gradients, without_grad_at
from kllint.analysis.callables import BoundMethod, KLDivModule, UnresolvedAttribute, string_method
from kllint.analysis.facts import (
    ClampFact, ClassMeanOfKlDiv, KlDivCall, KlDivLossConstruction, OptaxKlCall, ReferenceForward, SinkKind,
)
from kllint.analysis.fields import KEY_FIELD, constructor_fields
from kllint.analysis.module import dotted_name
from kllint.analysis.protocols import FrameLike, InterpreterLike
from kllint.analysis.symbolic import (
    LOGRATIO, LP, LPD, OLD, REF, Clamp, classify_value, on_policy_value, proportional,
)
from kllint.analysis.values import (
    Alts, ClassRef, ConfigValue, FunctionRef, GradOf, Instance, Keyed, Literal, Mapping, Model, ModuleRef, Partial,
    Sequence, Tensor, Unknown, Value, alternatives, join,
)

ROLE_SYMBOL = {"policy": LP, "reference": REF}
# Methods returning a part of the same network (HF, PEFT): its role is the network's.
SUBMODULE_GETTERS = frozenset({"get_decoder", "get_encoder", "get_base_model", "get_model", "get_submodule",
                               "get_input_embeddings", "get_output_embeddings"})
FORWARD_METHODS = ("forward", "__call__", "get_logits", "compute_logits", "apply")


def dispatch(it: InterpreterLike, func: Value, args: list[Value], kwargs: dict[str, Value], node: cst.Call,
             frame: FrameLike) -> Value:
    vocabulary = vocab_call(it, node, args, frame)
    if vocabulary is not None:
        return vocabulary
    if isinstance(func, FunctionRef):
        return it.call_function(func, args, kwargs, node, frame)
    if isinstance(func, Keyed):
        return it.call(func.function, args, kwargs, node, frame.child(conditions=frame.conditions + (func.condition,)))
    if isinstance(func, Partial):
        return it.call(func.function, list(func.args) + list(args), {**dict(func.kwargs), **kwargs}, node, frame)
    if isinstance(func, ClassRef):
        init = it.find_method(func, "__init__")
        for name, value in constructor_fields(func, init.node if init is not None else None, args, kwargs):
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
        if isinstance(func.obj, Tensor):
            return tensor_method(it, func.obj, func.name, args, kwargs, node, frame)
        if isinstance(func.obj, Model):
            if func.name in FORWARD_METHODS:
                return forward(it, func.obj, node, frame)
            if _literal(_arg(args, kwargs, 0, "method_name", "method")) in FORWARD_METHODS:
                # remote dispatch by name: `group.async_run_method_batch(method_name="forward", ...)`
                return forward(it, func.obj, node, frame)
            if func.name in ("eval", "train", "to", "cuda", "requires_grad_", "module") or func.name in SUBMODULE_GETTERS:
                return func.obj
            return Unknown(func.name)
    if isinstance(func, Model):
        return forward(it, func, node, frame)
    model = flax_parameters(args)
    if model is not None and not isinstance(func, ModuleRef):
        # `apply_fn({"params": params}, x)`: a forward of the parameters' model
        return Tensor(ROLE_SYMBOL.get(model.role, LP), space="logits")
    if isinstance(func, Tensor) and func.expr in (LP, REF) and node.args:  # `reference(x)`; not `ref()`
        return forward(it, Model("reference" if func.expr == REF else "policy"), node, frame)
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


def flax_parameters(args: list[Value]) -> Model | None:
    """`{"params": params}` as the first argument: Flax's variables of a network."""
    if args and isinstance(args[0], Mapping):
        found = model_argument([v for _, v in args[0].items])
        return found
    return None


def model_argument(values: list[Value], depth: int = 0) -> Model | None:
    """A network among call arguments (also inside dicts and tuples)."""
    for value in values:
        for option in alternatives(value):
            if isinstance(option, Model):
                return option
            if depth < 2 and isinstance(option, Mapping):
                found = model_argument([v for _, v in option.items], depth + 1)
                if found is not None:
                    return found
            if depth < 2 and isinstance(option, Sequence):
                found = model_argument(list(option.items), depth + 1)
                if found is not None:
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
    it.emit(frame, ReferenceForward(anchor, model.name, taped, tracking, is_frozen, call_stack=frame.call_stack))


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


def grad_call(it: InterpreterLike, grad: GradOf, args: list[Value], kwargs: dict[str, Value], node: cst.Call,
              frame: FrameLike) -> Value:
    """Calling `jax.grad(f)`: `f`'s result (its first element with has_aux) is differentiated with
    respect to its first argument, which carries the policy's parameters."""
    results = []
    for function in alternatives(grad.function):
        if not isinstance(function, FunctionRef):
            continue
        bound = [Model("policy", "params")] + list(args[1:])
        result = it.call_function(function, bound, kwargs, node, frame)
        for option in alternatives(result):
            first = option.items[0] if isinstance(option, Sequence) and option.items and grad.has_aux else option
            if isinstance(first, Sequence) and first.items:
                first = first.items[0]
            results.append(first)
    it.loss_sink(join(*results) if results else Unknown(), node, frame, SinkKind.GRAD_TRANSFORM, grad.transform)
    return Unknown("gradients")


def _arg(args: list[Value], kwargs: dict[str, Value], position: int, *names: str) -> Value | None:
    for name in names:
        if name in kwargs:
            return kwargs[name]
    return args[position] if len(args) > position else None


def _literal(value: Value | None) -> Any:
    if isinstance(value, Literal):
        return value.value
    return None


def library_call(it: InterpreterLike, qualname: str, args: list[Value], kwargs: dict[str, Value], node: cst.Call,
                 frame: FrameLike) -> Value:
    last = qualname.rsplit(".", 1)[-1]
    if qualname in fw.GRAD_TRANSFORMS:
        has_aux = bool(_literal(kwargs.get("has_aux")))
        position = 1 if qualname in fw.GRAD_TRANSFORMS_OF_MODEL else 0
        function = args[position] if len(args) > position else Unknown()
        return GradOf(function, has_aux or "value_and_grad" in last, qualname)
    if qualname in fw.KL_DIV_FUNCTIONS:
        reduction = _arg(args, kwargs, 4, "reduction")
        log_target = _arg(args, kwargs, 5, "log_target")
        return kl_div(it, _arg(args, kwargs, 0, "input"), _arg(args, kwargs, 1, "target"),
                      _literal(reduction) if reduction is not None else "mean", reduction is not None,
                      bool(_literal(log_target)), node, frame, "F.kl_div")
    if qualname in fw.KL_DIV_MODULES:
        reduction = _arg(args, kwargs, 2, "reduction")
        log_target = _arg(args, kwargs, 3, "log_target")
        module = KLDivModule(_literal(reduction) if reduction is not None else "mean", reduction is not None,
                             bool(_literal(log_target)))
        it.emit(frame, KlDivLossConstruction(it.anchor(node, frame), module.reduction, module.explicit))
        return module
    if qualname in fw.OPTAX_KL:
        first = _arg(args, kwargs, 0, "log_predictions")
        it.emit(frame, OptaxKlCall(it.anchor(node, frame), last, _space(first)))
        return it.algebra.opaque("kl")
    if qualname.startswith("torch.distributions") and last in ("Categorical", "OneHotCategorical", "Bernoulli"):
        logits = _arg(args, kwargs, 1, "logits") or _arg(args, kwargs, 0, "probs")
        return logits.with_(vocab=True) if isinstance(logits, Tensor) else Unknown("distribution")
    if qualname.startswith("torch.distributions") and last == "kl_divergence" and len(args) >= 2:
        return analytic(it, args[0], args[1], node, frame)
    if qualname in ("torch.autograd.grad", "torch.autograd.backward"):
        target = _arg(args, kwargs, 0, "outputs", "tensors")
        it.loss_sink(target if target is not None else Unknown(), node, frame, SinkKind.AUTOGRAD, qualname)
        return Unknown("gradients")
    if qualname == "functools.partial" and args:
        return join(*(Partial(f, tuple(args[1:]), tuple(kwargs.items())) for f in alternatives(args[0])))
    if qualname in fw.TRANSFER and args:
        return join(*args)
    if last in ("stop_gradient",) or qualname.endswith("lax.stop_gradient"):
        return it.detach_value(args[0]) if args else Unknown()
    if not fw.is_tensor_library(qualname) and qualname.split(".")[0] != "math":
        return unknown_call(it, last, args, kwargs, node, frame)
    if last == "cross_entropy" and args and isinstance(args[0], Tensor) and it.algebra.has_roles(args[0].expr):
        # per-token cross-entropy of the sampled tokens is minus their log-prob (MLX's default
        # reduction is "none", PyTorch's "mean")
        reduction = _literal(kwargs.get("reduction")) or ("none" if qualname.startswith("mlx") else "mean")
        negated = args[0].with_(expr=-args[0].expr, space="logprob", vocab=False)
        return negated if reduction == "none" else it.algebra.reduce(negated, "sum")
    model = model_argument(list(args))
    if model is not None and last in ("dot", "matmul", "einsum", "tensordot", "linear", "embedding", "conv1d", "conv2d", "dense", "bmm", "mm", "inner"):
        return it.as_tensor(model)
    return tensor_function(it, last, args, kwargs, node, frame)


def _space(value: Value | None) -> str | None:
    """What a tensor argument holds ("prob", "logits", "logprob"); None when not known."""
    return value.space if isinstance(value, Tensor) else None


def tensor_function(it: InterpreterLike, name: str, args: list[Value], kwargs: dict[str, Value], node: cst.Call,
                    frame: FrameLike) -> Value:
    """`torch.X(...)`, `jnp.X(...)`, `F.X(...)`: the first argument is the tensor operated on."""
    model = model_argument(list(args))
    if model is not None and name in ("split", "merge", "state", "graphdef", "jit", "remat", "checkpoint"):
        return Sequence((model, model, model)) if name == "split" else model  # Flax NNX split / merge
    if name in ("cat", "concatenate", "stack", "hstack", "vstack", "concat"):
        items = args[0] if args else Unknown()
        return join(*[i for option in alternatives(items) for i in (option.items if isinstance(option, Sequence) else (option,))])
    if name in fw.NEGATIVE_LOGPROB_LOSSES:
        return negative_logprob(it, args, kwargs, node, frame, reduction=_literal(kwargs.get("reduction", Literal("mean"))))
    if name in fw.CONSTANT_LIKE:
        return it.algebra.number(1 if name == "ones_like" else 0) if name in ("ones_like", "zeros_like") else it.algebra.opaque(name)
    if name in fw.CREATION:
        if name in ("tensor", "array", "asarray", "full") and args and _is_constant(args[-1 if name == "full" else 0]) \
                and isinstance(args[-1 if name == "full" else 0], Literal):
            return it.algebra.number(args[-1 if name == "full" else 0].value)  # `mx.array(0.0)`: a constant
        if name in fw.BUFFERS:
            # a preallocated buffer holds what is written into it later, whatever it is named
            return it.algebra.opaque(name).with_(kind="buffer")
        return it.algebra.opaque(name)
    if name == "where" and len(args) >= 3:
        x, y = args[1], args[2]
        if _is_constant(y):
            return x
        if _is_constant(x):
            return y
        # masking or padding: `where(mask, logp, fill)` keeps the operand that carries a role
        x_roles, y_roles = _carries_roles(it, x), _carries_roles(it, y)
        if x_roles and not y_roles:
            return x
        if y_roles and not x_roles:
            return y
        return _piecewise(it, "where", x, y)
    if name in fw.MULTI_ARG_ARITH and len(args) >= 2:
        return it.arith(fw.MULTI_ARG_ARITH[name], args[0], args[1], node, frame)
    if name in fw.PAIRWISE_CLAMPS and len(args) >= 2:
        if _is_constant(args[1]):
            return clamp(it, args[0], node, frame)
        if _is_constant(args[0]):
            return clamp(it, args[1], node, frame)
        return _piecewise(it, name, args[0], args[1])
    if name in ("max", "min") and len(args) >= 2 and not _is_int_literal(args[1]):
        if _is_constant(args[1]):
            return clamp(it, args[0], node, frame)
        return _piecewise(it, name, args[0], args[1])
    if name == "pow" and len(args) >= 2:
        return it.arith("**", args[0], args[1], node, frame)
    if not args:
        return it.algebra.opaque(name)
    return tensor_method(it, args[0], name, args[1:], kwargs, node, frame, functional=True)


def _piecewise(it: InterpreterLike, name: str, x: Value, y: Value) -> Value:
    """Elementwise `maximum(x, y)` / `minimum` / `where(mask, x, y)` of two tensors: at every
    element the value, and its gradient, is one of the operands (PPO's clipped surrogate
    `max(-A * ratio, -A * clip(ratio))`), so the result is either operand. Operands that carry no
    role keep the dependencies only."""
    if _carries_roles(it, x) and _carries_roles(it, y):
        # where one operand is constant in the policy (PPO's dual clip `min(-A * c, ...)`) the
        # gradient is zero by design: the operands that carry the gradient are what the loss is
        live = [v for v in (x, y) if any(isinstance(o, Tensor) and it.algebra.live(it.algebra.wrap(o))
                                         for o in alternatives(v))]
        return join(*live) if len(live) == 1 else join(x, y)
    return it.algebra.opaque_call(name, [it.as_tensor(x), it.as_tensor(y)])


def negative_logprob(it: InterpreterLike, args: list[Value], kwargs: dict[str, Value], node: cst.Call,
                     frame: FrameLike, reduction: Any) -> Value:
    """`cross_entropy(logits, labels)` / `nll_loss(log_probs, labels)`: minus the log-prob of the
    labels, of the role of the logits (a common way to gather token log-probs:
    `-F.cross_entropy(logits, labels, reduction="none")`); reduced unless `reduction="none"`."""
    first = args[0] if args else kwargs.get("input")
    options = []
    for option in alternatives(first) if first is not None else ():
        if isinstance(option, (Tensor, Model)) and (isinstance(option, Model) or it.algebra.has_roles(option.expr)):
            logp = it.as_tensor(option).with_(space="logprob", vocab=False)
            value = it.algebra.unary(logp, lambda e: -e, it.anchor(node, frame))
            options.append(value if reduction == "none" else it.algebra.reduce(value, "sum"))
        else:
            options.append(it.algebra.opaque("cross_entropy"))
    return join(*options) if options else it.algebra.opaque("cross_entropy")


def _is_constant(value: Value) -> bool:
    if isinstance(value, Literal):
        return isinstance(value.value, (int, float)) and not isinstance(value.value, bool)
    if isinstance(value, Tensor):
        return value.expr.is_number
    return isinstance(value, ConfigValue)


def _carries_roles(it: InterpreterLike, value: Value) -> bool:
    """Any alternative is a tensor with a log-prob role or a KL term (or a network)."""
    return any(isinstance(o, Model) or (isinstance(o, Tensor) and it.algebra.has_roles(o.expr))
               for o in alternatives(value))


def _is_int_literal(value: Value) -> bool:
    return isinstance(value, Literal) and isinstance(value.value, int) and not isinstance(value.value, bool)


def clamp(it: InterpreterLike, value: Value, node: cst.Call, frame: FrameLike) -> Value:
    """A clamp: identity inside its range (kept as a marker). A clamp of exp(log-ratio) is
    observed (`ClampFact`); KL601 is judged where the clamped value reaches a loss."""
    options = []
    for option in alternatives(value):
        if not isinstance(option, Tensor):
            options.append(option)
            continue
        clamped = it.algebra.clamp(option, it.anchor(node, frame))
        if _exp_of_live_logratio(it, option.expr) and clamped.expr.has(Clamp):
            it.emit(frame, ClampFact(clamped.expr, it.anchor(node, frame), frame.call_stack))
        options.append(clamped)
    return join(*options)


def _exp_of_live_logratio(it: InterpreterLike, expr: sp.Expr) -> bool:
    """A KL estimate (not a PPO ratio clip) with the exp of an unclamped live log-ratio: a
    difference of log-probs, unbounded (exp of a log-softmax is a probability, at most 1)."""
    if REF not in it.algebra.table.role_symbols(expr):
        return False
    match = classify_value(expr, it.algebra.table) if it.algebra.table.is_pure(expr) else None
    if match is not None and match.name == "reference-ratio":
        return False
    for sub in sp.preorder_traversal(it.algebra.table.expand_reductions(expr)):
        if isinstance(sub, sp.exp) and LP in sub.args[0].free_symbols and not sub.args[0].has(Clamp):
            if _log_ratio(sub.args[0]):
                return True
    return False


def _log_ratio(expr: sp.Expr) -> bool:
    """A difference of log-probs of two policies: it depends on two of them, and no longer on
    them once they are all equal (through opaque helpers, such as padding, the first suffices)."""
    roles_in = expr.free_symbols & {LP, LPD, REF, OLD}
    if len(roles_in) < 2:
        return False  # exp of one policy's log-probs is a probability, at most 1
    if expr.atoms(AppliedUndef):
        return True
    common = sp.Dummy("common", real=True)
    same = expr.xreplace({symbol: common for symbol in roles_in})
    return common not in same.free_symbols


def tensor_method(it: InterpreterLike, obj: Value, name: str, args: list[Value], kwargs: dict[str, Value],
                  node: cst.Call, frame: FrameLike, functional: bool = False) -> Value:
    """`x.method(...)` (or `torch.method(x, ...)` with `functional`)."""
    if isinstance(obj, Alts):
        return join(*(tensor_method(it, option, name, args, kwargs, node, frame, functional)
                      for option in obj.options))
    if not isinstance(obj, Tensor):
        if isinstance(obj, Model):
            obj = it.as_tensor(obj)
        elif isinstance(obj, Sequence) and name in ("stack", "cat"):
            return join(*obj.items)
        else:
            return it.algebra.opaque(name)
    algebra = it.algebra
    anchor = it.anchor(node, frame)
    if name == "backward":
        target = obj
        if args and isinstance(args[0], Tensor) and not algebra.has_roles(obj.expr):
            target = args[0]
        it.loss_sink(target, node, frame, SinkKind.BACKWARD_METHOD, "backward")
        return Unknown("backward")
    if name in fw.DETACH:
        return algebra.detach(obj)
    if name in fw.CONSUME:
        return Unknown("metric")
    if name in ("gather", "take_along_axis", "index_select", "take"):
        return obj.with_(vocab=False)
    if name in fw.IDENTITY or name in ("scale",):
        return obj
    if name in fw.EXP:
        space = "prob" if obj.space == "logprob" else None
        return algebra.unary(obj, sp.exp, anchor).with_(space=space)
    if name in fw.LOG:
        space = "logprob" if obj.space == "prob" else None
        return algebra.unary(obj, sp.log, anchor).with_(space=space)
    if name == "expm1":
        return algebra.unary(obj, lambda e: sp.exp(e) - 1, anchor)
    if name == "log1p":
        return algebra.unary(obj, lambda e: sp.log(1 + e), anchor)
    if name in ("square",):
        return algebra.unary(obj, lambda e: e ** 2, anchor)
    if name in ("pow", "power", "float_power") and args:
        return it.arith("**", obj, args[0], node, frame)
    if name == "sqrt":
        return algebra.unary(obj, sp.sqrt, anchor)
    if name in ("abs", "absolute"):
        return algebra.unary(obj, sp.Abs, anchor)
    if name in ("neg", "negative"):
        return algebra.unary(obj, lambda e: -e, anchor)
    if name in fw.MULTI_ARG_ARITH and args:
        return it.arith(fw.MULTI_ARG_ARITH[name], obj, args[0], node, frame)
    if name in fw.CLAMPS:
        return clamp(it, obj, node, frame)
    if name == "softmax":  # probabilities of a distribution whose log-probs are the (normalised) logits
        return algebra.unary(obj, sp.exp, anchor, keep_anchor=True).with_(space="prob", vocab=True)
    if name == "log_softmax":
        return obj.with_(space="logprob", vocab=True)
    if name in fw.PROB_MAPS or name in fw.LOGPROB_MAPS:
        space = "prob" if name in fw.PROB_MAPS else "logprob"
        return algebra.unary(obj, sp.Function(name), anchor).with_(space=space)
    if name in fw.REDUCTIONS:
        if obj.kind == "analytic_elementwise" and name == "sum":
            return obj.with_(kind=None)  # the sum over classes: the per-token analytic KL
        if obj.kind == "kldiv_elementwise" and name in ("mean", "nanmean"):
            dim = _arg(args, kwargs, 0, "dim", "axis")
            if dim is None or _literal(dim) in (-1,):
                it.emit(frame, ClassMeanOfKlDiv(anchor))
        if obj.space in ("prob", "logprob") and obj.vocab:
            dim = _literal(_arg(args, kwargs, 0, "dim", "axis"))
            if dim not in (-1, None):
                return obj  # an average over the batch keeps the distribution
        if obj.vocab and it.algebra.table.is_pure(obj.expr) and name == "sum":
            summed = vocabulary_kl(it, obj, node, frame)
            if summed is not None:
                return summed
        return algebra.reduce(obj, "sum", frame.call_stack + (anchor,))
    if name in fw.CUMULATIVE:
        return algebra.reduce(obj, "rtg", frame.call_stack + (anchor,))
    if name == "logsumexp" and obj.space == "logits":
        # the log-softmax normaliser: logits and log-probs share a role, `logits - lse` is log-probs
        return it.algebra.number(0).with_(kind="log_normaliser")
    if name in fw.OPAQUE_REDUCTIONS:
        if args and isinstance(args[0], Tensor) and not _is_int_literal(args[0]):
            if _is_constant(args[0]):
                return clamp(it, obj, node, frame)
            return algebra.opaque_call(name, [obj, args[0]])
        return algebra.opaque_call(name, [obj])
    if name in ("masked_fill", "masked_scatter", "fill_"):
        return obj
    tensors = [obj] + [a for a in args if isinstance(a, Tensor)]
    return algebra.opaque_call(name, tensors)


def analytic(it: InterpreterLike, p: Value, q: Value, node: cst.Call, frame: FrameLike) -> Value:
    """`kl_divergence(P, Q)`: the per-token analytic KL(pi || ref) when P is the policy and Q the
    reference (the forward direction, distillation from a fixed teacher, is not judged)."""
    if isinstance(p, Tensor) and isinstance(q, Tensor):
        p_roles, q_roles = it.algebra.table.role_symbols(p.expr), it.algebra.table.role_symbols(q.expr)
        if (LP in p_roles or LPD in p_roles) and REF in q_roles and REF not in p_roles:
            return it.algebra.analytic_kl(LP in p_roles, it.anchor(node, frame))
    return it.algebra.opaque("kl")


def vocabulary_kl(it: InterpreterLike, t: Tensor, node: cst.Call, frame: FrameLike) -> Tensor | None:
    """`(p * (log p - log q)).sum(-1)` over the vocabulary with p the policy: analytic KL(pi || ref)."""
    value = on_policy_value(t.expr, it.algebra.table)
    if proportional(value, sp.exp(LP) * LOGRATIO) is None:
        return None
    return it.algebra.analytic_kl(LP in it.algebra.table.role_symbols(t.expr), it.anchor(node, frame))


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
        p_roles = it.algebra.table.role_symbols(target.expr)
        q_roles = it.algebra.table.role_symbols(input_.expr)
        target_ok = target.space != "prob" or not log_target
        if (LP in p_roles or LPD in p_roles) and REF in q_roles and REF not in p_roles and target_ok:
            value = it.algebra.analytic_kl(LP in p_roles, anchor, assumed=target.assumed)
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
    if lowered == "getattr" and len(args) >= 2 and not isinstance(args[1], Literal):
        networks = [option for option in alternatives(args[0]) if isinstance(option, Model)]
        if networks:
            return join(*networks)  # `getattr(model, config.backbone_name)`: a part of that network
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
    if lowered == "sum" and len(args) > 1 and isinstance(args[1], Sequence):
        return args[0]  # `sum(list_of_lists, [])` concatenates lists: their elements, not a reduction
    if not tensors:
        return Unknown(name)
    first = it.as_tensor(tensors[0])
    if lowered in fw.REDUCTION_HELPER_TOKENS or toks & fw.REDUCTION_HELPER_TOKENS or lowered.startswith(("masked_mean", "masked_sum", "agg_loss")):
        if "whiten" not in lowered and "normalize" not in lowered:
            return it.algebra.reduce(first, "sum", frame.call_stack + (it.anchor(node, frame),))
    if toks & fw.RTG_HELPER_TOKENS or "reward_to_go" in lowered:
        return it.algebra.reduce(first, "rtg", frame.call_stack + (it.anchor(node, frame),))
    if {"cross", "entropy"} <= toks or "nll" in toks:
        return negative_logprob(it, args, kwargs, node, frame, reduction=_literal(kwargs.get("reduction", Literal("none"))))
    if toks & fw.SHAPE_HELPER_TOKENS:
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
