"""In-flight activations counted from the generated order, against the simulator.

The ledger's count (`models.core.rank_activations.in_flight_counts` -> `in_flight_profile`)
must equal what the discrete-event simulator measures for every schedule, chunk count and
layer split up to p = 16, m = 64, in micro-batch x chunk units and in bytes for uneven chunks.
"""

import math

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from api_schemas import ModelSpec, ParallelConfig, TrainingSpec
from api_schemas.parallel import PipelineSchedule as S
from models.catalog.presets import cluster_preset
from models.core.activations import layer_activation_bytes
from models.core.layout import pipeline_layout, virtual_stage_sizes
from models.core.memory import memory_ledger
from models.core.pipeline import (
    ActivationSizes,
    OpDurations,
    generate_program,
    in_flight_profile,
    peak_in_flight_chunks,
    schedule_traits,
    simulate,
)
from models.core.rank_activations import activation_context, in_flight_counts
from models.errors import InvalidSpecError

UNIT = OpDurations.uniform(forward_s=1.0, backward_input_s=1.0, backward_weight_s=1.0)


@st.composite
def _cases(draw: st.DrawFn) -> tuple[S, int, int, int, int | None]:
    schedule = draw(st.sampled_from(list(S)))
    p = draw(st.integers(1, 16))
    m = draw(st.integers(1, 64))
    traits = schedule_traits(schedule)
    v = traits.fixed_chunks if traits.fixed_chunks is not None else draw(st.integers(2, 4))
    # N from p to m, or one group of all m < p micro-batches (Llama 3, torch's one round).
    group = draw(st.one_of(st.none(), st.integers(p, max(p, m)), st.just(m))) \
        if traits.takes_group_size else None
    return schedule, p, m, v, group


@settings(max_examples=150, deadline=None)
@given(case=_cases(), data=st.data())
def test_profile_equals_the_simulator_for_every_schedule_and_layer_split(
        case: tuple[S, int, int, int, int | None], data: st.DataObject) -> None:
    schedule, p, m, v, group = case
    try:
        program = generate_program(schedule, num_stages=p, num_micro_batches=m, num_chunks=v,
                                   group_size=group)
    except InvalidSpecError:
        assume(False)
        return
    stages = program.placement.num_stages
    # Any layer split: 0..6 layers per virtual stage (0 = an embedding- or loss-only chunk).
    layers = data.draw(st.lists(st.integers(0, 6), min_size=stages, max_size=stages))
    per_stage = tuple(3_000 * n + 7 for n in layers)
    result = simulate(program, UNIT, activation_sizes=ActivationSizes(
        forward_bytes=per_stage, freed_by_input_grad_bytes=(0,)))
    profile = in_flight_profile(schedule, num_stages=p, num_micro_batches=m, num_chunks=v,
                                group_size=group)
    assert profile.peak_chunks == result.peak_in_flight_chunks
    assert profile.peak_until_b_chunks == result.peak_until_b_chunks
    place = program.placement
    for rank in range(p):
        chunk_bytes = [0] * profile.num_chunks
        for pipe in range(place.stage_rank.shape[0]):
            for s in range(stages):
                if int(place.stage_rank[pipe, s]) == rank:
                    chunk_bytes[int(place.stage_chunk[pipe, s])] = per_stage[s]
        assert profile.peak_bytes(rank, chunk_bytes) == result.peak_activation_bytes[rank]
        closed = peak_in_flight_chunks(schedule, num_stages=p, num_micro_batches=m,
                                       num_chunks=v, stage=rank, group_size=group)
        assert closed == profile.peak_chunks[rank]


