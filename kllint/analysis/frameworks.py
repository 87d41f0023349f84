"""Tables of PyTorch / JAX / NumPy / optax APIs by what they mean to the analysis.

Functions are matched by their qualified name's last component once the module is known to be a
tensor library (`torch`, `torch.nn.functional`, `jax.numpy`, `jax.nn`, `numpy`, ...), and tensor
methods by name.
"""
from __future__ import annotations

TENSOR_LIBRARIES = (
    "torch", "torch.nn.functional", "torch.special", "jax.numpy", "jax.nn", "jax.lax", "jax",
    "numpy", "jax.scipy.special", "torch.linalg", "flax.linen", "optax", "chex", "jnp", "np",
    "mlx.core", "mlx.nn", "mlx.nn.losses",
)

# Elementwise functions that keep the value (shape, dtype, device, layout changes).
IDENTITY = frozenset({
    "float", "double", "half", "bfloat16", "to", "type", "type_as", "contiguous", "view", "view_as",
    "reshape", "reshape_as", "squeeze", "unsqueeze", "flatten", "unflatten", "permute", "transpose", "t",
    "expand", "expand_as", "repeat", "tile", "broadcast_to", "cuda", "cpu", "clone", "copy", "astype",
    "flip", "fliplr", "roll", "narrow", "select", "index_select", "gather", "take_along_axis",
    "take", "masked_fill", "masked_fill_", "nan_to_num", "squeeze_", "unsqueeze_", "asarray",
    "as_tensor", "atleast_1d", "atleast_2d", "expand_dims", "swapaxes", "moveaxis", "ravel",
    "requires_grad_", "float_", "contiguous_", "chunk_", "pin_memory", "block_until_ready", "to_dense",
    "squeeze_dim", "__getitem__", "diagonal", "tril", "triu", "split_", "detach_copy", "pad",
    "dynamic_slice", "dynamic_slice_in_dim", "slice_in_dim",
})
DETACH = frozenset({"detach", "detach_", "stop_gradient"})
# Methods that cut a tensor into pieces (micro-batches): iterating or unpacking gives parts of it.
PIECES = frozenset({"chunk", "split", "tensor_split", "unbind", "array_split"})
# Calls that return their function argument compiled or wrapped: calling the result runs it.
# (JAX's `jax.jit(f)` keeps its own handling: its result is also what `jax.grad` and `scan` are given.)
FUNCTION_WRAPPERS = frozenset({"torch.compile", "torch.jit.script"})
# Bases of custom autograd operations: `Cls.apply(*args)` runs the static `Cls.forward(ctx, *args)`.
AUTOGRAD_FUNCTIONS = frozenset({"torch.autograd.Function", "torch.autograd.function.Function",
                                "torch.autograd.function.InplaceFunction"})
# Calls that move or regroup values without changing them: remote fetches, device transfers,
# flattening of lists (their result holds the argument's values).
TRANSFER = frozenset({"ray.get", "ray.put", "jax.device_put", "jax.device_get", "itertools.chain",
                      "itertools.chain.from_iterable", "copy.copy", "copy.deepcopy"})
