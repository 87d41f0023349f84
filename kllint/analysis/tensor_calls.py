"""What tensor-library functions (`torch.X`, `jnp.X`, `F.X`) and tensor methods (`x.X(...)`)
compute, on the analysis's values: arithmetic, exp / log, clamps (a clamp of exp(log-ratio) is
observed: `ClampFact`), reductions over tokens (a mean over the classes of an elementwise kl_div
is observed: `ClassMeanOfKlDiv`), gathers, `backward()` as a loss sink; and the argument helpers
the call handlers share (`kllint.analysis.calls`).
"""
from __future__ import annotations

from typing import Any

import libcst as cst
from kllint.analysis import terms as tm

from kllint.analysis import frameworks as fw
from kllint.analysis.estimators import classify_value, on_policy_value
from kllint.analysis.facts import ClampFact, ClassMeanOfKlDiv, RewardFact, SinkKind
from kllint.analysis.numeric import proportional
from kllint.analysis.protocols import FrameLike, InterpreterLike
from kllint.analysis.symbolic import LOGRATIO, LP, LPD, OLD, REF, Clamp
from kllint.analysis.values import (
    Alts, Anchor, ConfigValue, Literal, Mapping, Model, Sequence, Tensor, Unknown, Value, alternatives, join,
)


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


def argument(args: list[Value], kwargs: dict[str, Value], position: int, *names: str) -> Value | None:
    for name in names:
        if name in kwargs:
            return kwargs[name]
    return args[position] if len(args) > position else None


def literal_value(value: Value | None) -> Any:
    if isinstance(value, Literal):
        return value.value
    return None


def tensor_function(it: InterpreterLike, name: str, args: list[Value], kwargs: dict[str, Value], node: cst.Call,
                    frame: FrameLike) -> Value:
    """`torch.X(...)`, `jnp.X(...)`, `F.X(...)`: the first argument is the tensor operated on."""
    model = model_argument(list(args))
    if model is not None and name in ("split", "merge", "state", "graphdef", "jit", "remat", "checkpoint"):
        return Sequence((model, model, model)) if name == "split" else model  # Flax NNX split / merge
    if name in ("cat", "concatenate", "stack", "hstack", "vstack", "concat"):
        items = args[0] if args else Unknown()
        elements = [i for option in alternatives(items) for i in (option.items if isinstance(option, Sequence) else (option,))]
        if len(elements) > 1:  # a table of estimates is written here, whichever of them is picked later
            anchor = it.anchor(node, frame)
            elements = [it.algebra.unary(e, lambda x: x, anchor) if isinstance(e, Tensor) and e.anchor is not None
                        and it.algebra.is_kl_candidate(e) else e for e in elements]
        return join(*elements)
    if name in fw.NEGATIVE_LOGPROB_LOSSES:
        return negative_logprob(it, args, kwargs, node, frame, reduction=literal_value(kwargs.get("reduction", Literal("mean"))))
    if name == "mse_loss" and len(args) >= 2:  # `(input - target) ** 2`, reduced unless `reduction="none"`
        squared = it.arith("**", it.arith("-", args[0], args[1], node, frame), Literal(2), node, frame)
        if literal_value(kwargs.get("reduction", Literal("mean"))) == "none":
            return squared
        return tensor_method(it, squared, "mean", [], {}, node, frame)
    if name in fw.PER_EXAMPLE_NEGATIVE_LOGPROB_LOSSES:  # optax's: one value per example, never reduced
        return negative_logprob(it, args, kwargs, node, frame, reduction="none")
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
    if name == "one_hot" and args:  # `one_hot(tokens, vocab)`: times log-probs and summed over classes, a gather
        return it.algebra.opaque(name).with_(kind="one_hot", vocab=True)
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


def _exp_of_live_logratio(it: InterpreterLike, expr: tm.Term) -> bool:
    """A KL estimate (not a PPO ratio clip) with the exp of an unclamped live log-ratio: a
    difference of log-probs, unbounded (exp of a log-softmax is a probability, at most 1)."""
    if REF not in it.algebra.table.role_symbols(expr):
        return False
    match = classify_value(expr, it.algebra.table) if it.algebra.table.is_pure(expr) else None
    if match is not None and match.name == "reference-ratio":
        return False
    for sub in tm.preorder_traversal(it.algebra.table.expand_reductions(expr)):
        if isinstance(sub, tm.exp) and LP in sub.args[0].free_symbols and not sub.args[0].has(Clamp):
            if _log_ratio(sub.args[0]):
                return True
    return False


