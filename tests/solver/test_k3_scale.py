"""A K3-scale preset (2.8T parameters) planned on a large cluster, with the explanation
naming the mechanisms the plan leans on."""

import pytest

from api_schemas import OptimizerKind, PlanRequest
from models.catalog.assumed_presets import K3_SCALE_ASSUMPTIONS, K3_SCALE_ID
from models.catalog.presets import model_ids, model_preset
from models.core.params import count_parameters
from solver.api import plan


def test_the_k3_scale_preset_has_the_reported_total_and_states_its_assumptions() -> None:
    """Kimi K3 (arXiv:2607.24653, research ledger Sec. 11): 2.8T total parameters."""
    assert K3_SCALE_ID in model_ids()
    counted = count_parameters(model_preset(K3_SCALE_ID))
    assert counted.total == pytest.approx(2.8e12, rel=0.01)
    k2 = count_parameters(model_preset("kimi-k2-instruct"))
    # More experts at K2's expert shape and sparsity: the activated count barely moves.
    assert counted.activated == pytest.approx(k2.activated, rel=0.05)
    assert any("KDA" in line for line in K3_SCALE_ASSUMPTIONS)


def _request(num_nodes: int) -> PlanRequest:
    """K2's layout family (PP16 with virtual stages, EP, ZeRO-1, no TP) on H800 nodes, with
    K3's Muon point-to-point orthogonalisation and Pipeline ZeRO-2."""
    return PlanRequest.model_validate({
        "model": {"preset": K3_SCALE_ID},
        "cluster": {"gpu": "h800-sxm5-80gb", "num_nodes": num_nodes},
        "training": {"global_batch_size": 8192, "sequence_length": 4096, "optimizer": "muon",
                     "muon_distribution": "owner_p2p", "moe_keep_expert_outputs": False,
                     # K2's NCCL all-to-all dispatch, fixed (with DeepEP, the planner's
                     # choice, the plan moves to EP 32 with 8 GiB to spare).
                     "moe_dispatcher": "alltoall"},
        # The optimizer states stay on the GPU, as in K3's recipe (its host memory holds
        # the gradient shards); allowed to, the search moves them there on these 2 TiB
        # nodes (`tests/solver/test_k3_only_mechanism_fits.py`).
        "constraints": {"tp": 1, "pp": 16, "zero_stage": 1, "allow_fp8_activations": True,
                        "gradient_host_shards": True, "allow_optimizer_offload": False},
        "solver": {"time_limit_s": 60, "top_k": 1}})


def test_the_planner_fits_k3_scale_on_1024_h800s_and_says_what_made_it_fit() -> None:
    response = plan(_request(128))
    assert response.status in ("optimal", "feasible")
    best = response.parallel
    assert best is not None
    assert best.gradient_host_shards and best.pp == 16 and best.world_size == 1024
    assert response.time is not None
    assert response.time.overheads_s["Pipeline ZeRO-2 gradient offload"] > 0
    notes = response.explanation.notes
    # The plan shown is the memory-margin tie-break's: EP 32 with 10.6 GiB free, 4.5% slower
    # than EP 64 with 3.1 GiB free (inside the pairwise band); on it Muon is no longer what
    # makes it fit, and the note says so with both peaks.
    choice = response.robust_choice
    assert choice is not None and choice.picked == "margin"
    assert any(not tied.shown and tied.step_time_s < response.time.step_time_s
               for tied in choice.tied)
    muon = next(n for n in notes if n.startswith("Muon"))
    assert "peak" in muon and ("makes this plan fit" in muon or "would still fit" in muon)
    assert any(n.startswith("Pipeline ZeRO-2") for n in notes)
    # Why not overlap_ep_comm: this mesh tried with it fixed on (one more micro-batch of a
    # chunk stored, no full recomputation under Megatron-LM) fits nowhere.
    ep_overlap = next(u for u in response.runtime_features if u.feature == "overlap_ep_comm")
    assert not ep_overlap.on and ep_overlap.decided_by == "planner"
    assert ep_overlap.why_not.startswith("with it no plan of this mesh fits"), ep_overlap


