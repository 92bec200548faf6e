"""The ledger memo's model-state tables are shared by recipes that differ only in fields no
model-state term reads (`models.core.ledger_memo.STATE_FREE_FIELDS`): each such field, set,
leaves every rank's states as they were, and a recipe that changes the states (DeepSpeed's
BF16_Optimizer keeping the bf16 gradients) gets tables of its own."""

import pytest

from api_schemas import (
    ModelPreset,
    ModelSpec,
    MoeDispatcher,
    ParallelConfig,
    PipeEngineP2P,
    TrainingSpec,
)
from models.catalog.resolve import resolve_model
from models.core.layout import pipeline_layout
from models.core.ledger_memo import STATE_FREE_FIELDS, LedgerMemo, state_sums, states_recipe
from models.core.rank_states import state_parts

TRAINING = TrainingSpec(global_batch_size=64, sequence_length=4096)
PARALLEL = ParallelConfig(tp=2, pp=2, dp=4, ep=4, zero_stage=1, sequence_parallel=True)
SET_VALUES = {"moe_dispatcher": MoeDispatcher.DEEPEP,
              "pipe_engine_p2p": PipeEngineP2P.DEEPSPEED_PARTITIONED}


def _spec() -> ModelSpec:
    return resolve_model(ModelPreset(preset="mixtral-8x7b")).spec


@pytest.mark.parametrize("name", STATE_FREE_FIELDS)
def test_a_state_free_field_leaves_every_rank_s_states_unchanged(name: str) -> None:
    spec = _spec()
    changed = TRAINING.model_copy(update={name: SET_VALUES.get(name, True)})
    assert states_recipe(changed) == states_recipe(TRAINING)
    for layout in pipeline_layout(spec, PARALLEL):
        assert state_parts(spec, changed, PARALLEL, layout) == state_parts(
            spec, TRAINING, PARALLEL, layout)


def test_recipes_share_state_tables_only_where_their_states_agree() -> None:
    spec = _spec()
    memo = LedgerMemo(spec=spec, training=TRAINING)
    overlapped = memo.for_recipe(spec, TRAINING.model_copy(update={"overlap_grad_reduce": True}))
    wrapped = memo.for_recipe(spec, TRAINING.model_copy(update={"bf16_hp_grad_update": True}))
    assert overlapped is not None and wrapped is not None
    assert overlapped.states is memo.states and overlapped.state_sums is memo.state_sums
    assert wrapped.states is not memo.states
    layout = pipeline_layout(spec, PARALLEL)[0]
    plain = state_sums(spec, TRAINING, PARALLEL, layout, memo)
    assert state_sums(spec, overlapped.training, PARALLEL, layout, overlapped) is plain
    held = state_sums(spec, wrapped.training, PARALLEL, layout, wrapped)
    assert held[1] > plain[1]
