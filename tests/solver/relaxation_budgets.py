"""Generous per-search budgets for the relaxation searches, for tests whose subject is what
the relaxations find rather than how long each may search.

`solver.relax` gives each relaxation search a few seconds (`RELAXATION_TIME_LIMIT_S`,
`NODE_SEARCH_TIME_LIMIT_S`), never past the request's deadline: on a loaded host a search
can run out of that time and the relaxation is then reported as not tried, or as unproven.
With these budgets the request's own (generous) time limit is the only bound.
"""

import pytest

GENEROUS_RELAXATION_BUDGET_S = 20.0


def generous_relaxation_budgets(monkeypatch: pytest.MonkeyPatch) -> None:
    """Give every relaxation search 20 s (still never past the request's deadline)."""
    from solver import relax

    monkeypatch.setattr(relax, "NODE_SEARCH_TIME_LIMIT_S", GENEROUS_RELAXATION_BUDGET_S)
    monkeypatch.setattr(relax._Clock.budget, "__defaults__", (GENEROUS_RELAXATION_BUDGET_S,))


__all__ = ["GENEROUS_RELAXATION_BUDGET_S", "generous_relaxation_budgets"]
