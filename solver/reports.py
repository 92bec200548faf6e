"""Conversion of cost-model value objects into the public response types.

Owns: building `MemoryReport` from a `MemoryLedger` (capacity before the safety margin, the
margin and its parts, the limit a peak is checked against). Must not: compute costs.
"""

from api_schemas.plan import (
    MemoryComponentReport,
    MemoryMarginPart,
    MemoryReport,
    StageMemoryReport,
)
from models.core.memory import MemoryComponent, MemoryLedger
from models.evidence.memory_margin import margin_parts


def _components(items: tuple[MemoryComponent, ...]) -> list[MemoryComponentReport]:
    return [MemoryComponentReport(name=c.name, kind=c.kind, bytes=c.bytes, note=c.note)
            for c in items]


def memory_report_from_ledger(ledger: MemoryLedger) -> MemoryReport:
    """The public `MemoryReport` of a ledger (every stage, every component)."""
    stages = [
        StageMemoryReport(
            stage=s.stage, num_layers=s.num_layers, total_bytes=s.total_bytes,
            parameters_bytes=s.bytes_of("parameters"), gradients_bytes=s.bytes_of("gradients"),
            optimizer_bytes=s.bytes_of("optimizer"), activations_bytes=s.bytes_of("activations"),
            other_bytes=s.bytes_of("other"), host_bytes=s.host_bytes,
            in_flight_micro_batches=s.in_flight_chunks, components=_components(s.components),
            host_components=_components(s.host_components))
        for s in ledger.stages
    ]
    parts = [MemoryMarginPart(name=p.name, bytes=p.bytes, in_peak=p.in_peak, basis=p.basis)
             for p in margin_parts(ledger)]
    return MemoryReport(capacity_bytes=ledger.capacity_bytes + ledger.margin_bytes,
                        peak_bytes=ledger.peak_bytes, fits=ledger.fits,
                        margin_bytes=ledger.margin_bytes, margin_frac=ledger.margin_frac,
                        limit_bytes=ledger.capacity_bytes, margin_parts=parts,
                        binding_stage=ledger.binding_stage,
                        host_capacity_per_gpu_bytes=ledger.host_capacity_per_gpu_bytes,
                        host_peak_bytes=ledger.host_peak_bytes, stages=stages)


__all__ = ["memory_report_from_ledger"]
