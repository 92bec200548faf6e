"""Published training systems as presets: what each paper ran and what it measured.

Owns: the configuration (model preset, cluster, recipe, parallel layout) and the printed
figures of a few landmark runs, each with its source, so the planner can load them, score
them and explain how its own plan differs. Fields a paper does not state are chosen as
documented in each run's `assumptions`. Must not: compute anything.
"""

from dataclasses import dataclass, field, replace

from api_schemas.architecture import MlpKind, ModelSpec, NormKind
from api_schemas.dtypes import DType
from api_schemas.parallel import ParallelConfig, PipelineSchedule, RecomputeMode
from api_schemas.parallel import RecomputeModule as M
from api_schemas.training import EmaPlacement, Fp8WeightStorage, OptimizerKind, TrainingSpec
from models.catalog.presets import MEGATRON_2021_TABLE1, model_preset


@dataclass(frozen=True, slots=True, kw_only=True)
class PublishedRun:
    """One published run: inputs, printed figures and where they were printed."""

    id: str
    description: str
    source: str
    model_preset: str
    gpu: str
    num_nodes: int
    gpus_per_node: int
    training: TrainingSpec
    parallel: ParallelConfig
    printed_tflops_per_gpu: float | None = None
    """As printed; `tflops_convention` says which FLOPs it counts."""
    tflops_convention: str = "model"
    """'hardware' (recomputation counted, Megatron-LM 2021 Eq. 3) or 'model'."""
    printed_mfu: float | None = None
    printed_iteration_time_s: float | None = None
    printed_tokens_per_s_per_gpu: float | None = None
    assumptions: tuple[str, ...] = field(default_factory=tuple)
    confidence: str = ""
    """How sure the ledger is for this run, and why (the evidence behind its choices)."""
    model: ModelSpec | None = None
    """The architecture, for a run whose model is not a catalog preset."""

    @property
    def world_size(self) -> int:
        """GPUs of the run."""
        return self.num_nodes * self.gpus_per_node


_MEGATRON_2021 = TrainingSpec(global_batch_size=1, sequence_length=2048, dropout=True,
                              flash_attention=False, overlap_grad_reduce=False)

_MEGATRON_LM_2021_2022 = _MEGATRON_2021.model_copy(update={"pp_scatter_gather": True})
"""The runs made with Megatron-LM itself (arXiv:2104.04473 Table 1 and Sec. 5.1, arXiv:2205.05198
Table 5): its pipeline sends split the boundary tensor over the TP ranks by default
(`--no-scatter-gather-tensors-in-pipeline` turns it off, megatron/arguments.py at 6985e58938
and 80389ef6e2; without sequence parallelism only in the latter)."""

_TABLE1_PRINTED = {  # (t, p, n, batch, TF/s per GPU) of arXiv:2104.04473 Table 1
    "gpt-1.7b": (1, 1, 32, 512, 137), "gpt-3.6b": (2, 1, 64, 512, 138),
    "gpt-7.5b": (4, 1, 128, 512, 142), "gpt-18.4b": (8, 1, 256, 1024, 135),
    "gpt-39.1b": (8, 2, 512, 1536, 138), "gpt-76.1b": (8, 4, 1024, 1792, 140),
    "gpt-145.6b": (8, 8, 1536, 2304, 148), "gpt-310.1b": (8, 16, 1920, 2160, 155),
    "gpt-529.6b": (8, 35, 2520, 2520, 163), "gpt-1008b": (8, 64, 3072, 3072, 163),
}


def _megatron_2021_runs() -> list[PublishedRun]:
    runs = []
    for name, layers, _, _ in MEGATRON_2021_TABLE1:
        t, p, n, batch, tflops = _TABLE1_PRINTED[name]
        per_stage = layers // p
        vpp = 2 if p > 1 and per_stage % 2 == 0 else 1
        schedule = PipelineSchedule.INTERLEAVED_1F1B if vpp > 1 else PipelineSchedule.ONE_F_ONE_B
        runs.append(PublishedRun(
            id=f"megatron2021-{name}", description=f"Megatron-LM 2021 Table 1, {name}",
            source="Narayanan et al. 2021, arXiv:2104.04473, Table 1 and Sec. 5.1",
            model_preset=name, gpu="a100-sxm4-80gb", num_nodes=n // 8, gpus_per_node=8,
            training=_MEGATRON_LM_2021_2022.model_copy(update={"global_batch_size": batch}),
            parallel=ParallelConfig(tp=t, pp=p, dp=n // (t * p), vpp=vpp, schedule=schedule,
                                    micro_batch_size=1, zero_stage=0,
                                    recompute=RecomputeMode.FULL),
            printed_tflops_per_gpu=tflops, tflops_convention="hardware",
            assumptions=("micro-batch size not printed: the best predicted of 1, 2, 4, 8",
                         "interleaved schedule with 2 chunks where layers allow (not printed)",
                         ("no sequence parallelism, full recomputation, fp16 mixed precision, "
                         "materialised attention, data-parallel all-reduce after the flush")),
        ))
    return runs


