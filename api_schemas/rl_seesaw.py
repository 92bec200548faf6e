"""Request and response of POST /v1/lab/rl-seesaw: GPU and host memory by phase of a
colocated reinforcement-learning iteration (training and rollout on the same GPUs) and the
time of each transition between them.

Owns: the shapes only. Must not: size or time anything (`models.labs.rl_seesaw` and
`models.labs.rl_seesaw_report` do).
"""

from enum import StrEnum
from typing import Any, Self

from pydantic import ConfigDict, Field, model_validator

from api_schemas._base import ResultModel, SpecModel
from api_schemas.dtypes import DType
from api_schemas.parallel import ParallelConfig
from api_schemas.plan import MemoryComponentReport
from api_schemas.requests import ClusterField, ModelField, TrainingField
from api_schemas.units import Bytes, Fraction, PositiveBytes, PositiveBytesPerSecond, PositiveInt

VLLM_GPU_MEMORY_UTILIZATION = 0.9
"""vLLM's default `gpu_memory_utilization` (`vllm/engine/arg_utils.py`, EngineArgs): the
share of a GPU's memory the engine may take for weights, activations and the KV cache."""

DEFAULT_BUCKET_BYTES = 2 * 2**30
"""Assumed transfer bucket of the checkpoint engine. Its published benchmark (MoonshotAI
checkpoint-engine README, v0.1.3) chose buckets between 1.42 and 2.99 GiB from the free
memory; 2 GiB is a round value inside that range, not a figure the source gives."""


class OffloadTier(StrEnum):
    """Where training states wait while the rollout runs."""

    HOST = "host"
    NVME = "nvme"


class RolloutSpec(SpecModel):
    """The inference side of a colocated RL iteration."""

    tp: PositiveInt = Field(default=8, description="Tensor-parallel degree of one inference "
                            "instance.", examples=[8])
    pp: PositiveInt = Field(default=1, description="Pipeline stages of one inference "
                            "instance.", examples=[1])
    weight_dtype: DType = Field(default=DType.BF16, description="Format of the inference "
                                "weights (fp8 for a block-FP8 release such as Kimi K2).",
                                examples=["fp8"])
    kv_dtype: DType = Field(default=DType.BF16, description="Format of the KV cache.",
                            examples=["bf16"])
    gpu_memory_utilization: Fraction = Field(
        default=VLLM_GPU_MEMORY_UTILIZATION,
        description="Share of the GPU the inference engine may use for weights and KV cache "
        "(vLLM's default 0.9); the rest stays free for its activations and the runtime.")
    context_length: PositiveInt = Field(default=1_048_576, description="Tokens of one "
                                        "rollout context (prompt plus generation).",
                                        examples=[1_048_576])
    offload_tier: OffloadTier = Field(
        default=OffloadTier.HOST, description="Where training states go before the rollout: "
        "'host' (CPU DRAM) or 'nvme' (K3: frees host DRAM for the external KV pool).")
    nvme_bandwidth_bytes_per_s: PositiveBytesPerSecond | None = Field(
        default=None, description="Sequential NVMe bandwidth of one node (all its drives), "
        "bytes/s; required with offload_tier='nvme' (the hardware catalog has no figure).",
        examples=[2.0e10])
    external_kv_pool: bool = Field(
        default=False, description="A write-back KV pool in host DRAM (K3): idle prefixes "
        "are written to host memory only when evicted from the GPU and prefetched before "
        "reuse.")
    external_kv_pool_bytes_per_node: PositiveBytes | None = Field(
        default=None, description="Host DRAM given to the external KV pool per node "
        "(default: the node's host memory less the training states kept there).")
    bucket_bytes: PositiveBytes = Field(
        default=DEFAULT_BUCKET_BYTES, description="Checkpoint-engine transfer bucket "
        "(assumed 2 GiB; the published benchmark used 1.42-2.99 GiB).")
    pipelined_update: bool = Field(
        default=False, description="Overlap the checkpoint engine's host-to-device copy, "
        "broadcast and reload across buckets (the K2 report's pipeline; the released engine "
        "runs them one after another).")
    reuse_gradient_buffer: bool = Field(
        default=True, description="Materialise the reference model's weights into the "
        "policy's gradient buffers (K3) instead of a separate GPU copy.")

    @model_validator(mode="after")
    def _nvme_needs_bandwidth(self) -> Self:
        if self.offload_tier == OffloadTier.NVME and self.nvme_bandwidth_bytes_per_s is None:
            raise ValueError("offload_tier='nvme' needs nvme_bandwidth_bytes_per_s (one "
                             "node's drives together, bytes/s, e.g. 2e10)")
        return self


