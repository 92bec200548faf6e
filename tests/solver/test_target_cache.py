"""The mesh features of `solver/targets.py` live on the search's `TargetRequest`.

Every search brings its own spec and training objects; a module table once kept each one
alive (and its entries) until 65,536 entries had piled up, which a long-running service saw
as slowly growing memory. The table now lives on the request object and goes with it.
"""

import gc
import random
import weakref

from api_schemas.requests import Constraints
from api_schemas.training import TrainingSpec
from models.catalog.presets import model_preset
from solver import targets
from solver.space import candidate_meshes


def test_mesh_features_go_with_their_search() -> None:
    base = model_preset("llama-3.1-8b")
    training = TrainingSpec(global_batch_size=64, sequence_length=4096)
    candidates = candidate_meshes(base, training, world_size=8, gpus_per_node=8,
                                  constraints=Constraints())
    assert candidates
    first: list[weakref.ref[object]] = []
    for _ in range(3):
        spec, recipe = base.model_copy(), training.model_copy()  # a new request's objects
        request = targets.TargetRequest(spec, recipe, Constraints())
        for candidate in candidates:
            targets.admits_mesh(spec, recipe, candidate, request)
        if not first:
            first.append(weakref.ref(spec))
        del spec, recipe, request
    gc.collect()
    assert first[0]() is None, "the first search's spec is still kept"


def test_a_search_reuses_its_own_entries() -> None:
    spec = model_preset("llama-3.1-8b").model_copy()
    training = TrainingSpec(global_batch_size=64, sequence_length=4096)
    candidate = candidate_meshes(spec, training, world_size=8, gpus_per_node=8,
                                 constraints=Constraints())[0]
    request = targets.TargetRequest(spec, training, Constraints())
    first = request.mesh(candidate)
    assert request.mesh(candidate) is first
    # A request made for other objects is not reused by a call for these.
    other = targets.TargetRequest(spec.model_copy(), training, Constraints())
    assert targets.TargetRequest.of(spec, training, other) is not other
    assert targets.TargetRequest.of(spec, training, request) is request


def test_a_kept_verdict_is_the_one_a_fresh_request_gives() -> None:
    """`TargetRequest.admits` keeps each verdict by the mesh key: over every candidate of a
    MoE model on the released frameworks, taken in a shuffled order through one request,
    each verdict equals the one a request of its own gives, and both verdicts occur (the
    key leaves out nothing a framework's view reads)."""
    spec = model_preset("qwen3-30b-a3b")
    training = TrainingSpec(global_batch_size=64, sequence_length=32768)
    constraints = Constraints(framework="megatron-lm")
    candidates = candidate_meshes(spec, training, world_size=32, gpus_per_node=8,
                                  constraints=Constraints())
    random.Random(7).shuffle(candidates)
    shared = targets.TargetRequest(spec, training, constraints)
    kept = [shared.admits(c) for c in candidates]
    fresh = [targets.TargetRequest(spec, training, constraints).admits(c) for c in candidates]
    assert kept == fresh
    # Both verdicts occur: some candidate is refused, so a key too coarse shows.
    assert set(kept) == {True, False}
