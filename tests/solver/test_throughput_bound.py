"""The throughput bound checked before a search is above every plan the planner finds."""

import pytest

from api_schemas.requests import PlanRequest
from models.catalog.resolve import resolve_cluster, resolve_model
from solver import plan
from solver.throughput_bound import peak_tokens_per_s


@pytest.mark.parametrize(("preset", "nodes", "batch"), [
    ("llama-3.1-8b", 1, 64),
    ("llama-3.1-70b", 4, 256),
])
def test_no_plan_beats_the_peak_bound(preset: str, nodes: int, batch: int) -> None:
    request = PlanRequest.model_validate({
        "model": {"preset": preset},
        "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": nodes, "gpus_per_node": 8},
        "training": {"global_batch_size": batch, "sequence_length": 4096},
        "solver": {"time_limit_s": 60, "top_k": 3, "num_workers": 1}})
    response = plan(request)
    cluster = resolve_cluster(request.cluster)
    bound = peak_tokens_per_s(resolve_model(request.model).spec, cluster,
                              sequence_length=4096, gpus=cluster.world_size)
    assert response.throughput is not None
    found = [response.throughput.tokens_per_s,
             *(a.tokens_per_s for a in response.alternatives if a.tokens_per_s is not None)]
    assert 0 < max(found) < bound
    # The bound is a bound, not a wild overestimate: the best plan reaches a real share.
    assert max(found) > 0.1 * bound
