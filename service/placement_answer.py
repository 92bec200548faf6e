"""The MoE placement answer, built on a solver-pool thread and bounded in size.

Owns: everything between a checked placement request and the bytes of its answer, run as
one computation in the solver pool (so under its admission control, de-duplication and
wall-clock guard, and off the event loop): planning, the finiteness check, serialisation,
and the picture; a JSON answer over `ATLAS_MAX_ANSWER_BYTES` is refused with
invalid-request naming the bound, checked as each layer is written so that at most one
layer's routes are held as objects at a time; and the key identical requests share. Must
not: place experts (`solver.placement`), check the request's bounds (`routes/moe.py`) or
build HTTP responses.
"""

import hashlib

from pydantic_core import to_json

from api_schemas.moe import MoePlacementRequest, MoePlacementResponse
from models.core.moe.balance import home_rank_loads
from service import limits
from service.pictures import placement_svg
from service.problems import LimitExceededError
from service.settings import Settings
from service.solver_calls import placement_layers, plan_placement


def placement_key(request: MoePlacementRequest) -> str:
    """The de-duplication key of a placement request: SHA-256 of its JSON as pydantic
    writes it (deterministic for equal requests, and far cheaper than the canonical
    sorted-key JSON of plans for a request of a million counts)."""
    digest = hashlib.sha256(request.model_dump_json().encode()).hexdigest()
    return f"moe-placement:{digest}"


class _Writer:
    """JSON parts of one answer, refused once they pass the bound."""

    def __init__(self, settings: Settings) -> None:
        self.bound = limits.bounds(settings)["answer_bytes"]
        self.parts: list[bytes] = []
        self.size = 0

    def add(self, part: bytes, *, layers: int | None = None) -> None:
        self.parts.append(part)
        self.size += len(part)
        if self.size > self.bound.value:
            where = f"the first {layers} layers' placements" if layers else "the placement"
            raise LimitExceededError(
                f"routes: the answer would exceed this service's bound of "
                f"{self.bound.value} bytes ({self.bound.setting}; {where} alone take "
                f"{self.size}): ask for routes='shared' or 'none', send fewer layers per "
                f"request, or raise {self.bound.setting} on the server", field="routes")

    def body(self) -> bytes:
        return b"".join(self.parts)


def _layer_json(layer: MoePlacementResponse) -> bytes:
    limits.require_finite(layer)
    return layer.model_dump_json().encode()


def layers_json(request: MoePlacementRequest, *, settings: Settings) -> bytes:
    """The JSON of `MoePlacementLayersResponse` for a request with `layers`, each layer
    planned, checked and written before the next is built.

    Raises:
        LimitExceededError: the answer would pass `ATLAS_MAX_ANSWER_BYTES`.
        InvalidSpecError: counts the planner cannot take, or a non-finite figure.
    """
    wall_time_s, layers = placement_layers(request)
    writer = _Writer(settings)
    writer.add(b'{"layers":[')
    for index, layer in enumerate(layers):
        writer.add((b"," if index else b"") + _layer_json(layer), layers=index + 1)
    # The total as pydantic writes a float, so that the body equals the model's own JSON.
    total = to_json(wall_time_s)
    writer.add(b'],"wall_time_s":' + total + b"}")
    return writer.body()


def layer_json(request: MoePlacementRequest, *, settings: Settings) -> bytes:
    """The JSON of one layer's `MoePlacementResponse` (request with `tokens`)."""
    writer = _Writer(settings)
    writer.add(_layer_json(plan_placement(request)))
    return writer.body()


def layer_svg(request: MoePlacementRequest) -> str:
    """The placement picture of one layer: rank loads before and after, replicas, routes."""
    response = plan_placement(request)
    limits.require_finite(response)
    assert request.tokens is not None  # the route sends only `tokens` requests here
    expert_loads = [sum(column) for column in zip(*request.tokens, strict=True)]
    before = home_rank_loads(expert_loads, num_ranks=len(request.tokens))
    return placement_svg(response, home_loads=before.tolist())


__all__ = ["layer_json", "layer_svg", "layers_json", "placement_key"]
