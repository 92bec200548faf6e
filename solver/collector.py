"""Pausing Python's cyclic garbage collector while a search allocates.

Owns: `collector_paused`, a context manager that turns the cyclic collector off for as long
as any thread is inside one, and back on when the last one leaves (if it was on when the
first entered), collecting the young generations then, and a full collection at least
every `LONGEST_PAUSE_S` while searches keep overlapping. Must not: hold anything itself.

Why: a search builds many small objects it keeps in its memos (op orders, ledgers, stage
times), and CPython's cyclic collector walks every tracked object of the process on each
full collection. Measured on the benchmark problems (`benchmarks/bench_planner.py`
problems, a 2-core machine), collections took 10-15% of a first call (GPT 1T with every
mechanism open: 1.09 s of 7.24 s, 2,182 collections) and up to 0.3 s of a later one; one
full collection after such a search takes 0.19-0.26 s and finds no unreachable object (the
search leaves no reference cycles: DeepSeek-V3, GPT 1T and Llama 3.1 70B, first and later
calls). What a search allocates is freed by reference counting as usual; the young
generations are collected once when the pause ends (`YOUNG_GENERATIONS`), inside the call,
so that the cost is counted where it arises rather than moved to the caller.
"""

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from gc import collect
from time import monotonic

YOUNG_GENERATIONS = 1
"""The generation `collect` is given when the last pause ends (0 and 1: the objects made
since the last collection and the survivors of one): 0.06-0.11 s after a first search of
the benchmark problems, under 0.01 s after a later one."""

LONGEST_PAUSE_S = 10.0
"""Longest the collector stays off while searches keep overlapping (a busy service, where
the count of searches in progress may never return to 0): a search that ends past it runs
a full collection, even with others still running, and the pause starts over. It bounds the
cyclic garbage other threads (the web framework, the database layer) can leave meanwhile."""

_lock = threading.Lock()
_holders = 0
_restore = False
_paused_at = 0.0


@contextmanager
def collector_paused() -> Iterator[None]:
    """Run the body with the cyclic garbage collector off (nested and concurrent uses
    share one pause; the collector is turned back on only if it was on before)."""
    global _holders, _restore, _paused_at
    with _lock:
        if _holders == 0:
            _restore = gc.isenabled()
            _paused_at = monotonic()
            gc.disable()
        _holders += 1
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            resumed = _holders == 0 and _restore
            if resumed:
                gc.enable()
            overdue = not resumed and _restore and (
                monotonic() - _paused_at > LONGEST_PAUSE_S)
            if overdue:
                _paused_at = monotonic()
        if resumed:
            # The objects the search left are young: examine them now, in the call, rather
            # than leave the collection to whatever allocates next.
            collect(YOUNG_GENERATIONS)
        elif overdue:
            collect()


__all__ = ["collector_paused"]
