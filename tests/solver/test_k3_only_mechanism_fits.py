"""A K3-scale preset on a cluster where only Pipeline ZeRO-2 or remote
activation offload makes it fit gets a plan that chooses it and says why.

The case: the 2.8T K3-scale preset with AdamW on 128 nodes of 8 H800s with 256 GiB of host
memory each (`HOST_MEMORY_PER_NODE`), PP8 with four chunks per rank, ZeRO-1, 2,048 sequences
of 10,240 tokens, target 'any'. Without either mechanism no plan of the meshes these pins
allow fits, whatever recomputation, FP8 storage, host activation offload or optimizer
offload (allowed) it uses; each of the two alone makes it fit."""

from typing import Any

import pytest

from api_schemas import OptimizerKind, PlanRequest
from api_schemas.plan import PlanResponse
from models.catalog.assumed_presets import K3_SCALE_ID
from solver.api import plan

HOST_MEMORY_PER_NODE = 256 * 2**30
"""256 GiB of host memory per 8-GPU node (32 GiB per GPU; the H800 preset assumes 2 TiB):
enough for Pipeline ZeRO-2's gradient shards (about 29 GiB per GPU here), too little for the
AdamW optimizer states of a rank's shard (37 GiB per GPU at the least on these meshes), so
optimizer offload, which the search may also choose, makes no plan fit. With 2 TiB per node
it does (the search then takes it, 32.5 s per step)."""


def _plan(**allowed: bool) -> PlanResponse:
    constraints: dict[str, Any] = {"tp": 1, "pp": 8, "vpp": 4, "zero_stage": 1,
                                   "allow_fp8_activations": True, "framework": "any",
                                   "allow_optimizer_offload": True,
                                   **allowed}
    return plan(PlanRequest.model_validate({
        "model": {"preset": K3_SCALE_ID},
        "cluster": {"gpu": "h800-sxm5-80gb", "num_nodes": 128,
                    "host_memory_bytes": HOST_MEMORY_PER_NODE},
        "training": {"global_batch_size": 2048, "sequence_length": 10_240,
                     "optimizer": OptimizerKind.ADAMW.value, "moe_keep_expert_outputs": False,
                     "moe_dispatcher": "alltoall", "overlap_ep_comm": False},
        "constraints": constraints,
        "solver": {"time_limit_s": 60, "top_k": 1}}))


def _fits_by(response: PlanResponse, mechanism: str, allowed: str) -> None:
    """The plan fits, and the note says the search chose `mechanism` because, allowed by
    `allowed`, it is the only way any plan of the mesh fits."""
    assert response.status in ("optimal", "feasible")
    assert response.memory is not None and response.memory.fits
    why = next(n for n in response.explanation.notes
               if n.startswith(f"{mechanism} chosen by the search"))
    assert allowed in why and "without it no plan of this mesh fits" in why


def test_without_either_k3_memory_mechanism_nothing_fits() -> None:
    assert _plan().status == "infeasible"


@pytest.mark.parametrize(("allowed", "mechanism", "chosen", "left_off", "overhead"), [
    ("allow_gradient_host_shards", "Pipeline ZeRO-2", "gradient_host_shards",
     "remote_activation_offload", "Pipeline ZeRO-2 gradient offload"),
    ("allow_remote_offload", "remote activation offload", "remote_activation_offload",
     "gradient_host_shards", None),
])
def test_only_one_mechanism_makes_it_fit_and_the_search_chooses_it(
        allowed: str, mechanism: str, chosen: str, left_off: str, overhead: str | None) -> None:
    response = _plan(**{allowed: True})
    _fits_by(response, mechanism, allowed)
    assert response.parallel is not None
    assert getattr(response.parallel, chosen)
    assert not getattr(response.parallel, left_off)
    if overhead is not None:
        assert response.time is not None
        assert response.time.overheads_s[overhead] > 0