def test_with_adamw_pipeline_zero2_is_what_fits_k3_scale_on_pp8_with_four_chunks() -> None:
    """AdamW keeps two moments; at PP8 with four chunks per rank the two chunk buffers hold
    half a stage's gradients, and that is the difference between fitting and not."""
    request = _request(128)
    request = request.model_copy(update={
        "training": request.training.model_copy(update={"optimizer": OptimizerKind.ADAMW}),
        "constraints": request.constraints.model_copy(update={"pp": 8, "vpp": 4})})
    response = plan(request)
    assert response.status in ("optimal", "feasible")
    assert response.parallel is not None and response.parallel.vpp == 4
    zero2 = next(n for n in response.explanation.notes if n.startswith("Pipeline ZeRO-2"))
    assert "would not fit" in zero2 and "makes this plan fit" in zero2


def test_half_that_cluster_does_not_fit_even_with_pipeline_zero2() -> None:
    response = plan(_request(64))
    assert response.status == "infeasible"


def test_evaluate_reports_the_vision_encoder_placement_in_its_explanation() -> None:
    """K3 places the encoder's work into pipeline bubbles (ledger Sec. 9.6): evaluate shows
    stage 0's encoder bytes and the step time it adds, and what stage 0 would need with the
    encoder inside it."""
    from api_schemas import EvaluateRequest
    from solver.api import evaluate

    response = evaluate(EvaluateRequest.model_validate({
        "model": {"preset": K3_SCALE_ID},
        "cluster": {"gpu": "h800-sxm5-80gb", "num_nodes": 128},
        "training": {"global_batch_size": 8192, "sequence_length": 4096, "optimizer": "muon",
                     "muon_distribution": "owner_p2p", "moe_keep_expert_outputs": False,
                     "vision": {"images_per_sequence": 1, "placement": "bubbles"}},
        "parallel": {"pp": 16, "dp": 64, "ep": 64, "vpp": 3, "zero_stage": 1,
                     "schedule": "interleaved_1f1b", "recompute": {"full_layers": 3},
                     "gradient_host_shards": True}}))
    assert response.time is not None
    assert response.time.overheads_s["vision encoder"] >= 0
    notes = response.explanation.notes
    assert any(n.startswith("vision encoder ('bubbles')") for n in notes)
    placement = next(n for n in notes if n.startswith("vision encoder placement"))
    assert "without" in placement



def test_the_kda_variant_models_k3s_state_passing_cp_at_128k_tokens() -> None:
    """K3 runs KDA (a linear-attention branch) beside MLA and gives KDA its own context
    parallelism (research ledger Sec. 7.5): with the KDA layers of the hybrid preset, a
    128K-token step passes fixed-size states in 47 layers and is shorter than the all-MLA
    preset's on the same mesh."""
    from api_schemas import EvaluateRequest
    from models.catalog.assumed_presets import K3_SCALE_KDA_ASSUMPTIONS, K3_SCALE_KDA_ID
    from solver.api import evaluate

    assert count_parameters(model_preset(K3_SCALE_KDA_ID)).total == pytest.approx(2.8e12,
                                                                                   rel=0.01)
    assert any("KDA (Kimi Delta Attention) in 47 of the 63 layers" in line
               for line in K3_SCALE_KDA_ASSUMPTIONS)
    steps = {}
    for preset in (K3_SCALE_ID, K3_SCALE_KDA_ID):
        response = evaluate(EvaluateRequest.model_validate({
            "model": {"preset": preset},
            "cluster": {"gpu": "h800-sxm5-80gb", "num_nodes": 128},
            "training": {"global_batch_size": 512, "sequence_length": 131_072,
                         "optimizer": "muon", "muon_distribution": "owner_p2p",
                         "moe_keep_expert_outputs": False},
            "parallel": {"pp": 16, "dp": 8, "cp": 8, "ep": 64, "vpp": 3, "zero_stage": 1,
                         "schedule": "interleaved_1f1b", "recompute": "full",
                         "gradient_host_shards": True}}))
        assert response.time is not None
        steps[preset] = response.time.step_time_s
        notes = [n for n in response.explanation.notes if "context parallelism x8" in n]
        assert bool(notes) == (preset == K3_SCALE_KDA_ID)
    assert steps[K3_SCALE_KDA_ID] < steps[K3_SCALE_ID]


