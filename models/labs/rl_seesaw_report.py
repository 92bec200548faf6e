"""POST /v1/lab/rl-seesaw: the phases of one colocated RL iteration on the GPU the training
ledger binds, from a training configuration and a rollout.

Owns: turning an `RlSeesawRequest` into an `RlSeesawResponse`: the training phase is the
binding stage of `models.core.memory.memory_ledger`; the reference forward, the weight update
and the rollout are built from it with `models.labs.rl_seesaw`; the transitions are timed on the
cluster's host link, scale-up and scale-out bandwidths and HBM (`models/data/hardware.json`
through `models.catalog.resolve`). Must not: search, do I/O, or size a training byte itself.

Iteration order ([K2], [K3]): rollout -> (release KV and inference weights, reload
training states) -> reference forward -> train -> (offload training states, checkpoint
engine update) -> rollout.
"""

import math
from dataclasses import dataclass

from api_schemas.architecture import ModelSpec
from api_schemas.hardware import ClusterSpec
from api_schemas.plan import MemoryComponentReport
from api_schemas.rl_seesaw import (
    CheckpointEngineReport,
    KvCacheReport,
    OffloadTier,
    ReferenceModelReport,
    RlSeesawRequest,
    RlSeesawResponse,
    RolloutSpec,
    SeesawPhaseReport,
    SeesawTransitionReport,
)
from api_schemas.units import GIB
from models.catalog.resolve import resolve_cluster, resolve_model
from models.core.ledger_items import MemoryComponent
from models.core.memory import MemoryLedger, StageMemory, memory_ledger
from models.core.memory_floors import RUNTIME_RESERVE_BYTES
from models.core.mesh import validate_mesh
from models.core.params import count_parameters
from models.errors import InvalidSpecError
from models.labs.rl_seesaw import (
    KvPool,
    ReferenceWeights,
    SeesawPhase,
    SeesawTransition,
    UpdateLinks,
    WeightUpdate,
    checkpoint_engine_update,
    kv_bytes_per_token_per_gpu,
    kv_bytes_per_token_per_layer,
    kv_pool,
    reference_weights,
    state_transfer_s,
)

SOURCE = ("KV bytes per token: DeepSeek-V2 arXiv:2405.04434 Table 1, per-rank heads as vLLM "
          "shards them; colocated engines and the checkpoint engine: Kimi K2 "
          "arXiv:2507.20534 and the MoonshotAI checkpoint-engine README; external write-back "
          "KV pool, NVMe offload, reference weights in the gradient buffers and Pipeline "
          "ZeRO-2's two chunk buffers: Kimi K3 arXiv:2607.24653; training phase: the memory "
          "ledger of POST /v1/ledger/memory")

RESIDENT_NOTE = "CUDA context and communicator buffers the sleeping engine keeps"

ASSUMPTIONS = (
    "The training phase is the training ledger's binding stage; weights, master weights and "
    "moments leave the GPU before the rollout, gradients and activations are dropped.",
    "The idle training process keeps its CUDA context and default communicator buffers "
    "(the ledger's runtime floor) on the GPU during the rollout and the weight update.",
    "Inference weights are split evenly over the tp x pp GPUs of an instance (no replicated "
    "attention); the KV pool is gpu_memory_utilization x capacity less those weights.",
    "A context being decoded keeps all its KV blocks on the GPU; only idle contexts are "
    "parked in the external pool.",
    "The reference forward stores no activations for a backward pass.",
    "The checkpoint engine reads the inference-format weights from host memory; converting "
    "the training weights to that format is not timed.",
)


def _components(items: tuple[MemoryComponent, ...]) -> list[MemoryComponentReport]:
    return [MemoryComponentReport(name=c.name, kind=c.kind, bytes=c.bytes, note=c.note)
            for c in items]


def _phase_report(phase: SeesawPhase, capacity: int) -> SeesawPhaseReport:
    return SeesawPhaseReport(name=phase.name, gpu_bytes=phase.gpu_bytes,
                             host_bytes_per_gpu=phase.host_bytes,
                             fits_gpu=phase.gpu_bytes <= capacity,
                             components=_components(phase.components),
                             host_components=_components(phase.host_components))


