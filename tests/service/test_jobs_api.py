"""The job API on the embedded default: SQLite, jobs on threads of the service process,
real searches (Llama 3.1 8B answers within about a second).

The same checks run against PostgreSQL with worker processes in
`tests/service/test_jobs_queue.py`.
"""

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from jobs_suite import (
    check_cancellation,
    check_in_order,
    check_plan_done,
    check_problems,
    check_sweep,
    events,
    final,
    frontier_job,
    long_job,
    plan_job,
    read,
    schedule_job,
    submit,
    sweep_job,
    wait_for,
)
from service_testkit import load_tolerant_settings, serve_in_process
from sqlalchemy import create_engine, update
from sqlmodel import Session, col, select

from api_schemas.jobs import PlanJobRequest
from service.app import create_app
from service.jobs import store
from service.jobs.local import SERVE_STARTED_ENV, serve_started_at
from service.jobs.submit import prepare
from service.jobs.tables import JobLinkRecord, JobRecord
from service.persistence.gate import StoreGate


@pytest.fixture
def jobs_client(tmp_path: Path) -> Iterator[httpx.Client]:
    """A client of the service on a fresh SQLite file with the real planner."""
    settings = load_tolerant_settings(f"sqlite:///{tmp_path / 'jobs.db'}", solver_threads=2)
    with serve_in_process(create_app(settings)) as client:
        yield client


def test_plan_job_is_searched_stored_and_merged(jobs_client: httpx.Client) -> None:
    job = submit(jobs_client, plan_job())
    assert job["kind"] == "plan" and job["events_url"] == f"/v1/jobs/{job['id']}/events"
    done = final(jobs_client, job["id"])
    check_plan_done(jobs_client, done)
    assert done["attempts"] == 1 and done["progress"]["evaluated"] >= 1
    stream = events(jobs_client, job["id"])
    check_in_order(stream)
    assert [e["state"] for e in stream if e["type"] == "state"] == ["queued", "running", "done"]
    last = [e for e in stream if e["type"] == "progress"][-1]["progress"]
    assert last["gap"] == 0.0 and last["incumbent"] == last["bound"]
    resumed = events(jobs_client, job["id"], after=2)
    assert resumed == stream[2:]
    again = jobs_client.post("/v1/jobs", json=plan_job())
    assert again.status_code == 200 and again.json()["id"] == job["id"]
    assert jobs_client.get("/v1/plans").json()["total"] == 1


def test_plan_job_answered_from_the_plan_store(jobs_client: httpx.Client) -> None:
    body = plan_job(batch=128)
    stored = jobs_client.post("/v1/plans", json=body["request"])
    assert stored.status_code == 201
    done = final(jobs_client, submit(jobs_client, body)["id"])
    assert done["plan_id"] == stored.json()["id"]
    assert jobs_client.get("/v1/plans").json()["total"] == 1


def test_frontier_job_keeps_its_answer(jobs_client: httpx.Client) -> None:
    done = final(jobs_client, submit(jobs_client, frontier_job())["id"])
    assert done["state"] == "done" and done["plan_id"] is None
    assert [p["num_nodes"] for p in done["result"]["points"]] == [1, 2]
    searches = {e["progress"]["search"] for e in events(jobs_client, done["id"])
                if e["type"] == "progress"}
    assert searches == {1, 2}


def test_schedule_job_answers_as_the_optimizer_endpoint(jobs_client: httpx.Client) -> None:
    body = schedule_job()
    done = final(jobs_client, submit(jobs_client, body)["id"])
    assert done["state"] == "done", done
    direct = jobs_client.post("/v1/pipeline/optimize", json=body["request"])
    assert direct.status_code == 200
    assert done["result"]["makespan"] == direct.json()["makespan"]
    assert done["result"]["status"] == direct.json()["status"]


def test_sweep_fans_out_plan_jobs_and_gathers_frontiers(jobs_client: httpx.Client) -> None:
    single = submit(jobs_client, plan_job(nodes=2, batch=128))
    done = check_sweep(jobs_client)
    points = [p for f in done["result"]["frontiers"] for p in f["points"]]
    assert points[3]["job_id"] == single["id"]  # the identical plan job, merged
    assert jobs_client.get("/v1/plans").json()["total"] == 4
    again = jobs_client.post("/v1/jobs", json=sweep_job())
    assert again.status_code == 200 and again.json()["id"] == done["id"]


def test_cancelling_a_sweep_cancels_its_plans(jobs_client: httpx.Client) -> None:
    job = submit(jobs_client, sweep_job("deepseek-v3", nodes=(32, 48), batches=(2048,),
                                        time_limit_s=60))
    cancelled = jobs_client.delete(f"/v1/jobs/{job['id']}")
    assert cancelled.status_code in (200, 202)
    ended = final(jobs_client, job["id"], timeout_s=30)
    assert ended["state"] == "cancelled"
    for frontier in ended["result"]["frontiers"]:
        for point in frontier["points"]:
            assert read(jobs_client, point["job_id"])["state"] == "cancelled"
            assert point["plan_id"] is None and point["point"]["status"] == "unknown"


