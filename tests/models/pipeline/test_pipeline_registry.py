"""The schedule registry: one record per schedule, consistent with its generated order, and
the only place a schedule name is dispatched on."""

import pathlib
import re

import numpy as np
import pytest

from api_schemas.parallel import PipelineSchedule as S
from models.core.pipeline import (
    SCHEDULES,
    OpKind,
    StagePlacement,
    closed_form,
    generate_program,
    peak_in_flight_chunks,
    schedule_traits,
    validate_schedule,
)
from models.errors import InvalidSpecError

ROOT = pathlib.Path(__file__).resolve().parents[3]
PARAMS = {  # (p, m, v) every schedule accepts, large enough for its steady state
    S.GPIPE: (4, 8, 1), S.ONE_F_ONE_B: (4, 8, 1), S.INTERLEAVED_1F1B: (4, 8, 2),
    S.ZB_H1: (4, 8, 1), S.ZB_H2: (4, 8, 1), S.ZBV: (4, 8, 2), S.DUALPIPE: (4, 8, 1),
    S.DUALPIPEV: (4, 8, 2), S.CHIMERA: (4, 8, 1),
}


def test_every_schedule_name_has_exactly_one_record() -> None:
    assert set(SCHEDULES) == set(S)
    assert set(PARAMS) == set(S)
    for name, traits in SCHEDULES.items():
        assert traits.schedule == name
        assert traits.source


def test_an_unknown_schedule_is_an_error_not_another_schedules_numbers() -> None:
    for call in (lambda: schedule_traits("zb_auto"),
                 lambda: generate_program("zb_auto", num_stages=4,  # type: ignore[arg-type]
                                          num_micro_batches=8),
                 lambda: validate_schedule("zb_auto", num_stages=4,  # type: ignore[arg-type]
                                           num_micro_batches=8),
                 lambda: peak_in_flight_chunks("zb_auto", num_stages=4,  # type: ignore[arg-type]
                                               num_micro_batches=8, stage=0),
                 lambda: closed_form("zb_auto", num_stages=4,  # type: ignore[arg-type]
                                     num_micro_batches=8, forward_s=1.0,
                                     backward_input_s=1.0, backward_weight_s=1.0)):
        with pytest.raises(InvalidSpecError) as caught:
            call()
        assert caught.value.field == "schedule"
        assert "'dualpipev'" in caught.value.detail  # the known names are listed


@pytest.mark.parametrize("schedule", list(S))
def test_each_record_describes_its_generated_order(schedule: S) -> None:
    """Placement, chunks, pipes, split backward and overlapped pairs as the order has them."""
    traits = schedule_traits(schedule)
    p, m, v = PARAMS[schedule]
    program = generate_program(schedule, num_stages=p, num_micro_batches=m, num_chunks=v)
    place = program.placement
    assert traits.num_chunks(v) == v
    assert program.chunks_per_stage_unit == v
    assert place.stage_rank.shape[0] == traits.num_pipes
    assert traits.weight_copies == traits.num_pipes
    assert place.num_stages == traits.num_virtual_stages(p, v)
    assert [traits.rank_of_stage(p, s) for s in range(place.num_stages)] == \
        place.stage_rank[0].tolist()
    if traits.num_pipes == 2:
        assert place.stage_rank[1].tolist() == list(range(p - 1, -1, -1))
    assert traits.micro_batches_per_chunk(m) == int(np.sum(place.micro_batch_pipe == 0))
    kinds = set(program.kind.tolist())
    assert (OpKind.W in kinds) == traits.split_backward
    assert (OpKind.FB in kinds) == traits.overlapped_pairs
    expected = {StagePlacement.LINEAR: [0] * p, StagePlacement.LOOPED: list(range(v)) * 1,
                StagePlacement.V_SHAPE: [0, 1], StagePlacement.BIDIRECTIONAL: [0]}
    assert sorted(set(place.stage_chunk[0].tolist())) == sorted(set(expected[traits.placement]))


def test_framework_names_come_from_the_records() -> None:
    torch_keys = {"GPipe", "1F1B", "Interleaved1F1B", "InterleavedZeroBubble",
                  "ZBVZeroBubble", "DualPipeV", "LoopedBFS"}
    for traits in SCHEDULES.values():
        names = traits.exports
        assert names.torchtitan in torch_keys
        assert names.megatron_native == (names.megatron_note == "")
    assert [s for s, t in SCHEDULES.items() if t.exports.deepspeed_native] == [S.ONE_F_ONE_B]


_COMPARISON = re.compile(
    r"schedule\s*(==|!=|\bnot in\b|\bin\b)\s*\(?\s*(S|PipelineSchedule)\.[A-Z]")


def test_no_product_module_dispatches_on_a_schedule_name() -> None:
    """Outside `models/pipeline` every schedule fact is read from the record."""
    offenders = []
    for package in ("api_schemas", "models", "solver", "service"):
        for path in (ROOT / package).rglob("*.py"):
            if path.is_relative_to(ROOT / "models" / "core" / "pipeline"):
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if _COMPARISON.search(line) and not line.lstrip().startswith("for "):
                    offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert offenders == []