def _gbps(bytes_per_s: float) -> str:
    return f"{bytes_per_s / 1e9:.0f} GB/s"


@dataclass(frozen=True, slots=True, kw_only=True)
class _Training:
    """The training ledger's binding stage, split into what a seesaw moves."""

    ledger: MemoryLedger
    stage: StageMemory
    weights: tuple[MemoryComponent, ...]
    gradients: tuple[MemoryComponent, ...]
    state_bytes: int
    resident: MemoryComponent


@dataclass(frozen=True, slots=True, kw_only=True)
class _Seesaw:
    """Everything the phases, transitions and response of one iteration are built from."""

    spec: ModelSpec
    cluster: ClusterSpec
    rollout: RolloutSpec
    training: _Training
    reference: ReferenceWeights
    reference_host: MemoryComponent
    instance: int
    inference_weight_bytes: int
    inference_per_gpu: int
    update: WeightUpdate
    offloaded_host: tuple[MemoryComponent, ...]
    external: int
    per_token_gpu: float
    pool: KvPool
    nvme: float | None


def _validated(request: RlSeesawRequest) -> tuple[ModelSpec, ClusterSpec, int]:
    """The model, the cluster and the inference instance's GPUs, checked."""
    spec = resolve_model(request.model).spec
    cluster = resolve_cluster(request.cluster)
    rollout = request.rollout
    validate_mesh(request.parallel, model=spec, num_nodes=cluster.num_nodes,
                  gpus_per_node=cluster.gpus_per_node, training=request.training)
    instance = rollout.tp * rollout.pp
    if instance > cluster.world_size:
        raise InvalidSpecError(
            f"rollout tp x pp = {instance} exceeds the cluster's {cluster.world_size} GPUs; "
            "use a smaller inference instance", field="rollout.tp")
    return spec, cluster, instance


def _training(request: RlSeesawRequest, spec: ModelSpec, cluster: ClusterSpec) -> _Training:
    ledger = memory_ledger(spec, request.training, request.parallel, cluster)
    stage = next(s for s in ledger.stages if s.stage == ledger.binding_stage)
    weights = tuple(c for c in stage.components if c.kind == "parameters")
    optimizer = tuple(c for c in stage.components if c.kind == "optimizer")
    resident = MemoryComponent(name="training process runtime", kind="other",
                               bytes=min(RUNTIME_RESERVE_BYTES, stage.bytes_of("other")),
                               note=RESIDENT_NOTE)
    return _Training(ledger=ledger, stage=stage, weights=weights,
                     gradients=tuple(c for c in stage.components if c.kind == "gradients"),
                     state_bytes=sum(c.bytes for c in weights + optimizer), resident=resident)


def _reference(request: RlSeesawRequest, training: _Training,
               pcie: float) -> ReferenceWeights:
    """Reference model: resident in host memory, materialised for its forward."""
    return reference_weights(
        weight_bytes=sum(c.bytes for c in training.weights),
        gradient_buffer_bytes=sum(c.bytes for c in training.gradients),
        chunk_slots=request.parallel.gradient_host_shards,
        param_bytes=request.training.param_dtype.num_bytes,
        grad_bytes=request.training.grad_dtype.num_bytes,
        reuse=request.rollout.reuse_gradient_buffer, host_link_bytes_per_s=pcie)


def _update(cluster: ClusterSpec, rollout: RolloutSpec, weight_bytes: int,
            instance: int) -> WeightUpdate:
    """The checkpoint engine's update of the inference weights."""
    return checkpoint_engine_update(
        weight_bytes=weight_bytes, bucket_bytes=rollout.bucket_bytes,
        instance_gpus=instance, num_nodes=cluster.num_nodes,
        gpus_per_node=cluster.gpus_per_node,
        links=UpdateLinks(host_link_bytes_per_s=cluster.pcie_bandwidth_bytes_per_s,
                          intra_node_bytes_per_s=cluster.intra_node.bandwidth_bytes_per_s,
                          inter_node_bytes_per_s=cluster.inter_node.bandwidth_bytes_per_s,
                          hbm_bytes_per_s=cluster.gpu.hbm_bandwidth_bytes_per_s))


