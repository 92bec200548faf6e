"""The /v1/mesh answer built from a MeshRequest, and the request/response schemas."""

import pytest
from pydantic import ValidationError

from api_schemas import (
    CollectiveEstimateRequest,
    MeshRequest,
    MeshResponse,
    ModelSpec,
    TrainingSpec,
)
from models.core.mesh.report import mesh_report


def _example(model_type: type[MeshRequest] | type[CollectiveEstimateRequest]) -> dict[str, object]:
    extra = model_type.model_config.get("json_schema_extra")
    assert isinstance(extra, dict)
    examples = extra["examples"]
    assert isinstance(examples, list)
    example = examples[0]
    assert isinstance(example, dict)
    return example


def test_request_examples_validate() -> None:
    MeshRequest.model_validate(_example(MeshRequest))
    CollectiveEstimateRequest.model_validate(_example(CollectiveEstimateRequest))


def test_mesh_report_of_the_32_rank_example() -> None:
    response = mesh_report(MeshRequest.model_validate(_example(MeshRequest)))
    assert isinstance(response, MeshResponse)
    assert (response.world_size, response.valid, response.order) == (32, True,
                                                                     "tp-cp-ep-dp-pp")
    assert response.degrees["edp"] == 2
    assert len(response.ranks) == 32 and not response.ranks_truncated
    rank13 = response.ranks[13]
    assert rank13.node == 1 and rank13.local_rank == 5
    assert rank13.groups["ep"] == [9, 11, 13, 15]
    assert rank13.groups["dp_cp"] == [1, 3, 5, 7, 9, 11, 13, 15]
    axes = {a.kind: a for a in response.axes}
    assert axes["tp"].all_intra_node and not axes["dp_cp"].all_intra_node
    assert {c.collective.value for c in axes["tp"].collectives} == {"all_gather",
                                                                    "reduce_scatter"}
    assert axes["pp"].collectives[0].frequency == "per_micro_batch"
    assert response.model_dump_json()


def test_mesh_report_lists_problems_with_alternatives() -> None:
    model = ModelSpec(num_layers=32, hidden_size=4096, num_attention_heads=32,
                      ffn_hidden_size=11008, vocab_size=32000)
    request = MeshRequest.model_validate({
        "cluster": {"num_nodes": 2, "gpus_per_node": 8, "gpu": "h100-sxm5-80gb"},
        "parallel": {"tp": 3, "dp": 4}, "model": model.model_dump(),
        "training": TrainingSpec(global_batch_size=64, sequence_length=4096).model_dump(),
        "max_ranks": 4})
    response = mesh_report(request)
    assert not response.valid
    assert response.ranks == [] and response.axes == []
    rules = [p.rule for p in response.problems]
    assert rules[:2] == ["world-size", "tp-divides-heads"]
    assert all(p.alternative is not None for p in response.problems)
    world = response.problems[0]
    assert world.alternative is not None and world.alternative.parallel.world_size == 16


def test_mesh_request_truncates_rank_listing() -> None:
    response = mesh_report(MeshRequest.model_validate({
        "cluster": {"num_nodes": 64, "gpus_per_node": 8},
        "parallel": {"tp": 8, "pp": 8, "dp": 8}, "max_ranks": 16}))
    assert len(response.ranks) == 16 and response.ranks_truncated


def test_mesh_request_rejects_unknown_fields() -> None:
    with pytest.raises(ValidationError):
        MeshRequest.model_validate({"cluster": {"num_nodes": 1, "gpus_per_node": 8},
                                    "parallel": {"tp": 8}, "typo": 1})
