"""The `POST /v1/collectives/estimate` answer: a request in, a response out.

Owns: choosing between the explicit-link and the cluster model from the request, turning
a `CollectiveCost` into the response schema, and splitting its time into the part hidden
behind compute and the part exposed, under the request's overlap. Must not: do I/O.
"""


from api_schemas.collectives import (
    CollectiveEstimateRequest,
    CollectiveEstimateResponse,
    CollectivePhase,
)
from models.core.collectives.alpha_beta import (
    CollectiveCost,
    alpha_beta_crossover_bytes,
    flat_collective_cost,
)
from models.core.collectives.fabric import fabric_of
from models.core.collectives.hierarchical import collective_cost


def estimate_collective(request: CollectiveEstimateRequest) -> CollectiveEstimateResponse:
    """Bytes and alpha-beta time of the requested collective.

    Raises:
        InvalidSpecError: ranks_per_node does not divide num_ranks or exceeds a node.
    """
    crossover: float | None = None
    if request.cluster is None:
        bandwidth, latency = request.bandwidth_bytes_per_s, request.latency_s
        assert bandwidth is not None and latency is not None  # the schema checks both
        cost = flat_collective_cost(request.collective, num_ranks=request.num_ranks,
                                    message_bytes=request.message_bytes,
                                    bandwidth_bytes_per_s=bandwidth, latency_s=latency,
                                    algorithm=request.algorithm)
        if request.num_ranks > 1:
            crossover = alpha_beta_crossover_bytes(
                request.collective, num_ranks=request.num_ranks,
                bandwidth_bytes_per_s=bandwidth, latency_s=latency, algorithm=cost.algorithm)
    else:
        per_node = request.ranks_per_node or min(request.num_ranks,
                                                 request.cluster.gpus_per_node)
        cost = collective_cost(request.collective, num_ranks=request.num_ranks,
                               message_bytes=request.message_bytes,
                               fabric=fabric_of(request.cluster), ranks_per_node=per_node)
    hidden = hidden_time_s(cost.time_s, overlap_frac=request.overlap_frac,
                           window_s=request.overlap_window_s)
    return CollectiveEstimateResponse(
        collective=cost.collective, algorithm=cost.algorithm, link=cost.link,
        basis=cost.basis, num_ranks=cost.num_ranks, message_bytes=cost.message_bytes,
        bytes_sent_per_rank=cost.bytes_sent_per_rank,
        paper_volume_bytes=cost.paper_volume_bytes, wire_bytes=cost.wire_bytes,
        time_s=cost.time_s, alpha_s=cost.alpha_s, beta_s=cost.beta_s,
        algorithm_bandwidth_bytes_per_s=cost.algorithm_bandwidth_bytes_per_s,
        bus_bandwidth_bytes_per_s=cost.bus_bandwidth_bytes_per_s,
        alpha_beta_crossover_bytes=crossover, phases=[_phase(p) for p in cost.phases],
        hidden_s=hidden, exposed_s=cost.time_s - hidden)


def hidden_time_s(time_s: float, *, overlap_frac: float, window_s: float | None) -> float:
    """Part of a collective's time that runs behind compute.

    hidden = min(t f, w); exposed = t - hidden = max(t (1 - f), t - w).
    Source: the overlap rule of `models.core.step_time.exposure.sync_exposed_s` (Megatron-LM
    distributed optimizer, `--overlap-grad-reduce`: hiding is bounded by the item's
    overlappable share, the last bucket staying exposed, and by the compute it runs behind)
    and `models.core.traffic.items.TrafficItem.exposed_time_per_step_s` (t (1 - f) when the
    compute is long enough).
    Legend: t = time_s, f = overlap_frac, w = window_s (None: not bounded by compute).
    """
    share = time_s * min(1.0, max(0.0, overlap_frac))
    return share if window_s is None else min(share, max(0.0, window_s))


def _phase(cost: CollectiveCost) -> CollectivePhase:
    return CollectivePhase(
        collective=cost.collective, algorithm=cost.algorithm, link=cost.link,
        num_ranks=cost.num_ranks, message_bytes=cost.message_bytes,
        bytes_sent_per_rank=cost.bytes_sent_per_rank, alpha_s=cost.alpha_s,
        beta_s=cost.beta_s, time_s=cost.time_s)


__all__ = ["estimate_collective", "hidden_time_s"]
