"""The search chooses remote activation offload and Pipeline ZeRO-2 where the request allows
them and they win (a plan fits that would not, or it is faster), names them in the plan's
explanation, and never chooses them where the request or its framework target does not
allow them."""

from typing import Any

from api_schemas import PlanRequest
from api_schemas.plan import PlanResponse
from models.core.step_time.remote_offload import REMOTE_ACTIVATIONS
from solver.api import plan


def _request(**constraints: Any) -> PlanRequest:
    """Llama 3.1 70B at 16K tokens on TP8 x PP8 with two interleaved chunks: stage 0 holds
    23 micro-batch x chunk units in flight, the last stage 9, and stage 0 is over the
    capacity without a saving policy (host offload off, 16-bit training: no FP8 storage)."""
    return PlanRequest.model_validate({
        "model": {"preset": "llama-3.1-70b"},
        "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 8, "gpus_per_node": 8},
        "training": {"global_batch_size": 64, "sequence_length": 16384},
        # Optimizer states kept on the GPU: these cases weigh where activations live.
        "constraints": {"tp": 8, "pp": 8, "vpp": 2, "schedule": "interleaved_1f1b",
                        "allow_offload": False, "allow_optimizer_offload": False,
                        **constraints},
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


def test_the_remote_ladder_probed_below_a_known_fit_finds_the_same_rung() -> None:
    # Remote offload fits wherever the plan without it fits, so the search probes the
    # remote ladder only below the rung the plain storage fits first; the rung found equals
    # the one a full probe of the ladder finds, for every ZeRO stage of this candidate.
    import dataclasses

    from api_schemas import ParallelConfig, PipelineSchedule
    from models.catalog.presets import cluster_preset, model_preset
    from solver.candidate import PlanCandidate
    from solver.candidate_eval import Storage, _first_fit, _Fit
    from solver.space import MeshCandidate

    spec = model_preset("llama-3.1-70b")
    request = _request(framework="any", allow_remote_offload=True)
    training, constraints = request.training, request.constraints
    cluster = cluster_preset("h100-sxm5-80gb", num_nodes=8)
    candidate = MeshCandidate.of(ParallelConfig(tp=8, pp=8, vpp=2,
                                                schedule=PipelineSchedule.INTERLEAVED_1F1B,
                                                sequence_parallel=True), 64)
    cand = PlanCandidate.of(spec, training, cluster, candidate, constraints)
    checked = cheaper = 0
    for zero in (0, 1, 2, 3):
        plain = _first_fit(cand, Storage(zero=zero))
        if not isinstance(plain, _Fit) or plain.rung is None or plain.plain:
            continue
        remote = dataclasses.replace(Storage(zero=zero), remote=True)
        full = _first_fit(cand, remote)
        hinted = _first_fit(cand, remote, known_fit=plain.rung)
        assert isinstance(full, _Fit) and isinstance(hinted, _Fit)
        assert hinted.rung == full.rung and hinted.parallel == full.parallel
        assert full.rung is not None and full.rung <= plain.rung
        checked += 1
        cheaper += full.rung < plain.rung
    assert checked and cheaper  # remote offload lets some stage fit an earlier rung
