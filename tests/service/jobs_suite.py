"""The job API suite, run against any deployment: the embedded in-process runner on SQLite
and the procrastinate queue on PostgreSQL with worker processes.

Each check takes an httpx client of a running service (real solver) and asserts on what
the API answers: states, results, stored plans, events in order, cancellation.
"""

import json
import time
from collections.abc import Callable
from typing import Any

import httpx

FINAL = {"done", "failed", "cancelled"}


def plan_job(model: str = "llama-3.1-8b", *, nodes: int = 1, batch: int = 64,
             time_limit_s: float = 20) -> dict[str, Any]:
    """A plan job body (a real search: Llama 3.1 8B answers within about a second, 70B on
    8 nodes within several)."""
    return {"kind": "plan", "request": {
        "model": {"preset": model},
        "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": nodes, "gpus_per_node": 8},
        "training": {"global_batch_size": batch, "sequence_length": 4096},
        "solver": {"time_limit_s": time_limit_s}}}


def long_job() -> dict[str, Any]:
    """A plan job whose search runs for many seconds (DeepSeek-V3 on 256 GPUs)."""
    return plan_job("deepseek-v3", nodes=32, batch=2048, time_limit_s=60)


def frontier_job() -> dict[str, Any]:
    """A frontier job over 1 and 2 nodes of Llama 3.1 8B."""
    body = plan_job(time_limit_s=20)
    return {"kind": "frontier", "request": {**body["request"], "num_nodes_options": [1, 2]}}


def schedule_job() -> dict[str, Any]:
    """A pipeline schedule optimisation job (ZB-H1 on 4 ranks, 8 micro-batches)."""
    return {"kind": "schedule", "request": {
        "schedule": "zb_h1", "num_stages": 4, "num_micro_batches": 8,
        "durations": {"F": 1.0, "B": 1.0, "W": 1.0}, "memory_limit": 4, "time_limit_s": 10,
        "include_timeline": False}}


def sweep_job(model: str = "llama-3.1-8b", *, nodes: tuple[int, ...] = (1, 2),
              batches: tuple[int, ...] = (64, 128), time_limit_s: float = 20
              ) -> dict[str, Any]:
    """A sweep: one model over cluster sizes and recipes (global batch sizes)."""
    base = plan_job(model, time_limit_s=time_limit_s)["request"]
    return {"kind": "sweep", "request": {
        "base": base, "models": [base["model"]], "num_nodes_options": list(nodes),
        "recipes": [{**base["training"], "global_batch_size": batch} for batch in batches]}}


