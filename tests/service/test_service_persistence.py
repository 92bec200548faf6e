"""The plan store on SQLite and on PostgreSQL: repository functions, the unique request
hash, filters and pagination, and reading a plan back after the service restarts."""

import json
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from service_testkit import ScriptedPlanner, load_tolerant_settings, plan_body, serve_in_process
from sqlmodel import Session

from service.app import create_app
from service.persistence import (
    PlanRecord,
    check_database,
    find_plan_by_hash,
    get_plan,
    init_db,
    list_plans,
    make_engine,
    save_plan,
)
from service.settings import Settings

REFUSED_URL = "postgresql+psycopg://nobody@127.0.0.1:1/none"
"""A PostgreSQL URL whose port refuses connections (nothing listens on port 1)."""


def record(index: int, *, status: str = "optimal", model: str = "llama-3.1-70b",
           gpu: str = "h100-sxm5-80gb") -> PlanRecord:
    """A plan row with a distinct id, hash and creation time."""
    return PlanRecord(
        id=f"{index:032x}", request_hash=f"{index:064x}", status=status, model_name=model,
        gpu=gpu, world_size=64, objective="throughput",
        created_at=datetime(2025, 1, 1, tzinfo=UTC) + timedelta(minutes=index),
        request_json={"n": index}, response_json={"id": f"{index:032x}", "nested": [1, 2.5]},
        solver_stats_json={"wall_time_s": 0.5}, diagnostics_json=None)


@pytest.fixture
def engine(database_url: str) -> Any:
    built = make_engine(database_url)
    init_db(built)
    init_db(built)  # idempotent
    yield built
    built.dispose()


def test_save_and_get_round_trip(engine: Any) -> None:
    with Session(engine) as session:
        saved = save_plan(session=session, record=record(1))
        assert saved.id == f"{1:032x}"
    with Session(engine) as session:
        loaded = get_plan(session=session, plan_id=f"{1:032x}")
        assert loaded is not None
        assert loaded.response_json == {"id": f"{1:032x}", "nested": [1, 2.5]}
        assert loaded.solver_stats_json == {"wall_time_s": 0.5}
        assert get_plan(session=session, plan_id="f" * 32) is None
        assert find_plan_by_hash(session=session, request_hash=f"{1:064x}") is not None
    assert check_database(engine)


def test_same_request_hash_returns_the_first_row(engine: Any) -> None:
    with Session(engine) as session:
        first = save_plan(session=session, record=record(2))
    duplicate = record(3)
    duplicate.request_hash = f"{2:064x}"
    with Session(engine) as session:
        stored = save_plan(session=session, record=duplicate)
        assert stored.id == first.id
        assert get_plan(session=session, plan_id=duplicate.id) is None


def test_list_filters_and_paginates_newest_first(engine: Any) -> None:
    rows = [record(i, status="infeasible" if i % 3 == 0 else "optimal",
                   model="deepseek-v3" if i % 2 else "llama-3.1-70b") for i in range(1, 11)]
    with Session(engine) as session:
        for row in rows:
            save_plan(session=session, record=row)
    with Session(engine) as session:
        page = list_plans(session=session, limit=4, offset=0)
        assert page.total == 10
        assert [r.id for r in page.records] == [f"{i:032x}" for i in (10, 9, 8, 7)]
        last = list_plans(session=session, limit=4, offset=8)
        assert [r.id for r in last.records] == [f"{i:032x}" for i in (2, 1)]
        odd = list_plans(session=session, limit=50, model_name="deepseek-v3")
        assert odd.total == 5
        infeasible = list_plans(session=session, limit=50, status="infeasible",
                                model_name="deepseek-v3")
        assert [r.id for r in infeasible.records] == [f"{i:032x}" for i in (9, 3)]
        assert list_plans(session=session, limit=5, gpu="mi300x").total == 0


def test_unreachable_database_is_reported() -> None:
    engine = make_engine("postgresql+psycopg://nobody@127.0.0.1:1/none?connect_timeout=1")
    assert not check_database(engine)


def test_plan_survives_a_restart(database_url: str) -> None:
    settings = load_tolerant_settings(database_url)
    with serve_in_process(create_app(settings, planner=ScriptedPlanner())) as client:
        created = client.post("/v1/plans", json=plan_body())
        assert created.status_code == 201
        plan_id = created.json()["id"]
        before = client.get(f"/v1/plans/{plan_id}").content
    restarted = ScriptedPlanner()
    with serve_in_process(create_app(settings, planner=restarted)) as client:
        after = client.get(f"/v1/plans/{plan_id}")
        assert after.status_code == 200
        assert after.content == before
        assert after.json() == created.json()
        again = client.post("/v1/plans", json=plan_body())
        assert again.status_code == 200 and again.json()["id"] == plan_id
        assert restarted.calls == []
        health = client.get("/healthz").json()
        assert health["database"] == "ok"


def test_health_reports_an_unreachable_database(client: Any) -> None:
    assert client.get("/healthz").json() == {
        "status": "ok", "database": "ok", "database_backend": "sqlite", "version": "0.1.0"}
    refused = Settings(database_url=REFUSED_URL)
    with serve_in_process(create_app(refused, planner=ScriptedPlanner())) as down:
        response = down.get("/healthz")
        assert response.status_code == 503
        assert response.json()["status"] == "degraded"
        assert response.json()["database"] == "unreachable"
        assert response.headers["Retry-After"] == str(refused.retry_after_s)


