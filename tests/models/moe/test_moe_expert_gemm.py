"""Expert GEMM work inside a rank: padded rows and the per-expert GEMM time sum."""

import pytest

from api_schemas.dtypes import DType
from models.catalog.kernels import gemm_time_s
from models.catalog.presets import gpu_preset
from models.core.moe import expert_forward_gemm_s, padded_rows, rank_expert_gemm_s
from models.errors import InvalidSpecError

H100 = gpu_preset("h100-sxm5-80gb")
SHAPE = {"hidden_size": 7168, "expert_ffn_hidden_size": 2048, "gpu": H100,
         "dtype": DType.BF16, "tile_rows": 128}


def test_rows_round_each_expert_up_to_whole_tiles() -> None:
    assert padded_rows([128, 1, 0, 129], tile_rows=128) == 128 + 128 + 0 + 256
    with pytest.raises(InvalidSpecError):
        padded_rows([-1], tile_rows=128)


def test_one_expert_is_its_gate_up_and_down_gemms_at_padded_rows() -> None:
    expected = (gemm_time_s(256, 4096, 7168, gpu=H100, dtype=DType.BF16)
                + gemm_time_s(256, 7168, 2048, gpu=H100, dtype=DType.BF16))
    assert expert_forward_gemm_s(200, **SHAPE) == pytest.approx(expected)
    assert expert_forward_gemm_s(0, **SHAPE) == 0.0


def test_equal_rows_split_over_more_experts_take_longer() -> None:
    # Exact rank balance (512 tokens each) but a different expert mix: one full expert
    # against four partial ones that each pad and launch their own GEMMs.
    one = rank_expert_gemm_s([512, 0, 0, 0], **SHAPE)
    four = rank_expert_gemm_s([200, 100, 100, 112], **SHAPE)
    assert four > one
    assert four == pytest.approx(sum(expert_forward_gemm_s(n, **SHAPE)
                                     for n in (200, 100, 100, 112)))
