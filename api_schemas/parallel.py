"""A parallel configuration: degrees, schedule, sharding and activation policy.

Owns: the keys of the API contract (`tp`, `pp`, `dp`, `cp`, `ep`, `etp`, `vpp`,
`micro_batch_size`, `schedule`, `zero_stage`, `sequence_parallel`, `recompute`) and the
per-stage activation policy. Checks only what the configuration says about itself; checks
against a model or cluster (heads divisible by tp, world size) live in `models/core/mesh/`.
"""

import functools
from enum import StrEnum
from typing import Literal, Self

from pydantic import Field, model_validator

from api_schemas._base import SpecModel
from api_schemas.units import Fraction, NonNegativeInt, PositiveInt


class PipelineSchedule(StrEnum):
    """Pipeline schedules the simulator and planner know."""

    GPIPE = "gpipe"
    ONE_F_ONE_B = "1f1b"
    INTERLEAVED_1F1B = "interleaved_1f1b"
    ZB_H1 = "zb_h1"
    ZB_H2 = "zb_h2"
    ZBV = "zbv"
    DUALPIPE = "dualpipe"
    DUALPIPEV = "dualpipev"
    CHIMERA = "chimera"


class ContextParallelKind(StrEnum):
    """How a sequence is split across the context-parallel group."""

    RING = "ring"
    """Ring attention: K/V blocks rotate by P2P (Liu et al. 2023)."""
    ULYSSES = "ulysses"
    """DeepSpeed-Ulysses: all-to-all between sequence and head shards."""
    USP = "usp"
    """Unified sequence parallel: Ulysses on one mesh axis, ring on the other."""
    ALL_GATHER = "all_gather"
    """All-gather of K and V before attention, reduce-scatter of their gradients after
    (Llama 3, arXiv:2407.21783 Sec. 3.3.2; Megatron-LM `--cp-comm-type allgather`): any
    mask works and, with few KV heads, little moves, but nothing hides it."""


class RecomputeMode(StrEnum):
    """Activation recomputation granularity."""

    NONE = "none"
    SELECTIVE = "selective"
    """Recompute the attention core only (Korthikanti et al. 2022)."""
    FULL = "full"
    """Keep only each layer's input; recompute the whole layer in backward."""


class RecomputeModule(StrEnum):
    """Modules a selective recomputation may rebuild in backward (Megatron-LM
    `--recompute-modules` vocabulary)."""

    CORE_ATTN = "core_attn"
    """The attention core: scores and softmax (Korthikanti et al. 2022)."""
    LAYERNORM = "layernorm"
    """Norm outputs (the inputs of the QKV and MLP up-projections)."""
    MLA_UP_PROJ = "mla_up_proj"
    """MLA up-projections: per-head Q, K, V rebuilt from the latents (DeepSeek-V3, Kimi K2)."""
    MLP = "mlp"
    """The dense MLP (its input kept)."""
    MOE_ACT = "moe_act"
    """The expert activation (SwiGLU) outputs."""
    MOE = "moe"
    """The whole MoE block (its input kept)."""
    SHARED_EXPERTS = "shared_experts"
    """The shared experts (their input kept)."""
    MOE_DOWN_PROJ = "moe_down_proj"
    """The routed experts' down-projections: their outputs, kept for the gradient of the
    probability-weighted combine, are rebuilt instead (Kimi K2 Sec. 2.4.3)."""
    OP_SAC = "op_sac"
    """torchtitan's per-op selective checkpointing (`selective_ac_option = 'op'`): every
    non-matmul op and every second matmul of a dense layer (K, output and, for SwiGLU, the
    up projection) are rebuilt; the other matmul outputs and the attention output are kept.
    Not a Megatron-LM module."""


DEFAULT_RECOMPUTE_MODULES: tuple[RecomputeModule, ...] = (RecomputeModule.CORE_ATTN,)


class FullLayers(SpecModel):
    """Full recomputation of the first n layers of a stage; the others follow `others`."""

    full_layers: NonNegativeInt = Field(description="Layers of the stage fully recomputed.")
    others: Literal["none", "selective"] = Field(
        default="none", description="Policy of the stage's remaining layers.")


Recompute = RecomputeMode | FullLayers


class StagePolicy(SpecModel):
    """How one pipeline stage keeps its activations for backward."""

    recompute: Recompute = Field(default=RecomputeMode.NONE, description="Recompute policy.")
    recompute_modules: tuple[RecomputeModule, ...] = Field(
        default=DEFAULT_RECOMPUTE_MODULES,
        description="Modules rebuilt by 'selective' recomputation (default: the attention "
        "core, as Korthikanti et al.).",
    )
    fp8_activations: bool = Field(
        default=False,
        description="Store the MLP/expert inputs in FP8-E4M3 with 1x128 tiles and fp32 scales "
        "(Kimi K2).",
    )
    offload_frac: Fraction = Field(
        default=0.0, description="Fraction of the stored activation bytes offloaded to host."
    )


