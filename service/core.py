"""Calls from the service into the library, with degenerate inputs answered as such.

Owns: `call_core(fn, request)`, which runs a core function and turns an arithmetic failure
(division by zero, overflow) or a schema violation of a spec the core derived (a pydantic
`ValidationError` raised inside it) into `invalid-spec`. Such failures come from inputs the
request schemas admit but no hardware or model has (a zero bandwidth, zero memory, top_k
above the expert count in a config); the reply says so and the traceback is logged. Must
not: catch anything else (domain errors already carry their codes; the rest is a 500 with a
request id).
"""

import logging
from collections.abc import Callable
from typing import TypeVar

from pydantic import ValidationError

from models.errors import InvalidSpecError

logger = logging.getLogger(__name__)

RequestT = TypeVar("RequestT")
ResultT = TypeVar("ResultT")


def call_core(fn: Callable[[RequestT], ResultT], request: RequestT) -> ResultT:
    """`fn(request)`, with `ArithmeticError` and `ValidationError` re-raised as
    `InvalidSpecError`.

    Raises:
        InvalidSpecError: the core function raised it, or failed on arithmetic.
    """
    try:
        return fn(request)
    except ValidationError as error:
        # A spec the core derived (e.g. from a Hugging Face config) broke a schema rule.
        name = getattr(fn, "__name__", "the cost model")
        logger.info("%s derived an invalid specification: %s", name, error)
        first = error.errors()[0] if error.errors() else {"msg": str(error), "loc": ()}
        where = ".".join(str(part) for part in first["loc"])
        reason = f"{where}: {first['msg']}" if where else str(first["msg"])
        raise InvalidSpecError(
            f"the inputs give an inconsistent {error.title} ({reason}); correct the fields "
            "it is derived from") from error
    except ArithmeticError as error:
        name = getattr(fn, "__name__", "the cost model")
        logger.warning("%s failed on arithmetic (%s); answered as invalid-spec", name, error,
                       exc_info=True)
        raise InvalidSpecError(
            f"the cost model cannot evaluate these inputs ({type(error).__name__}: {error}); "
            "a zero or near-zero bandwidth, memory, FLOP/s or duration override is the usual "
            "cause: give physically meaningful positive values") from error


__all__ = ["call_core"]