RL_SEESAW_EXAMPLE: dict[str, Any] = {
    "model": {"preset": "kimi-k2-instruct"},
    "cluster": {"gpu": "h800-sxm5-80gb", "num_nodes": 32, "gpus_per_node": 8},
    "training": {"global_batch_size": 256, "sequence_length": 4096, "param_dtype": "bf16",
                 "grad_dtype": "fp32", "optimizer": "muon"},
    "parallel": {"tp": 1, "pp": 16, "dp": 16, "cp": 1, "ep": 16, "etp": 1, "vpp": 2,
                 "micro_batch_size": 1, "schedule": "interleaved_1f1b", "zero_stage": 1,
                 "recompute": "full", "gradient_host_shards": True},
    "rollout": {"tp": 16, "pp": 1, "weight_dtype": "fp8", "context_length": 131072},
}
"""Kimi K2 on 256 H800s (the K2 report's training layout and optimizer: PP16 with virtual
stages, EP16, ZeRO-1, Muon; here with K3's Pipeline ZeRO-2 gradient shards in host memory)
with FP8 rollouts on 16-GPU instances."""


class RlSeesawRequest(SpecModel):
    """The training configuration (as for POST /v1/ledger/memory) plus the rollout."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False,
                              json_schema_extra={"examples": [RL_SEESAW_EXAMPLE]})

    model: ModelField
    cluster: ClusterField
    training: TrainingField
    parallel: ParallelConfig = Field(description="The training configuration.")
    rollout: RolloutSpec = Field(default_factory=RolloutSpec,
                                 description="The inference side on the same GPUs.")


class SeesawPhaseReport(ResultModel):
    """Memory of one GPU (the training binding stage) during one phase."""

    name: str = Field(description="rollout | weight_sync | reference_forward | train")
    gpu_bytes: Bytes = Field(description="All GPU bytes of the phase.")
    host_bytes_per_gpu: Bytes = Field(description="Host DRAM this GPU's share uses.")
    fits_gpu: bool = Field(description="gpu_bytes within the usable capacity.")
    components: list[MemoryComponentReport] = Field(description="GPU bytes, itemised.")
    host_components: list[MemoryComponentReport] = Field(
        description="Host bytes of this GPU's share, itemised.")


class SeesawTransitionReport(ResultModel):
    """Bytes one GPU moves between two phases and the time it takes."""

    name: str = Field(description="What moves.")
    before: str = Field(description="Phase it leaves.")
    after: str = Field(description="Phase it enters.")
    bytes_per_gpu: Bytes = Field(description="Bytes this GPU sends or receives.")
    seconds: float = Field(ge=0.0, description="Time of the transition.")
    link: str = Field(description="The link that bounds it and its bandwidth.")


class KvCacheReport(ResultModel):
    """The KV cache the rollout gets."""

    bytes_per_token_per_layer: float = Field(description="KV bytes of one token in one "
                                             "layer, unsharded (MLA: latent plus RoPE key).")
    bytes_per_token_per_gpu: float = Field(description="KV bytes of one token on one GPU "
                                           "of an instance (its layers and KV heads).")
    gpu_pool_bytes: Bytes = Field(description="KV-cache pool per GPU during the rollout.")
    gpu_pool_tokens: int = Field(description="Tokens the GPU pool holds per instance.")
    active_contexts: int = Field(description="Whole contexts of context_length that decode "
                                 "at once from the GPU pool (0: one context does not fit).")
    external_pool_bytes_per_gpu: Bytes = Field(description="Host DRAM of the write-back "
                                               "pool per GPU (0 without one).")
    parked_contexts: int = Field(description="Idle contexts the external pool holds.")
    prefetch_s: float = Field(ge=0.0, description="Time to bring one whole context's KV "
                              "back from host memory over the GPU's host link.")
    write_back_bytes_per_gpu: Bytes = Field(description="Host writes to fill the GPU and "
                                            "the external pool once, write-back: only the "
                                            "parked (evicted) contexts.")
    write_through_bytes_per_gpu: Bytes = Field(description="The same with a write-through "
                                               "pool: every block of every context.")


class CheckpointEngineReport(ResultModel):
    """The weight update from training to inference (K2's checkpoint engine)."""

    weight_bytes: Bytes = Field(description="Full inference weights broadcast.")
    num_buckets: int = Field(description="Buckets the weights travel in.")
    h2d_s: float = Field(ge=0.0, description="Host-to-device copies of every bucket.")
    broadcast_s: float = Field(ge=0.0, description="Broadcast of every bucket to every GPU.")
    reload_s: float = Field(ge=0.0, description="Each GPU copying its shard out of the "
                            "broadcast buffer.")
    serial_s: float = Field(ge=0.0, description="The three stages one after another.")
    pipelined_s: float = Field(ge=0.0, description="The stages overlapped across buckets.")
    received_bytes_per_gpu: Bytes = Field(description="Bytes each GPU receives (all of "
                                          "them).")
    needed_bytes_per_gpu: Bytes = Field(description="Bytes its inference shard needs (the "
                                        "least a resharding transfer could move).")


class ReferenceModelReport(ResultModel):
    """The reference model's weights during the reference forward."""

    weight_bytes: Bytes = Field(description="Reference weights of this GPU's training "
                                "stage in the parameter format.")
    gradient_buffer_bytes: Bytes = Field(description="The policy's GPU gradient buffers.")
    slot: str = Field(description="'stage' (one buffer for the stage) or 'chunk' (Pipeline "
                      "ZeRO-2: two chunk slots, one computing, one prefetching).")
    fits_in_gradient_buffer: bool = Field(description="The weights of one slot fit in it.")
    extra_gpu_bytes: Bytes = Field(description="GPU bytes the reference adds beyond the "
                                   "training states (0 when reused in the buffer).")
    h2d_s: float = Field(ge=0.0, description="Time to copy the stage's reference weights "
                         "from host memory once.")


class RlSeesawResponse(ResultModel):
    """Memory by phase and transition times of one colocated RL iteration."""

    capacity_bytes: Bytes = Field(description="Usable GPU memory after headroom.")
    host_capacity_per_gpu_bytes: Bytes = Field(description="Host DRAM per GPU.")
    binding_stage: int = Field(description="The training stage drawn (largest GPU total).")
    phases: list[SeesawPhaseReport] = Field(description="Phases in iteration order.")
    transitions: list[SeesawTransitionReport] = Field(description="Transitions in order.")
    transition_s: float = Field(ge=0.0, description="Sum of the transition times.")
    kv_cache: KvCacheReport
    checkpoint_engine: CheckpointEngineReport
    reference: ReferenceModelReport
    fits: bool = Field(description="Every phase fits the GPU and host memory.")
    assumptions: list[str] = Field(description="Figures the sources do not give.")
    source: str = Field(description="Where the mechanisms come from.")


__all__ = [
    "DEFAULT_BUCKET_BYTES",
    "RL_SEESAW_EXAMPLE",
    "VLLM_GPU_MEMORY_UTILIZATION",
    "CheckpointEngineReport",
    "KvCacheReport",
    "OffloadTier",
    "ReferenceModelReport",
    "RlSeesawRequest",
    "RlSeesawResponse",
    "RolloutSpec",
    "SeesawPhaseReport",
    "SeesawTransitionReport",
]