def _external_pool_bytes(rollout: RolloutSpec, *, gpus_per_node: int, host_per_gpu: int,
                         kept_in_host: int) -> int:
    """Bytes per GPU of the external KV pool in host memory."""
    if not rollout.external_kv_pool:
        return 0
    if rollout.external_kv_pool_bytes_per_node is not None:
        return rollout.external_kv_pool_bytes_per_node // gpus_per_node
    return max(0, host_per_gpu - kept_in_host)


def _seesaw(request: RlSeesawRequest) -> _Seesaw:
    spec, cluster, instance = _validated(request)
    rollout = request.rollout
    training = _training(request, spec, cluster)
    pcie = cluster.pcie_bandwidth_bytes_per_s
    reference = _reference(request, training, pcie)
    reference_host = MemoryComponent(name="reference model weights", kind="parameters",
                                     bytes=reference.weight_bytes,
                                     note="forward-only model resident in host memory")
    counts = count_parameters(spec)
    inference_weight_bytes = math.ceil((counts.total + counts.mtp_total)
                                       * rollout.weight_dtype.num_bytes)
    inference_per_gpu = math.ceil(inference_weight_bytes / instance)
    # Host memory: training states (host tier) and the external KV pool.
    host_states = (MemoryComponent(name="training states (offloaded)", kind="optimizer",
                                   bytes=training.state_bytes,
                                   note="weights, master weights, moments")
                   if rollout.offload_tier == OffloadTier.HOST else None)
    training_host = training.stage.host_components
    kept_in_host = sum(c.bytes for c in training_host) + reference_host.bytes + (
        host_states.bytes if host_states else 0)
    external = _external_pool_bytes(rollout, gpus_per_node=cluster.gpus_per_node,
                                    host_per_gpu=training.ledger.host_capacity_per_gpu_bytes,
                                    kept_in_host=kept_in_host)
    per_token_gpu = kv_bytes_per_token_per_gpu(spec, rollout.kv_dtype.num_bytes,
                                               tp=rollout.tp, pp=rollout.pp)
    pool = kv_pool(capacity_bytes=training.ledger.capacity_bytes,
                   gpu_memory_utilization=rollout.gpu_memory_utilization,
                   weight_bytes_per_gpu=inference_per_gpu,
                   resident_bytes=training.resident.bytes,
                   bytes_per_token_per_gpu=per_token_gpu,
                   context_length=rollout.context_length, external_pool_bytes_per_gpu=external,
                   host_link_bytes_per_s=pcie)
    return _Seesaw(
        spec=spec, cluster=cluster, rollout=rollout, training=training, reference=reference,
        reference_host=reference_host, instance=instance,
        inference_weight_bytes=inference_weight_bytes, inference_per_gpu=inference_per_gpu,
        update=_update(cluster, rollout, inference_weight_bytes, instance),
        offloaded_host=((host_states,) if host_states else ()) + training_host + (
            reference_host,),
        external=external, per_token_gpu=per_token_gpu, pool=pool,
        nvme=(rollout.nvme_bandwidth_bytes_per_s if rollout.offload_tier == OffloadTier.NVME
              else None))


def _reference_forward_components(s: _Seesaw) -> tuple[MemoryComponent, ...]:
    """The training stage without activations, with the reference weights in the gradient
    buffers or beside them."""
    stage, grads, reference = s.training.stage, s.training.gradients, s.reference
    kept = tuple(c for c in stage.components if c.kind not in ("activations", "gradients"))
    held = (tuple(MemoryComponent(name=c.name + " (holding reference weights)",
                                  kind=c.kind, bytes=c.bytes, note=c.note)
                  for c in grads) if reference.extra_gpu_bytes == 0 else grads)
    extra = ((MemoryComponent(name="reference model weights", kind="parameters",
                              bytes=reference.extra_gpu_bytes,
                              note=f"materialised per {reference.slot}"),)
             if reference.extra_gpu_bytes else ())
    return kept + held + extra


