"""Roles decided by dataflow, and their evidence (design.md, item 3: "Roles by dataflow; names
last, in one place, with provenance").

- The reference by dataflow: a network other than the trained one (forwarded with gradient
  tracking on), forwarded only with tracking off, is the reference whatever its name. Each
  forward notes its network and mode (`forwarded_network`, called by `calls.forward`); after a
  run, `references_by_dataflow` names such networks and the interpreter runs the file again
  with them as the reference (`EntryPoints.run`).
- Fields and reads whose role the code shows: a field of a settings-named container named as a
  tensor (`tensor_field`), a stored policy log-prob the function treats as live (`live_read`).
- Reads whose value a call decides: a mapping read with a live default or a key made at run
  time (`mapping_read`), a result named by its callee when dataflow says nothing (`named_result`).
- `RoleEvidence` facts: why a value has its role, recorded where the role is decided
  (`note_role`): dataflow (a forward, a detach, a ratio, a log-softmax) or a name.
"""
from __future__ import annotations

from typing import Any

import libcst as cst

from kllint.analysis import roles
from kllint.analysis.facts import RoleEvidence
from kllint.analysis.interpret.frames import Frame
from kllint.analysis.liveness import canonical, live_reads
from kllint.analysis.symbolic import LP, LPD, OLD, REF
from kllint.analysis.fields import KEY_FIELD
from kllint.analysis.module import dotted_name
from kllint.analysis.strings import read_keys
from kllint.analysis.values import (
    Anchor, FunctionRef, Literal, Model, Partial, Tensor, Value, alternatives, join, plain,
)


