"""The best step-level MFU published for each GPU and compute format.

Owns: one record per (GPU, format) with the measurement's run, source and figure, in the
Megatron-LM / PaLM full-attention convention the sources print, and `mfu_above_record`,
which says when a predicted MFU beats it. Must not: predict anything.
"""

from dataclasses import dataclass

from api_schemas.dtypes import DType


@dataclass(frozen=True, slots=True, kw_only=True)
class MfuRecord:
    """The highest published training MFU on one GPU in one compute format."""

    gpu: str
    dtype: DType
    mfu: float
    run: str
    """The run's id in the project's published-run data."""
    source: str


RECORDS: tuple[MfuRecord, ...] = (
    MfuRecord(gpu="a100-sxm4-80gb", dtype=DType.BF16, mfu=0.72, run="fa2-t1-gpt3-2.7b-8k-flashattention-2",
              source="FlashAttention-2 (Dao 2023, arXiv:2307.08691) Table 1: GPT3-2.7B at 8K "
                     "context, 225 TFLOP/s per A100 (312 peak)"),
    MfuRecord(gpu="h100-sxm5-80gb", dtype=DType.BF16, mfu=0.535,
              run="nemotron4-340b-ngc-128gpu-bf16",
              source="NVIDIA NGC Nemotron-4 340B BF16 on 128 H100: 53.5% MFU"),
    MfuRecord(gpu="h100-sxm5-80gb", dtype=DType.FP8, mfu=0.449,
              run="nemo2407-gpt3-175b-512gpu",
              source="NeMo 24.07 performance summary: GPT3-175B FP8 on 512 H100, 888 TFLOP/s "
                     "per GPU (1979 peak)"),
    MfuRecord(gpu="b200-sxm-180gb", dtype=DType.FP8, mfu=0.37,
              run="bridge-25.11-dgx-b200-llama31-405b-128gpu",
              source="Megatron-Bridge 25.11 performance summary: Llama 3.1 405B FP8 on 128 "
                     "B200, 1667 TFLOP/s per GPU (4500 peak)"),
)


def best_published_mfu(gpu: str, dtype: DType) -> MfuRecord | None:
    """The record for a GPU id and compute format, or None where none is published here."""
    key = DType.BF16 if dtype == DType.FP16 else dtype
    return next((r for r in RECORDS if r.gpu == gpu and r.dtype == key), None)


def mfu_above_record(gpu: str, dtype: DType, mfu_full_attention: float) -> str | None:
    """A note when a predicted MFU (full-attention convention) exceeds the best published
    measurement for its GPU and format, naming that measurement; else None."""
    record = best_published_mfu(gpu, dtype)
    if record is None or mfu_full_attention <= record.mfu:
        return None
    return (f"predicted MFU {mfu_full_attention:.1%} (full-attention convention) exceeds the "
            f"best published measurement for {gpu} {dtype.value}, {record.mfu:.1%} "
            f"({record.source}): treat this plan's throughput as optimistic")


__all__ = ["RECORDS", "MfuRecord", "best_published_mfu", "mfu_above_record"]
