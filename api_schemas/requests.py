"""Request bodies of the planning endpoints: how a user names a model, a cluster, a recipe,
constraints, an objective and solver limits.

Owns: the three ways to give a model (preset, Hugging Face config, explicit fields), a
cluster as a GPU preset plus overrides, and the plan / evaluate request envelopes. Must not:
resolve presets (that is `models/catalog/resolve.py`).
"""

from enum import StrEnum
from typing import Annotated, Any, Literal, Self, TypeVar

from pydantic import AfterValidator, Field, model_validator

from api_schemas._base import FiniteJson, SpecModel, reject_non_finite
from api_schemas.architecture import ModelSpec
from api_schemas.dtypes import DType
from api_schemas.hardware import GpuSpec, IntraNodeTopology, KernelCalibration
from api_schemas.parallel import (
    ContextParallelKind,
    ParallelConfig,
    PipelineSchedule,
    Recompute,
)
from api_schemas.training import TrainingSpec
from api_schemas.units import (
    DurationSeconds,
    Fraction,
    PositiveBytes,
    PositiveBytesPerSecond,
    PositiveFlopPerSecond,
    PositiveInt,
    TimeLimitSeconds,
)

ZeroStageValue = Literal[0, 1, 2, 3]
"""A ZeRO stage a constraint may name."""

FrameworkTarget = Literal["megatron-lm", "torchtitan", "deepspeed", "any"]
RuntimeFeatureName = Literal["overlap_grad_reduce", "overlap_tp_comm", "tp_dgrad_overlap",
                             "moe_dispatcher", "overlap_ep_comm", "memory_efficient_norm",
                             "moe_grouped_gemm", "moe_permute_fusion"]
"""Runtime features a request may rule on (`constraints.runtime_features`)."""
RuntimeFeatureRule = Literal["allowed", "required", "forbidden"]
"""A training framework a plan must run on ('any' admits features of no released framework,
each named with the paper or system it comes from)."""
T = TypeVar("T")

MAX_TARGET_TOKENS_PER_S = 1e12
"""Largest throughput target a request may give (tokens/s)."""
MIN_GPU_HOUR_PRICE = 1e-6
"""Smallest GPU-hour price a request may give."""
MAX_GPU_HOUR_PRICE = 1e6
"""Largest GPU-hour price a request may give."""

Allowed = Annotated[list[T], Field(min_length=1)]
"""An allowed-value list: at least one value (an empty list would allow nothing)."""


class ModelPreset(SpecModel):
    """A model from the catalog."""

    preset: str = Field(description="Catalog id: a Hugging Face config stem, a Megatron GPT "
                        "shape, or an assumed shape (kimi-k3-scale-2.8t).",
                        examples=["llama-3.1-405b"])


class ModelFromHf(SpecModel):
    """A model given as its Hugging Face `config.json`."""

    hf_config: FiniteJson = Field(description="The parsed config.json (finite numbers).")


ModelInput = ModelPreset | ModelFromHf | ModelSpec


DEFAULT_MEMORY_HEADROOM_FRAC = 0.02
"""Default share of each GPU's memory a plan leaves free: what the ledger cannot itemise
(the HBM the driver keeps from the sold capacity, e.g. an 80 GiB H100 shows 81,559 of
81,920 MiB to CUDA; allocator growth between steps; host-side tools such as profilers),
so a plan at 79.9 of 80 GiB is not the default answer."""

DEFAULT_MEMORY_MARGIN_FRAC = 0.0384
"""Default share of the usable GPU memory (after the headroom) a plan keeps free for the
memory ledger's own error: 1 - 0.9616, where 0.9616 is the lowest predicted / measured peak
over the 134 measured peaks of `research/MEMORY_PEAKS.md` (`research/validate_memory.py`;
the Zero Bubble row zerobubble-t12-6.2b-zb-2p-b3-m8, 42.3 predicted vs 44.0 GiB measured),
rounded up. A predicted peak within usable x (1 - this) stays within the usable memory
even when the real peak is that much above the prediction. The rows that measure reserved
memory ran with PyTorch's expandable segments, so the margin assumes them (each export's
launch environment sets `PYTORCH_ALLOC_CONF=expandable_segments:True`). Data and
reasoning: research/CALIBRATION.md, 'Memory safety margin'."""


