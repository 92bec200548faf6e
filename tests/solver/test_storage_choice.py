"""The search chooses remote activation offload and Pipeline ZeRO-2 where the request allows
them and they win (a plan fits that would not, or it is faster), names them in the plan's
explanation, and never chooses them where the request or its framework target does not
allow them."""

from typing import Any

from api_schemas import PlanRequest
from api_schemas.plan import PlanResponse
from models.step_time.remote_offload import REMOTE_ACTIVATIONS
from solver.api import plan


def _request(**constraints: Any) -> PlanRequest:
    """Llama 3.1 70B at 16K tokens on TP8 x PP8 with two interleaved chunks: stage 0 holds
    23 micro-batch x chunk units in flight, the last stage 9, and stage 0 is over the
    capacity without a saving policy (host offload off, 16-bit training: no FP8 storage)."""
    return PlanRequest.model_validate({
        "model": {"preset": "llama-3.1-70b"},
        "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 8, "gpus_per_node": 8},
        "training": {"global_batch_size": 64, "sequence_length": 16384},
        "constraints": {"tp": 8, "pp": 8, "vpp": 2, "schedule": "interleaved_1f1b",
                        "allow_offload": False, **constraints},
        "solver": {"time_limit_s": 60, "top_k": 1, "num_workers": 1}})


def _note(response: PlanResponse, start: str) -> str:
    return next(n for n in response.explanation.notes if n.startswith(start))


def test_the_search_chooses_remote_offload_where_it_beats_recomputation() -> None:
    allowed = plan(_request(framework="any", allow_remote_offload=True))
    refused = plan(_request(framework="any"))
    assert allowed.parallel is not None and refused.parallel is not None
    assert allowed.time is not None and refused.time is not None
    # Without it the front rank recomputes; with it no stage recomputes anything.
    assert not refused.parallel.remote_activation_offload
    assert any(refused.parallel.policy_of(r).recompute != "none" for r in range(8))
    assert allowed.parallel.remote_activation_offload
    assert all(allowed.parallel.policy_of(r).recompute == "none" for r in range(8))
    # It is never free, and it wins only by being faster.
    assert allowed.time.overheads_s[REMOTE_ACTIVATIONS] > 0
    assert allowed.time.step_time_s < refused.time.step_time_s
    held = _note(allowed, "remote activation offload (")
    assert "would not fit" in held and "makes this plan fit" in held
    chosen = _note(allowed, "remote activation offload chosen by the search")
    assert f"{refused.time.step_time_s:.3f} s" in chosen and "it saves" in chosen
    assert allowed.memory is not None and allowed.memory.fits
    assert any(c.name == "activations: held for other pipeline ranks"
               for stage in allowed.memory.stages for c in stage.components)
    assert any("remote activation offload" in n for n in allowed.exports.megatron.notes)
    assert any("no measured peak yet" in n and "remote activation offload" in n
               for n in allowed.explanation.notes)


def test_no_released_framework_runs_remote_offload_so_the_default_target_never_picks_it(
        ) -> None:
    response = plan(_request(allow_remote_offload=True))
    assert response.parallel is not None and not response.parallel.remote_activation_offload
