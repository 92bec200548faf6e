"""Megatron-Bridge MoE runs that trained fit under their own recipe: the layout the table
prints, no activation recomputation (the Qwen3 recipe sets `recompute_granularity = None`;
the GPT-OSS recipe lists `recompute_modules` but leaves the granularity unset, which
Megatron-Core reads as no recomputation) and no offload, with the recipe's BF16 gradient
buffer (`grad_reduce_in_fp32 = False`) and Megatron-Core's MoE, which keeps no expert
outputs for the combine. The planner, asked for the row, picks that policy: no offload
stall and no recompute time."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "research"))
import validate_published  # noqa: E402 - the research folder is not a package

from api_schemas import DType, ParallelConfig, PipelineSchedule, RecomputeMode  # noqa: E402
from models.core.memory import memory_ledger  # noqa: E402

ROWS = ("bridge-25.11-dgx-h100-qwen3-30b-a3b-16gpu", "bridge-25.11-dgx-b200-gpt-oss-120b-64gpu")
BY_ID = {row["id"]: row for row in validate_published.DATA["runs"]}


def _published_parallel(row: dict[str, object]) -> ParallelConfig:
    p = row["parallel"]
    assert isinstance(p, dict)
    vpp = p.get("vpp") or 1
    return ParallelConfig(tp=p["tp"], pp=p["pp"], dp=p["dp"], ep=p["ep"], vpp=vpp,
                          micro_batch_size=p["micro_batch_size"],
                          schedule=(PipelineSchedule.INTERLEAVED_1F1B if vpp > 1
                                    else PipelineSchedule.ONE_F_ONE_B),
                          recompute=RecomputeMode.NONE)


@pytest.mark.parametrize("row_id", ROWS)
def test_published_moe_recipe_fits_without_recompute_or_offload(row_id: str) -> None:
    row = BY_ID[row_id]
    spec = validate_published.model_of(row)
    assert spec is not None
    training = validate_published.row_training(row)
    assert training.grad_dtype == DType.BF16
    assert not training.moe_keep_expert_outputs
    cluster = validate_published.row_cluster(row)
    parallel = _published_parallel(row)
    assert memory_ledger(spec, training, parallel, cluster).fits

    # The check can fail: with FP32 main gradients and the expert outputs kept for a
    # weighted combine (Megatron-Core before 0.13), the same recipe does not fit.
    older = training.model_copy(update={"grad_dtype": DType.FP32,
                                        "moe_keep_expert_outputs": True})
    assert not memory_ledger(spec, older, parallel, cluster).fits


@pytest.mark.parametrize("row_id", ROWS)
def test_planner_runs_the_published_moe_recipe_without_offload(row_id: str) -> None:
    estimate = validate_published.best_estimate(BY_ID[row_id])
    assert estimate is not None
    assert estimate.offload_stall_s == 0.0
    assert estimate.recompute_s == 0.0