class ClusterInput(SpecModel):
    """A cluster as a GPU preset (or object) plus nodes, with any field overridable."""

    gpu: str | GpuSpec = Field(description="GPU preset id or a full GPU object.",
                               examples=["h100-sxm5-80gb"])
    num_nodes: PositiveInt = Field(description="Number of nodes.", examples=[2048])
    gpus_per_node: PositiveInt | None = Field(
        default=None, description="GPUs per node; default from the node preset.", examples=[8])
    node: str | None = Field(default=None, description="Node preset id (default: the GPU's "
                             "typical node, e.g. 'hgx-h100').", examples=["hgx-h100"])
    gpu_memory_bytes: PositiveBytes | None = Field(default=None,
                                                   description="Override GPU memory.")
    peak_flop_per_s: dict[DType, PositiveFlopPerSecond] | None = Field(
        default=None, description="Override dense peak FLOP/s per format.")
    hbm_bandwidth_bytes_per_s: PositiveBytesPerSecond | None = Field(
        default=None, description="Override HBM bandwidth.")
    intra_node_bandwidth_bytes_per_s: PositiveBytesPerSecond | None = Field(
        default=None, description="Override achievable scale-up bandwidth per GPU per direction.")
    intra_node_latency_s: DurationSeconds | None = Field(
        default=None, description="Override scale-up latency.")
    inter_node_bandwidth_bytes_per_s: PositiveBytesPerSecond | None = Field(
        default=None, description="Override achievable NIC bandwidth per GPU per direction.")
    inter_node_latency_s: DurationSeconds | None = Field(
        default=None, description="Override scale-out latency.")
    intra_node_topology: IntraNodeTopology | None = Field(
        default=None, description="Override 'switch' / 'full_mesh'.")
    rail_optimized: bool | None = Field(default=None, description="Override rail optimisation.")
    host_memory_bytes: PositiveBytes | None = Field(default=None, description="Override host "
                                                    "memory per node.")
    pcie_bandwidth_bytes_per_s: PositiveBytesPerSecond | None = Field(
        default=None, description="Override host<->GPU bandwidth per GPU per direction.")
    host_memory_bandwidth_bytes_per_s: PositiveBytesPerSecond | None = Field(
        default=None, description="Override the node's aggregate CPU DRAM bandwidth.")
    memory_headroom_frac: Fraction = Field(
        default=DEFAULT_MEMORY_HEADROOM_FRAC,
        description="Share of GPU memory kept free beyond the ledger's itemised runtime "
        "memory (capacity = memory x (1 - this)); default 0.02, e.g. 1.6 GiB of an 80 GiB "
        "GPU. Set 0 to plan up to the whole HBM.", examples=[0.02])
    memory_margin_frac: Fraction = Field(
        default=DEFAULT_MEMORY_MARGIN_FRAC,
        description="Safety margin: the share of the usable GPU memory (after "
        "memory_headroom_frac) a plan keeps free for the memory model's own error, so that "
        "a plan fits when its predicted peak <= usable - margin. Default 0.0384, the "
        "ledger's worst under-prediction over 134 measured peaks (predicted / measured "
        "0.9616), e.g. 3.0 GiB of 78.4 GiB; it assumes PyTorch's expandable segments, which "
        "each export's launch environment sets. Set 0 to plan up to the usable memory.",
        examples=[0.0384])
    profile: str | None = Field(
        default=None, pattern=r"^[a-z0-9][a-z0-9._-]{0,63}$",
        description="Name of a stored calibration profile (GET /v1/calibration/profiles): "
        "its newest version's fitted GEMM efficiency and per-step overhead replace the GPU "
        "family's published calibration. The profile's GPU must be this cluster's GPU.",
        examples=["our-h100"])
    calibration: KernelCalibration | None = Field(
        default=None, description="Fitted kernel constants given directly (what "
        "`profile` expands to); give one of `profile` and `calibration`.")

    @model_validator(mode="after")
    def _one_calibration(self) -> Self:
        if self.profile is not None and self.calibration is not None:
            raise ValueError("give cluster.profile (a stored profile's name) or "
                             "cluster.calibration (its constants), not both")
        return self