def _phases(s: _Seesaw) -> tuple[SeesawPhase, ...]:
    rollout, update, training = s.rollout, s.update, s.training
    training_host = training.stage.host_components
    inference_weights = MemoryComponent(
        name="inference weights", kind="parameters", bytes=s.inference_per_gpu,
        note=f"{rollout.weight_dtype.value}, 1/{s.instance} of the model per GPU")
    rollout_host = s.offloaded_host + ((MemoryComponent(
        name="external KV pool (write-back)", kind="other", bytes=s.external,
        note="idle prefixes written on eviction, prefetched before reuse"),)
        if s.external else ())
    buckets_on_gpu = min(2 if rollout.pipelined_update else 1, update.num_buckets)
    return (
        SeesawPhase(name="rollout", components=(
            training.resident, inference_weights,
            MemoryComponent(name="KV-cache pool", kind="activations",
                            bytes=s.pool.gpu_pool_bytes,
                            note=f"{s.pool.gpu_pool_tokens} tokens per instance at "
                                 f"{s.per_token_gpu:.0f} bytes per token per GPU")),
            host_components=rollout_host),
        SeesawPhase(name="reference_forward", components=_reference_forward_components(s),
                    host_components=training_host + (s.reference_host,)),
        SeesawPhase(name="train", components=training.stage.components,
                    host_components=training_host + (s.reference_host,)),
        SeesawPhase(name="weight_sync", components=(
            training.resident, inference_weights,
            MemoryComponent(name="checkpoint-engine buckets", kind="other",
                            bytes=buckets_on_gpu * math.ceil(
                                s.inference_weight_bytes / update.num_buckets),
                            note="broadcast into a buffer shared with the inference engine")),
            host_components=s.offloaded_host + (MemoryComponent(
                name="checkpoint-engine weights", kind="parameters",
                bytes=math.ceil(s.inference_weight_bytes / s.cluster.world_size),
                note="this worker's share of the inference weights, read by the H2D stage"),)),
    )


def _transitions(s: _Seesaw) -> tuple[SeesawTransition, ...]:
    pcie, nvme, update = s.cluster.pcie_bandwidth_bytes_per_s, s.nvme, s.update
    per_node, state_bytes = s.cluster.gpus_per_node, s.training.state_bytes
    tier = ("host DRAM" if nvme is None else "NVMe through host DRAM")
    move_s = state_transfer_s(bytes_per_gpu=state_bytes, gpus_per_node=per_node,
                              host_link_bytes_per_s=pcie, nvme_bytes_per_s_per_node=nvme)
    link = f"host link {_gbps(pcie)}" + (
        f", node NVMe {_gbps(nvme)} shared by {per_node} GPUs" if nvme is not None else "")
    pipelined = s.rollout.pipelined_update
    return (
        SeesawTransition(name=f"reload training states from {tier}", before="rollout",
                         after="reference_forward", bytes_per_gpu=state_bytes, seconds=move_s,
                         link=link),
        SeesawTransition(name="materialise reference weights", before="rollout",
                         after="reference_forward", bytes_per_gpu=s.reference.weight_bytes,
                         seconds=s.reference.h2d_s, link=f"host link {_gbps(pcie)}"),
        SeesawTransition(name=f"offload training states to {tier}", before="train",
                         after="weight_sync", bytes_per_gpu=state_bytes, seconds=move_s,
                         link=link),
        SeesawTransition(name="checkpoint-engine weight update", before="weight_sync",
                         after="rollout", bytes_per_gpu=update.received_bytes_per_gpu,
                         seconds=update.pipelined_s if pipelined else update.serial_s,
                         link=(f"{'pipelined' if pipelined else 'serial'}: "
                               f"H2D {update.h2d_s:.1f} s, broadcast {update.broadcast_s:.1f} s, "
                               f"reload {update.reload_s:.2f} s")),
    )


