"""The job API against real processes: `atlas-planner serve` on PostgreSQL with two
`atlas-planner worker` processes taking jobs from procrastinate, one of them killed with
SIGKILL in the middle of a search; and the same suite against `atlas-planner serve` on its
embedded SQLite store, which runs jobs itself.

PostgreSQL tests use a schema of their own (the `postgres_url` fixture) and skip with the
reason when TEST_DATABASE_URL is not set.
"""

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from jobs_suite import check_cancellation, check_problems, check_sweep, check_twenty
from serving import free_port
from sqlalchemy import Engine, create_engine, text

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow

HEARTBEAT_S = 1.0
STALLED_AFTER_S = 4.0


def _environment(tmp_path: Path) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ATLAS_STORE_TIMEOUT_S": "30",
           "ATLAS_TIME_LIMIT_GRACE_S": "60", "ATLAS_SOLVER_THREADS": "2"}
    env.pop("DATABASE_URL", None)
    env["ATLAS_SQLITE_PATH"] = str(tmp_path / "jobs.db")
    return env


def _start(arguments: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as sink:
        return subprocess.Popen([sys.executable, "-m", "service.cli", *arguments], cwd=ROOT,
                                env=env, stdout=sink, stderr=subprocess.STDOUT)


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def _serve(arguments: list[str], env: dict[str, str], log: Path
           ) -> tuple[subprocess.Popen[bytes], httpx.Client]:
    port = free_port()
    server = _start(["serve", "--port", str(port), "--log-level", "warning", *arguments],
                    env, log)
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60.0)
    deadline = time.monotonic() + 120
    while True:
        assert server.poll() is None, log.read_text()[-3000:]
        try:
            if client.get("/healthz").status_code == 200:
                return server, client
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.3)


def _workers(engine: Engine) -> list[int]:
    with engine.connect() as connection:
        try:
            rows = connection.execute(text("SELECT id FROM procrastinate_workers ORDER BY id"))
        except Exception:
            return []
        return [int(row[0]) for row in rows]


def _start_worker(env: dict[str, str], url: str, log: Path, engine: Engine,
                  known: int) -> tuple[subprocess.Popen[bytes], int]:
    """A worker process, once it registered with the queue; and its worker id."""
    worker = _start(["worker", "--database-url", url, "--concurrency", "1", "--heartbeat",
                     str(HEARTBEAT_S), "--stalled-after", str(STALLED_AFTER_S)], env, log)
    deadline = time.monotonic() + 120
    while len(ids := _workers(engine)) <= known:
        assert worker.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.3)
    return worker, ids[-1]


@pytest.fixture
def queue_service(postgres_url: str, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """The service on PostgreSQL and two workers (by their queue worker ids)."""
    env = _environment(tmp_path)
    log = tmp_path / "processes.log"
    engine = create_engine(postgres_url)
    server, client = _serve(["--database-url", postgres_url], env, log)
    processes = [server]
    workers: dict[int, subprocess.Popen[bytes]] = {}
    try:
        for known in range(2):
            worker, worker_id = _start_worker(env, postgres_url, log, engine, known)
            processes.append(worker)
            workers[worker_id] = worker
        yield {"client": client, "engine": engine, "workers": workers, "log": log}
    finally:
        client.close()
        for process in processes:
            _stop(process)
        engine.dispose()


def _kill_mid_search(service: dict[str, Any], job_id: str) -> dict[str, Any]:
    """Wait until a worker runs the job and its search has reported progress, then SIGKILL
    that worker; the job as it was."""
    engine: Engine = service["engine"]
    client: httpx.Client = service["client"]
    deadline = time.monotonic() + 240
    while True:
        with engine.connect() as connection:
            row = connection.execute(text(
                "SELECT worker_id FROM procrastinate_jobs WHERE status = 'doing' "
                "AND args->>'job_id' = :job"), {"job": job_id}).first()
        if row is not None and row[0] in service["workers"]:
            job = client.get(f"/v1/jobs/{job_id}").json()
            if job["state"] == "running" and job["progress"] is not None:
                victim = service["workers"][row[0]]
                victim.send_signal(signal.SIGKILL)
                victim.wait(timeout=10)
                return job
        assert time.monotonic() < deadline, f"job {job_id} never ran with progress"
        time.sleep(0.1)


def test_twenty_jobs_survive_a_killed_worker(queue_service: dict[str, Any]) -> None:
    killed: dict[str, Any] = {}

    def kill(submitted: list[dict[str, Any]]) -> None:
        killed.update(_kill_mid_search(queue_service, submitted[0]["id"]))  # the long one

    outcome = check_twenty(queue_service["client"], during=kill)
    victim = outcome["jobs"][killed["id"]]
    assert victim["state"] == "done"
    assert victim["attempts"] == killed["attempts"] + 1, victim
    attempts = sorted(job["attempts"] for job in outcome["jobs"].values())
    print(f"\n20 jobs (15 distinct) on 2 workers, one killed: {outcome['wall_s']:.1f} s; "
          f"attempts {attempts}")


def test_cancellation_and_sweep_on_workers(queue_service: dict[str, Any]) -> None:
    outcome = check_cancellation(queue_service["client"])
    check_problems(queue_service["client"])
    check_sweep(queue_service["client"])
    print(f"\ncancelled search stopped {outcome['stopped_s']:.2f} s after DELETE")


@pytest.fixture
def embedded_service(tmp_path: Path) -> Iterator[httpx.Client]:
    """`atlas-planner serve` on its embedded SQLite store (jobs run in the server)."""
    server, client = _serve([], _environment(tmp_path), tmp_path / "serve.log")
    try:
        yield client
    finally:
        client.close()
        _stop(server)


def test_twenty_jobs_on_the_embedded_default(embedded_service: httpx.Client) -> None:
    outcome = check_twenty(embedded_service)
    assert all(job["attempts"] == 1 for job in outcome["jobs"].values())
    print(f"\n20 jobs (15 distinct) in-process on SQLite: {outcome['wall_s']:.1f} s")


def test_cancellation_and_sweep_on_the_embedded_default(embedded_service: httpx.Client
                                                        ) -> None:
    outcome = check_cancellation(embedded_service)
    check_problems(embedded_service)
    check_sweep(embedded_service)
    print(f"\ncancelled search stopped {outcome['stopped_s']:.2f} s after DELETE")