def submit(client: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    """POST /v1/jobs; checks 202/200 and the Location."""
    response = client.post("/v1/jobs", json=body)
    assert response.status_code in (200, 202), response.text
    job: dict[str, Any] = response.json()
    assert response.headers["Location"] == f"/v1/jobs/{job['id']}"
    assert (response.status_code == 200) == (job["state"] in FINAL)
    return job


def read(client: httpx.Client, job_id: str) -> dict[str, Any]:
    """GET /v1/jobs/{id}."""
    response = client.get(f"/v1/jobs/{job_id}")
    assert response.status_code == 200, response.text
    job: dict[str, Any] = response.json()
    return job


BUSY_POLLS = 5
"""Store-unavailable answers in a row that a poll waits out, each for its Retry-After: the
service's answer while its store is busy for a moment (on the embedded SQLite file, a
stream of job-event commits can hold a new reader back past the busy timeout on a loaded
host). A client polling a job does the same; more in a row fail the check."""


def wait_for(client: httpx.Client, job_id: str, done: Callable[[dict[str, Any]], bool], *,
             timeout_s: float = 300.0) -> dict[str, Any]:
    """Poll the job until `done(job)`, waiting out up to `BUSY_POLLS` store-unavailable
    answers in a row; fails after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    busy = 0
    while True:
        response = client.get(f"/v1/jobs/{job_id}")
        if response.status_code == 503 and busy < BUSY_POLLS:
            assert response.json()["code"] == "store-unavailable", response.text
            busy += 1
            time.sleep(float(response.headers["Retry-After"]))
            continue
        assert response.status_code == 200, response.text
        busy = 0
        job: dict[str, Any] = response.json()
        if done(job):
            return job
        assert time.monotonic() < deadline, f"job {job_id} still {job['state']}: {job}"
        time.sleep(0.2)


def final(client: httpx.Client, job_id: str, timeout_s: float = 300.0) -> dict[str, Any]:
    """The job once it is final."""
    return wait_for(client, job_id, lambda job: job["state"] in FINAL, timeout_s=timeout_s)


def events(client: httpx.Client, job_id: str, *, after: int = 0) -> list[dict[str, Any]]:
    """The job's server-sent events until the stream ends (at a final state)."""
    headers = {"Last-Event-ID": str(after)} if after else {}
    received: list[dict[str, Any]] = []
    with client.stream("GET", f"/v1/jobs/{job_id}/events", headers=headers,
                       timeout=httpx.Timeout(600.0)) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        block: dict[str, str] = {}
        for line in response.iter_lines():
            if line == "":
                if "data" in block:
                    event = json.loads(block["data"])
                    assert block["id"] == str(event["seq"])
                    assert block["event"] == event["type"]
                    received.append(event)
                block = {}
            elif not line.startswith(":"):
                name, _, value = line.partition(": ")
                block[name] = value
    return received


def check_in_order(stream: list[dict[str, Any]], *, after: int = 0) -> None:
    """Events numbered without gaps, a run's clock never going back, its search reports
    never losing ground (candidates and evaluations grow within one search), and the last
    event a final state."""
    assert [event["seq"] for event in stream] == list(range(after + 1, after + 1 + len(stream)))
    last: dict[tuple[int, int], tuple[int, int]] = {}
    clock: dict[int, float] = {}
    for event in stream:
        attempt = event["attempt"]
        if event["type"] == "progress":
            assert event["state"] == "running"
            assert event["elapsed_s"] >= clock.get(attempt, 0.0)
            clock[attempt] = event["elapsed_s"]
            progress = event["progress"]
            key = (attempt, progress["search"])
            counts = (progress["candidates"], progress["evaluated"])
            previous = last.get(key, (0, 0))
            assert counts[1] >= previous[1], (previous, counts)
            last[key] = counts
            if progress["gap"] is not None:
                assert 0.0 <= progress["gap"] <= 1.0
    assert stream[-1]["type"] == "state" and stream[-1]["state"] in FINAL


def check_plan_done(client: httpx.Client, job: dict[str, Any]) -> None:
    """A done plan job links its stored plan, and carries it as its result."""
    assert job["state"] == "done", job
    assert job["result"]["status"] in ("optimal", "feasible", "infeasible")
    plan = client.get(job["plan_url"])
    assert plan.status_code == 200
    assert plan.json()["id"] == job["plan_id"] == job["result"]["id"]


def check_cancellation(client: httpx.Client) -> dict[str, Any]:
    """A running search stops soon after DELETE; the job ends cancelled, well before its
    time limit, and a second DELETE answers the cancelled job."""
    job = submit(client, long_job())
    running = wait_for(client, job["id"], lambda j: j["state"] == "running"
                       and j["progress"] is not None, timeout_s=240)
    asked = time.monotonic()
    response = client.delete(f"/v1/jobs/{job['id']}")
    assert response.status_code in (200, 202), response.text
    cancelled = final(client, job["id"], timeout_s=30)
    stopped_s = time.monotonic() - asked
    assert cancelled["state"] == "cancelled", cancelled
    assert cancelled["cancel_requested"] is True
    assert stopped_s < 15, f"the search took {stopped_s:.1f} s to stop"
    again = client.delete(f"/v1/jobs/{job['id']}")
    assert again.status_code == 200 and again.json()["state"] == "cancelled"
    stream = events(client, job["id"])
    check_in_order(stream)
    assert stream[-1]["state"] == "cancelled"
    assert any(event["type"] == "progress" for event in stream)
    return {"running": running, "cancelled": cancelled, "stopped_s": stopped_s}


def check_problems(client: httpx.Client) -> None:
    """Unknown jobs answer 404 job-not-found; a done job cannot be cancelled (409); a job of
    an unknown kind is refused (422); all as problem+json."""
    missing = client.get("/v1/jobs/" + "0" * 32)
    assert missing.status_code == 404
    assert missing.headers["content-type"].startswith("application/problem+json")
    assert missing.json()["code"] == "job-not-found"
    assert client.delete("/v1/jobs/" + "0" * 32).json()["code"] == "job-not-found"
    assert client.get("/v1/jobs/" + "0" * 32 + "/events").status_code == 404
    wrong = client.post("/v1/jobs", json={"kind": "sweep", "request": {}})
    assert wrong.status_code == 422 and wrong.json()["code"] == "invalid-request"
    done = final(client, submit(client, plan_job(batch=32))["id"])
    finished = client.delete(f"/v1/jobs/{done['id']}")
    assert finished.status_code == 409 and finished.json()["code"] == "job-finished"


def check_sweep(client: httpx.Client) -> dict[str, Any]:
    """A sweep of Llama 3.1 8B over 1 and 2 nodes and two recipes ends done with a frontier
    per recipe whose points are its plan jobs' stored plans."""
    job = submit(client, sweep_job())
    done = final(client, job["id"])
    assert done["state"] == "done", done
    frontiers = done["result"]["frontiers"]
    assert [(f["model_index"], f["recipe_index"]) for f in frontiers] == [(0, 0), (0, 1)]
    points = [p for f in frontiers for p in f["points"]]
    assert [p["point"]["num_nodes"] for p in points] == [1, 2, 1, 2]
    for point in points:
        plan = read(client, point["job_id"])
        assert plan["state"] == "done" and plan["plan_id"] == point["plan_id"]
        assert point["point"]["step_time_s"] > 0
    for frontier in frontiers:
        assert frontier["pareto_num_gpus"]
        assert set(frontier["pareto_num_gpus"]) <= {8, 16}
    return done


def twenty_jobs() -> list[dict[str, Any]]:
    """20 job bodies, 15 distinct: the long search first (DeepSeek-V3, many seconds), 5
    searches of Llama 3.1 70B on 8 nodes (about a second each), 8 of Llama 3.1 8B, one
    frontier, and 5 repeats."""
    distinct = [long_job()]
    distinct += [plan_job("llama-3.1-70b", nodes=8, batch=batch)
                 for batch in (256, 512, 768, 1024, 1536)]
    distinct += [plan_job(nodes=nodes, batch=batch) for nodes in (1, 2)
                 for batch in (64, 128, 256, 512)]
    distinct.append(frontier_job())
    repeats = [distinct[0], distinct[1], distinct[6], distinct[7], distinct[14]]
    return distinct + repeats


def check_twenty(client: httpx.Client, *, during: Callable[[list[dict[str, Any]]], None]
                 | None = None) -> dict[str, Any]:
    """Submit the 20 jobs; identical ones are one job; `during(jobs)` runs while they run
    (a worker kill); every job ends done or cancelled, one stored plan per distinct plan
    request, events in order. Returns figures."""
    bodies = twenty_jobs()
    started = time.monotonic()
    submitted = [submit(client, body) for body in bodies]
    ids = [job["id"] for job in submitted]
    assert len(set(ids)) == 15
    for index, body in enumerate(bodies):
        twin = bodies.index(body)
        assert ids[index] == ids[twin]
    if during is not None:
        during(submitted)
    ended = {job_id: final(client, job_id) for job_id in set(ids)}
    wall_s = time.monotonic() - started
    assert {job["state"] for job in ended.values()} <= {"done", "cancelled"}, ended
    plan_ids = []
    for job in ended.values():
        if job["kind"] == "plan" and job["state"] == "done":
            check_plan_done(client, job)
            plan_ids.append(job["plan_id"])
        elif job["kind"] == "frontier" and job["state"] == "done":
            assert len(job["result"]["points"]) == 2
    assert len(plan_ids) == len(set(plan_ids))
    listed = client.get("/v1/plans", params={"limit": 200}).json()
    hashes = [job["request_hash"] for job in ended.values() if job["kind"] == "plan"]
    assert listed["total"] == len(set(hashes)) == 14
    for job_id in ended:
        check_in_order(events(client, job_id))
    return {"wall_s": wall_s, "jobs": ended}


__all__ = ["BUSY_POLLS", "check_cancellation", "check_in_order", "check_plan_done",
           "check_problems", "check_sweep", "check_twenty", "events", "final",
           "frontier_job", "long_job", "plan_job", "read", "schedule_job", "submit",
           "sweep_job", "twenty_jobs", "wait_for"]
