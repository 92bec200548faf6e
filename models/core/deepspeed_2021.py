"""DeepSpeed ZeRO-3 as its 2021 releases run it (v0.3.14 to v0.4.4, the runtime profile
`TrainingSpec.zero3_collectives: per_parameter`): which tensors it gathers at each use,
which it keeps, how it reduces gradients, the host work its list-form collectives cost, and
why it prefetches nothing (`forward_step_ids`).

Owns: the per-layer parameter tensors as DeepSpeed partitions them, split at its
persistence threshold; the host time of one per-parameter all-gather and of the step's
re-gather of the persistent tensors, both growing with the data-parallel group; the gradient
buckets; the prefetch coordinator's step counter. Must not: say what is exposed
(`models.core.step_time.deepspeed_zero3_2021`) or price a collective on the wire
(`models.core.collectives`).

Source (read at tag v0.3.13, unchanged in these respects to v0.5.4 unless said):
`deepspeed/runtime/zero/partition_parameters.py` (`_allgather_param`, `_allgather_params`),
`deepspeed/runtime/zero/stage3.py` (`persistent_parameters`, `_partition_all_parameters`,
`_post_step`, `reduce_ipg_grads`, `buffered_reduce_fallback`; at v0.3.14 and v0.4.4
`setup_zero_stage3_hooks`, `get_params_to_prefetch`),
`deepspeed/runtime/zero/constants.py`; PyTorch `torch/lib/c10d/ProcessGroupNCCL.cpp`
(`allgather` with a list of outputs: NCCL gathers into one flat buffer, then each of the n
slices is copied into its output tensor, one `copy_` per rank).
"""

import math

from api_schemas import ModelSpec
from models.core.layer_kinds import mlp_kind, norm_kind
from models.core.moe.host_issue import MOE_HOST_LAUNCH_S
from models.core.sharded_states import DEEPSPEED_REDUCE_BUCKET_PARAMS

PERSISTENCE_THRESHOLD = 100_000
"""`stage3_param_persistence_threshold` default (elements): a parameter with fewer elements
is marked persistent (`persistent_parameters`: `ds_numel < persistence_threshold`) and is not
released after its module runs, so it is not gathered per use. Source: DeepSpeed
`deepspeed/runtime/zero/constants.py`, `ZERO_OPTIMIZATION_PARAM_PERSISTENCE_THRESHOLD_DEFAULT`
= 100000 (v0.3.13 to v0.5.x)."""

VIEW_OP_S = 3.3e-6
"""Host time of one eager view op called from Python on a CUDA tensor (`narrow`, `view`):
PyTorch's operator micro-benchmark times `split` (a view op) of a CUDA tensor at 3.33-3.42 us
per call (`split_M8_N8_parts2_cuda` 3.333 us, `split_M512_N512_parts2_cuda` 3.416 us, the
`master` timings of PyTorch pull request #32194, January 2020)."""

COPY_LAUNCH_S = MOE_HOST_LAUNCH_S
"""Host time of one `copy_` launch issued back to back (the NVIDIA blog figure of
`models.core.moe.host_issue.MOE_HOST_LAUNCH_S`, 3.8 us per launch; a lower bound for a PyTorch
`copy_`, which also passes the dispatcher)."""

GATHER_HOST_OPS_PER_RANK = (1, 1)
"""(view ops, copy launches) the host issues per rank of the group for one per-parameter
all-gather: `_allgather_param` narrows the flat output once per rank in a Python loop, and
ProcessGroupNCCL's list-form `allgather` copies each rank's slice out of its flat buffer
(`outputTensors[i][j].copy_(outputFlattened[i][j], true)`)."""

REGATHER_HOST_OPS_PER_RANK = (3, 1)
"""(view ops, copy launches) per rank and per persistent tensor of the synchronous re-gather
after the optimizer step (`_allgather_params`): for every parameter and every rank, Python
runs `partitions[i].narrow(...)`, `replicated_tensor.view(-1).narrow(...)` and `.copy_(...)`;
the single all-gather's own n slice copies are left out."""


def forward_step_ids(modules: int) -> list[int]:
    """The prefetch coordinator's step counter as the sub-module hooks of one forward read it,
    module by module (the root first), from the second step on, in DeepSpeed v0.3.14 to v0.4.4.

    The first step records each module's hook in a trace; `get_params_to_prefetch` prefetches
    only when the module at the counter's step of that trace is the calling module.
    `_register_hooks_recursively` puts the sub-module pre-forward hook on the root module too,
    and `setup_zero_stage3_hooks` then registers the root's `_pre_forward_hook`, which resets the
    counter (added in v0.3.14, commit 7b46d11fa, DeepSpeed PR #867). PyTorch runs a module's
    forward pre-hooks in the order they were registered, so the root's sub-module hook counts a
    step and the reset then takes it back: module k reads step k - 1, one behind the trace, to
    the end of the backward (nothing resets it before the optimizer step, `_pre_step`). So
    every prefetch after the root's returns nothing ("Tracing failed. Prefetching is disabled"),
    and `get_reuse_distance_in_numel` answers 1e12, so `_keep_for_later` keeps nothing: each
    module gathers its own parameters at its hook and waits for them. The diagnosis is the
    DeepSpeed thread "Performance Degradation with ZERO Stage 3"
    (github.com/deepspeedai/DeepSpeed/issues/1069, May 2021: the step id is incremented to 1,
    then reset to zero, and the rest of the forward is off by one, which skips the
    prefetches). v0.3.13 registers no reset hook (the counter is reset only by `_pre_step`),
    so there module k reads step k."""
    steps, step = [], 0
    for module in range(modules):
        steps.append(step)
        step = 0 if module == 0 else step + 1
    return steps


