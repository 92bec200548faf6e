"""The training recipe: batch, sequence and the precision of every persistent state.

Owns: what the user trains with (global batch, sequence length, formats of parameters,
gradients, master weights and optimizer states, compute format, optimizer). Must not: turn a
recipe into bytes (that is `models/core/precision.py`).
"""

from enum import StrEnum
from typing import Self

from pydantic import Field, model_validator

from api_schemas._base import SpecModel
from api_schemas.dtypes import DType
from api_schemas.units import PositiveInt


class OptimizerKind(StrEnum):
    """Optimizers whose state shapes the ledger knows."""

    ADAM = "adam"
    ADAMW = "adamw"
    SGD = "sgd"
    SGD_MOMENTUM = "sgd_momentum"
    MUON = "muon"


class Fp8WeightStorage(StrEnum):
    """How FP8 compute keeps its weights (only read when compute_dtype is fp8)."""

    HIGH_PRECISION_PLUS_FP8 = "high_precision_plus_fp8"
    """Default Transformer Engine behaviour: the param_dtype weights stay and an FP8 copy
    (with its transpose) is cached beside them, so FP8 costs memory (TE #257, #1261)."""
    ON_THE_FLY = "on_the_fly"
    """Only the param_dtype weights are kept; each GEMM quantises its weight block-wise to
    FP8 when it runs (DeepSeek-V3 Sec. 3.3.2, online 128x128 block quantisation), so only
    one module's FP8 copy exists at a time."""
    FP8_ONLY = "fp8_only"
    """Megatron --fp8-param-gather / TE fp8_model_init: the compute weights are FP8 only; the
    master copy lives in the optimizer."""


class AttentionKernel(StrEnum):
    """Which fused attention kernel the runtime calls: its generation sets how much of the
    16-bit peak attention reaches (`models.catalog.kernels.KernelProfile`)."""

    TRANSFORMER_ENGINE = "transformer_engine"
    """Transformer Engine's fused attention (cuDNN, FlashAttention-3 class on Hopper):
    Megatron-LM and NeMo."""
    FLASH_ATTENTION_2 = "flash_attention_2"
    """FlashAttention-2 (arXiv:2307.08691), also what PyTorch's
    `scaled_dot_product_attention` picks first."""
    FLASH_ATTENTION_1 = "flash_attention_1"
    """The first FlashAttention CUDA kernels (arXiv:2205.14135, 2022)."""
    TRITON_FLASH_ATTENTION = "triton_flash_attention"
    """The Triton FlashAttention of 2022 (`flash_attn_triton.py` of the FlashAttention
    repository; MPT's `attn_impl: triton` in llm-foundry)."""


class ElementwiseFusion(StrEnum):
    """How the runtime launches the memory-bound ops between GEMMs (norms, activation,
    rotary embedding, residual adds, the loss): each unfused op is one full HBM pass."""

    FUSED = "fused"
    """Hand-fused kernels (Megatron-LM / Transformer Engine): one pass per op in 16-bit."""
    COMPILED = "compiled"
    """torch.compile (Inductor) fuses the pointwise chains inside each compiled region; the
    attention repeat of GQA keys/values stays a copy and the loss stays eager where it is
    not compiled (torchtitan at the end of 2024)."""
    EAGER = "eager"
    """Eager PyTorch: every aten op is its own kernel, with the fp32 intermediates of the
    model code (torchtitan RMSNorm, rotary embedding and loss) each a full pass."""

    @property
    def pytorch_native(self) -> bool:
        """Whether the runtime is PyTorch's own (eager or compiled), not Megatron-LM's or
        Transformer Engine's hand-fused kernels: it calls attention through PyTorch's SDPA
        and checkpoints with PyTorch's non-reentrant `torch.utils.checkpoint`."""
        return self is not ElementwiseFusion.FUSED


class EmaPlacement(StrEnum):
    """Where an exponential moving average of the parameters is kept, if any."""

    NONE = "none"
    GPU = "gpu"
    HOST = "host"