def _assumptions(s: _Seesaw) -> list[str]:
    assumptions = list(ASSUMPTIONS)
    if s.rollout.bucket_bytes == 2 * GIB:
        assumptions.append("Checkpoint-engine bucket of 2 GiB (the published benchmark used "
                           "1.42-2.99 GiB).")
    if s.nvme is not None:
        assumptions.append(f"NVMe bandwidth of {_gbps(s.nvme)} per node as given; the "
                           "hardware catalog has no NVMe figure.")
    return assumptions


def _kv_cache_report(s: _Seesaw) -> KvCacheReport:
    pool = s.pool
    return KvCacheReport(
        bytes_per_token_per_layer=kv_bytes_per_token_per_layer(
            s.spec, s.rollout.kv_dtype.num_bytes),
        bytes_per_token_per_gpu=s.per_token_gpu, gpu_pool_bytes=pool.gpu_pool_bytes,
        gpu_pool_tokens=pool.gpu_pool_tokens, active_contexts=pool.active_contexts,
        external_pool_bytes_per_gpu=pool.external_pool_bytes_per_gpu,
        parked_contexts=pool.parked_contexts, prefetch_s=pool.prefetch_s,
        write_back_bytes_per_gpu=pool.write_back_bytes_per_gpu,
        write_through_bytes_per_gpu=pool.write_through_bytes_per_gpu)


def _engine_report(update: WeightUpdate) -> CheckpointEngineReport:
    return CheckpointEngineReport(
        weight_bytes=update.weight_bytes, num_buckets=update.num_buckets,
        h2d_s=update.h2d_s, broadcast_s=update.broadcast_s, reload_s=update.reload_s,
        serial_s=update.serial_s, pipelined_s=update.pipelined_s,
        received_bytes_per_gpu=update.received_bytes_per_gpu,
        needed_bytes_per_gpu=update.needed_bytes_per_gpu)


def _reference_report(reference: ReferenceWeights) -> ReferenceModelReport:
    return ReferenceModelReport(
        weight_bytes=reference.weight_bytes,
        gradient_buffer_bytes=reference.gradient_buffer_bytes, slot=reference.slot,
        fits_in_gradient_buffer=reference.fits_in_gradient_buffer,
        extra_gpu_bytes=reference.extra_gpu_bytes, h2d_s=reference.h2d_s)


def rl_seesaw_report(request: RlSeesawRequest) -> RlSeesawResponse:
    """GPU and host memory by phase and the transition times of one colocated RL iteration
    (a deterministic model, not a measurement).

    Raises:
        InvalidSpecError: unknown presets, a training mesh that breaks a rule, or an
            inference instance larger than the cluster.
    """
    s = _seesaw(request)
    ledger = s.training.ledger
    transitions = _transitions(s)
    capacity, host_per_gpu = ledger.capacity_bytes, ledger.host_capacity_per_gpu_bytes
    phase_reports = [_phase_report(p, capacity) for p in _phases(s)]
    fits = (all(p.fits_gpu for p in phase_reports)
            and all(p.host_bytes_per_gpu <= host_per_gpu for p in phase_reports))
    return RlSeesawResponse(
        capacity_bytes=capacity, host_capacity_per_gpu_bytes=host_per_gpu,
        binding_stage=ledger.binding_stage, phases=phase_reports,
        transitions=[SeesawTransitionReport(name=t.name, before=t.before, after=t.after,
                                            bytes_per_gpu=t.bytes_per_gpu, seconds=t.seconds,
                                            link=t.link) for t in transitions],
        transition_s=sum(t.seconds for t in transitions),
        kv_cache=_kv_cache_report(s), checkpoint_engine=_engine_report(s.update),
        reference=_reference_report(s.reference),
        fits=fits, assumptions=_assumptions(s), source=SOURCE)


__all__ = ["rl_seesaw_report"]