def test_sweep_grid_is_bounded(jobs_client: httpx.Client) -> None:
    body = sweep_job(nodes=tuple(range(1, 17)), batches=(64, 128, 256, 512, 1024))
    refused = jobs_client.post("/v1/jobs", json=body)
    assert refused.status_code == 422 and "at most 64" in refused.text


def test_job_problems(jobs_client: httpx.Client) -> None:
    check_problems(jobs_client)


def test_out_of_bounds_job_is_refused(jobs_client: httpx.Client) -> None:
    body = plan_job(nodes=100_000)
    refused = jobs_client.post("/v1/jobs", json=body)
    assert refused.status_code == 422, refused.text
    assert refused.headers["content-type"].startswith("application/problem+json")


def test_cancelling_a_running_search_stops_it(jobs_client: httpx.Client) -> None:
    outcome = check_cancellation(jobs_client)
    job_id = outcome["cancelled"]["id"]
    requeued = jobs_client.post("/v1/jobs", json=long_job())
    assert requeued.status_code == 202 and requeued.json()["id"] == job_id
    assert requeued.json()["state"] in ("queued", "running")
    assert jobs_client.delete(f"/v1/jobs/{job_id}").status_code in (200, 202)
    assert final(jobs_client, job_id, timeout_s=30)["state"] == "cancelled"


def test_a_stopped_server_queues_its_running_job_again(tmp_path: Path) -> None:
    settings = load_tolerant_settings(f"sqlite:///{tmp_path / 'jobs.db'}", solver_threads=2)
    with serve_in_process(create_app(settings)) as client:
        job = submit(client, long_job())
        wait_for(client, job["id"], lambda j: j["state"] == "running", timeout_s=120)
    engine = create_engine(f"sqlite:///{tmp_path / 'jobs.db'}")
    deadline = time.monotonic() + 30
    while (record := store.get_job(engine, job["id"])) is None or record.state != "queued":
        assert time.monotonic() < deadline, record
        time.sleep(0.2)
    engine.dispose()
    with serve_in_process(create_app(settings)) as client:
        again = wait_for(client, job["id"], lambda j: j["state"] == "running", timeout_s=120)
        assert again["attempts"] == 2
        assert client.delete(f"/v1/jobs/{job['id']}").status_code in (200, 202)
        assert final(client, job["id"], timeout_s=30)["state"] == "cancelled"
        states = [(e["state"], e["attempt"]) for e in events(client, job["id"])
                  if e["type"] == "state"]
    assert states == [("queued", 0), ("running", 1), ("queued", 1), ("running", 2),
                      ("cancelled", 2)]


def test_a_job_left_running_by_a_killed_server_runs_again_at_the_next_start(
        tmp_path: Path) -> None:
    """A server killed with kill -9 (or by the kernel) never stops its runs: its job stays
    `running` in the store. The next server on the file queues it again (an event says
    why) and runs it to the end; before, it stayed running forever."""
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    settings = load_tolerant_settings(url, solver_threads=2)
    engine = create_engine(url)
    gate = StoreGate(engine, threads=1, timeout_s=30, retry_after_s=1)
    with serve_in_process(create_app(settings)):
        pass  # the schema
    body = plan_job(batch=128)
    submission = anyio.run(partial(prepare, PlanJobRequest.model_validate(body),
                                   settings=settings, gate=gate))
    orphan, _ = store.create_or_join(engine, key=submission.key, kind="plan",
                                     request_hash=submission.request_hash,
                                     request_json=submission.request_json)
    claimed = store.claim(engine, orphan.id, take_running=False)  # then the process died
    assert claimed is not None and claimed.state == "running"
    gate.shutdown()
    engine.dispose()
    with serve_in_process(create_app(settings)) as client:
        done = final(client, orphan.id)
        check_plan_done(client, done)
        stream = events(client, orphan.id)
    states = [(e["state"], e["attempt"]) for e in stream if e["type"] == "state"]
    assert states == [("queued", 0), ("running", 1), ("queued", 1), ("running", 2),
                      ("done", 2)]
    requeued = [e for e in stream if e["type"] == "state"][2]
    assert "server process ended" in requeued["detail"]


