"""Published training records per GPU family, format and kind, and the plausibility note
every plan carries.

Owns: the table of published step-level records (rows of research/data/published_runs.json,
and one README figure named by its file: its GPU, compute format, dense or MoE, model, cluster
size, MFU and tokens/s per GPU as printed, source), the choice of the closest record for a
plan, and the note that compares the plan with it. Must not: predict anything, or read the
error table itself (the caller passes the band's upper error, `models.evidence.error_bands`).

A record's MFU is the source's own figure, or its printed model TFLOP/s per GPU over the
GPU's dense peak in that format (models/data/hardware.json). The Megatron-LM 2021,
Korthikanti 2022, Llama 3 and NGC rows count attention in full (the Megatron-LM / PaLM
convention the plan's `mfu_full_attention` uses); the Megatron-Bridge rows count causal
attention (their summary says so), which understates their full-attention MFU by the
attention share: comparing a plan with them is strict, never lenient.
"""

import math
from dataclasses import dataclass

from api_schemas.dtypes import DType
from models.catalog.kernels import FAMILY_PREFIXES
from models.catalog.presets import gpu_preset


@dataclass(frozen=True, slots=True, kw_only=True)
class PublishedRecord:
    """One published training measurement a plan of its kind is compared with."""

    run: str | None
    """The run's id in research/data/published_runs.json; None for a figure that file does
    not hold (its `source` then names the repository file it is printed in)."""
    gpu: str
    """Catalog GPU id the run maps to."""
    dtype: DType
    moe: bool
    model: str
    """The model as the source names it."""
    preset: str | None
    """The catalog preset of that model (the same architecture), when there is one."""
    num_gpus: int
    mfu: float | None
    """Model FLOPs utilisation as printed or derived (module docstring); None: not printed."""
    tokens_per_s_per_gpu: float | None
    source: str


