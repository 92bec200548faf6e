"""Small faults of the service's answers: a 405 lists every method of the path, true/false is
refused where a number is due, a refused Hugging Face config does not show the installed
pydantic version, GPU memory below the CUDA context is refused by name, a large body past
its slots is refused with its own problem code."""

import asyncio
from typing import Any

import httpx
import pytest
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from api_schemas.parallel import ParallelConfig
from api_schemas.requests import Constraints
from service.large_bodies import LargeBodyGate
from service.problems import PROBLEM_TITLES

HF_BAD_GROUPS = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 2,
                 "num_attention_heads": 32, "num_key_value_heads": 7,
                 "intermediate_size": 14336, "vocab_size": 128256,
                 "max_position_embeddings": 8192}
"""A config whose 32 query heads do not split into 7 KV groups: ModelSpec refuses it."""

_CLUSTER = {"gpu": "h100-sxm5-80gb", "num_nodes": 1}
_TRAINING = {"global_batch_size": 8, "sequence_length": 4096}


@pytest.mark.parametrize(("method", "path", "allow"), [
    ("DELETE", "/v1/plans", "GET, POST"),
    ("PUT", "/v1/plans/0123", "GET"),
    ("GET", "/v1/evaluate", "POST"),
])
def test_a_405_names_every_method_of_the_path(client: httpx.Client, method: str, path: str,
                                              allow: str) -> None:
    answer = client.request(method, path)
    assert answer.status_code == 405
    assert answer.headers["Allow"] == allow
    assert answer.json()["detail"].endswith(f"this path takes {allow}")


@pytest.mark.parametrize("field", ["tp", "max_gpus"])
def test_true_or_false_is_refused_where_a_number_is_due(field: str) -> None:
    with pytest.raises(ValueError, match=f"{field}: give a number, not true"):
        Constraints.model_validate({field: True})
    with pytest.raises(ValueError, match="tp: give a number, not false"):
        ParallelConfig.model_validate({"tp": False, "pp": 1, "dp": 1, "micro_batch_size": 1})
    # Booleans stay booleans, numbers numbers.
    assert Constraints.model_validate({"allow_offload": False, field: 2}).allow_offload is False


def test_a_boolean_tp_is_answered_422_over_http(client: httpx.Client) -> None:
    body: dict[str, Any] = {"model": {"preset": "llama-3.1-8b"}, "cluster": _CLUSTER,
                            "training": _TRAINING,
                            "parallel": {"tp": True, "pp": 1, "dp": 8, "micro_batch_size": 1}}
    answer = client.post("/v1/evaluate", json=body)
    assert answer.status_code == 422
    assert "tp: give a number, not true" in answer.text


def test_a_refused_hf_config_does_not_show_the_pydantic_version(client: httpx.Client) -> None:
    body = {"model": {"hf_config": HF_BAD_GROUPS}, "cluster": _CLUSTER, "training": _TRAINING}
    answer = client.post("/v1/plans", json=body)
    assert answer.status_code == 422
    assert "num_kv_heads=7" in answer.json()["detail"]
    assert "pydantic.dev" not in answer.text and "pydantic" not in answer.json()["detail"]


def test_gpu_memory_at_or_below_the_cuda_context_is_refused_by_name(
        client: httpx.Client) -> None:
    body = {"model": {"preset": "llama-3.1-8b"}, "training": _TRAINING,
            "cluster": {**_CLUSTER, "gpu_memory_bytes": 2**29}}
    answer = client.post("/v1/plans", json=body)
    assert answer.status_code == 422
    problem = answer.json()
    assert problem["errors"][0]["loc"] == ["body", "cluster", "gpu_memory_bytes"]
    assert "536870912 bytes (512 MiB) of the CUDA context" in problem["detail"]


def test_a_large_body_over_its_slots_is_refused_as_large_bodies_busy(
        client: httpx.Client) -> None:
    """The large-body gate's refusal has its own code and title: the solver threads may
    all be idle when it refuses, so "Every solver thread is busy" (overloaded) misled."""

    async def refused_while_one_is_served() -> httpx.Response:
        entered, release = asyncio.Event(), asyncio.Event()

        async def held(scope: Scope, receive: Receive, send: Send) -> None:
            entered.set()
            await release.wait()
            await Response("served")(scope, receive, send)

        gate = LargeBodyGate(held, threshold_bytes=1024, slots=1, retry_after_s=3)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=gate),
                                     base_url="http://gate") as http:
            first = asyncio.create_task(http.post("/v1/evaluate", content=b"x" * 2048))
            await entered.wait()
            second = await http.post("/v1/evaluate", content=b"x" * 2048)
            release.set()
            assert (await first).text == "served"
            return second

    second = asyncio.run(refused_while_one_is_served())
    assert second.status_code == 503 and second.headers["Retry-After"] == "3"
    problem = second.json()
    assert problem["code"] == "large-bodies-busy"
    assert problem["title"] == PROBLEM_TITLES["large-bodies-busy"] != PROBLEM_TITLES["overloaded"]
    assert "ATLAS_LARGE_BODY_SLOTS=1" in problem["detail"]
    described = client.get("/problems/large-bodies-busy")
    assert described.status_code == 200 and described.json()["status"] == 503
    post = client.get("/openapi.json").json()["paths"]["/v1/moe/placement"]["post"]
    assert "large-bodies-busy" in post["responses"]["503"]["description"]
