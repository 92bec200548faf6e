"""The pydantic base classes every input and response type shares, and the validators of
free-form JSON that several schemas use.

Owns: `SpecModel` (frozen, no unknown fields, only finite floats), `ResultModel`, and
`FiniteJson` / `reject_non_finite` (a free-form JSON value, such as a Hugging Face config,
with no NaN or infinity anywhere inside, the offending path named). Must not: compute
anything beyond validation.
"""

import math
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict

T = TypeVar("T")

MAX_NAME_LENGTH = 200
"""Longest model name or GPU id (the plan store's column width)."""


class SpecModel(BaseModel):
    """Immutable input type that rejects unknown fields (so typos fail loudly) and NaN or
    infinite floats (no physical quantity of the API is infinite)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class ResultModel(BaseModel):
    """Response type: immutable, extra fields allowed only where declared."""

    model_config = ConfigDict(frozen=True)


def _first_non_finite(value: object, path: str) -> str | None:
    if isinstance(value, float) and not math.isfinite(value):
        return f"{path or 'value'} is {value}"
    if isinstance(value, dict):
        items: list[tuple[str, object]] = [(f"{path}.{k}" if path else str(k), v)
                                           for k, v in value.items()]
    elif isinstance(value, list | tuple):
        items = [(f"{path}.{i}" if path else str(i), v) for i, v in enumerate(value)]
    else:
        return None
    for sub_path, sub in items:
        found = _first_non_finite(sub, sub_path)
        if found is not None:
            return found
    return None


def reject_non_finite(value: T) -> T:
    """`value` unchanged if no number inside it is NaN or infinite.

    Raises:
        ValueError: naming the path of the first non-finite number.
    """
    found = _first_non_finite(value, "")
    if found is not None:
        raise ValueError(f"{found}: numbers must be finite (no NaN or Infinity)")
    return value


FiniteJson = Annotated[dict[str, Any], AfterValidator(reject_non_finite)]
"""A free-form JSON object whose numbers are all finite."""

__all__ = ["MAX_NAME_LENGTH", "FiniteJson", "ResultModel", "SpecModel", "reject_non_finite"]