ModelField = Annotated[ModelInput, Field(
    description="Preset, Hugging Face config or explicit fields.")]
"""The `model` of a request that names one training configuration."""
ClusterField = Annotated[ClusterInput, Field(description="GPUs and nodes.")]
"""The `cluster` of such a request."""
TrainingField = Annotated[TrainingSpec, Field(description="Batch, sequence and precision recipe.")]
"""The `training` of such a request."""


class Objective(StrEnum):
    """What the planner optimises."""

    THROUGHPUT = "throughput"
    """Maximum tokens/s on the given cluster (default)."""
    MIN_GPUS = "min_gpus"
    """Fewest GPUs that fit (and reach `target_tokens_per_s` when given)."""
    COST_PER_TOKEN = "cost_per_token"
    """Lowest cost per token at `gpu_hour_price`."""
    MIN_MEMORY = "min_memory"
    """Lowest peak memory per GPU: each mesh with its most memory-saving plan (highest
    allowed ZeRO stage, full recomputation, FP8 storage and offload where allowed), ties
    broken by step time."""


class Constraints(SpecModel):
    """Pins (a value), allowed sets (a list) or forbidden values for any plan dimension."""

    tp: PositiveInt | Allowed[PositiveInt] | None = Field(
        default=None, description="Pin or allow tensor parallel degrees.", examples=[8])
    pp: PositiveInt | Allowed[PositiveInt] | None = Field(
        default=None, description="Pipeline degrees.")
    dp: PositiveInt | Allowed[PositiveInt] | None = Field(
        default=None, description="Data-parallel degrees.")
    cp: PositiveInt | Allowed[PositiveInt] | None = Field(
        default=None, description="Context-parallel degrees.")
    ep: PositiveInt | Allowed[PositiveInt] | None = Field(
        default=None, description="Expert-parallel degrees.")
    etp: PositiveInt | Allowed[PositiveInt] | None = Field(
        default=None, description="Expert-TP degrees.")
    vpp: PositiveInt | Allowed[PositiveInt] | None = Field(
        default=None, description="Virtual chunks per rank.")
    micro_batch_size: PositiveInt | Allowed[PositiveInt] | None = Field(
        default=None, description="Micro-batch sizes.")
    schedule: PipelineSchedule | Allowed[PipelineSchedule] | None = Field(
        default=None, description="Allowed schedules.")
    zero_stage: ZeroStageValue | Allowed[ZeroStageValue] | None = Field(
        default=None, description="Allowed ZeRO stages.")
    sequence_parallel: bool | None = Field(default=None, description="Pin sequence parallel.")
    cp_kind: ContextParallelKind | Allowed[ContextParallelKind] | None = Field(
        default=None, description="Allowed context-parallel kinds.")
    recompute: Recompute | Allowed[Recompute] | None = Field(default=None, description="Allowed "
                                                          "uniform recompute policies.")
    allow_fp8_activations: bool | None = Field(
        default=None, description="May the planner store activations in FP8 (Kimi K2 style)? "
        "Unset follows the recipe: allowed for FP8 training, off for 16-bit training (it "
        "changes the numerics of the backward pass).")
    allow_offload: bool = Field(default=True, description="May the planner offload activations "
                                "to host memory?")
    gradient_host_shards: bool = Field(
        default=False, description="Give every candidate Pipeline ZeRO-2 (Kimi K3: gradient "
        "shards in host memory, two chunk-sized gradient buffers on the GPU); the search does "
        "not choose it on its own (see allow_gradient_host_shards).")
    allow_gradient_host_shards: bool = Field(
        default=False, description="May the search choose Pipeline ZeRO-2 (gradient shards in "
        "host memory, with ZeRO-1) where it makes a plan fit or is faster? Its host-link "
        "copies, host accumulation and shard upload are charged to the step. A feature of no "
        "released framework: it needs constraints.framework 'any'.")
    allow_remote_offload: bool = Field(
        default=False, description="May the search choose remote activation offload (Kimi "
        "K3: stored activations of the fullest pipeline ranks held in other pipeline ranks' "
        "spare memory) where it makes a plan fit or is faster? The transfers over the "
        "pipeline group's link are charged to the step. A feature of no released framework: "
        "it needs constraints.framework 'any'.")
    optimizer_offload_frac: Fraction | None = Field(
        default=None, description="Fix the share of each rank's optimizer states (master "
        "weights and moments) kept in host memory and updated by a CPU optimizer on every "
        "candidate (0 forbids it). Null: the search may choose 1 (the whole shard) where "
        "allow_optimizer_offload and the target framework allow it.")
    allow_optimizer_offload: bool = Field(
        default=True, description="May the search move the optimizer states to host memory "
        "(Megatron-LM --optimizer-cpu-offload, DeepSpeed ZeRO-Offload) where that makes a "
        "plan fit or is faster? On by default, as the runtime features a target offers: "
        "the CPU optimizer step and the host-link copies are charged to the step, so it is "
        "chosen only where nothing else fits or it buys a faster plan; never for a "
        "framework target without it (torchtitan). False forbids it (as "
        "optimizer_offload_frac 0 does).")
    runtime_features: dict[RuntimeFeatureName, RuntimeFeatureRule] = Field(
        default_factory=dict,
        description="Per runtime feature: 'allowed' (default: the planner turns it on where "
        "the target framework offers it, the plan meets its prerequisites and the plan is "
        "faster), 'required' (fixed on; for moe_dispatcher: DeepEP) or 'forbidden' (fixed "
        "off; for moe_dispatcher: the NCCL all-to-all). The same as fixing the training field "
        "of that name; a rule that contradicts a fixed training field is refused.",
        examples=[{"overlap_ep_comm": "required", "overlap_tp_comm": "forbidden"}])
    forbid: Annotated[dict[str, list[Any]], AfterValidator(reject_non_finite)] = Field(
        default_factory=dict,
        description="Forbidden values per key, e.g. {'schedule': ['dualpipe'], 'tp': [16]}.")
    framework: FrameworkTarget | None = Field(
        default=None, description="Framework the plan must run on as exported: 'megatron-lm', "
        "'torchtitan', 'deepspeed', or 'any' (also features of no released framework, such as "
        "DualPipe, FP8 activation storage and activation offload). Null: any of the three "
        "released frameworks.", examples=["megatron-lm"])
    framework_version: str | None = Field(
        default=None, description="With a named framework: the newest release the plan may "
        "rely on (features added later are not used), e.g. 'core_v0.12.0', 'v0.2.2', '0.19.2'.",
        examples=["core_v0.14.0"])
    max_gpus: PositiveInt | None = Field(default=None, description="Use at most this many GPUs.")
    target_tokens_per_s: float | None = Field(
        default=None, gt=0, le=MAX_TARGET_TOKENS_PER_S, description="Throughput the plan must "
        "reach (min_gpus objective), at most 1e12 tokens/s; a target above the cluster's peak "
        "is refused before any search.")
    gpu_hour_price: float | None = Field(
        default=None, ge=MIN_GPU_HOUR_PRICE, le=MAX_GPU_HOUR_PRICE, description="Price of one "
        "GPU-hour (cost_per_token objective), 1e-6 to 1e6.")

    @property
    def pinned_recompute(self) -> Recompute | None:
        """The one recompute policy the request pins; None when it allows a list of them or
        leaves the choice to the planner."""
        return None if isinstance(self.recompute, list) else self.recompute

    @model_validator(mode="after")
    def _version_needs_framework(self) -> Self:
        if self.framework_version is not None and self.framework in (None, "any"):
            raise ValueError("constraints.framework_version needs constraints.framework set to "
                             "'megatron-lm', 'torchtitan' or 'deepspeed'")
        if self.framework_version is not None and not any(
                ch.isdigit() for ch in self.framework_version):
            raise ValueError(f"constraints.framework_version '{self.framework_version}' is not "
                             "a release (e.g. 'core_v0.14.0', 'v0.2.2', '0.19.8')")
        return self