def _log_ratio(expr: tm.Term) -> bool:
    """A difference of log-probs of two policies: it depends on two of them, and no longer on
    them once they are all equal (through opaque helpers, such as padding, the first suffices)."""
    roles_in = expr.free_symbols & {LP, LPD, REF, OLD}
    if len(roles_in) < 2:
        return False  # exp of one policy's log-probs is a probability, at most 1
    if expr.atoms(tm.Undefined):
        return True
    common = tm.Dummy("common", real=True)
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
    if name == "get" and args and isinstance(args[0], Literal) and isinstance(args[0].value, str):
        return it.tensor_item(obj, args[0], node, frame)  # `out.get("log_probs")`: as `out["log_probs"]`
    if name in fw.CONSUME:
        if name in ("item", "tolist", "numpy", "device_get"):
            it.metric_sink(obj, node, frame, f"`.{name}()`")
        return Unknown("metric")
    if name == "log_prob" and obj.kind == "distribution":
        # `Categorical(logits=...).log_prob(tokens)`: the log-probs of the tokens under it
        chosen = obj.with_(vocab=False, kind=None)
        if obj.space == "prob":
            return algebra.unary(chosen, tm.log, anchor).with_(space="logprob")
        return chosen.with_(space="logprob")
    if name in fw.PIECES and algebra.has_roles(obj.expr):
        return obj.with_(kind="pieces")  # `ref_logp.chunk(n)`: each piece holds the same values
    if name in ("gather", "take_along_axis", "take_along_dim", "index_select", "take"):
        return obj.with_(vocab=False)
    if name in fw.IDENTITY or name in ("scale",):
        return obj
    if name in fw.EXP:
        space = "prob" if obj.space == "logprob" else None
        # exp of logits: the unnormalised probabilities, whose sum over the vocabulary is the partition function
        return algebra.unary(obj, tm.exp, anchor).with_(space=space, kind="exp_logits" if obj.space == "logits" else None)
    if name in fw.LOG:
        if obj.kind == "partition":  # log of the partition function: the log-softmax normaliser
            return it.algebra.number(0).with_(kind="log_normaliser")
        space = "logprob" if obj.space == "prob" else None
        return algebra.unary(obj, tm.log, anchor).with_(space=space)
    if name == "expm1":
        return algebra.unary(obj, lambda e: tm.exp(e) - 1, anchor)
    if name == "log1p":
        return algebra.unary(obj, lambda e: tm.log(1 + e), anchor)
    if name in ("square",):
        return algebra.unary(obj, lambda e: e ** 2, anchor)
    if name in ("pow", "power", "float_power") and args:
        return it.arith("**", obj, args[0], node, frame)
    if name == "sqrt":
        return algebra.unary(obj, _square_root, anchor)
    if name in ("abs", "absolute"):
        return algebra.unary(obj, tm.Abs, anchor)
    if name in ("neg", "negative"):
        return algebra.unary(obj, lambda e: -e, anchor)
    if name in fw.MULTI_ARG_ARITH and args:
        return it.arith(fw.MULTI_ARG_ARITH[name], obj, args[0], node, frame)
    if name in fw.CLAMPS:
        return clamp(it, obj, node, frame)
    if name == "softmax":  # probabilities of a distribution whose log-probs are the (normalised) logits
        return algebra.unary(obj, tm.exp, anchor, keep_anchor=True).with_(space="prob", vocab=True)
    if name == "log_softmax":
        if obj.kind is None and not algebra.has_roles(obj.expr):
            # a log-softmax makes log-probs whatever its operand is called (`F.linear(h, w)`, a
            # renamed local): the policy's when nothing else says whose, its gradient assumed
            value = Tensor(LPD if frame.no_grad else LP, space="logprob", vocab=True, assumed=not frame.no_grad)
            it.note_role(anchor, frame, value, "log-softmax of a value with no role of its own")
            return value
        return obj.with_(space="logprob", vocab=True)
    if name in fw.PROB_MAPS or name in fw.LOGPROB_MAPS:
        space = "prob" if name in fw.PROB_MAPS else "logprob"
        return algebra.unary(obj, tm.Function(name), anchor).with_(space=space)
    if name in fw.REDUCTIONS:
        if obj.kind == "analytic_elementwise" and name == "sum":
            per_token = obj.with_(kind=None)  # the sum over classes: the per-token analytic KL
            if argument(args, kwargs, 0, "dim", "axis") is None:  # `.sum()`: over the tokens too
                return algebra.reduce(per_token, "sum", frame.call_stack + (anchor,))
            return per_token
        if obj.kind in ("kldiv_elementwise", "analytic_elementwise") and name in ("mean", "nanmean"):
            dim = argument(args, kwargs, 0, "dim", "axis")
            if dim is None or literal_value(dim) in (-1,):
                it.emit(frame, ClassMeanOfKlDiv(anchor))
        if obj.space in ("prob", "logprob") and obj.vocab:
            dim = literal_value(argument(args, kwargs, 0, "dim", "axis"))
            if dim not in (-1, None):
                return obj  # an average over the batch keeps the distribution
        if obj.kind == "one_hot_selected" and name == "sum" and literal_value(argument(args, kwargs, 0, "dim", "axis")) == -1:
            return obj.with_(vocab=False, kind=None)
        if obj.kind == "exp_logits" and name in ("sum", "nansum") and literal_value(argument(args, kwargs, 0, "dim", "axis")) == -1:
            return algebra.reduce(obj, "sum", frame.call_stack + (anchor,)).with_(kind="partition")
        if obj.vocab and it.algebra.table.is_pure(obj.expr) and name == "sum":
            summed = vocabulary_kl(it, obj, node, frame)
            if summed is not None:
                return summed
        return algebra.reduce(obj, "sum", frame.call_stack + (anchor,))
    if name in fw.CUMULATIVE:
        return reward_to_go(it, obj, anchor, frame)
    if name in ("max", "amax") and literal_value(argument(args, kwargs, 0, "dim", "axis")) == -1:
        found = vocabulary_max(it, obj, name)
        if found is not None:
            return found
    if name == "logsumexp" and obj.space == "logits":
        # the log-softmax normaliser: logits and log-probs share a role, `logits - lse` is log-probs
        return it.algebra.number(0).with_(kind="log_normaliser")
    if name in fw.OPAQUE_REDUCTIONS:
        if args and isinstance(args[0], Tensor) and not _is_int_literal(args[0]):
            if _is_constant(args[0]):
                return clamp(it, obj, node, frame)
            return algebra.opaque_call(name, [obj, args[0]])
        return algebra.opaque_call(name, [obj])
    if name in ("masked_fill", "masked_scatter", "fill_", "masked_select"):
        return obj
    tensors = [obj] + [a for a in args if isinstance(a, Tensor)]
    return algebra.opaque_call(name, tensors)


