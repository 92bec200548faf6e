"""The pydantic base classes every input and response type shares, and the validators of
free-form JSON that several schemas use.

Owns: `SpecModel` (frozen, no unknown fields, only finite floats), `ResultModel`, and
`FiniteJson` / `reject_non_finite` (a free-form JSON value, such as a Hugging Face config,
with no NaN or infinity anywhere inside, the offending path named). Must not: compute
anything beyond validation.
"""

import math
from collections.abc import Iterable
from types import UnionType
from typing import Annotated, Any, TypeVar, Union, get_args, get_origin

from pydantic import AfterValidator, BaseModel, ConfigDict, model_validator

T = TypeVar("T")

MAX_NAME_LENGTH = 200
"""Longest model name or GPU id (the plan store's column width)."""


class SpecModel(BaseModel):
    """Immutable input type that rejects unknown fields (so typos fail loudly), NaN or
    infinite floats (no physical quantity of the API is infinite) and true/false given for
    a number (pydantic reads `"tp": true` as 1).

    Where one is also returned (a plan's `parallel`), its answer always holds every field,
    defaulted or not: the OpenAPI document marks them required on the output side
    (`json_schema_serialization_defaults_required`), so typed clients need no casts."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False,
                              json_schema_serialization_defaults_required=True)

    @model_validator(mode="before")
    @classmethod
    def _no_booleans_for_numbers(cls, data: Any) -> Any:
        if isinstance(data, dict):
            numeric = _numeric_fields(cls)
            for key, value in data.items():
                if isinstance(value, bool) and key in numeric:
                    raise ValueError(f"{key}: give a number, not {str(value).lower()}")
        return data


_NUMERIC_FIELDS: dict[type, frozenset[str]] = {}


def _numeric_fields(model: type[BaseModel]) -> frozenset[str]:
    """Fields of `model` that take an int or a float directly but not a bool."""
    found = _NUMERIC_FIELDS.get(model)
    if found is None:
        found = frozenset(name for name, info in model.model_fields.items()
                          if _scalars(info.annotation) & {int, float}
                          and bool not in _scalars(info.annotation))
        _NUMERIC_FIELDS[model] = found
    return found


def _scalars(annotation: Any) -> set[Any]:
    """The plain types a field annotation accepts at its top level (through unions and
    `Annotated`, not into lists or models)."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _scalars(get_args(annotation)[0])
    if origin in (Union, UnionType):
        return set().union(*(_scalars(arg) for arg in get_args(annotation)))
    return {annotation} if annotation in (int, float, bool) else set()


class ResultModel(BaseModel):
    """Response type: immutable, extra fields allowed only where declared; every field is
    always serialised, so every field is required in the OpenAPI document."""

    model_config = ConfigDict(frozen=True, json_schema_serialization_defaults_required=True)


def field_path(path: str, part: str | int) -> str:
    """`path` extended by a key or a list index, in the one format every field path of the
    project uses: dotted, indices as numbers ("constraints.forbid.tp.0")."""
    return f"{path}.{part}" if path else str(part)


def first_non_finite(value: object, path: str = "") -> tuple[str, float] | None:
    """The path (`field_path` format, under `path`) and value of the first NaN or infinite
    number inside `value`, walking dicts, lists and tuples in order; None if there is none.

    The path is built only once a number is found: a large answer (a million token routes)
    is mostly integers, which the walk passes over without a call each."""
    found = _non_finite_at(value)
    if found is None:
        return None
    parts, number = found
    for part in reversed(parts):  # collected from the number outwards
        path = field_path(path, part)
    return path, number


def _non_finite_at(value: object) -> tuple[list[str | int], float] | None:
    """`first_non_finite` with the path as its parts, innermost first."""
    if isinstance(value, float):
        return None if math.isfinite(value) else ([], value)
    if isinstance(value, dict):
        items: Iterable[tuple[str | int, object]] = value.items()
    elif isinstance(value, list | tuple):
        items = enumerate(value)
    else:
        return None
    for part, sub in items:
        if isinstance(sub, int | str | None):  # nothing non-finite inside (bool is an int)
            continue
        found = _non_finite_at(sub)
        if found is not None:
            found[0].append(part)
            return found
    return None


def reject_non_finite(value: T) -> T:
    """`value` unchanged if no number inside it is NaN or infinite.

    Raises:
        ValueError: naming the path of the first non-finite number.
    """
    found = first_non_finite(value)
    if found is not None:
        where, number = found
        raise ValueError(f"{where or 'value'} is {number}: numbers must be finite (no NaN or "
                         "Infinity)")
    return value


FiniteJson = Annotated[dict[str, Any], AfterValidator(reject_non_finite)]
"""A free-form JSON object whose numbers are all finite."""

__all__ = [
    "MAX_NAME_LENGTH",
    "FiniteJson",
    "ResultModel",
    "SpecModel",
    "field_path",
    "first_non_finite",
    "reject_non_finite",
]
