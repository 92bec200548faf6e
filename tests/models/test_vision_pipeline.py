"""A vision encoder beside the pipeline: on stage 0, decoupled (Kimi K2.5 DEP), or in the
pipeline's bubbles (Kimi K3)."""

import pytest

from api_schemas import ParallelConfig, PipelineSchedule, TrainingSpec, VisionWorkload
from models.catalog.presets import cluster_preset, hf_preset_config, model_preset
from models.core.memory import memory_ledger
from models.core.step_time import estimate_step
from models.core.step_time.assembly import VISION_ENCODER
from models.core.vision_pipeline import BACKWARD_OVER_FORWARD, vision_encoder
from models.errors import InvalidSpecError

SCOUT = model_preset("llama-4-scout-17b-16e")
CLUSTER = cluster_preset("h100-sxm5-80gb", num_nodes=8)
PARALLEL = ParallelConfig(pp=4, dp=16, ep=8, vpp=2, schedule=PipelineSchedule.INTERLEAVED_1F1B)
BASE = TrainingSpec(global_batch_size=256, sequence_length=4096)


def _with(placement: str, images: float = 4.0) -> TrainingSpec:
    return BASE.model_copy(update={"vision": VisionWorkload(images_per_sequence=images,
                                                            placement=placement)})


def test_forward_flops_per_image_follow_the_llama4_vision_config() -> None:
    """Llama 4's vision_config (hidden 1408, MLP 5632, 34 layers, 336 px images in 14 px
    patches: 576 patches + a class token; pixel shuffle 0.5 leaves 144 output tokens)."""
    vision = hf_preset_config("llama-4-scout-17b-16e")["vision_config"]
    enc = vision_encoder(VisionWorkload(images_per_sequence=1), SCOUT)
    n, d, f = 577, 1408, 5632
    assert (enc.tokens_per_image, enc.output_tokens_per_image) == (n, 144)
    layers = vision["num_hidden_layers"] * (2 * n * (4 * d * d + 2 * d * f) + 4 * n * n * d)
    patch = 2 * 576 * 3 * 14 * 14 * d
    out = 2 * 144 * (enc.params.adapter + enc.params.projector)
    assert enc.forward_flop_per_image() == pytest.approx(layers + patch + out, rel=1e-12)
    # About 2 FLOPs per weight per token: the encoder layers dominate.
    assert enc.forward_flop_per_image() == pytest.approx(
        2 * n * enc.params.encoder_layers, rel=0.1)


def test_an_encoder_preset_without_a_modelled_tower_is_refused() -> None:
    with pytest.raises(InvalidSpecError, match="no vision tower"):
        vision_encoder(VisionWorkload(images_per_sequence=1, encoder_preset="llama-3.1-8b"),
                       SCOUT)


def test_decoupling_takes_the_encoder_off_stage_0s_memory_and_critical_path() -> None:
    text = memory_ledger(SCOUT, BASE, PARALLEL, CLUSTER).stages[0].total_bytes
    on_stage0 = memory_ledger(SCOUT, _with("stage0"), PARALLEL, CLUSTER).stages[0]
    dep = memory_ledger(SCOUT, _with("dep"), PARALLEL, CLUSTER).stages[0]
    assert on_stage0.total_bytes > dep.total_bytes > text
    # Other stages carry the encoder only when it is decoupled (every GPU holds a copy).
    assert memory_ledger(SCOUT, _with("stage0"), PARALLEL, CLUSTER).stages[1].total_bytes == \
        memory_ledger(SCOUT, BASE, PARALLEL, CLUSTER).stages[1].total_bytes
    steps = {p: estimate_step(SCOUT, _with(p), PARALLEL, CLUSTER) for p in
             ("stage0", "dep", "bubbles")}
    for est in steps.values():
        assert sum(est.breakdown_s.values()) == pytest.approx(est.step_time_s, rel=1e-9)
    # K3 hides most of the decoupled work in the bubbles (ledger Sec. 9.6), not all of it.
    assert 0 < steps["bubbles"].overheads_s[VISION_ENCODER] < \
        steps["dep"].overheads_s[VISION_ENCODER]


def test_without_bubbles_the_bubble_placement_costs_what_dep_costs() -> None:
    """With one pipeline stage there is no bubble: the K3 placement exposes all of DEP's
    work (forward, recomputed forward and backward: (2 + 2) forwards)."""
    flat = ParallelConfig(dp=64, ep=8)
    dep = estimate_step(SCOUT, _with("dep"), flat, CLUSTER).overheads_s[VISION_ENCODER]
    bubbles = estimate_step(SCOUT, _with("bubbles"), flat, CLUSTER).overheads_s[VISION_ENCODER]
    assert bubbles == pytest.approx(dep, rel=1e-9)
    assert BACKWARD_OVER_FORWARD == 2.0


def test_on_stage_0_the_encoder_costs_what_the_simulated_pipeline_says() -> None:
    """Stage 0's added work is m x (forward + backward) of its images; the pipeline grows by
    at most that, and less where stage 0 had slack (the last stage carries the head)."""
    from models.core.vision_pipeline import stage0_vision_times

    enc = vision_encoder(VisionWorkload(images_per_sequence=4), SCOUT)
    forward, backward = stage0_vision_times(enc, _with("stage0"), PARALLEL, CLUSTER.gpu)
    est = estimate_step(SCOUT, _with("stage0"), PARALLEL, CLUSTER)
    added = est.overheads_s[VISION_ENCODER]
    assert 0 < added <= est.num_micro_batches * (forward + backward) * (1 + 1e-9)
    assert backward == pytest.approx(BACKWARD_OVER_FORWARD * forward)