def _korthikanti_runs() -> list[PublishedRun]:
    rows = [("gpt-22b", 1, 4, 4, 1.10, 0.415), ("gpt-175b", 8, 64, 1, 13.75, 0.514),
            ("gpt-530b", 35, 280, 1, 37.83, 0.560), ("gpt-1t", 64, 512, 1, 71.49, 0.563)]
    runs = []
    for name, p, batch, mbs, time_s, mfu in rows:
        vpp = 3 if name in ("gpt-175b", "gpt-530b") else 1
        schedule = PipelineSchedule.INTERLEAVED_1F1B if vpp > 1 else PipelineSchedule.ONE_F_ONE_B
        runs.append(PublishedRun(
            id=f"korthikanti2022-{name}", description=f"Korthikanti et al. 2022 Table 5, {name}",
            source="Korthikanti et al. 2022, arXiv:2205.05198, Tables 3 and 5",
            model_preset=name, gpu="a100-sxm4-80gb", num_nodes=max(1, 8 * p // 8),
            gpus_per_node=8,
            training=_MEGATRON_LM_2021_2022.model_copy(update={"global_batch_size": batch}),
            parallel=ParallelConfig(tp=8, pp=p, dp=1, vpp=vpp, schedule=schedule,
                                    micro_batch_size=mbs, zero_stage=0, sequence_parallel=True,
                                    recompute=RecomputeMode.SELECTIVE),
            printed_mfu=mfu, printed_iteration_time_s=time_s,
            assumptions=("530B uses 3 interleaved chunks (105 layers / 35 stages),",)
            if name == "gpt-530b" else ()))
    return runs


LLAMA3_405B_VIRTUAL_STAGES = (0,) + (1,) * 126 + (0,)
"""Llama 3 405B's layers per virtual stage (PP16 x 8 chunks): "we reduce one Transformer layer
each from the first and the last stages ... the first model chunk on the first stage has only
the embedding, and the last model chunk on the last stage has only output projection and loss
calculation" (arXiv:2407.21783 Sec. 3.3.2). Removing one layer empties a chunk only when a
chunk holds one layer, so 126 layers + 2 empty chunks = 128 = 16 ranks x 8 chunks."""


def _llama3_405b(num_gpus: int, dp: int) -> PublishedRun:
    return PublishedRun(
        id=f"llama3-405b-{num_gpus // 1024}k",
        description=f"Llama 3 405B pre-training on {num_gpus:,} H100 (8K context)",
        source="Llama 3 Herd of Models, arXiv:2407.21783, Table 4 and Sec. 3.3.2",
        model_preset="llama-3.1-405b", gpu="h100-sxm5-80gb", num_nodes=num_gpus // 8,
        gpus_per_node=8,
        training=TrainingSpec(global_batch_size=2048, sequence_length=8192),
        parallel=ParallelConfig(tp=8, pp=16, dp=dp, vpp=8,
                                schedule=PipelineSchedule.INTERLEAVED_1F1B,
                                micro_batch_size=1, zero_stage=3, fsdp=True,
                                fsdp_reshard_after_forward=False, sequence_parallel=True,
                                recompute=RecomputeMode.NONE,
                                layers_per_virtual_stage=LLAMA3_405B_VIRTUAL_STAGES),
        printed_tflops_per_gpu=430 if dp == 64 else 400,
        printed_mfu=0.43 if dp == 64 else 0.41,
        assumptions=(("stated: TP8 x PP16 x DP, 16M tokens per batch, one layer fewer on the "
                     "first and last stages so that the first chunk of the first stage holds "
                     "only the embedding and the last chunk of the last stage only the output "
                     "projection and loss (hence one layer per chunk: 126 + 2 = 16 x 8 "
                     "virtual stages), FSDP sharding optimizer states and gradients without "
                     "resharding parameters after forward, no activation checkpointing for "
                     "8K sequences (Sec. 3.3.2)"),
                     ("chosen by the planner, not fixed by the preset: memory-efficient norms "
                     "(each norm keeps its output, not its input; the runtime feature "
                     "`memory_efficient_norm`, left unset). Sec. 3.3.2 deallocates 'the input "
                     "and output tensors of each pipeline stage that will not be used for "
                     "future computation'; with one layer per chunk a stage's input is the "
                     "input of its attention norm, which backward reads unless the norm keeps "
                     "its output, as Apex's memory-efficient FusedRMSNorm does for every norm "
                     "of a layer; no released framework's standard path has it, so the "
                     "evaluation chooses it (target 'any') where nothing released fits"),
                     ("not printed: when FSDP reduce-scatters the gradients. Sec. 3.3.2 "
                     "('Numerical stability') accumulates gradients in FP32 over the "
                     "micro-batches and reduce-scatters them in FP32; taken: every micro-batch "
                     "(FSDP's default), since deferring the sync to the last micro-batch "
                     "(fsdp_defer_grad_sync) keeps the stage's unsharded FP32 gradients, 1.088 "
                     "of the cap, against 0.936; the same configuration predicts 379 TF/s per "
                     "GPU against the 430 printed (441 with the sync deferred)"),
                     ("not printed: the micro-batch size (1 sequence taken) and the group N "
                     "(N = pp taken: the paper tunes N between depth-first, N = PP, and "
                     "breadth-first, N = M, and N = PP holds the fewest in flight)")),
        confidence=("high for the states (mesh, sharding and recompute are printed); for "
                    "activations, with 16 micro-batches on 16 stages every micro-batch is in "
                    "flight, while with 32 the count depends on Llama 3's micro-batch group "
                    "N, which is not printed (N = PP is the smallest the paper describes)"),
    )


LLAMA3_405B_8K = _llama3_405b(8192, 64)
LLAMA3_405B_16K = _llama3_405b(16384, 128)

DEEPSEEK_V3_2048 = PublishedRun(
    id="deepseek-v3-2048", description="DeepSeek-V3 pre-training on 2,048 H800",
    source="DeepSeek-V3 Technical Report, arXiv:2412.19437, Sec. 3.1-3.3 and Table 1",
    model_preset="deepseek-v3", gpu="h800-sxm5-80gb", num_nodes=256, gpus_per_node=8,
    training=TrainingSpec(global_batch_size=15360, sequence_length=4096, compute_dtype=DType.FP8,
                          fp8_weight_storage=Fp8WeightStorage.ON_THE_FLY,
                          optimizer=OptimizerKind.ADAMW, optimizer_state_dtype=DType.BF16,
                          ema=EmaPlacement.HOST, moe_keep_expert_outputs=False),
    parallel=ParallelConfig(pp=16, dp=128, ep=64, schedule=PipelineSchedule.DUALPIPE,
                            zero_stage=1, recompute=RecomputeMode.SELECTIVE,
                            recompute_modules=(M.LAYERNORM, M.MLA_UP_PROJ, M.MOE_ACT),
                            fp8_activations=True),
    printed_tokens_per_s_per_gpu=1e12 / (180_000 * 3600),
    assumptions=(("stated: PP16 x EP64 x ZeRO-1 DP, no TP, DualPipe, BF16 AdamW moments, "
                 "EMA in host memory, recompute of RMSNorm and MLA up-projections, SwiGLU "
                 "outputs recomputed from FP8-cached inputs, FP8 GEMMs with online "
                 "(on-the-fly) 128x128 weight quantisation (Sec. 3.2.3, 3.3)"),
                 ("not printed: whether the routed experts' outputs are kept for the "
                 "combine's gradient (taken: not kept, the router probabilities are "
                 "applied inside the recomputed SwiGLU), the micro-batch (one 4K sequence)"),
                 ("throughput from 180K H800 GPU-hours per trillion tokens (a whole-run "
                 "average)")),
    confidence="medium: the techniques are printed, their byte-level implementation "
               "(HAI-LLM) is not",
)

KIMI_K2_256 = PublishedRun(
    id="kimi-k2-256", description="Kimi K2 on the smallest unit of 256 H800",
    source="Kimi K2 Technical Report, arXiv:2507.20534, Sec. 2.4",
    model_preset="kimi-k2-instruct", gpu="h800-sxm5-80gb", num_nodes=32, gpus_per_node=8,
    training=TrainingSpec(global_batch_size=1024, sequence_length=4096,
                          optimizer=OptimizerKind.MUON, overlap_ep_comm=True,
                          moe_keep_expert_outputs=True),
    parallel=ParallelConfig(pp=16, dp=16, ep=16, vpp=2, schedule=PipelineSchedule.INTERLEAVED_1F1B,
                            zero_stage=1, recompute=RecomputeMode.SELECTIVE,
                            recompute_modules=(M.LAYERNORM, M.MLA_UP_PROJ, M.MOE_ACT,
                                               M.MOE_DOWN_PROJ),
                            fp8_activations=True, activation_offload_frac=1.0,
                            optimizer_offload_frac=1.0),
    assumptions=(("stated: PP16 (virtual stages) x EP16 x ZeRO-1 DP on 32 nodes, BF16 "
                 "parameters and FP32 gradient accumulation (about 6 TB over 256 GPUs), "
                 "recompute of LayerNorm, SwiGLU and MLA up-projections and of the MoE "
                 "down-projections, FP8-E4M3 storage of MoE up-projection and SwiGLU "
                 "inputs, all remaining activations offloaded to CPU, optimizer states "
                 "offloaded to CPU on small clusters (Sec. 2.4.3)"),
                 ("implied: the MoE down-projection recompute is a memory saving, so the "
                 "framework keeps the routed experts' outputs for the weighted combine "
                 "(moe_keep_expert_outputs)"),
                 ("not printed: the global batch (1024 sequences taken; it does not change "
                 "the peak) and the virtual stages (2 taken)")),
    confidence="medium: states are printed (about 30 GB per GPU); activation bytes depend on "
               "the offload overlap, which is not",
)

KIMI_K2_4096 = replace(
    KIMI_K2_256,
    id="kimi-k2-4096", description="Kimi K2: 16 units of 256 H800 replicated over DP",
    num_nodes=512,
    training=KIMI_K2_256.training.model_copy(update={"global_batch_size": 16384}),
    parallel=KIMI_K2_256.parallel.model_copy(update={"dp": 256, "optimizer_offload_frac": 0.0}),
    assumptions=(("stated: the 256-GPU model-parallel unit is replicated over data "
                 "parallelism with ZeRO-1, so optimizer states spread over the replicas "
                 "(Sec. 2.4.3)"), "not printed: the cluster size (16 units taken)",
                 "global batch 67M tokens (16,384 x 4K)"),
    confidence="medium: as kimi-k2-256",
)

GPT3_175B = PublishedRun(
    id="gpt3-175b-1024", description="GPT-3 175B in Megatron-LM on 1,024 A100",
    source="Narayanan et al. 2021, arXiv:2104.04473, Sec. 1 and 5.1 (GPT-3 175B on 1,024 "
           "A100 at batch 1536 and 140 TF/s per GPU); the shape of Brown et al. 2020 "
           "(96 layers, hidden 12288, 96 heads)",
    model_preset="gpt-175b", gpu="a100-sxm4-80gb", num_nodes=128, gpus_per_node=8,
    training=_MEGATRON_LM_2021_2022.model_copy(update={"global_batch_size": 1536}),
    parallel=ParallelConfig(tp=8, pp=8, dp=16, vpp=2, schedule=PipelineSchedule.INTERLEAVED_1F1B,
                            micro_batch_size=1, zero_stage=0, recompute=RecomputeMode.FULL),
    printed_tflops_per_gpu=140, tflops_convention="hardware",
    assumptions=(("stated: 1,024 A100, batch 1536, 140 TF/s per GPU for GPT-3 175B (Sec. 1); "
                 "fp16 mixed precision, full recomputation, TP8 within a node (Sec. 5)"),
                 "not printed for this run: PP8 x DP16 and 2 virtual stages taken"),
    confidence="high for states and activations (full recomputation stores one input per "
               "layer); the mesh split is an assumption",
)

MT_NLG_530B = PublishedRun(
    id="mt-nlg-530b", description="Megatron-Turing NLG 530B on 4,480 A100",
    source="Smith et al. 2022, arXiv:2201.11990, Sec. 2.2-2.3 and 3",
    model_preset="gpt-530b", gpu="a100-sxm4-80gb", num_nodes=560, gpus_per_node=8,
    training=_MEGATRON_2021.model_copy(update={"global_batch_size": 1920}),
    parallel=ParallelConfig(tp=8, pp=35, dp=16, schedule=PipelineSchedule.ONE_F_ONE_B,
                            micro_batch_size=1, zero_stage=0, recompute=RecomputeMode.FULL),
    assumptions=(("stated: 105 layers, hidden 20480, 128 heads, sequence 2048, batch 1920, "
                 "8-way tensor x 35-way pipeline per 280-GPU replica, data parallel to 4,480 "
                 "A100 80GB, mixed precision, gradient checkpointing (Sec. 2.3, 3)"),
                 ("not printed: optimizer sharding (none taken: an upper bound) and the "
                 "micro-batch (1 taken)")),
    confidence="high: the ledger takes the larger states when a choice is not printed",
)

BLOOM_176B_MODEL = ModelSpec(
    name="bloom-176b", num_layers=70, hidden_size=14336, num_attention_heads=112,
    ffn_hidden_size=4 * 14336, mlp=MlpKind.GELU, norm=NormKind.LAYERNORM, linear_bias=True,
    attention_bias=True, vocab_size=250880, tie_word_embeddings=True,
    learned_position_embeddings=0, max_position_embeddings=2048)
"""BLOOM 176B: 70 layers, hidden 14336, 112 heads, 250,880-token vocabulary, ALiBi (no
position table), tied embeddings (Le Scao et al. 2022, arXiv:2211.05100, Table 3)."""

BLOOM_176B = PublishedRun(
    id="bloom-176b", description="BLOOM 176B on 384 A100",
    source="BigScience tr11-176B-ml (README and slurm); Le Scao et al. 2022, "
           "arXiv:2211.05100, Sec. 3.4",
    model_preset="bloom-176b", model=BLOOM_176B_MODEL, gpu="a100-sxm4-80gb", num_nodes=48,
    gpus_per_node=8,
    training=TrainingSpec(global_batch_size=2048, sequence_length=2048, flash_attention=False,
                          dropout=False, overlap_grad_reduce=False),
    parallel=ParallelConfig(tp=4, pp=12, dp=8, schedule=PipelineSchedule.ONE_F_ONE_B,
                            micro_batch_size=2, zero_stage=1, recompute=RecomputeMode.FULL),
    printed_tflops_per_gpu=150, tflops_convention="hardware",
    assumptions=(("stated: TP4 x PP12 x DP8, micro-batch 2, global batch 2048, BF16 with "
                 "ZeRO-1-sharded optimizer states, full activation checkpointing, no "
                 "dropout, DeepSpeed's 1F1B pipeline (tr11 slurm)"),),
    confidence="high: every memory-relevant choice is printed",
)


def published_runs() -> list[PublishedRun]:
    """Every published run preset."""
    return (_megatron_2021_runs() + _korthikanti_runs() + list(PUBLISHED_SYSTEMS))


PUBLISHED_SYSTEMS: tuple[PublishedRun, ...] = (
    LLAMA3_405B_8K, LLAMA3_405B_16K, DEEPSEEK_V3_2048, KIMI_K2_256, KIMI_K2_4096, GPT3_175B,
    MT_NLG_530B, BLOOM_176B)
"""The landmark systems, each with its published recipe (the acceptance set of the ledger)."""


def run_model(run: PublishedRun) -> ModelSpec:
    """The architecture of a run: its own, or its catalog preset."""
    return run.model if run.model is not None else model_preset(run.model_preset)


def published_run(run_id: str) -> PublishedRun:
    """A published run by id."""
    for run in published_runs():
        if run.id == run_id:
            return run
    from models.errors import InvalidSpecError

    raise InvalidSpecError(f"unknown published run '{run_id}'; known: "
                           + ", ".join(r.id for r in published_runs()), field="preset")


__all__ = [
    "BLOOM_176B",
    "BLOOM_176B_MODEL",
    "DEEPSEEK_V3_2048",
    "GPT3_175B",
    "KIMI_K2_256",
    "KIMI_K2_4096",
    "LLAMA3_405B_8K",
    "LLAMA3_405B_16K",
    "LLAMA3_405B_VIRTUAL_STAGES",
    "MT_NLG_530B",
    "PUBLISHED_SYSTEMS",
    "PublishedRun",
    "published_run",
    "published_runs",
    "run_model",
]