def test_uneven_chunks_count_what_the_order_holds_not_the_heaviest_first_bound() -> None:
    """Interleaved p=4, v=2, m=8, rank 0: 11 chunk units at the peak, but never 8 of the
    heavy second chunk; the former bound filled 8 heavy + 3 light units."""
    profile = in_flight_profile(S.INTERLEAVED_1F1B, num_stages=4, num_micro_batches=8,
                                num_chunks=2)
    assert profile.peak_chunks[0] == 11
    light, heavy = 1, 100
    exact = profile.peak_bytes(0, [light, heavy])
    assert exact == max(a * light + b * heavy for a, b in profile.live_vectors[0])
    assert exact < 8 * heavy + 3 * light
    assert profile.peak_counts(0) in profile.live_vectors[0]


TINY = ModelSpec(name="tiny", num_layers=16, hidden_size=512, num_attention_heads=8,
                 num_kv_heads=8, ffn_hidden_size=2048, vocab_size=32000)
LEDGER_CASES = [
    (S.ONE_F_ONE_B, 4, 1, None),
    (S.GPIPE, 4, 1, (1, 5, 5, 5)),
    (S.INTERLEAVED_1F1B, 4, 2, (2, 6, 4, 4)),
    (S.ZB_H1, 4, 1, (3, 5, 5, 3)),
    (S.ZB_H2, 2, 1, None),
    (S.ZBV, 4, 2, (2, 6, 4, 4)),
    (S.DUALPIPEV, 4, 2, None),
    (S.DUALPIPE, 4, 1, (3, 5, 5, 3)),
]


@pytest.mark.parametrize(("schedule", "pp", "vpp", "split"), LEDGER_CASES)
def test_the_ledger_stores_the_simulated_peak_bytes(
        schedule: S, pp: int, vpp: int, split: tuple[int, ...] | None) -> None:
    """`activations: layers` of every rank equals the simulator's peak bytes with each
    virtual stage sized by its layers (uniform layers, no recompute, no offload)."""
    training = TrainingSpec(global_batch_size=16, sequence_length=1024)
    parallel = ParallelConfig(pp=pp, vpp=vpp, schedule=schedule, layers_per_stage=split)
    ledger = memory_ledger(TINY, training, parallel, cluster_preset("h100-sxm5-80gb",
                                                                     num_nodes=1))
    m = ledger.num_micro_batches
    ctx = activation_context(training, parallel, False)
    per_layer = layer_activation_bytes(TINY, 0, ctx).stored_bytes(
        parallel.recompute, parallel.recompute_modules)
    sizes = tuple(n * per_layer for n in virtual_stage_sizes(TINY, parallel))
    chunks = schedule_traits(schedule).num_chunks(vpp)
    program = generate_program(schedule, num_stages=pp, num_micro_batches=m, num_chunks=chunks)
    result = simulate(program, UNIT, activation_sizes=ActivationSizes(
        forward_bytes=sizes, freed_by_input_grad_bytes=(0,)))
    profile = in_flight_counts(parallel, m)
    for stage, layout in zip(ledger.stages, pipeline_layout(TINY, parallel), strict=True):
        layers = next(c for c in stage.components if c.name == "activations: layers")
        assert layers.bytes == result.peak_activation_bytes[layout.rank]
        assert stage.in_flight_chunks == result.peak_in_flight_chunks[layout.rank]
        assert math.isclose(profile.peak_chunks[layout.rank], stage.in_flight_chunks)

def test_the_memory_profile_and_the_simulator_share_one_read_only_program() -> None:
    from models.core.pipeline import shared_program
    from models.core.pipeline.in_flight import profile_of
    from models.core.step_time import compiled_schedule

    schedule = S.ZBV
    for cache in (shared_program, compiled_schedule):
        cache.cache_clear()
    profile = in_flight_profile(schedule, num_stages=6, num_micro_batches=24, num_chunks=2)
    program = shared_program(schedule, 6, 24, 2, None)
    compiled = compiled_schedule(schedule, 6, 24, 2, None)
    assert compiled.program is program
    assert shared_program.cache_info().misses == 1
    assert profile == profile_of(program)
    with pytest.raises(ValueError):
        program.kind[0] = 0