class SolverLimits(SpecModel):
    """Search limits."""

    time_limit_s: TimeLimitSeconds = Field(default=10.0, description="Wall-clock limit of "
                                           "the search (0.1 s to 600 s).", examples=[10])
    top_k: int = Field(default=5, ge=0, le=50, description="Alternatives to report.",
                       examples=[5])
    num_workers: int = Field(default=2, ge=1, le=64, description="CP-SAT worker threads.")
    random_seed: int = Field(default=0, description="CP-SAT seed (results are deterministic "
                             "for a fixed seed and worker count).")


class PlanRequest(SpecModel):
    """Body of POST /v1/plans."""

    model: ModelField
    cluster: ClusterField
    training: TrainingField
    constraints: Constraints = Field(default_factory=Constraints, description="Pins and "
                                     "forbidden values.")
    objective: Objective = Field(default=Objective.THROUGHPUT, description="What to optimise.")
    solver: SolverLimits = Field(default_factory=SolverLimits, description="Search limits.")
    parallel: ParallelConfig | None = Field(default=None, description="Ignored by plans "
                                            "(accepted so one body serves both endpoints).")

    @model_validator(mode="after")
    def _objective_inputs(self) -> Self:
        if self.objective == Objective.COST_PER_TOKEN and self.constraints.gpu_hour_price is None:
            raise ValueError("objective 'cost_per_token' needs constraints.gpu_hour_price "
                             "(e.g. 2.0 per GPU-hour)")
        return self


