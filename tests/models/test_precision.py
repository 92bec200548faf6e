"""Model-state bytes: ZeRO Table 1 and the 7.5B / N_d = 64 example."""

import pytest

from api_schemas import DType, Fp8WeightStorage, OptimizerKind, TrainingSpec
from models.core.precision import (
    fp8_weight_quantisation_bytes,
    sharded_state_bytes,
    state_bytes_per_param,
)

ZERO_RECIPE = TrainingSpec(global_batch_size=1, sequence_length=1, param_dtype=DType.FP16,
                           grad_dtype=DType.FP16, optimizer=OptimizerKind.ADAM)

# ZeRO (arXiv:1910.02054) Table 1: per-device model-state memory in GB (1e9 bytes).
RAJ20_TABLE1 = {
    7.5e9: {1: (120, 120, 120), 4: (52.5, 41.3, 30), 16: (35.6, 21.6, 7.5),
            64: (31.4, 16.6, 1.88), 256: (30.4, 15.4, 0.47), 1024: (30.1, 15.1, 0.12)},
    128e9: {1: (2048, 2048, 2048), 4: (896, 704, 512), 16: (608, 368, 128),
            64: (536, 284, 32), 256: (518, 263, 8), 1024: (513, 257, 2)},
    1e12: {1: (16000, 16000, 16000), 4: (7000, 5500, 4000), 16: (4750, 2875, 1000),
           64: (4187, 2218, 250), 256: (4046, 2054, 62.5), 1024: (4011, 2013, 15.6)},
}


def _printed_precision(value: float) -> float:
    text = repr(value)
    return 10.0 ** -(len(text.split(".")[1]) if "." in text else 0)


@pytest.mark.parametrize("psi", sorted(RAJ20_TABLE1))
def test_sharded_state_bytes_matches_RAJ20_table1(psi: float) -> None:
    per_param = state_bytes_per_param(ZERO_RECIPE)
    assert per_param.total == 16
    for n_d, printed in RAJ20_TABLE1[psi].items():
        for stage, value in zip((1, 2, 3), printed, strict=True):
            got = sharded_state_bytes(int(psi), per_param, zero_stage=stage,
                                      shard_degree=n_d).total_bytes / 1e9
            # Table cells are truncated or rounded to their printed digits.
            assert abs(got - value) <= _printed_precision(value), (psi, n_d, stage, got)


def test_7_5b_dp64_example_matches_RAJ20_figure1() -> None:
    per_param = state_bytes_per_param(ZERO_RECIPE)
    got = [round(sharded_state_bytes(7_500_000_000, per_param, zero_stage=z,
                                     shard_degree=64).total_bytes / 1e9, 1) for z in range(4)]
    assert got == [120.0, 31.4, 16.6, 1.9]


def test_megatron_bf16_recipe_is_18_bytes() -> None:
    # bf16 weights, fp32 main_grad, fp32 master, fp32 Adam moments: 2 + 4 + 4 + 8.
    recipe = TrainingSpec(global_batch_size=1, sequence_length=1)
    assert state_bytes_per_param(recipe).total == 18


def test_fp8_recipes_keep_a_copy_or_shrink_weights() -> None:
    default = TrainingSpec(global_batch_size=1, sequence_length=1, compute_dtype=DType.FP8)
    fp8_only = default.model_copy(update={"fp8_weight_storage": Fp8WeightStorage.FP8_ONLY})
    assert state_bytes_per_param(default).total == 20  # TE default costs more than bf16
    assert state_bytes_per_param(fp8_only).total == 17
    on_the_fly = default.model_copy(update={"fp8_weight_storage": Fp8WeightStorage.ON_THE_FLY})
    assert state_bytes_per_param(on_the_fly).total == 18  # no cached copy (DeepSeek-V3)
    assert state_bytes_per_param(default, is_gemm_weight=False).total == 18


def test_muon_keeps_one_moment_for_matrices_and_adamw_elsewhere() -> None:
    muon = TrainingSpec(global_batch_size=1, sequence_length=1, optimizer=OptimizerKind.MUON)
    assert state_bytes_per_param(muon, is_matrix=True).moments == 4
    assert state_bytes_per_param(muon, is_matrix=False).moments == 8
    sgd = muon.model_copy(update={"optimizer": OptimizerKind.SGD, "master_dtype": None})
    assert state_bytes_per_param(sgd).optimizer == 0


def test_on_the_fly_fp8_quantisation_reads_the_weight_and_writes_two_fp8_copies() -> None:
    # DeepSeek-V3 Sec. 3.3.2: 128 x 128 weight blocks, one fp32 scale each.
    n = 128 * 128
    assert fp8_weight_quantisation_bytes(n, param_bytes=2) == n * 2 + n * 2 + 2 * 4
