"""Chrome Trace Event JSON of a simulated pipeline iteration (opens in Perfetto and
chrome://tracing).

Owns: `trace_document(result, title=...)`: the JSON object format of the Trace Event
specification, with process and thread metadata events naming one track per pipeline rank
(process "compute") and one per rank's outgoing messages (process "communication"), a
complete ("X") event per op and per transfer with `ts` and `dur` in microseconds, and the
"deterministic model, not a measurement" label in `otherData`; and the `TraceDocument`
schema of that object for the OpenAPI document. Must not: simulate or change a time
(seconds are only converted to microseconds).
"""

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from api_schemas.pipeline import PipelineSimulateResponse, PipelineTimelineEntry
from service.pictures.svg import MODEL_LABEL

COMPUTE_PID = 1
"""Process of the compute tracks (one thread per pipeline rank)."""
COMMUNICATION_PID = 2
"""Process of the communication tracks (one thread per sending rank)."""
US_PER_S = 1e6

CATEGORIES = {"F": "forward", "B": "backward-input", "W": "backward-weight",
              "BW": "backward", "FB": "forward-backward-pair"}


class TraceEvent(BaseModel):
    """One event of the Trace Event format (only the fields this service writes)."""

    model_config = ConfigDict(extra="allow")

    name: str = Field(description="Event name shown on the track.")
    ph: Literal["X", "M"] = Field(description="Phase: 'X' complete event, 'M' metadata.")
    pid: int = Field(description="Process id (1 compute, 2 communication).")
    tid: int = Field(description="Thread id: the pipeline rank.")
    ts: float | None = Field(default=None, description="Start, microseconds ('X' only).")
    dur: float | None = Field(default=None, description="Duration, microseconds ('X' only).")
    cat: str | None = Field(default=None, description="Category ('X' only).")
    args: dict[str, Any] = Field(default_factory=dict, description="Event arguments.")


class TraceDocument(BaseModel):
    """The JSON object format of the Trace Event specification."""

    model_config = ConfigDict(json_schema_extra={"examples": [{
        "traceEvents": [
            {"name": "process_name", "ph": "M", "pid": 1, "tid": 0,
             "args": {"name": "compute (deterministic model, not a measurement)"}},
            {"name": "thread_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": "rank 0"}},
            {"name": "F0", "ph": "X", "pid": 1, "tid": 0, "ts": 0.0, "dur": 1000000.0,
             "cat": "forward", "args": {"micro_batch": 0, "chunk": 0}}],
        "displayTimeUnit": "ms",
        "otherData": {"label": MODEL_LABEL, "makespan_s": 12.0}}]})

    traceEvents: list[TraceEvent] = Field(description="Metadata, then ops, then transfers.")
    displayTimeUnit: Literal["ms", "ns"] = Field(default="ms",
                                                 description="Unit the viewer displays.")
    otherData: dict[str, Any] = Field(default_factory=dict,
                                      description="Title, label and the iteration's figures.")


def _metadata(pid: int, process: str, tids: list[int], thread: str,
              sort_index: int) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
         "args": {"name": f"{process} ({MODEL_LABEL})"}},
        {"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0,
         "args": {"sort_index": sort_index}}]
    for tid in tids:
        events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                       "args": {"name": f"{thread} {tid}"}})
        events.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid,
                       "args": {"sort_index": tid}})
    return events


def _op_event(index: int, entry: PipelineTimelineEntry, critical: set[int]) -> dict[str, Any]:
    args: dict[str, Any] = {"micro_batch": entry.micro_batch, "chunk": entry.chunk,
                            "virtual_stage": entry.virtual_stage, "start_s": entry.start,
                            "end_s": entry.end, "critical_path": index in critical}
    if entry.op == "FB":
        args |= {"backward_micro_batch": entry.backward_micro_batch,
                 "backward_chunk": entry.backward_chunk}
    return {"name": f"{entry.op}{entry.micro_batch}", "ph": "X", "pid": COMPUTE_PID,
            "tid": entry.stage, "ts": entry.start * US_PER_S,
            "dur": (entry.end - entry.start) * US_PER_S, "cat": CATEGORIES[entry.op],
            "args": args}


def trace_document(result: PipelineSimulateResponse, *,
                   title: str = "Pipeline iteration") -> dict[str, Any]:
    """`result` (with its timeline) as a Trace Event JSON object."""
    ranks = list(range(len(result.busy_s)))
    senders = sorted({t.src_stage for t in result.transfers})
    critical = set(result.critical_path)
    events = _metadata(COMPUTE_PID, "compute", ranks, "rank", 0)
    if senders:
        events += _metadata(COMMUNICATION_PID, "communication", senders, "sends from rank", 1)
    events += [_op_event(i, entry, critical) for i, entry in enumerate(result.timeline)]
    events += [{"name": f"{t.kind} {t.src_stage}->{t.dst_stage} mb{t.micro_batch}", "ph": "X",
                "pid": COMMUNICATION_PID, "tid": t.src_stage, "ts": t.start * US_PER_S,
                "dur": (t.end - t.start) * US_PER_S, "cat": f"p2p-{t.kind}",
                "args": {"src_stage": t.src_stage, "dst_stage": t.dst_stage,
                         "micro_batch": t.micro_batch, "start_s": t.start, "end_s": t.end}}
               for t in result.transfers]
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"title": title, "label": MODEL_LABEL, "makespan_s": result.makespan,
                          "bubble_fraction": result.bubble_fraction,
                          "peak_in_flight": result.peak_in_flight}}


__all__ = ["TraceDocument", "TraceEvent", "trace_document"]
