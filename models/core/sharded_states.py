"""Bytes of sharded model states as the frameworks hold them at run time.

Owns: the model-state lines of a rank's ledger (weights, gradients, optimizer states, EMA;
on the GPU and in host memory), the transient buffers ZeRO-3 and FSDP allocate to gather
parameters and reduce gradients (per module, with the framework's prefetch or
live-parameter limit), optimizer states kept in host memory (ZeRO-Offload / CPU Adam), and
the byte quantities the step-time model prices (bytes gathered per module, bytes crossing
PCIe per step). Must not: estimate time, or decide which parameters a rank holds (see
`models/core/memory.py`).

Two framework families gather parameters differently:
- DeepSpeed ZeRO-3 gathers each submodule (a Linear, a norm) when it runs and prefetches the
  next ones up to a bucket of parameters, never holding more than `max_live_parameters`
  gathered at once. Source: DeepSpeed configuration reference, `zero_optimization`
  (`stage3_prefetch_bucket_size` 5e7, `stage3_max_live_parameters` 1e9,
  `reduce_bucket_size` 5e8 elements by default); Rajbhandari et al. 2021, ZeRO-Infinity,
  arXiv:2104.07857 Sec. 6 (the working memory of one operator, not of the whole model).
- PyTorch FSDP gathers one wrapped unit (a transformer block in every published recipe) and
  prefetches the next: with `limit_all_gathers` at most two units are unsharded at once.
  Source: Zhao et al. 2023, PyTorch FSDP, arXiv:2304.11277 Sec. 3.2-3.4 (units, backward
  prefetch, rate limiter of two in-flight all-gathers). Without resharding after forward
  (Llama 3, arXiv:2407.21783 Sec. 3.3.2) the units stay unsharded from their forward to
  the end of the step, so the whole stage's parameters are resident.
"""

import math
from dataclasses import dataclass

from api_schemas.parallel import ParallelConfig
from api_schemas.training import EmaPlacement, TrainingSpec
from models.core.ledger_items import MemoryComponent, RankParameters
from models.core.precision import (
    StateBytesPerParam,
    sharded_state_bytes,
    state_bytes_per_param,
)

DEEPSPEED_PREFETCH_BUCKET_PARAMS = 50_000_000
"""`stage3_prefetch_bucket_size` default (elements): parameters prefetched ahead of use.
Source: DeepSpeed configuration reference, zero_optimization."""

DEEPSPEED_MAX_LIVE_PARAMS = 1_000_000_000
"""`stage3_max_live_parameters` default: gathered parameters held at once (a single module
larger than this is still gathered whole). Source: DeepSpeed configuration reference."""

DEEPSPEED_REDUCE_BUCKET_PARAMS = 500_000_000
"""`reduce_bucket_size` default (elements): gradients reduced in one bucket. Source:
DeepSpeed configuration reference, zero_optimization."""

