"""The mesh-feature cache of `solver/targets.py` keeps a bounded number of searches.

Every search brings its own spec and training objects; the cache used to keep each one
alive (and its entries) until 65,536 entries had piled up, which a long-running service saw
as slowly growing memory.
"""

import gc
import weakref

from api_schemas.requests import Constraints
from api_schemas.training import TrainingSpec
from models.catalog.presets import model_preset
from solver import targets
from solver.space import candidate_meshes


def test_mesh_features_are_kept_for_the_last_searches_only() -> None:
    base = model_preset("llama-3.1-8b")
    training = TrainingSpec(global_batch_size=64, sequence_length=4096)
    candidates = candidate_meshes(base, training, world_size=8, gpus_per_node=8,
                                  constraints=Constraints())
    assert candidates
    searches = 3 * targets.MESH_CACHE_SEARCHES
    first: list[weakref.ref[object]] = []
    for _ in range(searches):
        spec, recipe = base.model_copy(), training.model_copy()  # a new request's objects
        for candidate in candidates:
            targets.admits_mesh(spec, recipe, candidate, Constraints())
        if not first:
            first.append(weakref.ref(spec))
        del spec, recipe
    gc.collect()
    assert len(targets._MESH) == targets.MESH_CACHE_SEARCHES
    assert first[0]() is None, "the first search's spec is still kept"


def test_a_search_reuses_its_own_entries() -> None:
    spec = model_preset("llama-3.1-8b").model_copy()
    training = TrainingSpec(global_batch_size=64, sequence_length=4096)
    candidate = candidate_meshes(spec, training, world_size=8, gpus_per_node=8,
                                 constraints=Constraints())[0]
    first = targets._mesh_features(spec, training, candidate)
    assert targets._mesh_features(spec, training, candidate) is first
