"""Megatron-LM 2021 Table 2's ZeRO-3 rows, evaluated as published (DeepSpeed of March 2021):
the per-GPU throughput falls with the data-parallel group as the paper prints."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "research"))
import validate_published as vp  # noqa: E402

IDS = [f"megatron2021-t2-zero3-175b-{n}gpu" for n in (384, 768, 1536)]
ROWS = {r["id"]: r for r in vp.DATA["runs"]}


def _predicted(protocol: str) -> list[float]:
    out = [vp.predict(ROWS[i], protocol) for i in IDS]
    assert all(o is not None for o in out)
    return [o[1] for o in out if o is not None]


def test_printed_figures_fall_from_144_to_44_tflops() -> None:
    assert [ROWS[i]["measured"]["tflops_per_gpu"] for i in IDS] == [144, 88, 44]


def test_the_2021_runtime_falls_with_the_group_as_printed() -> None:
    """Printed: 144 -> 44 TF/s per GPU from 384 to 1,536 GPUs (-69%). With DeepSpeed
    v0.3.13's per-parameter collectives and 50M-element prefetch the model falls by more
    than half and stays above the printed figure (the rest is not modelled); it falls
    monotonically, and the 384-GPU row is within 30%."""
    as_published = _predicted(vp.AS_PUBLISHED_PROTOCOL)
    assert as_published[0] > as_published[1] > as_published[2]
    assert as_published[2] / as_published[0] < 0.5
    assert all(p > printed for p, printed in zip(as_published, (144, 88, 44), strict=True))
    assert as_published[0] / 144 - 1 < 0.30


def test_coalesced_collectives_would_not_fall_so() -> None:
    """The same rows with one call per layer (DeepSpeed >= 0.6) keep over 70% of the
    384-GPU throughput at 1,536 GPUs: the fall is the 2021 runtime's, not ZeRO-3's."""
    from api_schemas import Zero3Collectives
    from models.core.step_time import estimate_step

    rates = []
    for i in IDS:
        config = vp.as_published_config(ROWS[i])
        spec = vp.model_of(ROWS[i])
        assert config is not None and spec is not None
        parallel, training = config
        training = training.model_copy(update={"zero3_collectives": Zero3Collectives.COALESCED})
        est = estimate_step(spec, training, parallel, vp.row_cluster(ROWS[i]))
        rates.append(est.hardware_tflops_per_gpu_full_attention)
    assert rates[2] / rates[0] > 0.7
