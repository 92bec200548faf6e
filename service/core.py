"""Calls from the service into the library, with degenerate inputs answered as such.

Owns: `call_core(fn, request)`, which runs a core function and turns an arithmetic failure
(division by zero, overflow) into `invalid-spec`. Such failures come from inputs the schemas
admit but no hardware has (a zero bandwidth, zero memory, an empty FLOP/s table); the reply
says so and the traceback is logged for the maintainers. Must not: catch anything else
(domain errors already carry their codes; the rest is a 500 with a request id).
"""

import logging
from collections.abc import Callable
from typing import TypeVar

from models.errors import InvalidSpecError

logger = logging.getLogger(__name__)

RequestT = TypeVar("RequestT")
ResultT = TypeVar("ResultT")


def call_core(fn: Callable[[RequestT], ResultT], request: RequestT) -> ResultT:
    """`fn(request)`, with `ArithmeticError` re-raised as `InvalidSpecError`.

    Raises:
        InvalidSpecError: the core function raised it, or failed on arithmetic.
    """
    try:
        return fn(request)
    except ArithmeticError as error:
        name = getattr(fn, "__name__", "the cost model")
        logger.warning("%s failed on arithmetic (%s); answered as invalid-spec", name, error,
                       exc_info=True)
        raise InvalidSpecError(
            f"the cost model cannot evaluate these inputs ({type(error).__name__}: {error}); "
            "a zero or near-zero bandwidth, memory, FLOP/s or duration override is the usual "
            "cause: give physically meaningful positive values") from error


__all__ = ["call_core"]
