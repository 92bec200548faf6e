"""The runtime behind `overlap_tp_comm`: Transformer Engine's userbuffers is priced by its
rule; PyTorch's async TP (torchtitan's) is credited nothing, since torchtitan measured it at
a fraction of what that rule would claim."""

from api_schemas import ParallelConfig, TpOverlapEngine, TrainingSpec
from models.catalog.presets import cluster_preset, model_preset
from models.core.frameworks import frameworks
from models.core.runtime_features import effective_features, userbuffers_tp_overlap
from models.core.step_time import estimate_step

LLAMA_70B = model_preset("llama-3.1-70b")
CLUSTER = cluster_preset("h100-sxm5-80gb", num_nodes=8)
TRAIN = TrainingSpec(global_batch_size=128, sequence_length=8192)
MESH = ParallelConfig(tp=8, pp=1, dp=8, sequence_parallel=True, micro_batch_size=1,
                      recompute="full")


def _tp_comm(training: TrainingSpec) -> tuple[float, float]:
    est = estimate_step(LLAMA_70B, training, MESH, CLUSTER)
    return est.step_time_s, est.breakdown_s.get("tp communication", 0.0)


def test_async_tp_is_priced_as_the_collectives_without_overlap() -> None:
    off = _tp_comm(TRAIN.model_copy(update={"overlap_tp_comm": False}))
    async_tp = _tp_comm(TRAIN.model_copy(update={
        "overlap_tp_comm": True, "tp_overlap_engine": TpOverlapEngine.PYTORCH_ASYNC_TP}))
    userbuffers = _tp_comm(TRAIN.model_copy(update={"overlap_tp_comm": True}))
    assert off[1] > 0.0
    assert async_tp == off
    # Unset and named userbuffers are the same runtime, and it hides most of the traffic.
    named = _tp_comm(TRAIN.model_copy(update={
        "overlap_tp_comm": True, "tp_overlap_engine": TpOverlapEngine.USERBUFFERS}))
    assert named == userbuffers
    assert userbuffers[1] < 0.2 * off[1] and userbuffers[0] < off[0]


def test_async_tp_keeps_the_feature_on_for_the_export() -> None:
    """The plan still runs async TP (the export turns it on); only its price is withheld."""
    training = TRAIN.model_copy(update={
        "overlap_tp_comm": True, "tp_overlap_engine": TpOverlapEngine.PYTORCH_ASYNC_TP})
    assert "overlap_tp_comm" in effective_features(training, moe=False, tp=8, dp=8, ep=1,
                                                   sequence_parallel=True)
    assert not userbuffers_tp_overlap(training, sequence_parallel=True)
    assert userbuffers_tp_overlap(TRAIN.model_copy(update={"overlap_tp_comm": True}),
                                  sequence_parallel=True)


def test_only_torchtitan_names_a_tp_overlap_runtime_of_its_own() -> None:
    engines = {fid: fw.tp_overlap_engine for fid, fw in frameworks().items()}
    assert engines == {"megatron-lm": None, "torchtitan": TpOverlapEngine.PYTORCH_ASYNC_TP,
                       "deepspeed": None}
    assert "_micro_pipeline_tp" in frameworks()["torchtitan"].tp_overlap_engine_source
