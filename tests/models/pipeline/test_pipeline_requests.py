"""POST /v1/pipeline/simulate as a library call: the contract's names and the examples."""

import pytest
from pydantic import ValidationError

from api_schemas.pipeline import PipelineSimulateRequest, PipelineSimulateResponse
from models.core.pipeline.requests import simulate_request
from models.errors import InvalidSpecError


def test_contract_example_request_runs() -> None:
    example = PipelineSimulateRequest.model_json_schema()["examples"][0]
    response = simulate_request(PipelineSimulateRequest.model_validate(example))
    assert isinstance(response, PipelineSimulateResponse)
    assert len(response.peak_in_flight) == example["num_stages"]
    assert len(response.timeline) == 8 * 32 * 2 * 2


def test_minimal_shape_of_the_product_contract() -> None:
    """{"schedule", "num_stages", "num_micro_batches", "num_chunks": 1, "durations":
    {"F", "B", "W"}} -> {"makespan", "bubble_fraction", "peak_in_flight", "timeline"}."""
    request = PipelineSimulateRequest.model_validate({
        "schedule": "1f1b", "num_stages": 4, "num_micro_batches": 8, "num_chunks": 1,
        "durations": {"F": 1.0, "B": 1.0, "W": 1.0}})
    body = simulate_request(request).model_dump()
    assert body["makespan"] == 33.0
    assert body["bubble_fraction"] == pytest.approx(9 / 33)
    assert body["peak_in_flight"] == [4.0, 3.0, 2.0, 1.0]
    first = body["timeline"][0]
    assert {k: first[k] for k in ("stage", "op", "micro_batch", "chunk", "start", "end")} == \
           {"stage": 0, "op": "F", "micro_batch": 0, "chunk": 0, "start": 0.0, "end": 1.0}


def test_overlapped_pair_and_activation_bytes_pass_through() -> None:
    request = PipelineSimulateRequest.model_validate({
        "schedule": "zb_h1", "num_stages": 4, "num_micro_batches": 8,
        "durations": {"F": 1.0, "B": [1.0, 1.0, 1.0, 1.0], "W": 1.0},
        "activation_bytes": {"forward_bytes": 4, "freed_by_input_grad_bytes": 3},
        "include_timeline": False})
    response = simulate_request(request)
    assert response.peak_activation_bytes == [16, 13, 10, 7]
    assert response.timeline == []
    dual = simulate_request(PipelineSimulateRequest.model_validate({
        "schedule": "dualpipe", "num_stages": 4, "num_micro_batches": 8,
        "durations": {"F": 1.0, "B": 1.0, "W": 1.0, "FB": 2.0}}))
    assert max(dual.idle_s) == pytest.approx(1.0)
    assert any(e.op == "FB" and e.backward_micro_batch is not None for e in dual.timeline)


def test_domain_errors_and_schema_errors_are_apart() -> None:
    with pytest.raises(InvalidSpecError, match="num_micro_batches"):
        simulate_request(PipelineSimulateRequest(schedule="dualpipe",  # type: ignore[arg-type]
                                                 num_stages=4, num_micro_batches=6))
    with pytest.raises(ValidationError):
        PipelineSimulateRequest.model_validate({"schedule": "1f1b", "num_stages": 0,
                                                "num_micro_batches": 8})
    with pytest.raises(ValidationError):
        PipelineSimulateRequest.model_validate({"schedule": "1f1b", "num_stages": 4,
                                                "num_micro_batches": 8, "durations": {"X": 1}})