class MoeDispatcher(StrEnum):
    """How MoE tokens travel to their experts and back."""

    ALLTOALL = "alltoall"
    """Megatron-Core `--moe-token-dispatcher-type alltoall` over NCCL: one row per
    (token, expert) assignment is sent, after a host synchronisation of the token counts."""
    DEEPEP = "deepep"
    """DeepEP / HybridEP kernels (Megatron `flex` dispatcher, DeepSeek-V3): one copy per
    destination node over the NICs, forwarded over NVLink to the destination ranks."""


class CudaGraphModule(StrEnum):
    """A per-layer CUDA graph capture region of a dropless MoE layer (Megatron-Core
    `--cuda-graph-impl transformer_engine --cuda-graph-modules ...`; the expert part of a
    dropless layer has data-dependent shapes and is never captured)."""

    ATTN = "attn"
    """The attention block (`TransformerLayer._forward_attention`)."""
    MOE_ROUTER = "moe_router"
    """The pre-MLP norm and the router (`_forward_mlp` up to `MoELayer.router`)."""
    MOE_PREPROCESS = "moe_preprocess"
    """The dispatcher's token-count preprocessing (`MoELayer.preprocess`); needs
    `moe_router`."""


class Zero3Collectives(StrEnum):
    """How a ZeRO-3 runtime without FSDP units (DeepSpeed) issues its parameter all-gathers
    and gradient reduce-scatters."""

    COALESCED = "coalesced"
    """One call per unit (layer) of its parameters together: DeepSpeed since v0.5.5 (all-gather,
    `_allgather_params_coalesced`) and v0.6.0 (reduce-scatter, `reduce_scatter_coalesced`)."""
    PER_PARAMETER = "per_parameter"
    """One call per parameter tensor, none prefetched: DeepSpeed v0.3.14 to v0.5.x (2021;
    `_allgather_param` and `_reduce_scatter_gradient` per parameter in
    `deepspeed/runtime/zero/partition_parameters.py`; the prefetch step counter runs one behind
    the recorded trace, `models.core.deepspeed_2021.forward_step_ids`), the ZeRO-3 Megatron-LM
    2021 compared with (arXiv:2104.04473 Table 2)."""


class PipeEngineP2P(StrEnum):
    """How DeepSpeed's pipeline engine (`deepspeed/runtime/pipe/engine.py`) moves a
    stage-boundary tensor with TP > 1: every send and receive is a blocking NCCL call on the
    stage's own stream (`deepspeed/runtime/pipe/p2p.py`), so both neighbours wait for it and
    neither computes meanwhile; the activation travels as the sender's 1/t slice (with its
    `PartitionedTensor` meta tensor) and the receiver rebuilds it with an all-gather over TP;
    before its backward the sender rebuilds its own output the same way."""

    DEEPSPEED_FULL_GRAD = "deepspeed_full_grad"
    """DeepSpeed v0.4.0 to v0.5.3 (2021; `is_grad_partitioned = False`): each TP rank sends
    the whole input gradient, b*s*h elements, over its own link, with one send each on
    `dist.broadcast` within a two-rank group."""
    DEEPSPEED_PARTITIONED = "deepspeed_partitioned"
    """DeepSpeed v0.5.4 and later (pull request #1407 of 2021-09-29, `is_grad_partitioned =
    is_model_parallel`): the gradient also travels as 1/t slices with a meta tensor, and the
    receiver all-gathers it over TP before its backward."""


class TpOverlapEngine(StrEnum):
    """Which runtime overlaps the tensor-parallel collectives with the GEMMs when
    `TrainingSpec.overlap_tp_comm` is on."""

    USERBUFFERS = "userbuffers"
    """Transformer Engine's userbuffers (Megatron `--tp-comm-overlap`): ring-exchange and
    bulk overlaps priced by `models.core.step_time.exposure.tp_overlap_exposed_s`."""
    PYTORCH_ASYNC_TP = "pytorch_async_tp"
    """PyTorch's micro-pipelined async TP (Inductor's `micro_pipeline_tp` pass, torchtitan
    `parallelism.enable_async_tensor_parallel`): its gain is not credited. torchtitan's
    benchmarks measured it at +5.7% to +16.4% on five pairs of runs where the userbuffers
    rule would credit +22% to +34% (`models.core.runtime_features.userbuffers_tp_overlap`,
    `research/async_tp_pairs.py`)."""


