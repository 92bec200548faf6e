"""Named enumerations in the OpenAPI document.

Owns: turning the closed sets the API schemas type as `Literal` (problem codes, ZeRO
stages), which pydantic writes inline wherever they are used, into one named component each
that every use references, so generated clients get one enum per set. Must not: change
what a request accepts or a response holds.
"""

from typing import Any, get_args

from api_schemas.problems import ProblemCode
from api_schemas.requests import ZeroStageValue

NAMED_ENUMS: dict[str, tuple[list[Any], str]] = {
    "ProblemCode": (list(get_args(ProblemCode)), "Stable machine-readable problem code."),
    "ZeroStage": (list(get_args(ZeroStageValue)), ("ZeRO stage: 0 none, 1 optimizer states, "
                  "2 + gradients, 3 + parameters sharded over data parallelism.")),
}
"""Component name -> (the values, in order; the description)."""

_KEPT_BESIDE_REF = ("description", "default", "examples")


def _named(node: dict[str, Any], by_values: dict[str, str]) -> str | None:
    values = node.get("enum")
    return by_values.get(repr(values)) if isinstance(values, list) else None


def _replace(node: Any, by_values: dict[str, str]) -> Any:
    if isinstance(node, list):
        return [_replace(item, by_values) for item in node]
    if not isinstance(node, dict):
        return node
    name = _named(node, by_values)
    if name is not None:
        ref: dict[str, Any] = {"$ref": f"#/components/schemas/{name}"}
        ref.update({key: node[key] for key in _KEPT_BESIDE_REF if key in node})
        return ref
    return {key: _replace(value, by_values) for key, value in node.items()}


def name_enums(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` with every inline use of a `NAMED_ENUMS` set replaced by a reference to its
    component, and the components added."""
    by_values = {repr(values): name for name, (values, _) in NAMED_ENUMS.items()}
    named = _replace(schema, by_values)
    components = named.setdefault("components", {}).setdefault("schemas", {})
    for name, (values, description) in NAMED_ENUMS.items():
        kind = "integer" if all(isinstance(v, int) for v in values) else "string"
        components[name] = {"title": name, "type": kind, "enum": values,
                            "description": description}
    result: dict[str, Any] = named
    return result


__all__ = ["NAMED_ENUMS", "name_enums"]
