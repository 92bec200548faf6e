"""The pipeline simulator behind POST /v1/pipeline/simulate: request in, response out.

Owns: `simulate_request` and the conversions between the API types of
`api_schemas.pipeline` and this package's inputs and results (`op_durations_from`,
`activation_sizes_from`, `simulation_fields`, `link_fields` for the critical path and the
transfers). Must not: know HTTP.
"""

from typing import Any

from api_schemas.pipeline import (
    PipelineActivationBytes,
    PipelineOpDurations,
    PipelineSimulateRequest,
    PipelineSimulateResponse,
    PipelineTimelineEntry,
    PipelineTransfer,
)
from models.core.pipeline.costs import ActivationSizes, OpDurations
from models.core.pipeline.critical_path import PipelineLinks, pipeline_links
from models.core.pipeline.metrics import SimulationResult, simulate
from models.core.pipeline.registry import generate_program
from models.core.pipeline.simulator import compile_program


def _per_stage(value: float | tuple[float, ...]) -> tuple[float, ...]:
    return value if isinstance(value, tuple) else (value,)


def op_durations_from(durations: PipelineOpDurations) -> OpDurations:
    """The API durations as simulator input."""
    return OpDurations(forward_s=_per_stage(durations.forward_s),
                       backward_input_s=_per_stage(durations.backward_input_s),
                       backward_weight_s=_per_stage(durations.backward_weight_s),
                       overlapped_pair_s=durations.overlapped_pair_s)


def activation_sizes_from(sizes: PipelineActivationBytes | None) -> ActivationSizes | None:
    """The API activation sizes as simulator input (None stays None)."""
    if sizes is None:
        return None
    held, freed = sizes.forward_bytes, sizes.freed_by_input_grad_bytes
    return ActivationSizes(forward_bytes=held if isinstance(held, tuple) else (held,),
                           freed_by_input_grad_bytes=freed if isinstance(freed, tuple)
                           else (freed,))


def link_fields(links: PipelineLinks) -> dict[str, Any]:
    """The critical path and transfers as response fields."""
    return {
        "critical_path": list(links.critical_path),
        "transfers": [PipelineTransfer(src_stage=t.src_rank, dst_stage=t.dst_rank,
                                       kind=t.kind,  # type: ignore[arg-type]
                                       micro_batch=t.micro_batch, src_op=t.src_row,
                                       dst_op=t.dst_row, start=t.start_s, end=t.end_s)
                      for t in links.transfers],
    }


def simulation_fields(result: SimulationResult, *, include_timeline: bool) -> dict[str, Any]:
    """The fields every pipeline response shares, from a simulation result."""
    timeline = []
    if include_timeline:
        timeline = [
            PipelineTimelineEntry(
                stage=e.stage, op=e.op, micro_batch=e.micro_batch,  # type: ignore[arg-type]
                chunk=e.chunk, virtual_stage=e.virtual_stage, start=e.start_s, end=e.end_s,
                backward_micro_batch=e.backward_micro_batch, backward_chunk=e.backward_chunk)
            for e in result.timeline.entries()
        ]
    return {
        "makespan": result.makespan_s,
        "bubble_fraction": min(1.0, max(0.0, result.global_bubble_fraction)),
        "span_bubble_fraction": min(1.0, max(0.0, result.span_bubble_fraction)),
        "peak_in_flight": list(result.peak_in_flight),
        "peak_in_flight_chunks": list(result.peak_in_flight_chunks),
        "peak_until_b": list(result.peak_until_b),
        "peak_activation_bytes": (None if result.peak_activation_bytes is None
                                  else list(result.peak_activation_bytes)),
        "busy_s": list(result.busy_s),
        "idle_s": list(result.idle_s),
        "span_bubble_s": list(result.span_bubble_s),
        "timeline": timeline,
    }


def simulate_request(request: PipelineSimulateRequest) -> PipelineSimulateResponse:
    """Generate the requested schedule and simulate it.

    Raises:
        InvalidSpecError: the schedule refuses the parameters, or the inputs are inconsistent.
    """
    program = generate_program(request.schedule, num_stages=request.num_stages,
                               num_micro_batches=request.num_micro_batches,
                               num_chunks=request.num_chunks, group_size=request.group_size)
    compiled = compile_program(program)
    result = simulate(compiled, op_durations_from(request.durations),
                      p2p_latency_s=request.p2p_latency_s,
                      activation_sizes=activation_sizes_from(request.activation_bytes))
    fields = simulation_fields(result, include_timeline=request.include_timeline)
    if request.include_timeline:
        fields |= link_fields(pipeline_links(compiled, result.timeline,
                                             p2p_latency_s=request.p2p_latency_s))
    return PipelineSimulateResponse(**fields)


__all__ = ["activation_sizes_from", "link_fields", "op_durations_from", "simulate_request",
           "simulation_fields"]