RECORDS: tuple[PublishedRecord, ...] = (
    # Ampere (A100; the A800 of Skywork-MoE is mapped to it, its NVLink cut aside).
    PublishedRecord(
        run="fa2-t1-gpt3-2.7b-8k-flashattention-2", gpu="a100-sxm4-80gb", dtype=DType.BF16,
        moe=False, model="GPT3-2.7B (8K context)", preset=None, num_gpus=8, mfu=225 / 312,
        tokens_per_s_per_gpu=None,
        source="FlashAttention-2 (Dao 2023, arXiv:2307.08691) Table 1: 225 TFLOP/s per A100"),
    PublishedRecord(
        run="korthikanti2022-t5-1t-sp-selective", gpu="a100-sxm4-80gb", dtype=DType.BF16,
        moe=False, model="GPT 1T", preset=None, num_gpus=512, mfu=0.563,
        tokens_per_s_per_gpu=None,
        source="Korthikanti et al. 2022 (arXiv:2205.05198) Table 5: 56.3% MFU"),
    PublishedRecord(
        run="skywork-moe-1536gpu", gpu="a100-sxm4-80gb", dtype=DType.BF16, moe=True,
        model="Skywork-MoE 146B (16 experts)", preset=None, num_gpus=1536, mfu=0.38,
        tokens_per_s_per_gpu=690,
        source="Skywork-MoE (arXiv:2406.06563) App. B.3: 38% MFU, 690 tokens/s per GPU on "
               "1,536 A800"),
    # Hopper (H100, H800, H200, GH200).
    PublishedRecord(
        run="nemotron4-340b-ngc-128gpu-bf16", gpu="h100-sxm5-80gb", dtype=DType.BF16,
        moe=False, model="Nemotron-4 340B", preset=None, num_gpus=128, mfu=0.5352,
        tokens_per_s_per_gpu=None,
        source="NVIDIA NGC Nemotron-4 340B BF16 on 128 H100: 53.5% MFU"),
    PublishedRecord(
        run="llama3-t4-405b-8192gpu-seq8192", gpu="h100-sxm5-80gb", dtype=DType.BF16,
        moe=False, model="Llama 3 405B", preset="llama-3.1-405b", num_gpus=8192, mfu=0.43,
        tokens_per_s_per_gpu=None,
        source="Llama 3 (arXiv:2407.21783) Table 4: 430 TFLOP/s, 43% BF16 MFU on 8,192 H100"),
    PublishedRecord(
        run="nemo2407-gpt3-175b-512gpu", gpu="h100-sxm5-80gb", dtype=DType.FP8, moe=False,
        model="GPT3-175B", preset=None, num_gpus=512, mfu=888 / 1978.9,
        tokens_per_s_per_gpu=825,
        source="NeMo 24.07 performance summary: 888 TFLOP/s per H100 in FP8 on 512 GPUs"),
    PublishedRecord(
        run="megatron-llama-fp8-8b", gpu="h100-sxm5-80gb", dtype=DType.FP8, moe=False,
        model="Llama 3 8B", preset="llama-3.1-8b", num_gpus=8, mfu=800 / 1978.9,
        tokens_per_s_per_gpu=13812,
        source="Megatron-LM Llama FP8 table: 13,812 tokens/s, 800 TFLOP/s per H100 on 8 GPUs"),
    PublishedRecord(
        run="torchtitan-h200-8b-32gpu-float8", gpu="h200-sxm-141gb", dtype=DType.FP8,
        moe=False, model="Llama 3.1 8B", preset="llama-3.1-8b", num_gpus=32, mfu=None,
        tokens_per_s_per_gpu=10938,
        source="torchtitan benchmarks: 10,938 tokens/s per H200 (float8 linears) on 32 GPUs"),
    PublishedRecord(
        run=None, gpu="h100-sxm5-80gb", dtype=DType.BF16, moe=True, model="Mixtral 8x7B",
        preset="mixtral-8x7b", num_gpus=64, mfu=468 / 989.4, tokens_per_s_per_gpu=None,
        source="Megatron-LM megatron/core/transformer/moe/README.md (MCore v0.9): Mixtral 8x7B "
               "BF16 at 468 TFLOP/s per H100, at its reference mapping on 64 GPUs (TP1 EP8 "
               "PP4 VP8, sequence 4096)"),
    PublishedRecord(
        run="bridge-26.04.01-dgx-h100-gpt-oss-120b-64gpu", gpu="h100-sxm5-80gb",
        dtype=DType.BF16, moe=True, model="GPT-OSS-120B", preset=None, num_gpus=64,
        mfu=158 / 989.4, tokens_per_s_per_gpu=5824,
        source="Megatron-Bridge 26.04.01 performance summary: 5,824 tokens/s, 158 TFLOP/s "
               "per H100 (BF16, causal count) on 64 GPUs"),
    PublishedRecord(
        run="bridge-26.04.01-dgx-h100-qwen3-235b-a22b-256gpu", gpu="h100-sxm5-80gb",
        dtype=DType.FP8, moe=True, model="Qwen3-235B-A22B", preset="qwen3-235b-a22b",
        num_gpus=256, mfu=253 / 1978.9, tokens_per_s_per_gpu=1712,
        source="Megatron-Bridge 26.04.01 performance summary: 1,712 tokens/s, 253 TFLOP/s "
               "per H100 (FP8, causal count) on 256 GPUs"),
    PublishedRecord(
        run="bridge-26.04.01-dgx-h100-qwen3-30b-a3b-16gpu", gpu="h100-sxm5-80gb",
        dtype=DType.FP8, moe=True, model="Qwen3-30B-A3B", preset="qwen3-30b-a3b",
        num_gpus=16, mfu=206 / 1978.9, tokens_per_s_per_gpu=8960,
        source="Megatron-Bridge 26.04.01 performance summary: 8,960 tokens/s, 206 TFLOP/s "
               "per H100 (FP8, causal count) on 16 GPUs"),
    PublishedRecord(
        run="deepseek-v3-pretrain", gpu="h800-sxm5-80gb", dtype=DType.FP8, moe=True,
        model="DeepSeek-V3", preset="deepseek-v3", num_gpus=2048, mfu=None,
        tokens_per_s_per_gpu=1e12 / (180e3 * 3600.0),
        source="DeepSeek-V3 (arXiv:2412.19437) Sec. 1: 180K H800 GPU-hours per trillion "
               "tokens on 2,048 H800, 1,543 tokens/s per GPU (a whole-run average)"),
    # Blackwell (B200, GB200, B300).
    PublishedRecord(
        run="bridge-25.11-dgx-b200-llama31-405b-128gpu", gpu="b200-sxm-180gb", dtype=DType.FP8,
        moe=False, model="Llama 3.1 405B", preset="llama-3.1-405b", num_gpus=128,
        mfu=1667 / 4500, tokens_per_s_per_gpu=661,
        source="Megatron-Bridge 25.11 performance summary: 661 tokens/s, 1,667 TFLOP/s per "
               "B200 (FP8, causal count) on 128 GPUs"),
    PublishedRecord(
        run="bridge-25.11-dgx-b200-llama3-8b-8gpu", gpu="b200-sxm-180gb", dtype=DType.FP8,
        moe=False, model="Llama 3 8B", preset="llama-3.1-8b", num_gpus=8, mfu=1576 / 4500,
        tokens_per_s_per_gpu=30624,
        source="Megatron-Bridge 25.11 performance summary: 30,624 tokens/s, 1,576 TFLOP/s "
               "per B200 (FP8, causal count) on 8 GPUs"),
    PublishedRecord(
        run="bridge-25.11-dgx-b200-gpt-oss-120b-64gpu", gpu="b200-sxm-180gb", dtype=DType.BF16,
        moe=True, model="GPT-OSS-120B", preset=None, num_gpus=64, mfu=223 / 2250,
        tokens_per_s_per_gpu=8213,
        source="Megatron-Bridge 25.11 performance summary: 8,213 tokens/s, 223 TFLOP/s per "
               "B200 (BF16, causal count) on 64 GPUs"),
    PublishedRecord(
        run="bridge-26.04.01-dgx-b200-deepseekv3-256gpu", gpu="b200-sxm-180gb",
        dtype=DType.FP8, moe=True, model="DeepSeek-V3", preset="deepseek-v3", num_gpus=256,
        mfu=864 / 4500, tokens_per_s_per_gpu=3328,
        source="Megatron-Bridge 26.04.01 performance summary: 3,328 tokens/s, 864 TFLOP/s "
               "per B200 (MXFP8, causal count) on 256 GPUs"),
)
"""The records. CDNA 3 (MI300X, MI325X) and CDNA 4 have none: no published MI300X training
run with its layout, format and measured throughput was read (research/CALIBRATION.md,
CDNA3)."""