def vocabulary_max(it: InterpreterLike, t: Tensor, name: str) -> Tensor | None:
    """`x.max(-1)` over the vocabulary axis of a distribution (`kind="vocab_max"`; its `.values`
    and `[0]` are the tensor itself). Of log-probs or probabilities it is the value of the most
    likely token, as a gather of that token. Of logits it is a per-row constant: subtracted from
    the same logits (`logits - logits.max(-1, keepdim=True).values`, the stable log-softmax) it
    leaves the distribution unchanged (`Algebra.binary`), otherwise it is opaque. None for
    anything else (a maximum over tokens of per-token values)."""
    if t.space == "logits":
        return it.algebra.opaque_call(name, [t]).with_(kind="vocab_max")
    if t.space in ("logprob", "prob") and t.vocab:
        return t.with_(vocab=False, kind="vocab_max")
    return None


def vocabulary_kl(it: InterpreterLike, t: Tensor, node: cst.Call, frame: FrameLike) -> Tensor | None:
    """`(p * (log p - log q)).sum(-1)` over the vocabulary with p the policy: analytic KL(pi || ref),
    times the constant it is written with (`p * (log q - log p)`, the log terms swapped, is its
    negative: a penalty that sign then maximises)."""
    value = on_policy_value(t.expr, it.algebra.table)
    scale = proportional(value, tm.exp(LP) * LOGRATIO)
    if scale is None:
        return None
    kl = it.algebra.analytic_kl(LP in it.algebra.table.role_symbols(t.expr), it.anchor(node, frame))
    if abs(scale - 1) < 1e-9:
        return kl
    factor = round(scale) if abs(scale - round(scale)) < 1e-9 else scale
    return kl.with_(expr=it.algebra.number(factor).expr * kl.expr)


def _square_root(expr: tm.Term) -> tm.Term:
    """`sqrt(expr)`, left unevaluated unless `expr` is a number: no rule looks inside a square
    root, and the large normalisers (running variances) that reach one need not be examined."""
    return tm.sqrt(expr) if expr.is_number else tm.Pow(expr, tm.HALF, evaluate=False)


def reward_to_go(it: InterpreterLike, t: Tensor, anchor: Anchor, frame: FrameLike) -> Tensor:
    """`t` credited from the end (a cumulative sum over tokens: returns). A detached KL estimate
    in it is a reward whatever the value is called: the returns are what a reward becomes
    (`RewardFact`, target `returns`). A live one is left to the sink its returns reach (a
    surrogate may still detach them)."""
    note_reward_to_go(it, t, anchor, frame)
    return it.algebra.reduce(t, "rtg", frame.call_stack + (anchor,))


def note_reward_to_go(it: InterpreterLike, t: Tensor, anchor: Anchor, frame: FrameLike) -> None:
    """The reward fact of `reward_to_go` (also for a loop that credits each position with the
    ones after it)."""
    wrapped = it.algebra.wrap(t)
    if it.algebra.kl_symbols(wrapped) and not it.algebra.live(wrapped):
        it.emit(frame, RewardFact(t, anchor, "returns", "rewards", frame.call_stack))
