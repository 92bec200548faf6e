"""Muon: Newton-Schulz FLOPs as the Muon write-up counts them, and how sharding spreads it."""

import pytest

from api_schemas import ParallelConfig, TrainingSpec
from models.catalog.presets import cluster_preset, gpu_preset, model_preset
from models.core.muon import NEWTON_SCHULZ_STEPS, newton_schulz_flops, rank_matrices
from models.core.step_time import estimate_step


@pytest.mark.parametrize(("m", "tokens", "printed"), [(768, 524_288, 0.007),
                                                       (16_384, 16 * 2**20, 0.005)])
def test_newton_schulz_overhead_is_t_m_over_b(m: int, tokens: int, printed: float) -> None:
    """Jordan et al. 2024: the FLOP overhead of Muon over training an m x m matrix on B
    tokens per step is T m / B: 0.7% for NanoGPT speedrunning, 0.5% for Llama 405B."""
    training_flops = 6 * m * m * tokens
    overhead = newton_schulz_flops(m, m) / training_flops
    assert overhead == pytest.approx(NEWTON_SCHULZ_STEPS * m / tokens, rel=1e-12)
    assert overhead == pytest.approx(printed, abs=0.0005)
    # The iteration runs on the wide orientation: a tall matrix costs what its transpose does.
    assert newton_schulz_flops(4096, 14336) == newton_schulz_flops(14336, 4096)


def test_rank_matrices_are_the_tensor_parallel_shards_without_embeddings() -> None:
    spec = model_preset("llama-3.1-8b")
    gpu = gpu_preset("h100-sxm5-80gb")
    whole = sum(m.params for m in rank_matrices(spec, ParallelConfig(), tuple(range(32)), gpu))
    split = sum(m.params for m in rank_matrices(spec, ParallelConfig(tp=4), tuple(range(32)),
                                                gpu))
    # 32 layers of QKV (4096 x 6144), output (4096 x 4096), gate-up and down (3 x 4096 x 14336).
    assert whole == 32 * (4096 * 6144 + 4096 * 4096 + 3 * 4096 * 14336)
    assert split == whole // 4


def test_sharded_muon_pays_gathers_and_owners_divide_the_work() -> None:
    spec = model_preset("llama-3.1-8b")
    cluster = cluster_preset("h100-sxm5-80gb", num_nodes=2)
    parallel = ParallelConfig(dp=16, zero_stage=1)

    def terms(**training: object) -> tuple[float, dict[str, float]]:
        est = estimate_step(spec, TrainingSpec(global_batch_size=256, sequence_length=4096,
                                               **training), parallel, cluster)
        return est.step_time_s, est.overheads_s

    adam_step, adam = terms()
    gather_step, gather = terms(optimizer="muon")
    owner_step, owner = terms(optimizer="muon", muon_distribution="owner_p2p")
    assert "Muon Newton-Schulz" not in adam
    assert owner["Muon Newton-Schulz"] == pytest.approx(gather["Muon Newton-Schulz"] / 16)
    assert 0 < owner["Muon matrix gathers"] < gather["Muon matrix gathers"]
    assert adam_step < owner_step < gather_step
    replicated = estimate_step(spec, TrainingSpec(global_batch_size=256, sequence_length=4096,
                                                  optimizer="muon"),
                               ParallelConfig(dp=16, zero_stage=0), cluster)
    assert replicated.overheads_s.get("Muon matrix gathers", 0.0) == 0.0
    assert replicated.overheads_s["Muon Newton-Schulz"] == gather["Muon Newton-Schulz"]
