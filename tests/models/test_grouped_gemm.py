"""Grouped expert GEMMs at their real per-expert shapes."""

import pytest

from api_schemas import DType
from models.catalog.kernels import GEMM_IO_FACTOR, gemm_time_s, grouped_gemm_time_s
from models.catalog.presets import gpu_preset

H100 = gpu_preset("h100-sxm5-80gb")


def test_one_group_is_the_plain_gemm() -> None:
    assert grouped_gemm_time_s(1, 4096, 1536, 2048, gpu=H100, dtype=DType.BF16) == \
        pytest.approx(gemm_time_s(4096, 1536, 2048, gpu=H100, dtype=DType.BF16), rel=1e-12)


def test_few_tokens_per_expert_pay_every_expert_s_weights() -> None:
    """16 local experts with 128 tokens each: the same FLOPs as one 2048-row GEMM, but each
    expert's k x n weights are read, so the grouped launch is slower by at least those
    extra bytes."""
    grouped = grouped_gemm_time_s(16, 128, 1536, 2048, gpu=H100, dtype=DType.BF16)
    merged = gemm_time_s(16 * 128, 1536, 2048, gpu=H100, dtype=DType.BF16)
    extra_weights = GEMM_IO_FACTOR * 2 * 15 * 1536 * 2048 / H100.hbm_bandwidth_bytes_per_s
    assert grouped - merged >= 0.9 * extra_weights > 0