class ParallelConfig(SpecModel):
    """One point of the search space (the keys of the API contract)."""

    tp: PositiveInt = Field(default=1, description="Tensor-parallel degree.", examples=[8])
    pp: PositiveInt = Field(default=1, description="Pipeline-parallel degree (ranks).")
    dp: PositiveInt = Field(default=1, description="Data-parallel degree (replicas).")
    cp: PositiveInt = Field(default=1, description="Context-parallel degree.")
    ep: PositiveInt = Field(
        default=1, description="Expert-parallel degree (folded over dp x cp for MoE layers)."
    )
    etp: PositiveInt = Field(default=1, description="Expert tensor-parallel degree.")
    vpp: PositiveInt = Field(
        default=1, description="Virtual pipeline chunks per rank; checked against the "
        "schedule when the configuration is evaluated (its fixed chunk count, or >= 2 where "
        "it interleaves).")
    micro_batch_size: PositiveInt = Field(default=1, description="Sequences per micro-batch.")
    num_micro_batches: PositiveInt | None = Field(
        default=None,
        description="Micro-batches per step per pipeline; null = global_batch / (mbs x dp).",
    )
    schedule: PipelineSchedule = Field(
        default=PipelineSchedule.ONE_F_ONE_B, description="Pipeline schedule."
    )
    zero_stage: Literal[0, 1, 2, 3] = Field(
        default=1,
        description="0 none; 1 optimizer states; 2 + gradients; 3 + parameters, sharded over "
        "the data-parallel group (dp x cp).",
    )
    fsdp: bool = Field(
        default=False,
        description="PyTorch FSDP full shard (needs zero_stage 3): parameters are gathered "
        "one wrapped unit (layer) at a time.",
    )
    fsdp_reshard_after_forward: bool = Field(
        default=True,
        description="FSDP frees each unit's gathered parameters after its forward (true) or "
        "keeps them until the end of the step (false: Llama 3, no all-gather in backward, "
        "the stage's whole parameters resident).",
    )
    norm_saves_output: bool = Field(
        default=False,
        description="Memory-efficient norms: each RMSNorm / LayerNorm keeps its output and "
        "inverse RMS for backward instead of its input (Apex FusedRMSNorm memory_efficient, "
        "Megatron-LM --memory-efficient-layer-norm), so a norm input the next GEMM's saved "
        "16-bit input already covers is not stored, and a stage's input is freed once its "
        "first layer has run (Llama 3); false = each norm keeps its input.",
    )
    sequence_parallel_saves_gathered: bool = Field(
        default=False,
        description="With sequence parallelism, each column-parallel GEMM keeps its "
        "all-gathered input for backward (PyTorch DTensor SequenceParallel, torchtitan); "
        "false = it keeps its sequence shard and all-gathers again in backward (Megatron-LM).",
    )
    fsdp_defer_grad_sync: bool = Field(
        default=False,
        description="FSDP reduce-scatters gradients only after the step's last backward and "
        "accumulates every unit's unsharded gradients in the gradient dtype until then "
        "(torch.distributed.pipelining with FSDP2, as torchtitan runs pipeline parallelism); "
        "false = each unit's gradient is reduce-scattered as its backward ends.",
    )
    optimizer_offload_frac: Fraction = Field(
        default=0.0,
        description="Share of this rank's optimizer states (master weights and moments) kept "
        "in host memory and updated by a CPU optimizer (ZeRO-Offload; Kimi K2 on small "
        "clusters).",
    )
    gradient_host_shards: bool = Field(
        default=False,
        description="Pipeline ZeRO-2 (Kimi K3): gradient shards live in host memory and the "
        "GPU keeps two chunk-sized gradient buffers.",
    )
    remote_activation_offload: bool = Field(
        default=False,
        description="Remote activation offload (Kimi K3): pipeline ranks over the GPU "
        "capacity send part of their stored activations to the spare memory of other ranks "
        "of their pipeline group (each receiver kept within the capacity at its own peak), "
        "out after forward and back before backward over the link the pipeline group uses.",
    )
    sequence_parallel: bool = Field(
        default=False, description="Megatron sequence parallelism inside the TP group."
    )
    cp_kind: ContextParallelKind = Field(
        default=ContextParallelKind.RING, description="'ring', 'ulysses' or 'usp'."
    )
    ulysses_degree: PositiveInt | None = Field(
        default=None, description="USP: the Ulysses axis (the ring axis is cp / this)."
    )
    recompute: Recompute = Field(
        default=RecomputeMode.NONE,
        description="'none', 'selective', 'full' or {'full_layers': n} for every stage.",
    )
    recompute_modules: tuple[RecomputeModule, ...] = Field(
        default=DEFAULT_RECOMPUTE_MODULES,
        description="Modules 'selective' recomputation rebuilds, e.g. ['layernorm', "
        "'mla_up_proj', 'moe_act'] (Kimi K2); default ['core_attn'].",
    )
    fp8_activations: bool = Field(
        default=False, description="FP8 storage of MLP/expert inputs on every stage."
    )
    activation_offload_frac: Fraction = Field(
        default=0.0, description="Fraction of stored activations offloaded to host, every stage."
    )
    stage_policies: tuple[StagePolicy, ...] | None = Field(
        default=None,
        description="One policy per pipeline rank; overrides recompute / fp8_activations / "
        "activation_offload_frac.",
    )
    layers_per_stage: tuple[NonNegativeInt, ...] | None = Field(
        default=None,
        description="Transformer layers per pipeline rank (uneven first/last stages); null = "
        "as even as possible.",
    )
    layers_per_virtual_stage: tuple[NonNegativeInt, ...] | None = Field(
        default=None,
        description="Transformer layers per virtual stage in layer order (pp x chunks entries; "
        "0 allowed, e.g. an embedding-only first chunk or a loss-only last one, as Megatron-LM "
        "--pipeline-model-parallel-layout); overrides layers_per_stage. Null = from "
        "layers_per_stage or as even as possible.",
    )
    microbatch_group_size: PositiveInt | None = Field(
        default=None,
        description="Interleaved schedules: micro-batches run through every chunk as one group "
        "(Megatron-LM microbatch_group_size_per_vp_stage, Llama 3's tunable N, arXiv:2407.21783 "
        "Sec. 3.3.2), from pp to the micro-batch count, or equal to a micro-batch count below pp "
        "(one group, as torch's interleaved 1F1B runs it; Megatron-LM refuses that); null = pp.",
    )

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.fsdp and self.zero_stage != 3:
            raise ValueError(
                f"fsdp=true needs zero_stage=3 (full shard), got zero_stage={self.zero_stage}"
            )
        if not self.fsdp_reshard_after_forward and not self.fsdp:
            raise ValueError(
                "fsdp_reshard_after_forward=false needs fsdp=true (with zero_stage=3)"
            )
        if self.sequence_parallel_saves_gathered and not self.sequence_parallel:
            raise ValueError("sequence_parallel_saves_gathered=true needs sequence_parallel=true")
        if self.fsdp_defer_grad_sync and not self.fsdp:
            raise ValueError("fsdp_defer_grad_sync=true needs fsdp=true (with zero_stage=3)")
        if self.cp_kind == ContextParallelKind.USP:
            u = self.ulysses_degree
            if u is None or self.cp % u:
                raise ValueError(
                    f"cp_kind='usp' needs ulysses_degree dividing cp={self.cp}, got {u}; "
                    "e.g. ulysses_degree=2 with cp=4 gives a 2 x 2 mesh"
                )
        if self.layers_per_stage is not None and self.layers_per_virtual_stage is not None:
            raise ValueError(
                "give layers_per_stage (per rank) or layers_per_virtual_stage (per chunk), not "
                "both: drop one")
        for name, seq in (("stage_policies", self.stage_policies),
                          ("layers_per_stage", self.layers_per_stage)):
            if seq is not None and len(seq) != self.pp:
                raise ValueError(
                    f"{name} has {len(seq)} entries but pp={self.pp}: give one per pipeline rank"
                )
        return self

    @property
    def world_size(self) -> int:
        """GPUs in the orthogonal mesh tp x cp x dp x pp (ep and etp fold into it)."""
        return self.tp * self.cp * self.dp * self.pp

    def policy_of(self, stage: int) -> StagePolicy:
        """The activation policy of one pipeline rank."""
        if self.stage_policies is not None:
            return self.stage_policies[stage]
        return _uniform_policy(self.recompute, self.recompute_modules, self.fp8_activations,
                               self.activation_offload_frac)


@functools.lru_cache(maxsize=1024)
def _uniform_policy(recompute: RecomputeMode | FullLayers,
                    recompute_modules: tuple[RecomputeModule, ...], fp8_activations: bool,
                    offload_frac: float) -> StagePolicy:
    """One shared (immutable) StagePolicy per uniform setting: the cost model asks for a
    rank's policy once per layer, and validating a new object each time dominated it."""
    return StagePolicy(recompute=recompute, recompute_modules=recompute_modules,
                       fp8_activations=fp8_activations, offload_frac=offload_frac)


__all__ = [
    "DEFAULT_RECOMPUTE_MODULES",
    "ContextParallelKind",
    "FullLayers",
    "ParallelConfig",
    "PipelineSchedule",
    "Recompute",
    "RecomputeMode",
    "RecomputeModule",
    "StagePolicy",
]