class RoleDecisions:
    """Networks' forwards, the reference by dataflow and role evidence (a mixin of the interpreter)."""

    def forwarded_network(self, model: Model, node: cst.CSTNode, frame: Frame) -> Model:
        """A network about to run its forward at `node`: its mode is noted
        (`references_by_dataflow`), and one found to be the reference by dataflow is the
        reference (with its evidence, `RoleEvidence`)."""
        if model.role in ("reference", "old") and model.name and isinstance(node, cst.Call) and node.args:
            # the network's role came from its name (dataflow makes only the policy's networks the reference)
            evidence = self.reference_networks.get(model.name) or f"name `{model.name}` of the network forwarded"
            self.note_role(self.anchor(node, frame), frame, model.role, evidence)
        if model.role != "policy" or not model.name:
            return model
        if frame.adapters_off:
            self.note_role(self.anchor(node, frame), frame, "reference",
                           f"forward of `{model.name}` with its adapters disabled")
            return model
        if not (isinstance(node, cst.Call) and node.args):
            return model  # a forward takes inputs (`state_dict()` is no forward)
        self.note_forward(model.name, not frame.no_grad)
        if model.name in self.reference_networks:
            self.note_role(self.anchor(node, frame), frame, "reference", self.reference_networks[model.name])
            return Model("reference", model.name, frozen=True)
        self.note_role(self.anchor(node, frame), frame, "policy, no gradient" if frame.no_grad else "policy",
                       f"forward of `{model.name}` with gradient tracking {'off' if frame.no_grad else 'on'}")
        return model

    def note_forward(self, name: str, tracking: bool) -> None:
        """A forward of the network `name`, with gradient tracking on or off (`close_unit`); a
        memoised call replays those of its call tree."""
        self.forwards.setdefault(name, set()).add(tracking)
        self.unit_forwards.setdefault(name, set()).add(tracking)
        self.forward_log.append((name, tracking))

    def note_role(self, anchor: Anchor | None, frame: Frame, value: Value | str, evidence: str) -> None:
        """Record why the value formed at `anchor` has its role (`RoleEvidence`: `value` is the
        value, or the role itself), once per place, role and evidence."""
        role = value if isinstance(value, str) else role_of(value, self.algebra)
        if role is None or anchor is None or not frame.emit:
            return
        key = (anchor.node_id, role, evidence)
        if key in self.noted_roles:
            return
        self.noted_roles.add(key)
        self.facts.append(RoleEvidence(anchor, role, evidence, frame.call_stack))

    def tensor_field(self, field: str, owner: str, node: cst.CSTNode, frame: Frame) -> Tensor | None:
        """A field of a container named as configuration (`step_kwargs.ref_logprobs`,
        `cfg["attention_mask"]`) whose own name makes it a tensor (`roles.names_a_tensor_field`):
        a container's fields take their roles from what they hold and their own names, never
        from the container's name. Read like a batch's field: stored, without gradient, unless
        the container is named as a forward's output. None for any other field (a setting)."""
        if not roles.names_a_tensor_field(field):
            return None
        value = self.value_from_name(field, self.anchor(node, frame), frame,
                                     detached_source=not roles.is_output_name(owner or ""))
        return self.live_read(value, node, frame) if isinstance(value, Tensor) else None

    def live_read(self, value: Value, node: cst.CSTNode, frame: Frame) -> Value:
        """A container read whose policy role comes from its name (stored log-probs, without
        gradient) read as live when the running function's own code treats it so: detaches it
        explicitly or takes it in an importance ratio (`kllint.analysis.liveness`). Its gradient
        stays `assumed` (a name gave the role)."""
        if not (isinstance(value, Tensor) and value.expr == LPD) or frame.root is None:
            return value
        spelled = canonical(node)
        if spelled is None or spelled not in live_reads(frame.root):
            return value
        self.note_role(self.anchor(node, frame), frame, "policy",
                       "read live: the function detaches it, or weighs it as a ratio's numerator")
        return value.with_(expr=LP, assumed=True)

    def mapping_read(self, node: cst.Call, func: Value, args: list[Value], kwargs: dict[str, Value],
                     frame: Frame) -> Value | None:
        """`d.get(key[, default])` / `d.pop(...)` of a mapping the analysis cannot see (None for
        anything else, a method of a project class among them). A key made at run time reads each
        literal choice, a pattern by its text. A default that carries log-probs, a KL or a
        network is what dataflow knows of the value, the key only names it: with no writer of the
        key in sight the read is the default (`data.get("logprobs_unfiltered", logprobs)` is the
        live log-probs), with one, either. A policy log-prob read by its key alone is live when
        the function's code treats it so (`live_read`)."""
        if not (isinstance(node.func, cst.Attribute) and node.func.attr.value in ("get", "pop") and args):
            return None
        if any(isinstance(option, (FunctionRef, Partial)) for option in alternatives(func)):
            return None
        keys = read_keys(args[0])
        if keys is not None:
            return join(*(self.call(option, [key] + args[1:], kwargs, node, frame)
                          for key in keys for option in alternatives(func)))
        given = args[1] if len(args) > 1 else kwargs.get("default")
        carrying = [option for option in alternatives(given) if isinstance(option, Model)
                    or (isinstance(option, Tensor) and self.algebra.has_roles(option.expr))] if given is not None else []
        default = join(*carrying) if carrying else None
        key = args[0].value if isinstance(args[0], Literal) and isinstance(args[0].value, str) else None
        written = key is not None and self.fields.read(KEY_FIELD + key) is not None
        if default is not None and not written:
            self.note_role(self.anchor(node, frame), frame, default,
                           f"the default of `.{node.func.attr.value}`, no writer of the key in sight")
            return default
        result = join(*(self.call(option, args, kwargs, node, frame) for option in alternatives(func)))
        if default is not None:
            return join(result, default)
        return self.live_read(result, node, frame) if key is not None and not written else result

    def named_result(self, node: cst.Call, results: list[Value], frame: Frame) -> Value | None:
        """The result of a call about which dataflow says nothing (an opaque or unknown value:
        a project helper whose body calls a server, a method of an unknown object) named for
        log-probs by its callee (`server.get_reference_logps(ids)`): the role the callee's name
        gives (names last: the callee's name, not a local's), without gradient under no_grad;
        None otherwise."""
        if not all(plain(option) for result in results for option in alternatives(result)):
            return None
        callee = (dotted_name(node.func) or "").rsplit(".", 1)[-1]
        if not callee or roles.logprob_role(callee) is None or roles.is_logits_name(callee):
            return None
        named = self.role_from_name(callee, detached_source=frame.no_grad)
        if not isinstance(named, Tensor):
            return None
        self.note_role(self.anchor(node, frame), frame, named, f"name of the callee `{callee}`")
        return named

    def close_unit(self) -> None:
        """An entry point ran: a network forwarded in it only with gradient tracking off, beside
        another forwarded with it on (the trained network, whose log-probs carry the gradient
        into the loss) that is not the same network under another name (`same_network`), is a
        candidate reference (`references_by_dataflow`)."""
        forwards, self.unit_forwards = self.unit_forwards, {}
        trained = sorted(name for name, modes in forwards.items() if True in modes)
        for name, modes in forwards.items():
            if modes == {False} and trained and not any(same_network(name, other) for other in trained):
                self.reference_candidates.setdefault(name, trained)

    def references_by_dataflow(self) -> dict[str, str]:
        """The networks that are the reference by what the code does with them, whatever their
        names (design.md, item 3): a candidate (`close_unit`: forwarded only without gradient in
        an entry point that trains another network) never forwarded with gradient tracking on
        anywhere in the run (a network trained somewhere is no reference), each with its
        evidence."""
        found = {}
        for name, trained in self.reference_candidates.items():
            if True not in self.forwards.get(name, ()):
                beside = ", ".join(f"`{other}`" for other in trained[:3]) + (", ..." if len(trained) > 3 else "")
                found[name] = f"forward of `{name}` only with gradient tracking off, in a step that runs {beside} with it on"
        return found


# words of a network's name that say what holds or wraps it, not which network it is
GENERIC_NETWORK_WORDS = frozenset({"model", "models", "net", "network", "module", "lm", "llm", "engine", "wrapper",
                                   "wrapped", "unwrapped", "params", "state", "self", "ddp", "fsdp", "group", "main",
                                   "hf", "the", "my", "inner", "compiled"})


def same_network(first: str, second: str) -> bool:
    """Whether two names may hold the same network: they share a word that names which network
    it is (`actor_model_group` and `actor`), beyond words for what holds or wraps it."""
    words = [set(roles.words(name.rsplit(".", 1)[-1])) - GENERIC_NETWORK_WORDS for name in (first, second)]
    return bool(words[0] & words[1])

def role_of(value: Value, algebra: Any) -> str | None:
    """The role a value has, as `RoleEvidence` names it: `policy` (`policy, no gradient` when
    detached), `reference`, `old`, `mask`, `network:<role>`; None for a value without one."""
    if isinstance(value, Model):
        return f"network:{value.role}"
    if not isinstance(value, Tensor):
        return None
    if value.kind == "mask":
        return "mask"
    symbols = algebra.table.role_symbols(value.expr)
    for symbol, role in ((REF, "reference"), (OLD, "old"), (LP, "policy"), (LPD, "policy, no gradient")):
        if symbol in symbols:
            return role
    return None