def _family(gpu_id: str) -> str | None:
    gid = gpu_id.lower()
    return next((family for family, prefixes in FAMILY_PREFIXES.items()
                 if gid.startswith(prefixes)), None)


def _format(dtype: DType) -> DType:
    return DType.BF16 if dtype == DType.FP16 else dtype


def records_for(gpu_id: str, dtype: DType, *, moe: bool) -> tuple[PublishedRecord, ...]:
    """The records of a GPU's family in a compute format (FP16 counts as BF16), of one kind."""
    family = _family(gpu_id)
    key = _format(dtype)
    return tuple(r for r in RECORDS
                 if family is not None and _family(r.gpu) == family and r.dtype == key
                 and r.moe == moe)


def closest_record(gpu_id: str, dtype: DType, *, moe: bool, preset: str | None,
                   num_gpus: int) -> PublishedRecord | None:
    """The record a plan is compared with, among its family, format and kind: the best one
    of the same model when one is published (highest MFU, then tokens/s per GPU: the check
    is against a ceiling, so a slower run of the same model is not the one to beat); else,
    of those with an MFU, the same GPU first, then the nearest cluster size (ratio of GPU
    counts), then the higher MFU."""
    pool = records_for(gpu_id, dtype, moe=moe)
    same_model = [r for r in pool if preset is not None and r.preset == preset]
    if same_model:
        return max(same_model, key=lambda r: (r.mfu or 0.0, r.tokens_per_s_per_gpu or 0.0))
    candidates = [r for r in pool if r.mfu is not None] or list(pool)
    if not candidates:
        return None
    return min(candidates, key=lambda r: (r.gpu != gpu_id,
                                          abs(math.log(r.num_gpus / max(1, num_gpus))),
                                          -(r.mfu or 0.0)))


def _same_peak(record: PublishedRecord, dtype: DType, peak_flop_per_s: float) -> bool:
    """Whether the record's GPU has the plan's dense peak in the format (H100, H800, H200
    and GH200 do), so that tokens/s per GPU of one model compare directly."""
    peaks = gpu_preset(record.gpu).dense_peak_flop_per_s
    record_peak = peaks.get(_format(dtype))
    return record_peak is not None and math.isclose(record_peak, peak_flop_per_s, rel_tol=0.01)