def test_a_serve_worker_started_later_leaves_its_siblings_runs_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs that started after the `serve` command did belong to its worker processes:
    a worker uvicorn starts again does not queue them again."""
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    settings = load_tolerant_settings(url, solver_threads=2)
    with serve_in_process(create_app(settings)):
        pass
    engine = create_engine(url)
    # The serve command started a second before the sibling's run: no sleep, no race.
    monkeypatch.setenv(SERVE_STARTED_ENV, repr(time.time() - 1))
    job, _ = store.create_or_join(engine, key="plan:sibling", kind="plan", request_hash="0" * 64,
                                  request_json=plan_job())
    assert store.claim(engine, job.id, take_running=False) is not None  # a sibling's run
    assert store.requeue_orphans(engine, started_before=serve_started_at()) == []
    assert store.get_job(engine, job.id).state == "running"  # type: ignore[union-attr]
    monkeypatch.setenv(SERVE_STARTED_ENV, repr(time.time() + 1))  # a later serve command
    assert store.requeue_orphans(engine, started_before=serve_started_at()) == [job.id]
    engine.dispose()


def test_worker_needs_postgres(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from service.cli import main

    assert main(["worker", "--database-url", f"sqlite:///{tmp_path / 'x.db'}"]) == 1
    assert "PostgreSQL" in caplog.text


def test_a_job_left_unqueued_is_queued_by_the_next_identical_request(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    settings = load_tolerant_settings(url, solver_threads=2)
    with serve_in_process(create_app(settings)) as client:
        engine = create_engine(url)
        gate = StoreGate(engine, threads=1, timeout_s=30, retry_after_s=1)
        body = plan_job(batch=256)
        submission = anyio.run(partial(prepare, PlanJobRequest.model_validate(body),
                                       settings=settings, gate=gate))
        orphan, _ = store.create_or_join(  # stored, then its server stopped: never queued
            engine, key=submission.key, kind="plan", request_hash=submission.request_hash,
            request_json=submission.request_json)
        time.sleep(1.0)
        assert store.get_job(engine, orphan.id).state == "queued"  # type: ignore[union-attr]
        joined = submit(client, body)
        assert joined["id"] == orphan.id
        assert final(client, orphan.id)["state"] == "done"
        gate.shutdown()
        engine.dispose()


def test_metrics_count_jobs_by_state(jobs_client: httpx.Client) -> None:
    """GET /metrics reports the jobs in each state, read from the store when scraped."""
    from prometheus_client.parser import text_string_to_metric_families

    def jobs_by_state() -> dict[str, float]:
        page = jobs_client.get("/metrics")
        assert page.status_code == 200
        return {sample.labels["state"]: sample.value
                for family in text_string_to_metric_families(page.text)
                for sample in family.samples if sample.name == "atlas_jobs"}

    before = jobs_by_state()
    assert set(before) == {"queued", "running", "done", "failed", "cancelled"}
    job = submit(jobs_client, plan_job())
    final(jobs_client, job["id"])
    after = jobs_by_state()
    assert after["done"] == before["done"] + 1
    assert after["queued"] == after["running"] == 0


def _age(engine: Any, job_id: str, days: float) -> None:
    with engine.begin() as connection:
        connection.execute(update(JobRecord).where(col(JobRecord.id) == job_id).values(
            finished_at=datetime.now(UTC) - timedelta(days=days)))


def test_finished_jobs_past_their_retention_are_deleted_with_their_events(
        tmp_path: Path) -> None:
    """At start-up (then periodically) a server deletes the jobs that finished more than
    ATLAS_JOB_RETENTION_S ago, with their events; their stored plans stay, and newer jobs
    stay. Before, job and event rows grew without bound."""
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    settings = load_tolerant_settings(url, solver_threads=2)
    with serve_in_process(create_app(settings)) as client:
        old = final(client, submit(client, plan_job(batch=64))["id"])
        recent = final(client, submit(client, plan_job(batch=128))["id"])
    engine = create_engine(url)
    _age(engine, old["id"], days=2)
    kept = load_tolerant_settings(url, solver_threads=2, job_retention_s=86400)
    with serve_in_process(create_app(kept)) as client:
        deadline = time.monotonic() + 30
        while client.get(f"/v1/jobs/{old['id']}").status_code != 404:
            assert time.monotonic() < deadline, "the old job was not deleted"
            time.sleep(0.2)
        assert client.get(f"/v1/plans/{old['plan_id']}").status_code == 200
        assert read(client, recent["id"])["state"] == "done"
        assert events(client, recent["id"])
    assert store.events_after(engine, old["id"], 0) == []
    engine.dispose()


def test_pruning_keeps_a_sweeps_plan_jobs_while_the_sweep_stays(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    with serve_in_process(create_app(load_tolerant_settings(url, job_retention_s=0))):
        pass  # the schema
    engine = create_engine(url)
    made = {}
    for name in ("sweep", "child", "old-sweep", "old-child"):
        job, _ = store.create_or_join(engine, key=f"x:{name}", kind="plan",
                                      request_hash="0" * 64, request_json={})
        made[name] = job.id
        with engine.begin() as connection:
            connection.execute(update(JobRecord).where(col(JobRecord.id) == job.id)
                               .values(state="done"))
        _age(engine, job.id, days=0 if name == "sweep" else 2)
    with Session(engine) as session:
        session.add(JobLinkRecord(parent_id=made["sweep"], child_id=made["child"], position=0))
        session.add(JobLinkRecord(parent_id=made["old-sweep"], child_id=made["old-child"],
                                  position=0))
        session.commit()
    cutoff = datetime.now(UTC) - timedelta(days=1)
    assert store.prune_finished(engine, finished_before=cutoff) == 2
    left = {name for name, job_id in made.items() if store.get_job(engine, job_id)}
    assert left == {"sweep", "child"}
    with Session(engine) as session:
        assert [link.parent_id for link in session.exec(select(JobLinkRecord))] == [
            made["sweep"]]
    engine.dispose()
