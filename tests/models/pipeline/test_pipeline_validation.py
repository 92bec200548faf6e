"""Constraint errors: every impossible (schedule, p, m, v) is refused with field and fix."""

import pytest

from api_schemas.parallel import PipelineSchedule as S
from models.core.pipeline import validate_schedule
from models.errors import InvalidSpecError

REFUSED = [
    # (schedule, p, m, v, group_size, field, words in the fix)
    (S.ZB_H1, 8, 7, 1, None, "num_micro_batches", "num_micro_batches >= num_stages=8"),
    (S.GPIPE, 4, 8, 2, None, "num_chunks", "num_chunks=1"),
    (S.INTERLEAVED_1F1B, 4, 8, 1, None, "num_chunks", "num_chunks >= 2"),
    (S.INTERLEAVED_1F1B, 1, 8, 2, None, "num_stages", "num_stages >= 2"),
    (S.INTERLEAVED_1F1B, 4, 8, 2, 3, "group_size", "group_size >= 4"),
    (S.INTERLEAVED_1F1B, 4, 3, 2, 2, "group_size", "group_size >= 4"),
    (S.INTERLEAVED_1F1B, 4, 3, 2, None, "num_micro_batches", "set group_size=3"),
    (S.INTERLEAVED_1F1B, 4, 8, 2, 12, "num_micro_batches", "num_micro_batches >= 12"),
    (S.INTERLEAVED_1F1B, 4, 6, 2, None, "num_micro_batches", "multiple of 4"),
    (S.INTERLEAVED_1F1B, 4, 13, 2, 6, "num_micro_batches", "1 < num_stages=4"),
    (S.ZBV, 4, 8, 1, None, "num_chunks", "exactly two chunks"),
    (S.ZBV, 4, 8, 3, None, "num_chunks", "exactly two chunks"),
    (S.DUALPIPE, 3, 12, 1, None, "num_stages", "even num_stages"),
    (S.DUALPIPE, 4, 9, 1, None, "num_micro_batches", "even num_micro_batches"),
    (S.DUALPIPE, 4, 6, 1, None, "num_micro_batches", ">= 2 x num_stages = 8"),
    (S.DUALPIPE, 4, 8, 2, None, "num_chunks", "num_chunks=1"),
    (S.DUALPIPEV, 4, 7, 2, None, "num_micro_batches", ">= 2 x num_stages = 8"),
    (S.DUALPIPEV, 4, 8, 1, None, "num_chunks", "exactly two chunks"),
    (S.GPIPE, 0, 8, 1, None, "num_stages", "at least one"),
    (S.GPIPE, 4, 0, 1, None, "num_micro_batches", "at least one"),
    (S.ONE_F_ONE_B, 4, 8, 1, 4, "group_size", "only applies"),
]


@pytest.mark.parametrize(("schedule", "p", "m", "v", "group", "field", "fix"), REFUSED)
def test_validate_schedule_refuses_with_field_and_fix(
    schedule: S, p: int, m: int, v: int, group: int | None, field: str, fix: str
) -> None:
    with pytest.raises(InvalidSpecError) as caught:
        validate_schedule(schedule, num_stages=p, num_micro_batches=m, num_chunks=v,
                          group_size=group)
    assert caught.value.field == field
    assert caught.value.code == "invalid-spec"
    assert fix in caught.value.detail


ACCEPTED = [
    (S.GPIPE, 4, 1, 1, None),
    (S.ONE_F_ONE_B, 4, 4, 1, None),
    (S.ONE_F_ONE_B, 4, 3, 1, None),  # Megatron-LM and DeepSpeed run m < p (torch does not)
    (S.ONE_F_ONE_B, 12, 1, 1, None),
    (S.INTERLEAVED_1F1B, 4, 8, 2, None),
    (S.INTERLEAVED_1F1B, 4, 10, 3, 6),  # last group of 4 >= p
    (S.ZB_H1, 4, 4, 1, None),
    (S.ZB_H2, 4, 3, 1, None),
    (S.ZBV, 4, 3, 2, None),
    (S.DUALPIPE, 4, 8, 1, None),
    (S.DUALPIPEV, 4, 9, 2, None),  # odd m is fine for the V
]


@pytest.mark.parametrize(("schedule", "p", "m", "v", "group"), ACCEPTED)
def test_validate_schedule_accepts_valid_parameters(
    schedule: S, p: int, m: int, v: int, group: int | None
) -> None:
    validate_schedule(schedule, num_stages=p, num_micro_batches=m, num_chunks=v,
                      group_size=group)


def test_one_group_of_fewer_micro_batches_than_stages_is_accepted() -> None:
    # Llama 3 (arXiv:2407.21783 Sec. 3.3.2) runs fewer micro-batches than stages; torch's
    # ScheduleInterleaved1F1B takes them as one round, N = m.
    validate_schedule(S.INTERLEAVED_1F1B, num_stages=16, num_micro_batches=8, num_chunks=8,
                      group_size=8)
