"""The planner's bounds are lower bounds of the value they stand for."""

import random

import pytest

from api_schemas import Constraints, TrainingSpec
from models.catalog import cluster_preset, model_preset
from solver.bounds import BoundTables
from solver.candidate_eval import Rejection, evaluate_candidate, plain_makespan_bound
from solver.cpsat import SolverConfig
from solver.space import candidate_meshes


@pytest.mark.parametrize(("model", "gpu", "nodes", "batch", "seq"), [
    ("llama-3.1-8b", "h100-sxm5-80gb", 2, 64, 4096),
    ("mixtral-8x7b", "h100-sxm5-80gb", 4, 64, 4096),
    ("gpt-7.5b", "a100-sxm4-80gb", 4, 256, 2048),
])
def test_time_and_memory_bounds_never_exceed_the_evaluated_values(model: str, gpu: str,
                                                                  nodes: int, batch: int,
                                                                  seq: int) -> None:
    spec = model_preset(model)
    cluster = cluster_preset(gpu, num_nodes=nodes)
    training = TrainingSpec(global_batch_size=batch, sequence_length=seq)
    tables = BoundTables(spec, training, cluster)
    candidates = candidate_meshes(spec, training, world_size=cluster.world_size,
                                  gpus_per_node=8, constraints=Constraints())
    for c in random.Random(3).sample(candidates, min(25, len(candidates))):
        result = evaluate_candidate(spec, training, cluster, c, Constraints(), SolverConfig())
        if isinstance(result, Rejection):
            continue
        value = result.estimate.step_time_s
        assert tables.time_bound_s(c) <= value * (1 + 1e-9), c.key
        assert plain_makespan_bound(spec, training, cluster, c) <= value * (1 + 1e-9), c.key
        assert tables.memory_bound_bytes(c, max_zero=3, max_offload=0.5) \
            <= result.ledger.peak_bytes, c.key
