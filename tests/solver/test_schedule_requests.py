"""POST /v1/pipeline/optimize as a library call."""

import pytest

from api_schemas.pipeline import PipelineOptimizeRequest
from models.errors import InfeasibleError
from solver.cpsat import SolverConfig
from solver.schedule import optimize_request

CONFIG = SolverConfig(num_workers=1, random_seed=0)


def test_optimize_returns_the_simulate_shape_plus_status_and_bound() -> None:
    request = PipelineOptimizeRequest.model_validate({
        "schedule": "zb_h1", "num_stages": 4, "num_micro_batches": 8,
        "durations": {"F": 1.0, "B": 2.0, "W": 1.0}, "memory_limit": 5, "time_limit_s": 20,
        "activation_bytes": {"forward_bytes": 10, "freed_by_input_grad_bytes": 6}})
    response = optimize_request(request, config=CONFIG)
    assert (response.status, response.makespan, response.lower_bound) == ("optimal", 37.0, 37.0)
    assert (response.baseline_schedule, response.baseline_makespan) == ("zb_h1", 38.0)
    assert max(response.peak_in_flight) <= 5
    assert response.peak_activation_bytes is not None
    assert len(response.timeline) == 3 * 8 * 4


def test_example_request_validates() -> None:
    example = PipelineOptimizeRequest.model_json_schema()["examples"][0]
    request = PipelineOptimizeRequest.model_validate(example)
    assert (request.memory_limit, request.durations.forward_s) == (10, 0.021)


def test_unreachable_memory_limit_is_a_no_feasible_plan_error() -> None:
    request = PipelineOptimizeRequest.model_validate({
        "schedule": "zbv", "num_stages": 4, "num_micro_batches": 8, "num_chunks": 2,
        "memory_limit": 0.5})
    with pytest.raises(InfeasibleError) as caught:
        optimize_request(request, config=CONFIG)
    assert caught.value.code == "no-feasible-plan"