def layer_tensor_numels(spec: ModelSpec, tp: int = 1) -> tuple[int, ...]:
    """Elements of each parameter tensor of one dense transformer layer on a TP rank, as
    DeepSpeed partitions them (one partitioned tensor per `nn.Parameter`): the fused QKV, the
    output projection, the MLP projections (gate and up fused), their biases where the model
    has them, and the two norms' scale (and bias for LayerNorm).
    Legend: h = hidden size, d = head width, q/kv = query and key-value heads, f = FFN width
    (2f fused for a gated MLP)."""
    h, heads = spec.hidden_size, spec.num_attention_heads
    kv = spec.num_kv_heads or heads
    d = spec.head_dim or h // heads
    qkv = (heads + 2 * kv) * d // tp
    up = spec.ffn_hidden_size * mlp_kind(spec).up_matrices // tp
    weights = (h * qkv, h * (heads * d // tp), h * up, h * spec.ffn_hidden_size // tp)
    biases = (qkv, h, up, h) if spec.linear_bias else ()
    norms = (h,) * (2 * norm_kind(spec).params_per_feature)
    return weights + biases + norms


def gathered_tensors(spec: ModelSpec, tp: int = 1) -> int:
    """Tensors of a layer gathered at each use: those at or above `PERSISTENCE_THRESHOLD`."""
    return sum(n >= PERSISTENCE_THRESHOLD for n in layer_tensor_numels(spec, tp))


def persistent_tensors(spec: ModelSpec, tp: int = 1) -> int:
    """Tensors of a layer kept gathered between uses (below `PERSISTENCE_THRESHOLD`)."""
    return sum(n < PERSISTENCE_THRESHOLD for n in layer_tensor_numels(spec, tp))


def _host_s(ops: tuple[int, int]) -> float:
    views, copies = ops
    return views * VIEW_OP_S + copies * COPY_LAUNCH_S


def gather_issue_s(group_size: int) -> float:
    """Host time to issue one per-parameter all-gather over `group_size` ranks
    (`GATHER_HOST_OPS_PER_RANK` per rank). `_allgather_param` calls
    `torch.cuda.synchronize()` before it, so the device has drained when the host starts."""
    return group_size * _host_s(GATHER_HOST_OPS_PER_RANK)


def persistent_regather_s(spec: ModelSpec, *, layers: int, tp: int, group_size: int) -> float:
    """Host time of one step's synchronous re-gather of the persistent tensors of `layers`
    layers over `group_size` ranks. Every backward ends by partitioning all parameters,
    persistent ones included (`backward` -> `_partition_all_parameters` ->
    `release_and_reset_parameter`), and `_post_step` gathers the persistent ones again with
    `all_gather()` (synchronous: `_allgather_params`), copying each out rank by rank
    (`REGATHER_HOST_OPS_PER_RANK`)."""
    tensors = layers * persistent_tensors(spec, tp)
    return tensors * group_size * _host_s(REGATHER_HOST_OPS_PER_RANK)


def gradient_buckets(unit_params: int) -> int:
    """Flat all-reduce buckets of one layer's gradients per micro-batch. With
    `contiguous_gradients` off (`ZERO3_OPTIMIZATION_CONTIGUOUS_GRADIENTS_DEFAULT = False` to
    v0.4.4; True from v0.4.5) `reduce_ipg_grads` reduces the bucket through
    `buffered_reduce_fallback`: flatten, `all_reduce` over the data-parallel group, copy back,
    each time the bucket would pass `reduce_bucket_size` (500,000,000 elements,
    `models.core.sharded_states.DEEPSPEED_REDUCE_BUCKET_PARAMS`)."""
    return max(1, math.ceil(unit_params / DEEPSPEED_REDUCE_BUCKET_PARAMS))


__all__ = [
    "COPY_LAUNCH_S",
    "GATHER_HOST_OPS_PER_RANK",
    "PERSISTENCE_THRESHOLD",
    "REGATHER_HOST_OPS_PER_RANK",
    "VIEW_OP_S",
    "forward_step_ids",
    "gather_issue_s",
    "gathered_tensors",
    "gradient_buckets",
    "layer_tensor_numels",
    "persistent_regather_s",
    "persistent_tensors",
]
