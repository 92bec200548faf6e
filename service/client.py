"""A small synchronous Python client of the atlas-planner HTTP API (httpx).

Owns: one method per endpoint, taking the request type (or an equivalent dict) and
returning the response type; every error answer raised as `ApiProblemError` carrying the
RFC 9457 problem details. Must not: retry silently or hide transport failures (httpx's
`TransportError` subclasses propagate).

    with AtlasClient("http://127.0.0.1:8000") as client:
        report = client.memory(EVALUATE_REQUEST_EXAMPLE)
"""

from collections.abc import Mapping
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel

from api_schemas.calibration import CalibrationProfile, CalibrationRunsRequest
from api_schemas.collectives import CollectiveEstimateRequest, CollectiveEstimateResponse
from api_schemas.mesh import MeshRequest, MeshResponse
from api_schemas.moe import (
    MoePlacementLayersResponse,
    MoePlacementRequest,
    MoePlacementResponse,
)
from api_schemas.pipeline import (
    PipelineOptimizeRequest,
    PipelineOptimizeResponse,
    PipelineSimulateRequest,
    PipelineSimulateResponse,
)
from api_schemas.plan import MemoryReport, PlanResponse, PlanStatus
from api_schemas.problems import ProblemDetail
from api_schemas.remote_activations import RemoteActivationsResponse
from api_schemas.requests import EvaluateRequest, PlanRequest
from api_schemas.rl_seesaw import RlSeesawRequest, RlSeesawResponse
from api_schemas.run_level import (
    FrontierRequest,
    FrontierResponse,
    RunEstimateRequest,
    RunEstimateResponse,
    SensitivityRequest,
    SensitivityResponse,
)
from service.problems import PROBLEM_MEDIA_TYPE
from service.schemas import FromHfResponse, GpuCatalog, HealthReport, ModelCatalog, PlanList

ResponseT = TypeVar("ResponseT", bound=BaseModel)

DEFAULT_BASE_URL = "http://127.0.0.1:8000"
DEFAULT_TIMEOUT_S = 660.0
"""Longer than the largest search time limit a request may ask for (600 s)."""


class ApiProblemError(Exception):
    """An error answer of the service with its problem details."""

    def __init__(self, problem: ProblemDetail, *, headers: Mapping[str, str]) -> None:
        super().__init__(f"[{problem.code}] {problem.detail}")
        self.problem = problem
        self.headers = dict(headers)

    @property
    def code(self) -> str:
        """The stable problem code, e.g. 'no-feasible-plan'."""
        return self.problem.code

    @property
    def status(self) -> int:
        """The HTTP status."""
        return self.problem.status

    @property
    def retry_after_s(self) -> int | None:
        """Seconds to wait before retrying (503 answers), if the service said."""
        value = self.headers.get("retry-after")
        return int(value) if value is not None and value.isdigit() else None


def _problem_of(response: httpx.Response) -> ProblemDetail:
    media_type = response.headers.get("content-type", "").split(";")[0].strip()
    if media_type in (PROBLEM_MEDIA_TYPE, "application/json"):
        try:
            return ProblemDetail.model_validate(response.json())
        except ValueError:
            pass
    # Not our problem body (a proxy or load balancer answered): describe it as internal.
    return ProblemDetail(type="about:blank", title=response.reason_phrase or "error",
                         status=response.status_code, detail=response.text[:500],
                         code="internal", instance=str(response.request.url))


def _payload(request: BaseModel | Mapping[str, Any]) -> Any:
    if isinstance(request, BaseModel):
        return request.model_dump(mode="json", exclude_unset=True)
    return dict(request)


