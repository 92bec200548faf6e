"""The cost model against one H200's own measurements (research/data/measured/h200.json,
written by research/measure_gpu.py; compared by research/compare_measured.py).

These rows are validation data: no constant was fitted on them (research/CALIBRATION.md).
"""

from pathlib import Path

import pytest

from models.catalog.presets import model_preset
from models.core.activations import LayerActivationContext, layer_activation_bytes
from research.compare_measured import (
    allocator_reserve,
    compiled_layer_comparisons,
    gemm_comparisons,
    layer_comparisons,
    load,
)

MEASURED = load(Path(__file__).resolve().parents[2] / "research/data/measured/h200.json")
LLAMA_8B = model_preset("llama-3.1-8b")


def test_eager_layer_stored_bytes_match_the_measured_layer() -> None:
    """An eager Llama 3.1 8B layer keeps 688,423,936 bytes at 4,096 tokens (measured); the
    ledger's tensors under the eager runtime come within 0.01% (the rest is each norm's fp32
    inverse RMS, 8 bytes per token, which the ledger leaves out)."""
    stored = {c.what: c for c in layer_comparisons(MEASURED) if "stored" in c.what}
    assert stored["layer stored bytes s=4096"].measured == 688_423_936
    for row in stored.values():
        assert row.ratio == pytest.approx(1.0, abs=1e-4)
        assert row.predicted <= row.measured


def test_fused_layer_differs_from_eager_by_the_silu_output_alone() -> None:
    """The fused runtime's tensors are the measured eager layer's less the SiLU output the
    eager product keeps: 2 bytes x 14,336 per token."""
    for row in MEASURED["layer"]:
        tokens = row["seq"] * row["micro_batch"]
        fused = layer_activation_bytes(LLAMA_8B, 0, LayerActivationContext(
            seq_len=row["seq"], micro_batch_size=row["micro_batch"])).total_bytes
        silu_output = 2 * LLAMA_8B.ffn_hidden_size * tokens
        assert row["stored_bytes_per_layer"] - fused == pytest.approx(silu_output, rel=2e-3)


def test_eager_silu_output_is_dropped_by_mlp_recomputation() -> None:
    """Recomputing the MLP (or torchtitan's per-op policy, which rebuilds every non-matmul
    op) rebuilds the SiLU output, so the eager layer stores what the fused one does."""
    from api_schemas.parallel import RecomputeMode, RecomputeModule

    ctx = LayerActivationContext(seq_len=4096, micro_batch_size=1)
    eager = LayerActivationContext(seq_len=4096, micro_batch_size=1, eager_elementwise=True)
    for module in (RecomputeModule.MLP, RecomputeModule.OP_SAC):
        kept = [layer_activation_bytes(LLAMA_8B, 0, c).stored_bytes(
            RecomputeMode.SELECTIVE, (module,)) for c in (ctx, eager)]
        assert kept[0] == kept[1]


def test_hopper_gemm_model_is_not_faster_than_the_measured_h200() -> None:
    """On the Llama 3.1 8B layer's BF16 GEMMs at 8,192 tokens the kernel model (eta_max fitted
    at step level) predicts 3-16% slower than the measured kernels, never faster."""
    rows = [c for c in gemm_comparisons(MEASURED) if "llama8b" in c.what and "bf16" in c.what]
    assert len(rows) == 4
    for row in rows:
        assert 1.0 <= row.ratio <= 1.2, row


def test_compiled_layer_stores_what_the_fused_ledger_counts() -> None:
    """torch.compile's partitioner keeps 570,983,424 bytes of the same layer at 4,096 tokens
    (34.03 s h), the fused ledger's tensors within 0.01%: compiled and hand-fused runtimes
    share one activation count."""
    (row,) = compiled_layer_comparisons(MEASURED)
    assert row.measured == 570_983_424
    assert row.ratio == pytest.approx(1.0, abs=1e-4)


def test_allocator_reserve_is_smaller_with_expandable_segments() -> None:
    """A short training run's caching-allocator reserve at its steady peak: 8.2% of the
    allocated bytes by default, 5.3% with expandable segments (measured, 45.6 GB allocated)."""
    reserve = allocator_reserve(MEASURED)
    assert reserve[""] == pytest.approx(1.0818, abs=1e-4)
    assert reserve["expandable_segments:True"] == pytest.approx(1.0527, abs=1e-4)