def _chosen_request(**allowed: bool) -> PlanRequest:
    """K3 scale with AdamW on PP8 with four chunks per rank (1024 H800s), target 'any' so
    the search may use what no released framework runs, Pipeline ZeRO-2 not pinned."""
    request = _request(128)
    constraints = request.constraints.model_copy(update={
        "pp": 8, "vpp": 4, "gradient_host_shards": False, "framework": "any", **allowed})
    # The EP overlap fixed off: these cases weigh the K3 memory mechanisms against each
    # other, and under target 'any' the overlap (one more micro-batch stored) would be one
    # more way to spend the memory they free.
    return request.model_copy(update={
        "training": request.training.model_copy(update={"optimizer": OptimizerKind.ADAMW,
                                                        "overlap_ep_comm": False}),
        "constraints": constraints})


def test_the_search_chooses_pipeline_zero2_for_k3_scale_and_says_why() -> None:
    """Allowed but not pinned, Pipeline ZeRO-2 wins: without it the mesh's plans recompute
    more to fit, and the explanation names the mechanism, what it costs and what it saves."""
    chosen = plan(_chosen_request(allow_gradient_host_shards=True))
    refused = plan(_chosen_request())
    assert chosen.parallel is not None and refused.parallel is not None
    assert chosen.time is not None and refused.time is not None
    assert chosen.parallel.gradient_host_shards and not refused.parallel.gradient_host_shards
    assert chosen.time.overheads_s["Pipeline ZeRO-2 gradient offload"] > 0
    assert chosen.time.step_time_s < refused.time.step_time_s
    notes = chosen.explanation.notes
    held = next(n for n in notes if n.startswith("Pipeline ZeRO-2 (gradient shards"))
    assert "would not fit" in held and "costs" in held
    why = next(n for n in notes if n.startswith("Pipeline ZeRO-2 chosen by the search"))
    assert "allow_gradient_host_shards" in why and "it saves" in why
    assert f"{refused.time.step_time_s:.3f} s" in why


def test_with_both_allowed_the_search_takes_the_faster_of_the_k3_mechanisms() -> None:
    """Remote activation offload moves the last rank's excess into the middle ranks' spare
    memory for less than Pipeline ZeRO-2's host traffic costs here: the search takes it, and
    the plan is no slower than the Pipeline ZeRO-2 one."""
    both = plan(_chosen_request(allow_gradient_host_shards=True, allow_remote_offload=True))
    zero2 = plan(_chosen_request(allow_gradient_host_shards=True))
    assert both.parallel is not None and both.time is not None and zero2.time is not None
    assert both.parallel.remote_activation_offload
    assert both.time.step_time_s <= zero2.time.step_time_s
    assert any(n.startswith("remote activation offload chosen by the search")
               for n in both.explanation.notes)


def test_past_the_time_limit_the_chosen_mechanism_note_says_the_limit_ended_first(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The note that re-evaluates the mesh without a chosen mechanism runs within the time
    limit: past the deadline it says so instead of evaluating."""
    from solver import chosen_mechanisms, plan_notes

    def late(*args: object, deadline: float | None = None, **kwargs: object) -> list[str]:
        return original(*args, deadline=0.0, **kwargs)  # type: ignore[arg-type]

    original = chosen_mechanisms.chosen_mechanism_notes
    monkeypatch.setattr(plan_notes, "chosen_mechanism_notes", late)
    notes = plan(_chosen_request(allow_gradient_host_shards=True)).explanation.notes
    why = next(n for n in notes if n.startswith("Pipeline ZeRO-2 chosen by the search"))
    assert "the time limit ended before the mesh was re-evaluated without it" in why