class MuonDistribution(StrEnum):
    """How a data-parallel job with sharded optimizer states runs Muon's Newton-Schulz
    orthogonalisation, which needs whole matrices."""

    ALL_GATHER = "all_gather"
    """Moonlight's Distributed Muon (arXiv:2502.16982 Sec. 2.3): every data-parallel rank
    all-gathers each full matrix and orthogonalises all of them, keeping its shard."""
    OWNER_P2P = "owner_p2p"
    """Kimi K3: each matrix has one owner rank, which fetches the other shards point to
    point, orthogonalises it and sends the shards back; the work divides over the ranks."""


class VisionPlacement(StrEnum):
    """Where a multimodal job runs its vision encoder relative to the text pipeline."""

    STAGE0 = "stage0"
    """On the first pipeline stage, inside each micro-batch's forward and backward."""
    DEP = "dep"
    """Kimi K2.5's decoupled encoder process: every GPU runs a share of the step's images
    before the text pipeline (outputs kept, activations dropped) and recomputes its forward
    and runs its backward after it."""
    BUBBLES = "bubbles"
    """Kimi K3: the decoupled encoder work placed into the text pipeline's bubbles, the
    first micro-batch's forward run up front."""


class VisionWorkload(SpecModel):
    """The image side of a multimodal training step: which encoder, how many images, where
    it runs."""

    encoder_preset: str = Field(
        default="llama-4-scout-17b-16e",
        description="Model preset whose Hugging Face vision_config gives the encoder's shape.",
    )
    images_per_sequence: float = Field(
        gt=0, description="Images per training sequence, on average.", examples=[1.0])
    placement: VisionPlacement = Field(
        default=VisionPlacement.STAGE0,
        description="'stage0' (inside the first pipeline stage), 'dep' (Kimi K2.5: spread "
        "over every GPU before and after the text pipeline) or 'bubbles' (Kimi K3: the same "
        "work placed into pipeline bubbles).",
    )


