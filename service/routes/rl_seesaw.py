"""The RL memory seesaw lab: memory by phase of a colocated RL iteration.

Owns: POST /v1/lab/rl-seesaw (schema in -> `models.labs.rl_seesaw_report.rl_seesaw_report` ->
schema out, or its picture with `?format=svg` or POST /v1/lab/rl-seesaw.svg), with the
bounds of the training configuration it carries. Must not: size or time anything itself.
"""

from typing import Annotated

from fastapi import APIRouter, Body, Response

from api_schemas.rl_seesaw import RL_SEESAW_EXAMPLE, RlSeesawRequest, RlSeesawResponse
from models.labs.rl_seesaw_report import rl_seesaw_report
from service import limits
from service.deps import SettingsDep
from service.media import (
    AcceptHeader,
    FormatQuery,
    json_or_svg,
    svg_response,
    svg_responses,
)
from service.pictures import seesaw_svg

router = APIRouter(tags=["lab"])

SEESAW_EXAMPLES = {
    "kimi-k2-256-h800": {
        "summary": "Kimi K2 on 256 H800s (PP16 x EP16, Pipeline ZeRO-2), FP8 rollouts of "
                   "128K tokens on TP16 instances",
        "value": RL_SEESAW_EXAMPLE,
    },
    "kimi-k2-1m-nvme": {
        "summary": "The same with 1M-token contexts, states on NVMe and an external KV pool",
        "value": {**RL_SEESAW_EXAMPLE, "rollout": {
            **RL_SEESAW_EXAMPLE["rollout"], "context_length": 1_048_576,
            "offload_tier": "nvme", "nvme_bandwidth_bytes_per_s": 2.0e10,
            "external_kv_pool": True}},
    },
}


@router.post("/v1/lab/rl-seesaw", summary="GPU memory by phase of colocated RL, and transitions",
             response_model=RlSeesawResponse,
             responses=svg_responses(
                 "The phases and transitions (JSON) or the picture of memory by phase "
                 "(`?format=svg` or `Accept: image/svg+xml`).",
                 "The memory-by-phase picture.",
                 "invalid-spec"))
def rl_seesaw(
    request: Annotated[RlSeesawRequest, Body(openapi_examples=SEESAW_EXAMPLES)],
    settings: SettingsDep,
    format: FormatQuery = None,
    accept: AcceptHeader = None,
) -> RlSeesawResponse | Response:
    """Training and rollout taking turns on the same GPUs: for the training configuration's
    binding stage, the GPU and host memory of the rollout (inference weights and the
    KV-cache pool, with an optional write-back pool in host DRAM), the reference forward
    (reference weights in the policy's gradient buffers), the training step and the
    checkpoint engine's weight update; and the bytes and seconds of moving training states
    to host memory or NVMe and back, materialising the reference model and broadcasting the
    weights (a deterministic model, not a measurement; `assumptions` lists what the sources
    do not give)."""
    return json_or_svg(_seesaw(request, settings), format, accept, draw=seesaw_svg,
                       filename="rl-seesaw.svg")


@router.post("/v1/lab/rl-seesaw.svg", summary="GPU memory by phase of colocated RL (SVG)",
             response_class=Response,
             responses=svg_responses(
                 "GPU memory by phase and the transitions between them (what "
                 "`POST /v1/lab/rl-seesaw?format=svg` answers).",
                 "The memory-by-phase picture.",
                 "invalid-spec"))
def rl_seesaw_svg(request: Annotated[RlSeesawRequest, Body(openapi_examples=SEESAW_EXAMPLES)],
                  settings: SettingsDep) -> Response:
    """The phases of `POST /v1/lab/rl-seesaw` drawn as SVG (a deterministic model, not a
    measurement)."""
    return svg_response(seesaw_svg(_seesaw(request, settings)), filename="rl-seesaw.svg")


def _seesaw(request: RlSeesawRequest, settings: SettingsDep) -> RlSeesawResponse:
    limits.check_configuration(request, settings)
    return limits.finite_answer(rl_seesaw_report, request)


__all__ = ["SEESAW_EXAMPLES", "router"]
