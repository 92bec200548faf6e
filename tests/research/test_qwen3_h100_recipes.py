"""The three H100 Qwen3-30B-A3B rows (16 GPUs) run, as published, the performance recipe of
their Megatron-Bridge release (issue 34's audit, research/LEDGER.md "Qwen3-30B-A3B H100:
two recipes, one prediction"):
- 25.11: tag v0.2.0 `QWEN3_30B_A3B_H100_FP8_CS_BASE_CONFIG`: PP 2, VP 12, EP 8, the base
  micro-batch 1, GBS 512, `moe_a2a_overlap=True`, no flex backend (the provider's alltoall),
  no CUDA graph.
- 26.02: commit d29310e90 `QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_FP8_CS_V1`: the same layout at
  GBS 1024; `qwen3_30b_a3b_pretrain_config_h100` sets `moe_token_dispatcher_type="alltoall"`.
- 26.04.01: tag 26.04-alpha.rc2, the same config name after PR #2477: EP 16, PP 1, HybridEP
  (the model's per-node `deepep`), no EP overlap, GBS 1024, micro-batch 1, no CUDA graph.
The last test keeps the outlier note's figure honest: the model puts the old and the new
recipe within 0.2% of each other, while the 26.02 and 26.02.01 tables differ by 77%."""

import sys
from pathlib import Path

import pytest

from api_schemas import MoeDispatcher, PipelineSchedule
from api_schemas.dtypes import DType

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "research"))
import validate_published as vp  # noqa: E402

ROWS = {r["id"]: r for r in vp.DATA["runs"]}
OLD_2511 = "bridge-25.11-dgx-h100-qwen3-30b-a3b-16gpu"
OLD_2602 = "bridge-26.02-dgx-h100-qwen3-30b-a3b-16gpu"
NEW_2604 = "bridge-26.04.01-dgx-h100-qwen3-30b-a3b-16gpu"

RECIPES = {
    # (pp, vpp, ep, dp, micro-batch, global batch, dispatcher, EP overlap)
    OLD_2511: (2, 12, 8, 8, 1, 512, MoeDispatcher.ALLTOALL, True),
    OLD_2602: (2, 12, 8, 8, 1, 1024, MoeDispatcher.ALLTOALL, True),
    NEW_2604: (1, 1, 16, 16, 1, 1024, MoeDispatcher.DEEPEP, False),
}


@pytest.mark.parametrize("rid", sorted(RECIPES))
def test_each_row_runs_its_release_recipe(rid: str) -> None:
    config = vp.as_published_config(ROWS[rid])
    assert config is not None
    parallel, training = config
    pp, vpp, ep, dp, mbs, gbs, dispatcher, overlap = RECIPES[rid]
    assert (parallel.tp, parallel.pp, parallel.vpp, parallel.ep, parallel.dp) == (
        1, pp, vpp, ep, dp)
    assert parallel.micro_batch_size == mbs
    assert parallel.schedule == (PipelineSchedule.INTERLEAVED_1F1B if vpp > 1
                                 else PipelineSchedule.ONE_F_ONE_B)
    assert training.global_batch_size == gbs
    assert training.moe_dispatcher == dispatcher
    assert training.overlap_ep_comm is overlap
    assert training.cuda_graph_modules == ()
    assert training.compute_dtype == DType.FP8


def test_the_model_does_not_separate_the_two_recipes_the_tables_do() -> None:
    old = vp.predict(ROWS[OLD_2602], vp.AS_PUBLISHED_PROTOCOL)
    new = vp.predict(ROWS[NEW_2604], vp.AS_PUBLISHED_PROTOCOL)
    assert old is not None and new is not None
    assert (old[0], new[0]) == (5113, 8960)
    assert abs(new[1] / old[1] - 1) < 0.002
    assert new[0] / old[0] - 1 > 0.7
