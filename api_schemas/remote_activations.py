"""Response of POST /v1/lab/remote-activations: the memory lab's what-if of moving stored
activations into other pipeline ranks' spare memory (the request is the evaluate request).

Owns: the shapes only. Must not: size or time anything (`models.core.remote_activations` and
`models.labs.remote_activations_report` do).
"""

from pydantic import Field

from api_schemas._base import ResultModel
from api_schemas.units import Bytes


class StageRemoteReport(ResultModel):
    """One pipeline rank before and after remote offload."""

    stage: int = Field(description="Pipeline rank.")
    total_bytes_before: Bytes = Field(description="GPU bytes without remote offload (the "
                                      "memory ledger's total).")
    total_bytes_after: Bytes = Field(description="GPU bytes with it.")
    movable_bytes: Bytes = Field(description="Stored layer activations at the peak (what "
                                 "may move).")
    sent_bytes: Bytes = Field(description="Activations this rank keeps in other ranks' "
                              "memory at its peak.")
    received_bytes: Bytes = Field(description="Other ranks' activations this rank holds.")
    in_flight_units: int = Field(description="Micro-batch x chunk units in flight at the "
                                 "rank's peak.")
    bytes_per_step: Bytes = Field(description="Bytes the rank sends out and fetches back per "
                                  "step.")
    seconds_per_step: float = Field(ge=0.0, description="Those bytes over the link between "
                                    "pipeline ranks (before any overlap with compute).")
    host_link_seconds_per_step: float = Field(
        ge=0.0, description="The same bytes over the GPU's host link, for comparison with "
        "local CPU offload.")


class RemoteActivationsResponse(ResultModel):
    """Per-rank memory with stored activations balanced across the pipeline."""

    capacity_bytes: Bytes = Field(description="Usable GPU memory after headroom.")
    peak_bytes_before: Bytes = Field(description="Largest rank total without remote offload.")
    peak_bytes_after: Bytes = Field(description="Largest rank total with it.")
    fits_before: bool = Field(description="Every rank within capacity without it.")
    fits_after: bool = Field(description="Every rank within capacity with it.")
    link: str = Field(description="The link between pipeline ranks and its bandwidth.")
    link_bandwidth_bytes_per_s: float = Field(ge=0.0, description="Its bandwidth per GPU "
                                              "per direction.")
    stages: list[StageRemoteReport] = Field(description="Every pipeline rank.")
    assumptions: list[str] = Field(description="Figures the source does not give.")
    source: str = Field(description="Where the mechanism comes from.")


__all__ = ["RemoteActivationsResponse", "StageRemoteReport"]
