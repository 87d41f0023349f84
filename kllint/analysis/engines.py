"""Framework calls that hand back what they were given: wrappers of a network (distributed data
parallel, sharding, compilation, training engines, `accelerator.prepare`) return that network,
with its role, so a forward of the wrapper is a forward of the network; Ray's remote calls run
the function they name and `ray.get` returns its result; a Flax module of the project run with
`module.apply(variables, ...)` runs its `__call__` (or the method named). All by qualified name,
through the module's imports (`kllint.analysis.calls.library_call` asks here first).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import libcst as cst

from kllint.analysis.protocols import FrameLike, InterpreterLike
from kllint.analysis.tensor_calls import argument, literal_value
from kllint.analysis.values import (
    ClassRef, FunctionRef, Instance, Literal, Mapping, ModuleRef, Partial, Sequence, Unknown, Value, alternatives,
    join,
)

# Calls that wrap one network and return it: qualified name -> (position, keyword) of the network.
NETWORK_WRAPPERS: dict[str, tuple[int, str]] = {
    "torch.compile": (0, "model"),
    "torch.jit.script": (0, "obj"),
    "torch.nn.DataParallel": (0, "module"),
    "torch.nn.parallel.DataParallel": (0, "module"),
    "torch.nn.parallel.DistributedDataParallel": (0, "module"),
    "torch.nn.parallel.distributed.DistributedDataParallel": (0, "module"),
    "torch.distributed.fsdp.FullyShardedDataParallel": (0, "module"),
    "torch.distributed.fsdp.fully_sharded_data_parallel.FullyShardedDataParallel": (0, "module"),
    "torch.distributed.fsdp.fully_shard": (0, "module"),
    "torch.distributed._composable.fsdp.fully_shard": (0, "module"),
    "torch.distributed._composable.fsdp.fully_shard.fully_shard": (0, "module"),
    "deepspeed.init_inference": (0, "model"),
    "accelerate.Accelerator.prepare_model": (0, "model"),
    "accelerate.Accelerator.unwrap_model": (0, "model"),
    "lightning.Fabric.setup_module": (0, "module"),
    "lightning.fabric.Fabric.setup_module": (0, "module"),
}
# Calls that wrap each of their arguments and return them in order (one argument: itself).
ARGUMENT_WRAPPERS = frozenset({"accelerate.Accelerator.prepare", "lightning.Fabric.setup",
                               "lightning.fabric.Fabric.setup"})
# Training engines built around a network: qualified name -> (position, keyword) of the network;
# the call returns (engine, optimizer, data loader, learning-rate scheduler), the engine first.
ENGINE_INITIALIZERS: dict[str, tuple[int, str]] = {"deepspeed.initialize": (1, "model")}
# Library classes whose instances the analysis keeps by class, so that their methods are known by
# qualified name (`accelerator.prepare` is `accelerate.Accelerator.prepare`).
LIBRARY_OBJECTS = frozenset({"accelerate.Accelerator", "lightning.Fabric", "lightning.fabric.Fabric"})


# `ray.remote(f)`, `ray.remote(num_gpus=1)(f)`: the decorator (or call) hands back what it is given;
# what makes the function remote is how it is then called, `f.remote(...)`.
REMOTE_DECORATORS = frozenset({"ray.remote"})
# Attributes of a remote function, actor class or actor method: `remote` runs it, `options(...)`
# returns it with other resources.
REMOTE_ATTRIBUTES = frozenset({"remote", "options"})


@dataclass(frozen=True)
class Returns:
    """A callable whose call returns `value` whatever its arguments (`f.options(num_gpus=1)`)."""

    value: Value


def remote_attribute(base: Value, attr: str) -> Value | None:
    """`f.remote` / `Actor.remote` / `actor.method.remote` of a function, class or method of the
    project: the callable itself (calling it runs `f(...)`, builds the actor, runs the method; the
    object reference it returns is what `ray.get` reads back). `f.options` gives a callable
    returning the same. None for another attribute or value. A project function has no
    attribute of its own by these names: reading one means Ray made it remote (decorated
    `@ray.remote` or passed to `ray.remote(...)`, which return their argument here)."""
    if attr not in REMOTE_ATTRIBUTES or not isinstance(base, (FunctionRef, ClassRef, Partial)):
        return None
    return base if attr == "remote" else Returns(base)


def wrapper_call(qualname: str, args: list[Value], kwargs: dict[str, Value]) -> Value | None:
    """What a framework call that wraps a network (or builds an object whose methods do)
    returns, by its qualified name; None for another call."""
    if qualname in NETWORK_WRAPPERS:
        network = argument(args, kwargs, *NETWORK_WRAPPERS[qualname])
        return network if network is not None else Unknown(qualname)
    if qualname in ARGUMENT_WRAPPERS:
        if len(args) == 1 and not kwargs:
            return args[0]
        return Sequence(tuple(args)) if args else Unknown(qualname)
    if qualname in ENGINE_INITIALIZERS:
        network = argument(args, kwargs, *ENGINE_INITIALIZERS[qualname])
        optimizer = argument(args, kwargs, 2, "optimizer")
        return Sequence((network if network is not None else Unknown("engine"),
                         optimizer if optimizer is not None else Unknown("optimizer"),
                         Unknown("dataloader"), Unknown("lr_scheduler")))
    if qualname in REMOTE_DECORATORS:
        # `ray.remote(f)`: `f`, made remote; `ray.remote(num_gpus=1)`: the decorator, still awaiting `f`
        return args[0] if len(args) == 1 and not kwargs else ModuleRef(qualname)
    if qualname in LIBRARY_OBJECTS:
        return ModuleRef(qualname)  # an instance, known by its class: its methods are qualified through it
    return None



# Bases of Flax modules: `module.apply(variables, *args, method=...)` runs the module's code.
FLAX_MODULES = frozenset({"flax.linen.Module", "flax.linen.module.Module", "flax.nnx.Module",
                          "flax.experimental.nnx.Module", "flax.nnx.module.Module"})
# keywords of `Module.apply` that are not arguments of the method it runs
FLAX_APPLY_OPTIONS = ("rngs", "mutable", "capture_intermediates", "method")


@dataclass(frozen=True)
class FlaxApply:
    """`module.apply` of an instance of a project Flax module (its class derives from one of
    FLAX_MODULES), waiting for its call."""

    instance: Instance


def flax_apply(it: InterpreterLike, applied: FlaxApply, args: list[Value], kwargs: dict[str, Value],
               node: cst.Call, frame: FrameLike) -> Value:
    """`module.apply(variables, *args, method=None, mutable=False, ...)`: the module's `__call__`
    (or the method `method` names, by string or as `Cls.method`) runs with the arguments after
    the variables, `self` bound to the instance, whose fields hold what its constructor was
    given (dataclass fields: `Objective(net=net, ref_net=ref_net)`). With `mutable` the call
    returns (output, updated variables)."""
    instance = applied.instance
    method_value = kwargs.get("method")
    methods = []
    for option in alternatives(method_value) if method_value is not None else (Literal(None),):
        name = literal_value(option)
        if isinstance(option, FunctionRef):
            methods.append(replace(option, bound_self=instance) if option.bound_self is not None else option)
        elif name is None or isinstance(name, str):
            found = it.find_method(instance.cls, name or "__call__")
            if found is not None:
                methods.append(replace(found, bound_self=instance) if isinstance(found.bound_self, Instance) else found)
    passed = {key: value for key, value in kwargs.items() if key not in FLAX_APPLY_OPTIONS and key != "variables"}
    positional = list(args[1:]) if args or "variables" not in kwargs else list(args)
    results = [it.call_function(method, positional, passed, node, frame) for method in methods]
    result = join(*results) if results else Unknown("apply")
    mutable = literal_value(kwargs.get("mutable"))
    if "mutable" in kwargs and mutable is not False:
        return Sequence((result, Unknown("variables")))
    return result


# Bases of PyTorch Lightning modules: the framework differentiates what `training_step` returns.
LIGHTNING_MODULES = frozenset({
    "lightning.LightningModule", "lightning.pytorch.LightningModule", "lightning.pytorch.core.LightningModule",
    "lightning.pytorch.core.module.LightningModule", "pytorch_lightning.LightningModule",
    "pytorch_lightning.core.LightningModule", "pytorch_lightning.core.module.LightningModule",
})
# Methods a project class inherits from a library base that the analysis models, by name: the
# instance's attribute is the library method, known by qualified name (`Base.method`).
INHERITED_METHODS = {"manual_backward": LIGHTNING_MODULES}
# Library methods that backpropagate their first argument (besides any `.backward(loss)`).
BACKWARD_METHODS = frozenset(f"{base}.manual_backward" for base in LIGHTNING_MODULES)


def inherited_library_method(library_bases: list[str], attr: str) -> ModuleRef | None:
    """`self.manual_backward` in a LightningModule: the library method `attr` of the first base
    that defines it (INHERITED_METHODS), else None."""
    owners = INHERITED_METHODS.get(attr, frozenset())
    base = next((base for base in library_bases if base in owners), None)
    return ModuleRef(f"{base}.{attr}") if base is not None else None


# Packages whose `...Trainer` classes follow the transformers Trainer protocol: the training loop
# differentiates what an overridden `compute_loss` returns (the loss, or `(loss, outputs)`).
TRAINER_PACKAGES = ("transformers", "trl")


def differentiated_by_framework(library_bases: list[str], method: str) -> bool:
    """Whether a method of a class with these library bases (qualified names, through its
    project bases) returns what the framework differentiates: a LightningModule's
    `training_step`, a transformers (or TRL) Trainer's `compute_loss`."""
    if method == "training_step":
        return any(base in LIGHTNING_MODULES for base in library_bases)
    if method == "compute_loss":
        return any(base.split(".")[0] in TRAINER_PACKAGES and base.rsplit(".", 1)[-1].endswith("Trainer")
                   for base in library_bases)
    return False


def returned_loss(value: Value) -> Value:
    """The loss in what a training method returns: a tensor, the first of a tuple
    (`(loss, outputs)`), the "loss" entry of a dict (Lightning's `{"loss": ..., "log": ...}`)."""
    if isinstance(value, Sequence) and value.items:
        return value.items[0]
    if isinstance(value, Mapping):
        found = value.get("loss")
        return found if found is not None else Unknown("loss")
    return value
