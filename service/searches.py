"""Searches other than plans that run in the solver pool: the pipeline-schedule optimizer
and the exact MoE placement.

Owns: clamping their time limits (default when absent, never above the cap), their
de-duplication keys, and how long a request waits for them. Must not: store results (only
plans are stored) or build HTTP responses.
"""

from collections.abc import Callable
from functools import partial
from typing import TypeVar

from pydantic import BaseModel

from service import limits
from service.planning import request_hash
from service.pool import SolverPool
from service.settings import Settings

RequestT = TypeVar("RequestT", bound=BaseModel)
ResultT = TypeVar("ResultT")


def with_clamped_time_limit(request: RequestT, *, requested_s: float,
                            settings: Settings) -> RequestT:
    """The request with its `time_limit_s` (whose value is `requested_s`) replaced by the
    default when the client gave none, or by the cap when it asked for more."""
    given = requested_s if "time_limit_s" in request.model_fields_set else None
    clamped = limits.clamp_time_limit(given, settings)
    return request.model_copy(update={"time_limit_s": clamped})


async def run_search(request: RequestT, fn: Callable[[RequestT], ResultT], *, kind: str,
                     pool: SolverPool, timeout_s: float) -> ResultT:
    """Run `fn(request)` in the solver pool; identical requests in flight share one run.

    Raises:
        OverloadedError: the pool is full.
        SolveTimeoutError: no result within `timeout_s`.
    """
    key = f"{kind}:{request_hash(request)}"
    return await pool.run(partial(fn, request), key=key, timeout_s=timeout_s)


__all__ = ["run_search", "with_clamped_time_limit"]