class TrainingSpec(SpecModel):
    """Batch, sequence and precision recipe of one training run."""

    global_batch_size: PositiveInt = Field(
        description="Sequences per optimizer step.", examples=[2048]
    )
    sequence_length: PositiveInt = Field(description="Tokens per sequence.", examples=[8192])
    param_dtype: DType = Field(
        default=DType.BF16, description="Format of the weights used in forward/backward."
    )
    grad_dtype: DType = Field(
        default=DType.FP32,
        description="Format of the gradient (accumulation) buffer; fp32 = Megatron main_grad.",
    )
    master_dtype: DType | None = Field(
        default=DType.FP32,
        description="Format of the optimizer's master copy of the weights; null when the "
        "weights themselves are updated (no separate master copy).",
    )
    optimizer_state_dtype: DType = Field(
        default=DType.FP32, description="Format of optimizer moments (DeepSeek-V3: bf16)."
    )
    compute_dtype: DType = Field(
        default=DType.BF16,
        description="GEMM input format: 'bf16'/'fp16', or 'fp8' for FP8 compute (DeepSeek-V3).",
    )
    fp8_weight_storage: Fp8WeightStorage = Field(
        default=Fp8WeightStorage.HIGH_PRECISION_PLUS_FP8,
        description="With fp8 compute: keep a high-precision weight copy beside the FP8 one "
        "(default) or the FP8 weights only.",
    )
    optimizer: OptimizerKind = Field(default=OptimizerKind.ADAM, description="Optimizer.")
    dropout: bool = Field(
        default=False,
        description="Dropout layers are active (their 1-byte masks are stored); GPT-3-style "
        "recipes use dropout, most current LLM recipes do not.",
    )
    flash_attention: bool = Field(
        default=True,
        description="A fused attention kernel that never stores the s x s score matrix "
        "(FlashAttention); false = the scores and softmax are materialised.",
    )
    checkpoint_early_stop: bool | None = Field(
        default=None,
        description="A wholly recomputed layer's recomputation stops once the last tensor "
        "its backward saved is rebuilt, so a dense layer's last GEMM (the MLP's down "
        "projection) is not run again (PyTorch's non-reentrant activation checkpoint, on by "
        "default since 2.1); false = the whole forward again (Megatron-LM's and DeepSpeed's "
        "reentrant checkpoint); null = true for PyTorch-native runtimes (elementwise_fusion "
        "eager or compiled), false otherwise.",
    )
    attention_kernel: AttentionKernel | None = Field(
        default=None,
        description="The fused attention kernel the runtime calls (read with "
        "flash_attention=true): 'transformer_engine', 'flash_attention_2', "
        "'flash_attention_1' or 'triton_flash_attention'; null = the runtime's own "
        "(Transformer Engine with fused elementwise kernels, FlashAttention-2 through "
        "PyTorch SDPA otherwise).",
    )
    elementwise_fusion: ElementwiseFusion = Field(
        default=ElementwiseFusion.FUSED,
        description="How the memory-bound ops between GEMMs run: 'fused' (Megatron / "
        "Transformer Engine kernels), 'compiled' (torch.compile) or 'eager' (one PyTorch "
        "kernel per op, fp32 intermediates); sets their HBM passes in the step time.",
    )
    fused_cross_entropy: bool = Field(
        default=True,
        description="The loss is a fused vocabulary-parallel cross entropy whose backward "
        "rewrites the saved fp32 softmax in place (Megatron-LM); false = PyTorch's "
        "F.cross_entropy on fp32 logits (torchtitan), whose backward holds the saved "
        "log-probabilities, their gradient and the input gradient at once.",
    )
    moe_load_imbalance: float = Field(
        default=1.0, ge=1.0,
        description="Assumed max/mean routed tokens per expert-parallel rank (1.0 = perfectly "
        "balanced, as MoonEP guarantees).",
    )
    moe_keep_expert_outputs: bool = Field(
        default=False,
        description="Routed experts' outputs are kept for the gradient of a probability-"
        "weighted combine (Megatron-Core before 0.13, frameworks that weight in the combine); "
        "false (default) when the router probabilities are applied inside the expert "
        "activation, before the down projection (Megatron-Core 0.13 and later), or that "
        "gradient is rewritten (Kimi K3 Sec. 5.2).",
    )
    muon_distribution: MuonDistribution = Field(
        default=MuonDistribution.ALL_GATHER,
        description="With optimizer 'muon' and sharded optimizer states: 'all_gather' "
        "(Moonlight: every rank gathers and orthogonalises every matrix) or 'owner_p2p' "
        "(Kimi K3: one owner per matrix, point-to-point shards).",
    )
    moe_dispatcher: MoeDispatcher | None = Field(
        default=None,
        description="MoE token dispatcher: 'alltoall' (Megatron-Core's NCCL all-to-all, one "
        "row per token-expert assignment) or 'deepep' (DeepEP/HybridEP, one copy per "
        "destination node, as DeepSeek-V3); null (default) = the planner chooses per target "
        "framework (DeepEP where the framework offers it, the EP size is one DeepEP "
        "supports, and the plan is faster with it; its buffers cost memory). A value fixes "
        "it.",
    )
    zero3_collectives: Zero3Collectives = Field(
        default=Zero3Collectives.COALESCED,
        description="ZeRO-3 without FSDP (DeepSpeed): 'coalesced' (one all-gather and one "
        "reduce-scatter per layer, DeepSpeed >= 0.6) or 'per_parameter' (one per parameter "
        "tensor and none prefetched, DeepSpeed 0.3.14-0.5.x of 2021).",
    )
    tp_dgrad_overlap: bool | None = Field(
        default=None,
        description="Each column-parallel layer's input-gradient all-reduce (reduce-scatter "
        "with sequence parallelism) runs asynchronously under that layer's weight-gradient "
        "GEMM (Megatron-LM --async-tensor-model-parallel-allreduce, on by default since "
        "September 2021; Megatron-Core; Transformer Engine's Linear modules); false = it "
        "runs synchronously, as in Megatron-LM before September 2021 and the Megatron-"
        "DeepSpeed forks; null (default) = the planner chooses (on wherever the target "
        "framework offers it and TP > 1). A cost model evaluated without a choice reads "
        "null as false.",
    )
    pp_scatter_gather: bool | None = Field(
        default=None,
        description="Without sequence parallelism and with TP > 1, each of the t TP ranks of "
        "a pipeline stage sends 1/t of the stage-boundary activation (or gradient) and the "
        "receiving stage all-gathers it over its TP group (Megatron-LM's scatter/gather "
        "optimisation, arXiv:2104.04473 Sec. 4.1; megatron/arguments.py "
        "--no-scatter-gather-tensors-in-pipeline: on by default in Megatron-LM of 2021-2022); "
        "with sequence parallelism the boundary tensor is already sharded and this does "
        "nothing. null (default) = off: Megatron-Core's pipeline sends move the whole tensor "
        "unless sequence parallelism shards it.",
    )
    pipe_engine_p2p: PipeEngineP2P | None = Field(
        default=None,
        description="Stage-boundary transfers as DeepSpeed's pipeline engine runs them (the "
        "Megatron-DeepSpeed runs): each send and receive occupies both neighbouring stages, "
        "'deepspeed_full_grad' (v0.4-v0.5.3: activation slices of 1/t, whole gradients) or "
        "'deepspeed_partitioned' (v0.5.4 on: both as slices of 1/t); each slice is rebuilt "
        "by an all-gather over TP. null (default) = Megatron's own schedule, where the "
        "transfer is the latency between dependent ops of neighbouring stages.",
    )
    tp_overlap_engine: TpOverlapEngine | None = Field(
        default=None,
        description="The runtime that overlaps TP collectives when overlap_tp_comm is on: "
        "'userbuffers' (Transformer Engine, Megatron --tp-comm-overlap) or "
        "'pytorch_async_tp' (torch.compile micro-pipelined async TP, torchtitan "
        "enable_async_tensor_parallel), whose gain the cost model does not credit (measured "
        "+5.7% to +16.4% in torchtitan's benchmarks, where the userbuffers rule would claim "
        "+22% to +34%). null (default) = userbuffers; a plan for torchtitan sets "
        "pytorch_async_tp.",
    )
    bf16_hp_grad_update: bool | None = Field(
        default=None,
        description="After every micro-batch's backward each rank adds its bf16 gradients "
        "into fp32 copies and drops the bf16 ones (DeepSpeed's BF16Optimizer, v0.6.2 on, "
        "`update_hp_grads`: a cast to fp32 and an add per parameter tensor, 18 bytes of HBM "
        "traffic per parameter per micro-batch). null (default) = off: the gradient "
        "accumulates where the backward writes it.",
    )
    offload_grad_buffers: bool | None = Field(
        default=None,
        description="With the optimizer offloaded at ZeRO stage 1 or 2, each parameter of the "
        "rank's partition has a host buffer of its size in the parameter dtype through which "
        "its gradient accumulates between micro-batches (DeepSpeed's ZeRO-Offload, "
        "`stage_1_and_2.py` `async_accumulate_grad_in_cpu_via_gpu`); at stage 2 the gradients "
        "are copied there after every micro-batch but the last and back before the next one "
        "adds to them. null (default) = off: the gradients accumulate on the GPU until the "
        "optimizer step (Megatron Core's CPU optimizer).",
    )
    memory_efficient_norm: bool | None = Field(
        default=None,
        description="Each RMSNorm / LayerNorm keeps its output and inverse RMS for backward "
        "instead of its input (Apex FusedRMSNorm / FusedLayerNorm memory_efficient=True), so "
        "a norm input that the next GEMM's saved 16-bit input already covers is not stored "
        "and each pipeline stage's input is freed once its first layer has run (Llama 3, "
        "arXiv:2407.21783 Sec. 3.3.2); no time is added. null (default) = the planner "
        "chooses where the target offers it (no released framework's standard path does: "
        "target 'any'); a cost model evaluated without a choice reads null as false.",
    )
    overlap_grad_reduce: bool | None = Field(
        default=None,
        description="Data-parallel gradient reduction overlaps the last micro-batch's "
        "backward (Megatron --overlap-grad-reduce with --overlap-param-gather); false = it "
        "runs after the pipeline flush, as in Megatron-LM 2021 and Korthikanti et al. 2022; "
        "null (default) = the planner chooses (on wherever the target framework offers it). "
        "A cost model evaluated without a choice reads null as on.",
    )
    overlap_tp_comm: bool | None = Field(
        default=None,
        description="Tensor-parallel collectives overlap the GEMMs (Transformer Engine "
        "userbuffers, Megatron --tp-comm-overlap; needs sequence parallelism): each "
        "reduce-scatter's last ring step, the SMs a bulk-overlapped one holds and what outlasts "
        "the GEMMs stay exposed; false = exposed, as in Megatron-LM 2021; null (default) = the "
        "planner chooses (on wherever the target framework offers it and the plan has TP > 1 "
        "with sequence parallelism). A cost model evaluated without a choice reads null as "
        "off.",
    )
    overlap_ep_comm: bool | None = Field(
        default=None,
        description="Expert all-to-alls overlap another micro-batch's compute (Megatron "
        "--overlap-moe-expert-parallel-comm: needs EP > 1, interleaving when PP > 1, no full "
        "recomputation; it runs one more micro-batch forward before the steady state, so it "
        "costs one micro-batch of a model chunk's stored activations); DualPipe and DualPipeV "
        "always overlap them. Null (default) = the planner tries it where the target framework "
        "offers it and keeps it when the plan is faster; a value fixes it. A cost model "
        "evaluated without a choice reads null as off.",
    )
    moe_grouped_gemm: bool | None = Field(
        default=None,
        description="The local experts of an MoE layer run as one grouped GEMM (Megatron-LM "
        "--moe-grouped-gemm, Transformer Engine's grouped linear: the experts' GEMMs share "
        "waves and launch rounds); false = one GEMM per expert in turn (Megatron-LM's "
        "SequentialMLP, the default without the flag). null (default) = the planner chooses "
        "(on wherever the target framework offers it and the model has routed experts). A "
        "cost model evaluated without a choice reads null as on.",
    )
    moe_permute_fusion: bool | None = Field(
        default=None,
        description="The MoE token permutation and un-permutation run as fused Transformer "
        "Engine kernels (Megatron-LM --moe-permute-fusion, TE >= 2.1); false = the unfused "
        "PyTorch path (index_select, then a zero-filled output and scatter_add), which moves "
        "more bytes. null (default) = the planner chooses (on wherever the target framework "
        "offers it and the model has routed experts). A cost model evaluated without a "
        "choice reads null as on.",
    )
    cuda_graph_modules: tuple[CudaGraphModule, ...] = Field(
        default=(),
        description="Per-layer CUDA graphs of MoE layers: the regions captured and replayed "
        "as one graph each (Megatron-Core --cuda-graph-impl transformer_engine "
        "--cuda-graph-modules: 'attn', 'moe_router', 'moe_preprocess'; 'moe_preprocess' needs "
        "'moe_router'). The host then issues each captured region as one launch instead of "
        "kernel by kernel. Empty (default): eager, as Megatron's default cuda_graph_impl "
        "'none'. Graph memory pools are not counted.",
        examples=[["attn", "moe_router", "moe_preprocess"]],
    )
    ema: EmaPlacement = Field(
        default=EmaPlacement.NONE,
        description="Parameter EMA: none, on the GPU, or in host memory (DeepSeek-V3).",
    )
    vision: VisionWorkload | None = Field(
        default=None,
        description="A vision encoder beside the language model (multimodal training); "
        "none = text only.",
    )

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.compute_dtype not in (DType.BF16, DType.FP16, DType.FP8, DType.FP32, DType.TF32):
            raise ValueError(
                f"compute_dtype='{self.compute_dtype}' is not supported for training; use "
                "'bf16', 'fp16' or 'fp8'"
            )
        if (CudaGraphModule.MOE_PREPROCESS in self.cuda_graph_modules
                and CudaGraphModule.MOE_ROUTER not in self.cuda_graph_modules):
            raise ValueError("cuda_graph_modules: 'moe_preprocess' needs 'moe_router' "
                             "(Megatron-Core asserts it)")
        return self

    @property
    def tokens_per_step(self) -> int:
        """Tokens consumed by one optimizer step."""
        return self.global_batch_size * self.sequence_length


__all__ = ["CudaGraphModule", "ElementwiseFusion", "EmaPlacement", "Fp8WeightStorage",
           "MoeDispatcher", "MuonDistribution", "OptimizerKind", "TrainingSpec", "VisionPlacement",
           "VisionWorkload"]
