"""End to end through the public plan API: a Kimi-Linear hybrid (3 KDA
layers to 1 MLA layer) at 128K tokens plans with CP > 1, its KDA layers pass fixed-size
state fragments (KCP) while its MLA layers use another CP kind, and the KDA layers' CP
traffic per step stays the same from 128K to 1M tokens while the MLA layers' grows."""

from typing import Any

from api_schemas.plan import PlanResponse
from api_schemas.requests import EvaluateRequest, PlanRequest
from models.core.linear_attention import STATE_PASSING
from solver.api import evaluate, plan

KIMI_LINEAR = "kimi-linear-48b-a3b-instruct"
CLUSTER = {"gpu": "h800-sxm5-80gb", "num_nodes": 8, "gpus_per_node": 8}


def _plan_128k() -> PlanResponse:
    """64 H800s, 64 sequences of 128K tokens; the mesh's TP, PP and EP fixed to keep the
    search short, context parallelism left to the search."""
    return plan(PlanRequest.model_validate({
        "model": {"preset": KIMI_LINEAR}, "cluster": CLUSTER,
        "training": {"global_batch_size": 64, "sequence_length": 131_072},
        "constraints": {"tp": 4, "pp": 4, "ep": 16},
        "solver": {"time_limit_s": 60, "top_k": 1}}))


def _by_type(response: PlanResponse) -> dict[str, Any]:
    return {use.layer_type: use for use in response.context_parallel}


def test_the_hybrid_plans_with_cp_and_state_passing_on_its_kda_layers() -> None:
    response = _plan_128k()
    assert response.status in ("optimal", "feasible")
    assert response.parallel is not None and response.parallel.cp > 1
    uses = _by_type(response)
    # Kimi Linear 48B-A3B: 27 layers, KDA in 20 of them, MLA in every fourth (3:1).
    kda, mla = uses["linear_attention"], uses["full_attention"]
    assert (kda.layers, mla.layers) == (20, 7)
    assert kda.cp_kind == STATE_PASSING
    assert mla.cp_kind == response.parallel.cp_kind.value != STATE_PASSING
    assert kda.bytes_per_layer_per_step > 0 and mla.bytes_per_layer_per_step > 0
    note = next(n for n in response.explanation.notes
                if n.startswith(f"context parallelism x{response.parallel.cp}"))
    assert "20 linear-attention layers pass recurrent state" in note
    assert f"7 full-attention layers use {mla.cp_kind}" in note


def test_kda_cp_traffic_per_step_stays_constant_from_128k_to_1m_tokens() -> None:
    """The planned mesh evaluated at 128K, 256K, 512K and 1M tokens (same batch of
    sequences): per KDA layer, the bytes a rank sends and their exposed time do not move;
    per MLA layer the K/V blocks grow with the sequence (ring: in proportion)."""
    planned = _plan_128k().parallel
    assert planned is not None
    kda: list[tuple[int, float]] = []
    mla: list[int] = []
    for seq in (131_072, 262_144, 524_288, 1_048_576):
        response = evaluate(EvaluateRequest.model_validate({
            "model": {"preset": KIMI_LINEAR}, "cluster": CLUSTER,
            "training": {"global_batch_size": 64, "sequence_length": seq},
            "parallel": planned.model_dump(mode="json")}))
        uses = _by_type(response)
        kda.append((uses["linear_attention"].bytes_per_layer_per_step,
                    uses["linear_attention"].exposed_s_per_layer))
        mla.append(uses["full_attention"].bytes_per_layer_per_step)
    assert len(set(kda)) == 1 and kda[0][0] > 0
    assert all(later > earlier for earlier, later in zip(mla, mla[1:], strict=False))
    if planned.cp_kind.value == "ring":
        assert mla[-1] == 8 * mla[0]
    # At 1M tokens one MLA layer moves far more than one KDA layer.
    assert mla[-1] > 100 * kda[-1][0]