def test_concurrent_start_ups_create_the_schema_once(database_url: str) -> None:
    # Eight starts released together by a barrier: with several tables each start can lose
    # the race on a different table, which a single retry did not survive.
    engines = [make_engine(database_url) for _ in range(8)]
    errors: list[BaseException] = []
    released_together = threading.Barrier(len(engines))

    def start(engine: Any) -> None:
        released_together.wait(timeout=30)
        try:
            init_db(engine)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=start, args=(engine,)) for engine in engines]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert errors == []
    with Session(engines[0]) as session:
        assert save_plan(session=session, record=record(1)).id == f"{1:032x}"
    for engine in engines:
        engine.dispose()


GPU_OBJECT = {"id": "g" * 5000, "name": "custom", "memory_bytes": 85899345920,
              "hbm_bandwidth_bytes_per_s": 3.35e12, "dense_peak_flop_per_s": {"bf16": 989.4e12}}

UNSTORABLE_BODIES = [
    pytest.param(plan_body(model={"preset": "llama\u0000-3.1-70b"}),
                 ["body", "model", "preset"], id="nul-in-preset"),
    pytest.param(plan_body(model={"hf_config": {"model_type": "llama", "name": "x\u0000"}}),
                 ["body", "model", "hf_config", "name"], id="nul-in-config-value"),
    pytest.param(plan_body(model={"hf_config": {"rope_theta": float("inf")}}),
                 ["body", "model", "ModelFromHf", "hf_config"], id="infinite-config-value"),
    pytest.param(plan_body(constraints={"forbid": {"tp\u0000": [1]}}),
                 ["body", "constraints", "forbid", "tp\u0000"], id="nul-in-forbid-key"),
    pytest.param(plan_body(constraints={"forbid": {"tp": [float("nan")]}}),
                 ["body", "constraints", "forbid"], id="nan-in-forbid"),
    pytest.param(plan_body(objective="cost_per_token",
                           constraints={"gpu_hour_price": float("inf")}),
                 ["body", "constraints", "gpu_hour_price"], id="infinite-price"),
    pytest.param(plan_body(cluster={"gpu": "h100-sxm5-80gb", "num_nodes": 1,
                                    "inter_node_bandwidth_bytes_per_s": float("inf")}),
                 ["body", "cluster", "inter_node_bandwidth_bytes_per_s"],
                 id="infinite-bandwidth"),
    pytest.param(plan_body(cluster={"gpu": GPU_OBJECT, "num_nodes": 1}),
                 ["body", "cluster", "gpu", "function-after[_needs_a_16_bit_peak(), GpuSpec]",
                  "id"], id="gpu-id-over-column"),
    pytest.param(plan_body(model={"preset": "llama-3.1-70b\ud800"}),
                 ["body", "model", "preset"], id="lone-surrogate"),
]


@pytest.mark.parametrize(("body", "loc"), UNSTORABLE_BODIES)
def test_what_a_store_cannot_keep_is_refused_naming_the_field(
        database_url: str, body: dict[str, Any], loc: list[str]) -> None:
    """These reached the database and failed with 500 on PostgreSQL only."""
    settings = load_tolerant_settings(database_url)
    planner = ScriptedPlanner()
    with serve_in_process(create_app(settings, planner=planner)) as client:
        # Python's JSON writes Infinity and NaN as bare tokens, as such clients send them.
        response = client.post("/v1/plans", content=json.dumps(body),
                               headers={"Content-Type": "application/json"})
        assert response.status_code == 422, response.text
        problem = response.json()
        assert problem["code"] == "invalid-request"
        assert any(error["loc"][:len(loc)] == loc for error in problem["errors"]), problem
        assert planner.calls == []
        assert client.get("/v1/plans").json()["total"] == 0


@pytest.mark.parametrize(("url", "loc"), [
    ("/v1/plans?model=llama%00", ["query", "model"]),
    ("/v1/plans?gpu=h100%00", ["query", "gpu"]),
    ("/v1/plans/abc%00def", ["path", "plan_id"]),
])
def test_reads_with_unstorable_text_are_refused_naming_the_parameter(
        database_url: str, url: str, loc: list[str]) -> None:
    with serve_in_process(create_app(load_tolerant_settings(database_url))) as client:
        response = client.get(url)
        assert response.status_code == 422, response.text
        assert response.json()["errors"][0]["loc"] == loc
        assert "NUL" in response.json()["errors"][0]["msg"]


def test_a_long_model_name_is_refused_by_its_bound(database_url: str) -> None:
    spec = {"name": "m" * 5000, "num_layers": 2, "hidden_size": 256,
            "num_attention_heads": 4, "vocab_size": 1000, "ffn_hidden_size": 1024}
    with serve_in_process(create_app(load_tolerant_settings(database_url),
                                     planner=ScriptedPlanner())) as client:
        response = client.post("/v1/plans", json=plan_body(model=spec))
        assert response.status_code == 422, response.text
        assert any("name" in error["loc"] and "200" in error["msg"]
                   for error in response.json()["errors"])
