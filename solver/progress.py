"""Structured progress of a running search, for whoever watches it.

Owns: `SearchProgress` (one report: candidates listed, candidates evaluated, the incumbent's
objective value, the proven lower bound, the gap, elapsed seconds), the sink of the current
thread (`listening(sink)` installs one for the block it wraps) and `reporter()`, which the
search asks once at its start: None when nobody listens, so a search without a listener pays
one attribute read and nothing per candidate. A reporter passes on at most one report per
`MIN_INTERVAL_S` unless the report carries a new incumbent or is the last one. Must not:
know who listens (the service's job runner writes the reports as progress events), or
import anything heavy.

Why a sink of the thread and not a parameter: as with cancellation (`solver/cancel.py`), the
search sits several calls below the entry points (frontier -> plan -> search), and one sink
per thread reaches every search on the way without each signature carrying it.
"""

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

MIN_INTERVAL_S = 0.25
"""Shortest time between two reports without a new incumbent."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchProgress:
    """Where one search stands."""

    objective: str
    """What the search minimises (the unit of `incumbent` and `bound`)."""
    candidates: int
    """Candidate meshes listed so far."""
    evaluated: int
    """Candidates scored exactly so far."""
    incumbent: float | None
    """Objective value of the best plan found so far (None before the first)."""
    bound: float | None
    """Lowest objective value a candidate not yet evaluated could reach (None when unknown)."""
    gap: float | None
    """(incumbent - bound) / incumbent, when both are known."""
    elapsed_s: float
    """Seconds since the search started."""
    final: bool = False
    """True on the search's last report."""


Sink = Callable[[SearchProgress], None]

_local = threading.local()


def current() -> Sink | None:
    """The sink of this thread, if one was installed."""
    sink: Sink | None = getattr(_local, "sink", None)
    return sink


@contextmanager
def listening(sink: Sink) -> Iterator[None]:
    """Send this thread's search reports to `sink` within the block (the previous sink is
    restored after)."""
    previous = current()
    _local.sink = sink
    try:
        yield
    finally:
        _local.sink = previous


class Reporter:
    """One search's reporter: throttles and computes the gap."""

    def __init__(self, sink: Sink, *, objective: str) -> None:
        self._sink = sink
        self._objective = objective
        self._started = time.perf_counter()
        self._last = -MIN_INTERVAL_S
        self._incumbent: float | None = None

    def report(self, *, candidates: int, evaluated: int, incumbent: float | None,
               bound: float | None, final: bool = False) -> None:
        """Pass the state on when it is new enough (see the module docstring)."""
        now = time.perf_counter()
        improved = incumbent is not None and incumbent != self._incumbent
        if not (final or improved) and now - self._last < MIN_INTERVAL_S:
            return
        self._last = now
        self._incumbent = incumbent
        finite_bound = bound if bound is not None and bound < float("inf") else None
        if incumbent is not None and finite_bound is not None:
            finite_bound = min(finite_bound, incumbent)
        gap = None
        if incumbent is not None and finite_bound is not None and incumbent > 0:
            gap = max(0.0, (incumbent - finite_bound) / incumbent)
        self._sink(SearchProgress(objective=self._objective, candidates=candidates,
                                  evaluated=evaluated, incumbent=incumbent, bound=finite_bound,
                                  gap=gap, elapsed_s=now - self._started, final=final))


def reporter(*, objective: str) -> Reporter | None:
    """A reporter for a search starting now, or None when this thread has no sink."""
    sink = current()
    return Reporter(sink, objective=objective) if sink is not None else None


__all__ = ["MIN_INTERVAL_S", "Reporter", "SearchProgress", "Sink", "current", "listening",
           "reporter"]