class EvaluateRequest(SpecModel):
    """Body of POST /v1/evaluate and POST /v1/ledger/memory."""

    model: ModelField
    cluster: ClusterField
    training: TrainingField
    parallel: ParallelConfig = Field(description="The configuration to score.")


PLAN_REQUEST_EXAMPLE: dict[str, Any] = {
    "model": {"preset": "llama-3.1-70b"},
    "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 8, "gpus_per_node": 8},
    "training": {"global_batch_size": 512, "sequence_length": 8192, "param_dtype": "bf16",
                 "grad_dtype": "fp32", "optimizer": "adam"},
    "constraints": {},
    "objective": "throughput",
    "solver": {"time_limit_s": 10, "top_k": 5},
}

EVALUATE_REQUEST_EXAMPLE: dict[str, Any] = {
    "model": {"preset": "llama-3.1-405b"},
    "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 2048, "gpus_per_node": 8},
    "training": {"global_batch_size": 2048, "sequence_length": 8192, "param_dtype": "bf16",
                 "grad_dtype": "fp32", "optimizer": "adam"},
    "parallel": {"tp": 8, "pp": 16, "dp": 128, "cp": 1, "ep": 1, "etp": 1, "vpp": 1,
                 "micro_batch_size": 1, "schedule": "1f1b", "zero_stage": 1,
                 "sequence_parallel": True, "recompute": "none"},
}

__all__ = [
    "DEFAULT_MEMORY_HEADROOM_FRAC",
    "DEFAULT_MEMORY_MARGIN_FRAC",
    "EVALUATE_REQUEST_EXAMPLE",
    "MAX_GPU_HOUR_PRICE",
    "MAX_TARGET_TOKENS_PER_S",
    "MIN_GPU_HOUR_PRICE",
    "PLAN_REQUEST_EXAMPLE",
    "ClusterField",
    "ClusterInput",
    "Constraints",
    "EvaluateRequest",
    "FrameworkTarget",
    "ModelField",
    "ModelFromHf",
    "ModelInput",
    "ModelPreset",
    "Objective",
    "PlanRequest",
    "SolverLimits",
    "TrainingField",
]