def _kind(moe: bool) -> str:
    return "MoE" if moe else "dense"


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanFigures:
    """What `plausibility_note` compares of a plan: its GPU, format, kind, model and size,
    its predicted MFU and tokens/s per GPU, and the upper step-time error of its band."""

    gpu_id: str
    gpu_name: str
    dtype: DType
    moe: bool
    preset: str | None
    num_gpus: int
    mfu_full_attention: float
    tokens_per_s_per_gpu: float
    band_high: float | None
    """The band's upper step-time error e_90 (None: no band backs the GPU)."""
    peak_flop_per_s: float
    """The plan's GPU's dense peak in the format."""


def plausibility_note(plan: PlanFigures) -> str:
    """The note comparing a plan with its closest published record (`closest_record`).

    The plan exceeds the record by more than the error band when its figure divided by
    (1 + e_90) is still above the record's, e_90 being the band's upper step-time error
    (`models.evidence.error_bands`; tokens/s and MFU are inversely proportional to the step time),
    floored at 0; without a band any excess counts. MFU is compared when the record prints
    one; tokens/s per GPU only for the same model on a GPU of the same dense peak in the
    format (`PlanFigures.peak_flop_per_s`). Without a record the note says none is published
    for the family, format and kind."""
    gpu_id, gpu_name, dtype, moe, preset = (plan.gpu_id, plan.gpu_name, plan.dtype, plan.moe,
                                            plan.preset)
    mfu_full_attention, tokens_per_s_per_gpu = plan.mfu_full_attention, plan.tokens_per_s_per_gpu
    band_high = plan.band_high
    family = _family(gpu_id) or gpu_id
    label = f"{family} {_format(dtype).value.upper()} {_kind(moe)}"
    figures = (f"predicted MFU {mfu_full_attention:.1%} (full-attention convention), "
               f"{tokens_per_s_per_gpu:,.0f} tokens/s per GPU")
    record = closest_record(gpu_id, dtype, moe=moe, preset=preset, num_gpus=plan.num_gpus)
    if record is None:
        return (f"plausibility: no published record for {gpu_name} ({label}) training: "
                f"{figures}, checked against no measurement")
    tolerance = max(0.0, band_high) if band_high is not None else 0.0
    band = (f"the model's error band for {family} {_kind(moe)} (+{tolerance:.0%})"
            if band_high is not None else f"no error band (none backs {gpu_name})")
    named = (f"{record.model} on {record.num_gpus:,} {record.gpu}"
             + (f", MFU {record.mfu:.1%}" if record.mfu is not None else "")
             + (f", {record.tokens_per_s_per_gpu:,.0f} tokens/s per GPU"
                if record.tokens_per_s_per_gpu is not None else "")
             + f" ({record.source})")
    excess: list[str] = []
    if record.mfu is not None and mfu_full_attention / (1.0 + tolerance) > record.mfu:
        excess.append(f"MFU by {mfu_full_attention / record.mfu - 1.0:.0%}")
    same_model = (preset is not None and record.preset == preset
                  and _same_peak(record, dtype, plan.peak_flop_per_s))
    if (same_model and record.tokens_per_s_per_gpu is not None
            and tokens_per_s_per_gpu / (1.0 + tolerance) > record.tokens_per_s_per_gpu):
        excess.append(f"tokens/s per GPU by "
                      f"{tokens_per_s_per_gpu / record.tokens_per_s_per_gpu - 1.0:.0%}")
    if excess:
        return (f"plausibility warning: {figures} exceeds the closest published record for "
                f"{label}, {named}, in " + " and ".join(excess) + f", more than {band}: "
                "treat this plan's throughput as optimistic")
    compared = " and ".join(
        ([] if record.mfu is None else ["MFU"])
        + (["tokens/s per GPU"] if same_model and record.tokens_per_s_per_gpu is not None
           else []))
    return (f"plausibility: {figures}; closest published record for {label}: {named}; "
            + (f"{compared} within the record plus {band}" if compared else
               "no MFU printed and no tokens/s of this model on a GPU of this peak: "
               "nothing compared"))


__all__ = ["RECORDS", "PlanFigures", "PublishedRecord", "closest_record",
           "plausibility_note", "records_for"]
