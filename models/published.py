"""Published training systems as presets: what each paper ran and what it measured.

Owns: the configuration (model preset, cluster, recipe, parallel layout) and the printed
figures of a few landmark runs, each with its source, so the planner can load them, score
them and explain how its own plan differs. Fields a paper does not state are chosen as
documented in each run's `assumptions`. Must not: compute anything.
"""

from dataclasses import dataclass, field

from api_schemas.dtypes import DType
from api_schemas.parallel import ParallelConfig, PipelineSchedule, RecomputeMode, RecomputeModule
from api_schemas.training import OptimizerKind, TrainingSpec
from models.catalog import MEGATRON_2021_TABLE1


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

    @property
    def world_size(self) -> int:
        """GPUs of the run."""
        return self.num_nodes * self.gpus_per_node


_MEGATRON_2021 = TrainingSpec(global_batch_size=1, sequence_length=2048, dropout=True,
                              flash_attention=False, overlap_grad_reduce=False)

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
            training=_MEGATRON_2021.model_copy(update={"global_batch_size": batch}),
            parallel=ParallelConfig(tp=t, pp=p, dp=n // (t * p), vpp=vpp, schedule=schedule,
                                    micro_batch_size=1, zero_stage=0,
                                    recompute=RecomputeMode.FULL),
            printed_tflops_per_gpu=tflops, tflops_convention="hardware",
            assumptions=("micro-batch size not printed: the best predicted of 1, 2, 4, 8",
                         "interleaved schedule with 2 chunks where layers allow (not printed)",
                         "no sequence parallelism, full recomputation, fp16 mixed precision, "
                         "materialised attention, data-parallel all-reduce after the flush"),
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
            training=_MEGATRON_2021.model_copy(update={"global_batch_size": batch}),
            parallel=ParallelConfig(tp=8, pp=p, dp=1, vpp=vpp, schedule=schedule,
                                    micro_batch_size=mbs, zero_stage=0, sequence_parallel=True,
                                    recompute=RecomputeMode.SELECTIVE),
            printed_mfu=mfu, printed_iteration_time_s=time_s,
            assumptions=("530B uses 3 interleaved chunks (105 layers / 35 stages),",)
            if name == "gpt-530b" else ()))
    return runs


LLAMA3_405B_16K = PublishedRun(
    id="llama3-405b-16k", description="Llama 3 405B pre-training on 16,384 H100 (8K context)",
    source="Llama 3 Herd of Models, arXiv:2407.21783, Table 4 and Sec. 3.3",
    model_preset="llama-3.1-405b", gpu="h100-sxm5-80gb", num_nodes=2048, gpus_per_node=8,
    training=TrainingSpec(global_batch_size=2048, sequence_length=8192),
    parallel=ParallelConfig(tp=8, pp=16, dp=128, vpp=7, schedule=PipelineSchedule.INTERLEAVED_1F1B,
                            micro_batch_size=1, zero_stage=1, sequence_parallel=True,
                            recompute=RecomputeMode.SELECTIVE,
                            recompute_modules=(RecomputeModule.CORE_ATTN,
                                               RecomputeModule.LAYERNORM),
                            layers_per_stage=(7,) + (8,) * 14 + (7,)),
    printed_tflops_per_gpu=400, printed_mfu=0.41,
    assumptions=("one layer fewer on the first and last stages (Sec. 3.3.2)",
                 "virtual stages and micro-batch not printed: 7 chunks per rank, about one "
                 "layer each", "FSDP in the paper modelled as ZeRO-1",
                 "recomputation not printed: selective recomputation of the attention core "
                 "and norms (without it the ledger finds stage 1 about 6 GiB over 80 GiB)"),
)

DEEPSEEK_V3_2048 = PublishedRun(
    id="deepseek-v3-2048", description="DeepSeek-V3 pre-training on 2,048 H800",
    source="DeepSeek-V3 Technical Report, arXiv:2412.19437, Sec. 3.1-3.3 and Table 1",
    model_preset="deepseek-v3", gpu="h800-sxm5-80gb", num_nodes=256, gpus_per_node=8,
    training=TrainingSpec(global_batch_size=15360, sequence_length=4096, compute_dtype=DType.FP8,
                          optimizer=OptimizerKind.ADAMW, optimizer_state_dtype=DType.BF16,
                          moe_keep_expert_outputs=False),
    parallel=ParallelConfig(pp=16, dp=128, ep=64, schedule=PipelineSchedule.DUALPIPE,
                            zero_stage=1, recompute=RecomputeMode.SELECTIVE,
                            recompute_modules=(RecomputeModule.LAYERNORM,
                                               RecomputeModule.MLA_UP_PROJ,
                                               RecomputeModule.MOE_ACT),
                            fp8_activations=True),
    printed_tokens_per_s_per_gpu=1e12 / (180_000 * 3600),
    assumptions=("throughput from 180K H800 GPU-hours per trillion tokens (a whole-run "
                 "average)", "micro-batch of one 4K sequence"),
)

KIMI_K2_256 = PublishedRun(
    id="kimi-k2-256", description="Kimi K2 on the smallest unit of 256 H800",
    source="Kimi K2 Technical Report, arXiv:2507.20534, Sec. 2.4",
    model_preset="kimi-k2-instruct", gpu="h800-sxm5-80gb", num_nodes=32, gpus_per_node=8,
    training=TrainingSpec(global_batch_size=1024, sequence_length=4096,
                          optimizer=OptimizerKind.MUON, overlap_ep_comm=True),
    parallel=ParallelConfig(pp=16, dp=16, ep=16, vpp=2, schedule=PipelineSchedule.INTERLEAVED_1F1B,
                            zero_stage=1, recompute=RecomputeMode.SELECTIVE,
                            recompute_modules=(RecomputeModule.LAYERNORM,
                                               RecomputeModule.MLA_UP_PROJ,
                                               RecomputeModule.MOE_ACT),
                            fp8_activations=True, activation_offload_frac=0.5),
    assumptions=("global batch, virtual stages and offload share not printed",
                 "FP8 storage of MoE up-projection / SwiGLU inputs and CPU offload as Sec. 2.4",
                 "with EP16 x PP16 on 256 GPUs each expert has one replica, so its master "
                 "weights and momentum cannot be sharded; the ledger finds this layout over "
                 "80 GiB unless optimizer states leave the GPU, which it does not model"),
)


def published_runs() -> list[PublishedRun]:
    """Every published run preset."""
    return (_megatron_2021_runs() + _korthikanti_runs()
            + [LLAMA3_405B_16K, DEEPSEEK_V3_2048, KIMI_K2_256])


def published_run(run_id: str) -> PublishedRun:
    """A published run by id."""
    for run in published_runs():
        if run.id == run_id:
            return run
    from models.errors import InvalidSpecError

    raise InvalidSpecError(f"unknown published run '{run_id}'; known: "
                           + ", ".join(r.id for r in published_runs()), field="preset")


__all__ = ["DEEPSEEK_V3_2048", "KIMI_K2_256", "LLAMA3_405B_16K", "PublishedRun",
           "published_run", "published_runs"]
