"""Collective communication estimates.

Owns: POST /v1/collectives/estimate (schema in -> `models.core.collectives.estimate_collective`
-> schema out), with the group-size bound. Must not: model links itself.
"""

from typing import Annotated, Any

from fastapi import APIRouter, Body

from api_schemas.collectives import CollectiveEstimateRequest, CollectiveEstimateResponse
from models.core.collectives.report import estimate_collective
from service import limits
from service.deps import SettingsDep
from service.openapi import problem_responses

router = APIRouter(tags=["estimates"])

H100_CLUSTER_4_NODES: dict[str, Any] = {
    "gpu": {"id": "h100-sxm5-80gb", "name": "NVIDIA H100 SXM5 80GB", "vendor": "NVIDIA",
            "memory_bytes": 85899345920, "hbm_bandwidth_bytes_per_s": 3.35e12,
            "dense_peak_flop_per_s": {"bf16": 989.4e12, "fp16": 989.4e12, "tf32": 494.7e12,
                                      "fp8": 1978.9e12}},
    "num_nodes": 4, "gpus_per_node": 8,
    "intra_node": {"bandwidth_bytes_per_s": 360e9, "latency_s": 2e-06},
    "inter_node": {"bandwidth_bytes_per_s": 50e9, "latency_s": 5e-06},
}
"""Four HGX H100 nodes as the catalog builds them (GET /v1/catalog/gpus)."""

COLLECTIVE_EXAMPLES = {
    "dp-all-reduce-h100": {
        "summary": "256 MiB gradient all-reduce over 32 H100s on 4 nodes",
        "value": {"collective": "all_reduce", "num_ranks": 32, "message_bytes": 268435456,
                  "cluster": H100_CLUSTER_4_NODES, "ranks_per_node": 8},
    },
    "overlapped-gradient-reduction": {
        "summary": "The same all-reduce, 90% overlappable, behind 4 ms of backward compute",
        "value": {"collective": "all_reduce", "num_ranks": 32, "message_bytes": 268435456,
                  "cluster": H100_CLUSTER_4_NODES, "ranks_per_node": 8,
                  "overlap_frac": 0.9, "overlap_window_s": 0.004},
    },
    "explicit-links": {
        "summary": "The same all-reduce on explicit 50 GB/s, 10 us links",
        "value": {"collective": "all_reduce", "num_ranks": 32, "message_bytes": 268435456,
                  "bandwidth_bytes_per_s": 50e9, "latency_s": 1e-5},
    },
}


@router.post("/v1/collectives/estimate", summary="Bytes and alpha-beta time of a collective",
             responses=problem_responses("invalid-spec"))
def collectives_estimate(
    request: Annotated[CollectiveEstimateRequest, Body(openapi_examples=COLLECTIVE_EXAMPLES)],
    settings: SettingsDep,
) -> CollectiveEstimateResponse:
    """Bytes each rank sends (the counting basis named, beside the papers' volume and the
    bytes on the wire) and the alpha-beta time of one collective call, on a cluster's
    intra- and inter-node links (hierarchical when the group spans nodes) or on explicit
    links; the fastest algorithm is chosen as NCCL's tuner would. With `overlap_frac` (and
    `overlap_window_s`) the time is split into the part hidden behind compute and the part
    exposed."""
    named = limits.bounds(settings)
    limits.check_bound(request.num_ranks, named["world_size"], field="num_ranks",
                       what="the group size")
    if request.cluster is not None:
        limits.check_bound(request.cluster.num_nodes * request.cluster.gpus_per_node,
                           named["world_size"], field="cluster.num_nodes",
                           what="the cluster's GPU count")
    return limits.finite_answer(estimate_collective, request)


__all__ = ["router"]
