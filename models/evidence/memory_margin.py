"""What a plan's memory safety margin is made of, part by part.

Owns: the validation figures the default margin is derived from (the ledger's worst
predicted / measured peak) and the parts a plan reports: the bytes kept free for the
ledger's validated error, and the caching allocator's reserves that the peak already counts.
Must not: size a ledger line or decide a fit (the margin is applied once, in
`ClusterSpec.capacity_bytes`, which every check reads).
"""

from dataclasses import dataclass

from api_schemas.requests import DEFAULT_MEMORY_MARGIN_FRAC
from models.core.memory import MemoryLedger

WORST_PREDICTED_OVER_MEASURED = 0.9616
"""The lowest predicted / measured peak memory over the 134 measured peaks of
`research/MEMORY_PEAKS.md` (written by `research/validate_memory.py`, nothing fitted):
Zero Bubble (arXiv:2401.10241) Table 12, 6.2B ZB-2p, 45,431,075,636 predicted vs
47,244,640,256 bytes measured (0.96161). `DEFAULT_MEMORY_MARGIN_FRAC` is 1 - this, rounded
up (`tests/research/test_memory_peaks.py` recomputes both from the table's rows)."""

WORST_ROW = "zerobubble-t12-6.2b-zb-2p-b3-m8"
"""The measured peak the ledger under-predicts the most."""

MEASURED_PEAKS = 134
"""How many measured peaks the validation compares with the ledger."""

ALLOCATOR_PREFIX = "allocator"
"""Ledger lines whose names start with this are the caching allocator's reserves
(`models.core.runtime_memory`: fragmentation share, the freed logits block of an unfused loss)."""

EXPANDABLE_SEGMENTS_ENV = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
                           "PYTORCH_ALLOC_CONF": "expandable_segments:True"}
"""The allocator setting the margin assumes, as the validation rows that measure reserved
memory ran it (torchtitan v0.2.2's `run_train.sh` launches with
`PYTORCH_ALLOC_CONF="expandable_segments:True"`); every export's launch environment sets it,
under both names: `PYTORCH_ALLOC_CONF` from PyTorch 2.9 on, `PYTORCH_CUDA_ALLOC_CONF` before
(PyTorch "CUDA semantics" notes, "Optimizing memory usage with PYTORCH_CUDA_ALLOC_CONF"):
segments grow by mapping pages instead of new cudaMalloc blocks, so freed blocks of one size
serve later requests of another."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MarginPart:
    """One part of the memory a plan keeps in reserve."""

    name: str
    bytes: int
    in_peak: bool
    """True when the ledger's peak already counts these bytes; False when they are kept free
    under the usable memory (the margin proper)."""
    basis: str


def margin_parts(ledger: MemoryLedger) -> tuple[MarginPart, ...]:
    """The margin kept free (the ledger's validated error) and the allocator reserves on the
    binding stage that the peak counts."""
    if ledger.margin_frac == DEFAULT_MEMORY_MARGIN_FRAC:
        basis = (f"{ledger.margin_frac:g} of the usable memory (the default): 1 - "
                 f"{WORST_PREDICTED_OVER_MEASURED}, the lowest predicted / measured peak over "
                 f"{MEASURED_PEAKS} measured peaks ({WORST_ROW}, research/MEMORY_PEAKS.md), "
                 "so a real peak that much above the prediction still fits")
    else:
        basis = (f"{ledger.margin_frac:g} of the usable memory, as the request sets "
                 f"(cluster.memory_margin_frac; the default {DEFAULT_MEMORY_MARGIN_FRAC} "
                 "covers the ledger's worst under-prediction of a measured peak)")
    binding = next(s for s in ledger.stages if s.stage == ledger.binding_stage)
    allocator = sum(c.bytes for c in binding.components if c.name.startswith(ALLOCATOR_PREFIX))
    return (
        MarginPart(name="validated ledger error", bytes=ledger.margin_bytes, in_peak=False,
                   basis=basis),
        MarginPart(name="caching allocator", bytes=allocator, in_peak=True,
                   basis="the binding stage's allocator lines (fragmentation share of the "
                   "dynamic bytes, freed loss blocks), counted in the peak; with "
                   "PYTORCH_ALLOC_CONF=expandable_segments:True, which each export's "
                   "launch environment sets"),
    )


__all__ = [
    "ALLOCATOR_PREFIX",
    "EXPANDABLE_SEGMENTS_ENV",
    "MEASURED_PEAKS",
    "WORST_PREDICTED_OVER_MEASURED",
    "WORST_ROW",
    "MarginPart",
    "margin_parts",
]