class AtlasClient:
    """Methods per endpoint of one atlas-planner service."""

    def __init__(self, base_url: str = DEFAULT_BASE_URL, *,
                 timeout_s: float = DEFAULT_TIMEOUT_S, http: httpx.Client | None = None) -> None:
        """Args:
            base_url: where the service listens.
            timeout_s: per-request timeout.
            http: an httpx client to use instead of a new one (its base URL is kept).
        """
        self._owned = http is None
        self._http = http if http is not None else httpx.Client(base_url=base_url,
                                                                 timeout=timeout_s)

    def close(self) -> None:
        """Close the connection pool (only if this client created it)."""
        if self._owned:
            self._http.close()

    def __enter__(self) -> "AtlasClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _send(self, method: str, path: str, kind: type[ResponseT], *,
              body: Any = None, params: Mapping[str, Any] | None = None) -> ResponseT:
        response = self._http.request(method, path, json=body, params=params)
        if response.status_code >= 400:
            raise ApiProblemError(_problem_of(response), headers=response.headers)
        return kind.model_validate(response.json())

    def _post(self, path: str, kind: type[ResponseT],
              request: BaseModel | Mapping[str, Any]) -> ResponseT:
        """POST a request (its model or an equivalent dict) to `path`; the answer as `kind`."""
        return self._send("POST", path, kind, body=_payload(request))

    def health(self) -> HealthReport:
        """GET /healthz (a 503 'degraded' report raises `ApiProblemError`)."""
        return self._send("GET", "/healthz", HealthReport)

    def plan(self, request: PlanRequest | Mapping[str, Any]) -> PlanResponse:
        """POST /v1/plans: the stored plan (an infeasible outcome raises 'no-feasible-plan'
        whose `problem.instance` is the stored plan's id)."""
        return self._post("/v1/plans", PlanResponse, request)

    def get_plan(self, plan_id: str) -> PlanResponse:
        """GET /v1/plans/{plan_id}."""
        return self._send("GET", f"/v1/plans/{plan_id}", PlanResponse)

    def list_plans(self, *, limit: int = 20, offset: int = 0, model: str | None = None,
                   gpu: str | None = None, status: PlanStatus | str | None = None) -> PlanList:
        """GET /v1/plans with filters; newest first."""
        params: dict[str, Any] = {"limit": limit, "offset": offset}
        for key, value in (("model", model), ("gpu", gpu), ("status", status)):
            if value is not None:
                params[key] = str(value)
        return self._send("GET", "/v1/plans", PlanList, params=params)

    def evaluate(self, request: EvaluateRequest | Mapping[str, Any]) -> PlanResponse:
        """POST /v1/evaluate."""
        return self._post("/v1/evaluate", PlanResponse, request)

    def memory(self, request: EvaluateRequest | Mapping[str, Any]) -> MemoryReport:
        """POST /v1/ledger/memory."""
        return self._post("/v1/ledger/memory", MemoryReport, request)

    def rl_seesaw(self, request: RlSeesawRequest | Mapping[str, Any]) -> RlSeesawResponse:
        """POST /v1/lab/rl-seesaw."""
        return self._post("/v1/lab/rl-seesaw", RlSeesawResponse, request)

    def remote_activations(self, request: EvaluateRequest | Mapping[str, Any]
                           ) -> RemoteActivationsResponse:
        """POST /v1/lab/remote-activations."""
        return self._post("/v1/lab/remote-activations", RemoteActivationsResponse, request)

    def mesh(self, request: MeshRequest | Mapping[str, Any]) -> MeshResponse:
        """POST /v1/mesh."""
        return self._post("/v1/mesh", MeshResponse, request)

    def estimate_collective(self, request: CollectiveEstimateRequest | Mapping[str, Any]
                            ) -> CollectiveEstimateResponse:
        """POST /v1/collectives/estimate."""
        return self._post("/v1/collectives/estimate", CollectiveEstimateResponse, request)

    def simulate_pipeline(self, request: PipelineSimulateRequest | Mapping[str, Any]
                          ) -> PipelineSimulateResponse:
        """POST /v1/pipeline/simulate."""
        return self._post("/v1/pipeline/simulate", PipelineSimulateResponse, request)

    def optimize_pipeline(self, request: PipelineOptimizeRequest | Mapping[str, Any]
                          ) -> PipelineOptimizeResponse:
        """POST /v1/pipeline/optimize."""
        return self._post("/v1/pipeline/optimize", PipelineOptimizeResponse, request)

    def moe_placement(self, request: MoePlacementRequest | Mapping[str, Any]
                      ) -> MoePlacementResponse:
        """POST /v1/moe/placement."""
        return self._post("/v1/moe/placement", MoePlacementResponse, request)

    def moe_placement_layers(self, request: MoePlacementRequest | Mapping[str, Any]
                             ) -> MoePlacementLayersResponse:
        """POST /v1/moe/placement with `layers`: one placement per layer."""
        return self._post("/v1/moe/placement", MoePlacementLayersResponse, request)

    def calibrate(self, request: CalibrationRunsRequest | Mapping[str, Any]
                  ) -> CalibrationProfile:
        """POST /v1/calibration/runs: fit and store the next version of a profile."""
        return self._post("/v1/calibration/runs", CalibrationProfile, request)

    def run_estimate(self, request: RunEstimateRequest | Mapping[str, Any]
                     ) -> RunEstimateResponse:
        """POST /v1/run/estimate."""
        return self._post("/v1/run/estimate", RunEstimateResponse, request)

    def frontier(self, request: FrontierRequest | Mapping[str, Any]) -> FrontierResponse:
        """POST /v1/frontier."""
        return self._post("/v1/frontier", FrontierResponse, request)

    def sensitivity(self, request: SensitivityRequest | Mapping[str, Any]
                    ) -> SensitivityResponse:
        """POST /v1/sensitivity."""
        return self._post("/v1/sensitivity", SensitivityResponse, request)

    def catalog_gpus(self) -> GpuCatalog:
        """GET /v1/catalog/gpus."""
        return self._send("GET", "/v1/catalog/gpus", GpuCatalog)

    def catalog_models(self) -> ModelCatalog:
        """GET /v1/catalog/models."""
        return self._send("GET", "/v1/catalog/models", ModelCatalog)

    def model_from_hf(self, config: Mapping[str, Any], *, name: str | None = None
                      ) -> FromHfResponse:
        """POST /v1/models/from-hf."""
        body: dict[str, Any] = {"config": dict(config)}
        if name is not None:
            body["name"] = name
        return self._post("/v1/models/from-hf", FromHfResponse, body)


__all__ = ["DEFAULT_BASE_URL", "ApiProblemError", "AtlasClient"]
