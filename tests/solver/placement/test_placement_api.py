"""Validation of count matrices and the POST /v1/moe/placement request/response mapping."""

import numpy as np
import pytest
from pydantic import ValidationError

from api_schemas.moe import (
    MoePlacementRequest,
    MoePlacementResponse,
    PlacementPlanner,
    PlacementStatus,
)
from models.errors import InvalidSpecError
from solver.cpsat import SolverConfig
from solver.placement import placement_problem, plan_placement

EXAMPLE = MoePlacementRequest.model_json_schema()["properties"]["tokens"]["examples"][0]


@pytest.mark.parametrize(
    ("counts", "top_k", "message"),
    [([[1, 2, 3]], 1, None),
     ([[1, 2], [3]], 1, "rectangular|shape"),
     ([1, 2, 3], 1, "shape"),
     ([[1, -2], [1, 0]], 1, r"tokens\[0\]\[1\]=-2"),
     ([[1, 1, 1], [1, 1, 1]], 1, "num_experts=3 is not divisible by the 2 ranks"),
     ([[2, 0], [1, 0]], 1, "row 1 of tokens sums to 1 but row 0 sums to 2"),
     ([[3, 0], [2, 1]], 2, "multiple of top_k=2"),
     ([[1, 0]], 3, "top_k=3"),
     ([[0.5, 1.5]], 1, "integers")],
)
def test_placement_problem_validation(counts: object, top_k: int, message: str | None) -> None:
    if message is None:
        p = placement_problem(counts, top_k=top_k)
        assert (p.tokens_per_rank, p.capacity, p.experts_per_rank) == (6, 6, 3)
        return
    with pytest.raises(InvalidSpecError, match=message) as info:
        placement_problem(counts, top_k=top_k)
    assert info.value.field in {"tokens", "top_k"}
    assert info.value.code == "invalid-spec"


def test_request_rejects_rows_of_the_wrong_length() -> None:
    with pytest.raises(ValidationError, match=r"tokens\[1\] has 3 counts but num_experts=4"):
        MoePlacementRequest(num_experts=4, top_k=1, tokens=[[1, 1, 1, 1], [1, 1, 2]])
    with pytest.raises(ValidationError):
        MoePlacementRequest(num_experts=2, top_k=1, tokens=[[1, -1]])


@pytest.mark.parametrize("planner", list(PlacementPlanner))
def test_plan_placement_on_the_schema_example(planner: PlacementPlanner) -> None:
    request = MoePlacementRequest(num_experts=8, top_k=2, tokens=EXAMPLE, planner=planner,
                                  expert_weight_bytes=88_080_384, expert_grad_bytes=176_160_768)
    response = plan_placement(request, config=SolverConfig(num_workers=1, max_time_s=5.0))
    assert response.rank_loads == [16, 16, 16, 16]
    assert response.capacity_per_rank == 16 and response.tokens_per_rank == 8
    assert response.status == PlacementStatus.OPTIMAL
    assert response.num_redundant_experts == 3 == sum(response.lower_bound_per_rank)
    assert response.prefetch_bytes == 3 * 88_080_384
    assert response.bound_holds
    by_source = np.zeros((4, 8), dtype=np.int64)
    for route in response.routes:
        by_source[route.source, route.expert] += route.tokens
    assert by_source.tolist() == EXAMPLE
    # the response round-trips through JSON
    again = MoePlacementResponse.model_validate_json(response.model_dump_json())
    assert again == response


def test_schema_example_response_fields_match_the_planner() -> None:
    """The OpenAPI examples of the response are what the constructive planner returns."""
    props = MoePlacementResponse.model_json_schema()["properties"]
    response = plan_placement(MoePlacementRequest(num_experts=8, top_k=2, tokens=EXAMPLE,
                                                  expert_weight_bytes=88_080_384,
                                                  expert_grad_bytes=176_160_768))
    for name in ("rank_loads", "redundant_experts", "num_redundant_experts",
                 "lower_bound_per_rank", "remote_tokens", "migrated_tokens", "prefetch_bytes",
                 "grad_reduce_bytes", "no_redundancy_imbalance"):
        assert props[name]["examples"][0] == getattr(response, name), name


def test_plan_placement_reports_invalid_counts() -> None:
    request = MoePlacementRequest(num_experts=4, top_k=1, tokens=[[1, 1, 1, 1], [4, 0, 0, 1]])
    with pytest.raises(InvalidSpecError, match="row 1 of tokens sums to 5"):
        plan_placement(request)


SKEWED = [[30, 1, 1, 0, 0, 0, 0, 0], [28, 2, 1, 1, 0, 0, 0, 0],
          [31, 0, 0, 1, 0, 0, 0, 0], [29, 1, 1, 1, 0, 0, 0, 0]]


def test_rank_balance_is_reported_apart_from_the_expert_work_inside_ranks() -> None:
    request = MoePlacementRequest(num_experts=8, top_k=2, tokens=SKEWED, gpu="h100-sxm5-80gb",
                                  hidden_size=7168, expert_ffn_hidden_size=2048)
    response = plan_placement(request)
    assert response.rank_load_imbalance == 1.0
    per_rank = np.asarray(response.rank_expert_tokens)
    assert per_rank.sum(axis=1).tolist() == response.rank_loads
    assert per_rank.sum(axis=0).tolist() == np.asarray(SKEWED).sum(axis=0).tolist()
    assert response.rank_gemm_rows == [sum(-(-n // 128) * 128 for n in row)
                                       for row in per_rank.tolist()]
    times = response.rank_expert_gemm_s
    assert times is not None and response.expert_gemm_makespan_s == max(times)
    # Balanced ranks, unbalanced expert work: ranks holding replicas run more GEMMs.
    assert response.expert_gemm_imbalance is not None and response.expert_gemm_imbalance > 1.2


def test_expert_times_need_the_gpu_and_both_widths() -> None:
    rows_only = plan_placement(MoePlacementRequest(num_experts=8, top_k=2, tokens=SKEWED))
    assert rows_only.rank_expert_gemm_s is None and rows_only.rank_gemm_rows
    with pytest.raises(ValidationError, match="together"):
        MoePlacementRequest(num_experts=8, top_k=2, tokens=SKEWED, gpu="h100-sxm5-80gb")
    with pytest.raises(InvalidSpecError, match="unknown GPU") as err:
        plan_placement(MoePlacementRequest(num_experts=8, top_k=2, tokens=SKEWED, gpu="nope",
                                           hidden_size=64, expert_ffn_hidden_size=64))
    assert err.value.field == "gpu"