CONSUME = frozenset({"item", "tolist", "numpy", "__float__", "__int__", "size", "dim", "numel", "shape", "device_get"})
REDUCTIONS = frozenset({"sum", "mean", "nansum", "nanmean", "average"})
OPAQUE_REDUCTIONS = frozenset({"max", "min", "amax", "amin", "std", "var", "norm", "logsumexp", "median", "prod", "argmax", "argmin", "all", "any"})
CUMULATIVE = frozenset({"cumsum", "cumulative_sum", "flip_cumsum", "cumprod"})
CLAMPS = frozenset({"clamp", "clip", "clamp_", "clip_", "clamp_min", "clamp_max"})
PAIRWISE_CLAMPS = frozenset({"minimum", "maximum", "fmin", "fmax"})
CONSTANT_LIKE = frozenset({"ones_like", "zeros_like", "full_like", "empty_like", "rand_like", "randn_like", "randint_like"})
CREATION = frozenset({"ones", "zeros", "full", "empty", "rand", "randn", "randint", "arange", "tensor", "array", "linspace", "eye", "normal", "uniform", "bernoulli", "multinomial", "categorical", "PRNGKey", "key", "split"})
BUFFERS = frozenset({"zeros", "ones", "empty", "full"})
EXP = frozenset({"exp", "exp_"})
LOG = frozenset({"log", "log_"})
NEGATIVE_LOGPROB_LOSSES = frozenset({"cross_entropy", "nll_loss"})
PER_EXAMPLE_NEGATIVE_LOGPROB_LOSSES = frozenset({"softmax_cross_entropy_with_integer_labels"})
PROB_MAPS = frozenset({"softmax", "sigmoid"})
LOGPROB_MAPS = frozenset({"log_softmax", "logsigmoid", "log_sigmoid"})
MULTI_ARG_ARITH = {"add": "+", "sub": "-", "subtract": "-", "mul": "*", "multiply": "*", "div": "/", "divide": "/", "true_divide": "/", "add_": "+", "sub_": "-", "mul_": "*", "div_": "/"}
NO_GRAD_CONTEXTS = frozenset({"torch.no_grad", "torch.inference_mode", "torch.autograd.no_grad", "torch.autograd.grad_mode.no_grad", "torch.autograd.inference_mode"})
GRAD_TRANSFORMS = frozenset({"jax.grad", "jax.value_and_grad", "flax.nnx.grad", "flax.nnx.value_and_grad", "nnx.grad", "nnx.value_and_grad", "equinox.filter_grad", "equinox.filter_value_and_grad", "eqx.filter_grad", "eqx.filter_value_and_grad",
                             "mlx.core.grad", "mlx.core.value_and_grad", "mlx.nn.value_and_grad"})
# transforms whose differentiated function is the second argument (`mlx.nn.value_and_grad(model, fn)`)
GRAD_TRANSFORMS_OF_MODEL = frozenset({"mlx.nn.value_and_grad"})
KL_DIV_FUNCTIONS = frozenset({"torch.nn.functional.kl_div", "torch.kl_div"})
KL_DIV_MODULES = frozenset({"torch.nn.KLDivLoss", "torch.nn.modules.loss.KLDivLoss"})
OPTAX_KL = frozenset({"optax.kl_divergence", "optax.losses.kl_divergence", "optax.convex_kl_divergence", "optax.losses.convex_kl_divergence", "optax.kl_divergence_with_log_targets", "optax.losses.kl_divergence_with_log_targets"})

# Project helpers we may not be able to read: names that reveal their meaning.
REDUCTION_HELPER_TOKENS = frozenset({"masked_mean", "masked_sum", "agg_loss", "aggregate", "reduce", "token_mean", "seq_mean", "average", "mean", "sum", "masked_average", "agg"})
# Functions the analysis cannot read whose name says they only move elements (pad, unpad, gather
# across ranks, index, reshape): the value of the one tensor argument that carries a role passes.
SHAPE_HELPER_TOKENS = frozenset({"pad", "unpad", "gather", "gathered", "index", "rearrange", "reshape", "slice", "split",
                                 "scatter", "concat", "chunk", "repeat", "view", "squeeze", "unsqueeze",
                                 "flatten", "unflatten", "permute", "transpose", "roll", "shift", "truncate", "crop",
                                 "broadcast", "allgather", "all_gather", "rmpad", "unshard", "shard", "align"})
RTG_HELPER_TOKENS = frozenset({"returns", "gae", "advantage", "advantages", "discount", "discounted", "reward_to_go", "cumsum"})


def is_tensor_library(qualname: str) -> bool:
    head = qualname.rpartition(".")[0]
    return head in TENSOR_LIBRARIES or qualname.split(".")[0] in ("torch", "jax", "numpy", "optax", "flax", "mlx")
