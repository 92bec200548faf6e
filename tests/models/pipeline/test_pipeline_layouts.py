"""Published pipeline layouts are expressible: per-virtual-stage layer counts (an
embedding-only first chunk, a loss-only last chunk), one layer fewer on the first and last
ranks, and the interleaving micro-batch group size N of Llama 3."""

import pytest
from pydantic import ValidationError

from api_schemas import ModelSpec, ParallelConfig, TrainingSpec
from api_schemas.parallel import PipelineSchedule as S
from models.catalog.presets import cluster_preset
from models.core.layout import pipeline_layout, virtual_stage_sizes
from models.core.memory import memory_ledger
from models.core.rank_activations import in_flight_counts
from models.core.step_time import estimate_step
from models.errors import InvalidSpecError

SPEC = ModelSpec(name="tiny-14", num_layers=14, hidden_size=512, num_attention_heads=8,
                 num_kv_heads=8, ffn_hidden_size=2048, vocab_size=32000)
TRAINING = TrainingSpec(global_batch_size=16, sequence_length=1024)
CLUSTER = cluster_preset("h100-sxm5-80gb", num_nodes=1)


def test_an_embedding_only_first_chunk_and_a_loss_only_last_chunk() -> None:
    """Megatron-LM's layout 'E|t*2|...|L' style: virtual stage 0 holds no layer (only the
    embedding), the last holds none (only the head and loss)."""
    split = (0, 2, 2, 2, 2, 2, 2, 1, 1, 0)  # pp=5 x vpp=2 virtual stages
    parallel = ParallelConfig(pp=5, vpp=2, schedule=S.INTERLEAVED_1F1B,
                              layers_per_virtual_stage=split, microbatch_group_size=8)
    assert virtual_stage_sizes(SPEC, parallel) == list(split)
    layouts = pipeline_layout(SPEC, parallel)
    assert len(layouts[0].chunks[0]) == 0 and len(layouts[0].chunks[1]) == 2
    assert len(layouts[4].chunks[1]) == 0
    assert layouts[0].num_embeddings == 1 and layouts[4].num_heads == 1
    ledger = memory_ledger(SPEC, TRAINING, parallel, CLUSTER)
    profile = in_flight_counts(parallel, ledger.num_micro_batches)

    def layer_bytes(rank: int) -> int:
        stage = ledger.stages[rank]
        return next(c.bytes for c in stage.components if c.name == "activations: layers")

    # Rank 1 holds two 2-layer chunks; rank 0 a 0-layer chunk and a 2-layer chunk, so only
    # the micro-batches of its second chunk count.
    two_layers = layer_bytes(1) // profile.peak_chunks[1]
    assert layer_bytes(1) == two_layers * profile.peak_chunks[1]
    assert layer_bytes(0) == two_layers * max(second for _, second in profile.live_vectors[0])
    assert layer_bytes(0) < two_layers * profile.peak_chunks[0]
    assert estimate_step(SPEC, TRAINING, parallel, CLUSTER).step_time_s > 0


def test_one_fewer_layer_on_the_first_and_last_ranks() -> None:
    """Llama 3 (arXiv:2407.21783 Sec. 3.3.2): one layer fewer on the first and last stages."""
    parallel = ParallelConfig(pp=4, layers_per_stage=(3, 4, 4, 3))
    assert [len(s.layers) for s in pipeline_layout(SPEC, parallel)] == [3, 4, 4, 3]
    assert memory_ledger(SPEC, TRAINING, parallel, CLUSTER).stages[0].num_layers == 3


def test_the_interleaving_group_size_raises_the_warm_up_as_megatron_counts_it() -> None:
    """Rank 0 of interleaved p=4, v=2 holds 2(p-1) + (v-1)N + 1 chunks: 11 with N = p = 4,
    15 with N = 8 (Llama 3's tunable N)."""
    training = TrainingSpec(global_batch_size=16, sequence_length=1024)
    peaks = []
    for group in (None, 8):
        parallel = ParallelConfig(pp=4, vpp=2, schedule=S.INTERLEAVED_1F1B,
                                  microbatch_group_size=group)
        peaks.append(memory_ledger(SPEC.model_copy(update={"num_layers": 16}), training,
                                   parallel, CLUSTER).stages[0].in_flight_chunks)
    assert peaks == [11, 15]


@pytest.mark.parametrize(("changes", "field"), [
    ({"pp": 4, "vpp": 2, "schedule": S.INTERLEAVED_1F1B,
      "layers_per_virtual_stage": (2, 2, 2, 2, 2, 2, 2)}, "parallel.layers_per_virtual_stage"),
    ({"pp": 2, "layers_per_virtual_stage": (7, 6)}, "parallel.layers_per_virtual_stage"),
    ({"pp": 2, "microbatch_group_size": 4}, "parallel.microbatch_group_size"),
    ({"pp": 4, "vpp": 2, "schedule": S.INTERLEAVED_1F1B, "microbatch_group_size": 2},
     "parallel.microbatch_group_size"),
    ({"pp": 2, "vpp": 2, "schedule": S.ONE_F_ONE_B}, "parallel.vpp"),
])
def test_layout_errors_name_the_field(changes: dict[str, object], field: str) -> None:
    parallel = ParallelConfig(**changes)  # type: ignore[arg-type]
    with pytest.raises(InvalidSpecError) as caught:
        memory_ledger(SPEC, TRAINING, parallel, CLUSTER)
    assert caught.value.field == field


def test_per_rank_and_per_virtual_stage_counts_are_exclusive() -> None:
    with pytest.raises(ValidationError, match="layers_per_virtual_stage"):
        ParallelConfig(pp=2, layers_per_stage=(7, 7), layers_per_virtual_stage=(7, 7))


def test_fewer_micro_batches_than_stages_run_as_one_interleaving_group() -> None:
    # Llama 3 Sec. 3.3.2: "fewer micro-batches than the number of stages"; with N = m the
    # ledger holds every chunk of every micro-batch on rank 0 and the step is simulated.
    spec = SPEC.model_copy(update={"num_layers": 16})
    training = TrainingSpec(global_batch_size=2, sequence_length=1024)
    grouped = ParallelConfig(pp=4, vpp=2, schedule=S.INTERLEAVED_1F1B, microbatch_group_size=2)
    ledger = memory_ledger(spec, training, grouped, CLUSTER)
    assert ledger.num_micro_batches == 2
    assert ledger.stages[0].in_flight_chunks == 2 * 2
    assert estimate_step(spec, training, grouped, CLUSTER).step_time_s > 0
    default = grouped.model_copy(update={"microbatch_group_size": None})
    with pytest.raises(InvalidSpecError) as caught:
        memory_ledger(spec, training, default, CLUSTER)
    assert "group_size=2" in caught.value.detail