FSDP_UNITS_UNSHARDED = 2
"""Wrapped units unsharded at once under FSDP's rate limiter (the running unit and the
prefetched next one). Source: arXiv:2304.11277 Sec. 3.4 (limit_all_gathers)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GatherBuffers:
    """Transient bytes of ZeRO-3 / FSDP on one rank."""

    gathered_parameters_bytes: int
    """Unsharded parameters held at the peak."""
    unsharded_gradient_bytes: int
    """Gradients of the running unit (or bucket) before their reduce-scatter."""
    note: str


def zero3_gather_buffers(*, largest_unit_params: int, largest_module_params: int,
                         param_bytes: float, grad_bytes: float, fsdp: bool,
                         reshard_after_forward: bool = True,
                         rank_params: int | None = None) -> GatherBuffers:
    """Gather and gradient buffers of ZeRO-3 (DeepSpeed) or FSDP on one rank.

    Args:
        largest_unit_params: parameters of the largest FSDP unit on the rank (one layer's
            TP shard).
        largest_module_params: parameters of the largest single module (a weight matrix's
            TP shard), DeepSpeed's unit of gathering.
        param_bytes: bytes per gathered parameter (the compute weights' format).
        grad_bytes: bytes per gradient element before the reduce-scatter.
        fsdp: PyTorch FSDP units (True) or DeepSpeed submodules (False).
        reshard_after_forward: FSDP frees a unit after its forward (True) or keeps it to
            the end of the step (False: the resident weights are counted by the caller,
            and no gather buffer is added here).
        rank_params: all parameters of the rank, unsharded: a prefetch never gathers more
            than exists (None: no such bound).

    Source: module docstring (DeepSpeed reference defaults; arXiv:2304.11277 Sec. 3.4).
    Legend: unit = one FSDP-wrapped transformer block; module = one DeepSpeed submodule.
    """
    if fsdp:
        units = 0 if not reshard_after_forward else FSDP_UNITS_UNSHARDED
        return GatherBuffers(
            gathered_parameters_bytes=math.ceil(units * largest_unit_params * param_bytes),
            unsharded_gradient_bytes=math.ceil(largest_unit_params * param_bytes),
            note=(f"{units} FSDP units (layers) unsharded, one unit's gradient before its "
                  "reduce-scatter") if units else
            "FSDP without resharding: one unit's gradient before its reduce-scatter")
    live = min(DEEPSPEED_MAX_LIVE_PARAMS,
               largest_module_params + DEEPSPEED_PREFETCH_BUCKET_PARAMS)
    if rank_params is not None:
        live = min(live, rank_params)
    live = max(live, largest_module_params)
    bucket = min(DEEPSPEED_REDUCE_BUCKET_PARAMS, largest_unit_params)
    return GatherBuffers(
        gathered_parameters_bytes=math.ceil(live * param_bytes),
        unsharded_gradient_bytes=math.ceil(bucket * param_bytes),
        note="largest module plus the prefetch bucket, within max live parameters; one "
             "gradient reduce bucket")


def zero3_gather_bytes_per_module(*, module_params: int, param_bytes: float) -> int:
    """Bytes one rank receives to rebuild a module of `module_params` parameters (all of
    them, its own shard included): the all-gather payload the time model prices, per
    module, per forward and again per backward when the module is resharded.

    Source: ZeRO arXiv:1910.02054 Sec. 7.2.2 (Psi of parameter all-gather per pass).
    """
    return math.ceil(module_params * param_bytes)


@dataclass(frozen=True, slots=True, kw_only=True)
class OptimizerOffloadBytes:
    """Optimizer states moved to host memory, and what crosses PCIe each step."""

    host_bytes: int
    """Master weights and moments held in host memory by one rank."""
    gradients_to_host_bytes_per_step: int
    """Gradient shards copied down for the CPU optimizer each step."""
    parameters_to_gpu_bytes_per_step: int
    """Updated compute weights copied back each step."""


def optimizer_offload_bytes(*, sharded_params: int, optimizer_bytes_per_param: float,
                            grad_bytes: float, param_bytes: float,
                            offload_frac: float) -> OptimizerOffloadBytes:
    """Host bytes and PCIe traffic of a rank that keeps `offload_frac` of its optimizer
    states (master weights and moments of its ZeRO shard) in host memory and updates them
    there with a CPU optimizer.

    Source: Ren et al. 2021, ZeRO-Offload, arXiv:2101.06840 Sec. 4.1 (fp32 states and the
    Adam update on the CPU; fp16 gradients down and fp16 parameters up, 2 M each for M
    parameters); Kimi K2 arXiv:2507.20534 Sec. 2.4.3 (optimizer states offloaded to CPU on
    small clusters).
    Legend: M = sharded_params x offload_frac.
    """
    moved = sharded_params * offload_frac
    return OptimizerOffloadBytes(
        host_bytes=math.ceil(moved * optimizer_bytes_per_param),
        gradients_to_host_bytes_per_step=math.ceil(moved * grad_bytes),
        parameters_to_gpu_bytes_per_step=math.ceil(moved * param_bytes))


def cpu_optimizer_gradient_bytes(*, moved_params: float, zero_stage: int,
                                 per_param: StateBytesPerParam) -> int:
    """Host bytes of the gradients a CPU optimizer steps on, for the offloaded parameters of
    the rank's shard, held in host memory for the whole step (beside the GPU's own gradient
    lines, which stay as the ZeRO stage has them).

    Source: the CPU optimizer's own parameters are the fp32 master copies, each with a host
    gradient of its dtype: Megatron Core 0.16.1
    `megatron/core/optimizer/cpu_offloading/hybrid_optimizer.py` (the offloaded parameters'
    CPU copies get pinned host `.grad` tensors, `cpu_copy_map_grad`, kept across steps) and
    DeepSpeed 0.19.8 `deepspeed/runtime/zero/stage_1_and_2.py` (`initialize_optimizer_states`:
    the fp32 partition's `.grad` on the offload device). DeepSpeed's ZeRO-3 keeps in host
    memory, besides those fp32 gradients (`stage3.py` `initialize_optimizer_states`, one per
    optimizer sub-group), the gradient partitions themselves in the accumulation dtype
    (`grad_partitions_flat_buffer` on `self.device`, the CPU when the optimizer is
    offloaded).
    Legend: M = moved_params (sharded parameters x offload share), c = master bytes (the
    gradient bytes without a master copy), g = gradient (accumulation) bytes; bytes = M c at
    ZeRO stages 0-2, M (c + g) at stage 3.
    Deviation: at ZeRO-3 the DeepSpeed partitions live in host memory only, yet the GPU's
    gradient shard is still booked (conservative there); Megatron's FSDP with the CPU
    optimizer keeps that shard on the GPU and holds no accumulation-dtype copy on the host
    (conservative there).
    """
    master = per_param.master or per_param.gradients
    if zero_stage == 3:
        return math.ceil(moved_params * (master + per_param.gradients))
    return math.ceil(moved_params * master)


def offload_grad_buffers_on(training: TrainingSpec, parallel: ParallelConfig) -> bool:
    """Whether a rank accumulates gradients through per-parameter host buffers
    (`TrainingSpec.offload_grad_buffers` at ZeRO 1-2 with optimizer states offloaded)."""
    return (bool(training.offload_grad_buffers) and parallel.zero_stage in (1, 2)
            and parallel.optimizer_offload_frac > 0)


def offload_grad_buffer_bytes(partition_params: float, training: TrainingSpec) -> int:
    """Host bytes of DeepSpeed's per-parameter gradient buffers under ZeRO-Offload at stages
    1-2: one buffer of each partition parameter's size in the parameter dtype
    (`TrainingSpec.offload_grad_buffers`).

    Source: DeepSpeed 0.19.8 `deepspeed/runtime/zero/stage_1_and_2.py`
    `async_accumulate_grad_in_cpu_via_gpu` (`accumulated_grads_in_cpu[param_id]`, zeros of
    `param.numel()` in `param.dtype` on the offload device), reached from
    `copy_grads_in_partition` whenever the step has more than one micro-batch.
    Legend: P = partition_params, w = parameter bytes; bytes = P w.
    Deviation: a parameter cut by the partition boundary gets a buffer of its whole size; the
    partition's share is counted. Booked whatever the micro-batch count (a single micro-batch
    allocates none).
    """
    return math.ceil(partition_params * training.param_dtype.num_bytes)


def deferred_grad_sync_bytes(num_params: int, grad_bytes_per_param: float) -> int:
    """Unsharded gradients FSDP holds when it defers the reduce-scatter to the step's last
    backward: every parameter of the rank's units, in the gradient (reduce) dtype.

    Source: PyTorch `torch.distributed.pipelining` `PipelineStage.backward_maybe_with_nosync`
    (an FSDP2 stage runs each backward with `set_requires_gradient_sync(False)` and calls the
    units' post-backward, which reduce-scatters, only after the last one); FSDP2
    `FSDPParam.to_accumulated_grad_if_needed` keeps the unsharded gradient in `reduce_dtype`
    (fp32 in torchtitan's default `mixed_precision_reduce`) while sync is off. Checked
    against torchtitan's Llama 3.1 405B PP8 peaks (benchmarks/llama3_h100_202412, Tables 5
    and 6; `research/validate_memory.py`).
    Legend: N=num_params, g=gradient bytes per parameter; bytes = N g.
    """
    return math.ceil(num_params * grad_bytes_per_param)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Part:
    """One parameter group of a rank: its label, size, state bytes and shard degree."""

    label: str
    count: int
    per_param: StateBytesPerParam
    shard: int


def _add_part(gpu: list[MemoryComponent], host: list[MemoryComponent],
              parallel: ParallelConfig, part: _Part) -> None:
    """The weights, gradients and optimizer states of one parameter group, GPU and host."""
    label, count, per_param, shard = part.label, part.count, part.per_param, part.shard
    zero = parallel.zero_stage
    resident = zero == 3 and parallel.fsdp and not parallel.fsdp_reshard_after_forward
    deferred = zero == 3 and parallel.fsdp and parallel.fsdp_defer_grad_sync
    offload = parallel.optimizer_offload_frac
    states = sharded_state_bytes(count, per_param, zero_stage=zero, shard_degree=shard)
    weights, note = states.weights_bytes, f"{count} params"
    if zero == 3:
        note += f"; /{shard} under ZeRO-3"
    if resident:
        weights += math.ceil(count * (per_param.weights + per_param.fp8_copy))
        note += "; plus the unsharded copy kept from forward to the end of the step"
    gpu.append(MemoryComponent(name=f"weights: {label}", kind="parameters",
                               bytes=weights, note=note))
    if deferred:
        gpu.append(MemoryComponent(
            name=f"unsharded gradient accumulators: {label}", kind="gradients",
            bytes=deferred_grad_sync_bytes(count, per_param.gradients),
            note="FSDP gradient sync deferred to the last backward (torch pipelining)"))
    if parallel.gradient_host_shards:
        host.append(MemoryComponent(name=f"gradient shards: {label}", kind="gradients",
                                    bytes=math.ceil(count * per_param.gradients / shard),
                                    note="Pipeline ZeRO-2: sharded gradients in host memory"))
    else:
        gpu.append(MemoryComponent(name=f"gradients: {label}", kind="gradients",
                                   bytes=states.gradients_bytes))
    sharded = count / shard if zero else count
    if offload:
        host.append(MemoryComponent(
            name=f"gradients for the CPU optimizer: {label}", kind="gradients",
            bytes=cpu_optimizer_gradient_bytes(moved_params=math.ceil(sharded) * offload,
                                               zero_stage=zero, per_param=per_param),
            note=(f"{offload:.0%} of the shard: a copy in the accumulation dtype and one in "
                  "the master dtype" if zero == 3 else
                  f"{offload:.0%} of the shard, in the master dtype")))
    moved = optimizer_offload_bytes(
        sharded_params=math.ceil(sharded), optimizer_bytes_per_param=per_param.optimizer,
        grad_bytes=per_param.gradients, param_bytes=per_param.weights,
        offload_frac=offload)
    on_gpu = max(0, states.optimizer_bytes - moved.host_bytes)
    gpu.append(MemoryComponent(name=f"optimizer: {label}", kind="optimizer",
                               bytes=on_gpu,
                               note=f"master + moments, /{shard}" if zero else
                               "master + moments, replicated"))
    if moved.host_bytes:
        host.append(MemoryComponent(name=f"optimizer in host memory: {label}",
                                    kind="optimizer", bytes=moved.host_bytes,
                                    note=f"{offload:.0%} of master + moments, CPU update"))


def model_state_components(training: TrainingSpec, parallel: ParallelConfig,
                            groups: RankParameters, edp: int,
                            max_chunk_params: int) -> tuple[list[MemoryComponent],
                                                            list[MemoryComponent]]:
    """Weights, gradients and optimizer states of one rank, GPU and host.

    FSDP without resharding after forward keeps every unit's parameters unsharded for the
    whole step beside the local shard (Llama 3, arXiv:2407.21783 Sec. 3.3.2); an optimizer
    offload share moves master weights and moments to host memory (ZeRO-Offload,
    arXiv:2101.06840 Sec. 4.1; `models/sharded_states`)."""
    dense_shard = parallel.dp * parallel.cp
    gemm_bytes = state_bytes_per_param(training, is_gemm_weight=True, is_matrix=True)
    plain_bytes = state_bytes_per_param(training, is_gemm_weight=False, is_matrix=False)
    parts = [
        ("dense GEMM weights", groups.gemm, gemm_bytes, dense_shard),
        ("norms, biases, router", groups.vectors, plain_bytes, dense_shard),
        ("embedding", groups.embedding, plain_bytes, dense_shard),
        ("output head", groups.head, plain_bytes, dense_shard),
        ("routed experts", groups.experts, gemm_bytes, edp),
    ]
    gpu: list[MemoryComponent] = []
    host: list[MemoryComponent] = []
    for label, count, per_param, shard in parts:
        if count:
            _add_part(gpu, host, parallel, _Part(label=label, count=count,
                                                 per_param=per_param, shard=shard))
    if training.bf16_hp_grad_update:
        gpu.append(bf16_optimizer_grads(training, sum(count for _, count, _, _ in parts)))
    if offload_grad_buffers_on(training, parallel):
        sharded = sum(count / shard for _, count, _, shard in parts)
        host.append(MemoryComponent(
            name="per-parameter gradient buffers", kind="gradients",
            bytes=offload_grad_buffer_bytes(sharded * parallel.optimizer_offload_frac,
                                            training),
            note="ZeRO-Offload: each partition parameter's gradient between micro-batches"))
    if parallel.gradient_host_shards:
        gpu.append(MemoryComponent(
            name="gradient buffers (2 chunks)", kind="gradients",
            bytes=math.ceil(2 * max_chunk_params * training.grad_dtype.num_bytes),
            note="Pipeline ZeRO-2 (Kimi K3): one chunk reducing, one accumulating"))
    return gpu, host


def bf16_optimizer_grads(training: TrainingSpec, num_params: int) -> MemoryComponent:
    """The 16-bit `.grad` of each of a rank's `num_params` parameters that DeepSpeed's
    BF16_Optimizer keeps beside its fp32 gradient buffer (`TrainingSpec.bf16_hp_grad_update`;
    the fp32 buffer is the rank's `gradients` lines). Source: deepspeedai/DeepSpeed 0.19.8
    deepspeed/runtime/bf16_optimizer.py: `_setup_for_real_optimizer` allocates the fp32
    buffer over all the rank's parameters, `_update_hp_grad` adds each `.grad` into it after
    a backward, and `clear_lp_grads` (set_to_none=False, from `backward_prologue`) zeroes
    the `.grad` tensors in place, so both stay allocated from the first micro-batch on.
    Legend: N = parameters on the rank, b = `param_dtype` bytes; bytes = N b."""
    return MemoryComponent(
        name="bf16 gradients beside the fp32 accumulation", kind="gradients",
        bytes=math.ceil(num_params * training.param_dtype.num_bytes),
        note="DeepSpeed BF16_Optimizer: each parameter's .grad stays allocated beside its "
             "fp32 gradient")


def ema_components(training: TrainingSpec, parallel: ParallelConfig,
                    total_params: int) -> tuple[list[MemoryComponent], list[MemoryComponent]]:
    """An fp32 parameter EMA on the GPU or in host memory (DeepSeek-V3 Sec. 3.2.3 keeps it
    in host memory), sharded like the optimizer states under ZeRO."""
    if training.ema == EmaPlacement.NONE:
        return [], []
    shard = parallel.dp * parallel.cp if parallel.zero_stage >= 1 else 1
    line = MemoryComponent(name="parameter EMA", kind="optimizer",
                           bytes=math.ceil(total_params * 4 / shard), note="fp32 copy")
    return ([line], []) if training.ema == EmaPlacement.GPU else ([], [line])


__all__ = [
    "deferred_grad_sync_bytes",
    "DEEPSPEED_MAX_LIVE_PARAMS",
    "DEEPSPEED_PREFETCH_BUCKET_PARAMS",
    "DEEPSPEED_REDUCE_BUCKET_PARAMS",
    "FSDP_UNITS_UNSHARDED",
    "GatherBuffers",
    "OptimizerOffloadBytes",
    "bf16_optimizer_grads",
    "cpu_optimizer_gradient_bytes",
    "ema_components",
    "offload_grad_buffer_bytes",
    "offload_grad_buffers_on",
    "model_state_components",
    "optimizer_offload_bytes",
    "zero3_gather_buffers",
    "zero3_gather_bytes_per_module",
]
