"""The plan store failing under a live server: refused, partitioned, terminated, dropped and
recreated empty, locked while a search finishes, and locked while reads wait (answered).

The bounds on response times are the acceptance itself ("503 within 2 s"): the partition
tests set the read wait to 1 s (ATLAS_STORE_TIMEOUT_S, an operator's choice for quick
detection; by default a read waits as long as the driver may take on it), so an answer
later than 2 s means a request waited on the database instead of on the gate. Recovery
bounds are generous (tens of seconds) and only say that recovery happens without a restart.
"""

import sqlite3
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from faultkit import (
    EVALUATE_BODY,
    TcpProxy,
    admin_engine,
    free_port,
    hang_guard,
    plan_body,
    postgres_base_url,
    running_server,
    scratch_database,
    serving_in_thread,
    timed,
    url_through,
)
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from api_schemas.plan import PlanResponse
from api_schemas.requests import PlanRequest
from service.app import create_app
from service.settings import Settings
from solver import plan as solver_plan

pytestmark = hang_guard

OUTAGE_BOUND_S = 2.0
"""Acceptance: an outage or partition answers 503 within 2 s."""
RECOVERY_BOUND_S = 30.0


@contextmanager
def database_behind_proxy() -> Iterator[tuple[str, TcpProxy]]:
    """A scratch PostgreSQL database and a TCP proxy in front of it (reach it with
    `url_through(url, proxy.port)`); the proxy closes on leaving."""
    with scratch_database(postgres_base_url()) as (url, _name):
        proxy = TcpProxy(target_port=make_url(url).port or 5432).start()
        try:
            yield url, proxy
        finally:
            proxy.close()


def assert_store_unavailable(response: httpx.Response) -> None:
    assert response.status_code == 503, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.json()["code"] == "store-unavailable"
    assert int(response.headers["Retry-After"]) >= 1


def wait_healthy(base_url: str) -> float:
    """Poll /healthz until 200; the seconds it took."""
    start = time.monotonic()
    while time.monotonic() - start < RECOVERY_BOUND_S:
        try:
            if httpx.get(f"{base_url}/healthz", timeout=5).status_code == 200:
                return time.monotonic() - start
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"the store did not recover within {RECOVERY_BOUND_S} s")


@pytest.mark.slow
def test_refused_database_answers_503_at_once_and_evaluate_still_works(
        tmp_path: Path) -> None:
    url = f"postgresql+psycopg://nobody@127.0.0.1:{free_port()}/none"
    with ExitStack() as stack:
        server = stack.enter_context(
            running_server(url, tmp_path / "server.log", wait_healthy=False))
        http = stack.enter_context(httpx.Client(base_url=server.base_url, timeout=30))
        health, took = timed(lambda: http.get("/healthz"))
        assert health.status_code == 503 and took < OUTAGE_BOUND_S
        assert health.json()["status"] == "degraded"
        assert health.json()["database"] == "unreachable"
        assert int(health.headers["Retry-After"]) >= 1
        for call in (lambda: http.get("/v1/plans"),
                     lambda: http.get(f"/v1/plans/{'a' * 32}"),
                     lambda: http.post("/v1/plans", json=plan_body(0))):
            response, took = timed(call)
            assert_store_unavailable(response)
            assert took < OUTAGE_BOUND_S
        assert http.post("/v1/evaluate", json=EVALUATE_BODY).status_code == 200


@pytest.mark.slow
@pytest.mark.postgres
def test_silent_partition_answers_503_within_2_s_and_recovers(tmp_path: Path) -> None:
    with database_behind_proxy() as (url, proxy):
        with ExitStack() as stack:
            server = stack.enter_context(
                running_server(url_through(url, proxy.port), tmp_path / "server.log",
                               env={"ATLAS_STORE_TIMEOUT_S": "1"}))
            http = stack.enter_context(httpx.Client(base_url=server.base_url, timeout=60))
            created = http.post("/v1/plans", json=plan_body(0))
            assert created.status_code == 201, created.text
            plan_id = created.json()["id"]

            proxy.partition()
            calls = 48
            limits = httpx.Limits(max_connections=calls)
            with ThreadPoolExecutor(max_workers=calls) as pool, \
                    httpx.Client(base_url=server.base_url, timeout=60,
                                 limits=limits) as shared:
                for _ in range(calls):  # open the connections before timing
                    pool.submit(shared.get, "/problems/internal")
                stuck = [pool.submit(timed, lambda: shared.get(f"/v1/plans/{plan_id}"))
                         for _ in range(calls)]
                # With every store call waiting, an endpoint without a database answers.
                evaluated, evaluate_s = timed(
                    lambda: http.post("/v1/evaluate", json=EVALUATE_BODY))
                answers = [future.result() for future in stuck]
            assert evaluated.status_code == 200 and evaluate_s < 10.0
            times = sorted(took for _, took in answers)
            print(f"partition: {calls} concurrent reads answered 503 in "
                  f"{times[len(times) // 2]:.2f} s median, {times[-1]:.2f} s max")
            for response, took in answers:
                assert_store_unavailable(response)
                assert took < OUTAGE_BOUND_S, times
            health, took = timed(lambda: http.get("/healthz"))
            assert health.status_code == 503 and took < OUTAGE_BOUND_S
            assert health.json()["status"] == "degraded"

            proxy.heal()
            wait_healthy(server.base_url)
            again = http.get(f"/v1/plans/{plan_id}")
            assert again.status_code == 200 and again.json() == created.json()


@pytest.mark.slow
@pytest.mark.postgres
def test_connections_terminated_mid_request_answer_503_or_succeed(tmp_path: Path) -> None:
    base = postgres_base_url()
    with scratch_database(base) as (url, name), \
            running_server(url, tmp_path / "server.log") as server:
        created = httpx.post(f"{server.base_url}/v1/plans", json=plan_body(0), timeout=60)
        assert created.status_code == 201
        plan_id = created.json()["id"]
        statuses: list[int] = []
        stop = threading.Event()

        def traffic() -> None:
            with httpx.Client(base_url=server.base_url, timeout=30) as http:
                while not stop.is_set():
                    statuses.append(http.get(f"/v1/plans/{plan_id}").status_code)
                    statuses.append(http.get("/v1/plans?limit=5").status_code)

        workers = [threading.Thread(target=traffic) for _ in range(4)]
        for worker in workers:
            worker.start()
        admin = admin_engine(base)
        try:
            for _ in range(5):
                with admin.connect() as connection:
                    connection.execute(text(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE datname = :name AND pid <> pg_backend_pid()"), {"name": name})
                time.sleep(0.3)
        finally:
            stop.set()
            for worker in workers:
                worker.join(timeout=30)
            admin.dispose()
        assert statuses and set(statuses) <= {200, 503}, sorted(set(statuses))
        assert httpx.get(f"{server.base_url}/v1/plans/{plan_id}").status_code == 200


@pytest.mark.slow
@pytest.mark.postgres
def test_a_database_dropped_and_recreated_empty_recovers_without_restart(
        tmp_path: Path) -> None:
    base = postgres_base_url()
    with scratch_database(base) as (url, name), \
            running_server(url, tmp_path / "server.log") as server, \
            httpx.Client(base_url=server.base_url, timeout=60) as http:
        assert http.post("/v1/plans", json=plan_body(0)).status_code == 201
        admin = admin_engine(base)
        try:
            with admin.connect() as connection:
                connection.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))
            missing, took = timed(lambda: http.get("/v1/plans"))
            assert_store_unavailable(missing)
            assert took < OUTAGE_BOUND_S
            assert http.get("/healthz").status_code == 503
            with admin.connect() as connection:
                connection.execute(text(f'CREATE DATABASE "{name}"'))
        finally:
            admin.dispose()
        wait_healthy(server.base_url)
        listed = http.get("/v1/plans")
        assert listed.status_code == 200 and listed.json()["total"] == 0
        recreated = http.post("/v1/plans", json=plan_body(0))
        # The server's own account goes with a failure: a 500 here was once seen under load
        # and not reproduced since.
        assert recreated.status_code == 201, f"{recreated.text}\n{server.log()[-4000:]}"
        assert http.get(recreated.headers["Location"]).status_code == 200


class LockingPlanner:
    """The real planner, which makes the store stall as its first search finishes (`stall`).

    Only the first: the request sent again after the outage may find the late write not
    landed yet and search again, and that search must not start a second outage."""

    def __init__(self, stall: Any) -> None:
        self.stall = stall
        self.stalled = False

    def __call__(self, request: PlanRequest, *, progress: Any = None) -> PlanResponse:
        response = solver_plan(request, progress=progress)
        if not self.stalled:
            self.stalled = True
            self.stall()
        return response


def _stored_once_after_recovery(base_url: str) -> None:
    """After the outage the same request is answered with an id (201 if the late write was
    lost, 200 if it landed when the database answered again), and it is stored once."""
    again = httpx.post(f"{base_url}/v1/plans", json=plan_body(3), timeout=60)
    assert again.status_code in (200, 201) and again.json()["id"] is not None
    listed = httpx.get(f"{base_url}/v1/plans", timeout=30)
    assert listed.status_code == 200 and listed.json()["total"] == 1


def _unstored_answer(base_url: str) -> None:
    """A plan searched but not stored is a 503 with Retry-After, never a 200 without an id."""
    answer = httpx.post(f"{base_url}/v1/plans", json=plan_body(3), timeout=60)
    assert answer.status_code == 503, answer.text
    assert answer.json()["code"] == "store-unavailable" and answer.headers["Retry-After"]
    assert "could not store its plan" in answer.json()["detail"]
    assert "Location" not in answer.headers


@pytest.mark.slow
def test_a_search_finishing_while_sqlite_is_locked_is_answered_503(tmp_path: Path) -> None:
    path = tmp_path / "plans.db"
    holder: list[sqlite3.Connection] = []

    def lock() -> None:
        connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        connection.execute("BEGIN EXCLUSIVE")
        holder.append(connection)

    settings = Settings(database_url=f"sqlite:///{path}", store_statement_timeout_s=5.0)
    with serving_in_thread(create_app(settings, planner=LockingPlanner(lock))) as base_url:
        _unstored_answer(base_url)
        holder[0].execute("ROLLBACK")
        holder[0].close()
        _stored_once_after_recovery(base_url)


@pytest.mark.slow
@pytest.mark.postgres
def test_a_search_finishing_during_a_partition_is_answered_503(tmp_path: Path) -> None:
    with database_behind_proxy() as (url, proxy):
        settings = Settings(database_url=url_through(url, proxy.port))
        app = create_app(settings, planner=LockingPlanner(proxy.partition))
        with serving_in_thread(app) as base_url:
            _unstored_answer(base_url)
            proxy.heal()
            wait_healthy(base_url)
            _stored_once_after_recovery(base_url)


@pytest.mark.slow
def test_writes_that_wait_longer_than_the_read_timeout_are_stored_not_refused(
        tmp_path: Path) -> None:
    """A healthy store under load: another writer holds SQLite for 2.5 s (half the 5 s busy
    timeout) just as the first of four concurrent searches ends. Every look-up and write
    waits its turn and lands: four 201s with ids, four rows, none unstored. With one 1 s
    timeout for every call, these were answered 503 (earlier, 200 with `id: null`) although
    most writes landed."""
    path = tmp_path / "plans.db"
    held: list[float] = []

    def lock() -> None:
        connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        connection.execute("BEGIN EXCLUSIVE")
        started = time.monotonic()

        def release() -> None:
            connection.execute("ROLLBACK")
            connection.close()
            held.append(time.monotonic() - started)

        threading.Timer(2.5, release).start()

    settings = Settings(database_url=f"sqlite:///{path}", store_statement_timeout_s=5.0,
                        solver_threads=4, time_limit_grace_s=60.0)
    assert settings.read_timeout_s() > 5.0 and settings.write_timeout_s() > 5.0
    with serving_in_thread(create_app(settings, planner=LockingPlanner(lock))) as base_url:
        with ThreadPoolExecutor(max_workers=4) as pool:
            answers = list(pool.map(
                lambda i: httpx.post(f"{base_url}/v1/plans", json=plan_body(i), timeout=120),
                range(4)))
        for answer in answers:
            assert answer.status_code == 201, answer.text
            assert answer.json()["id"] is not None
        assert held and held[0] >= 2.5  # the lock was really held that long
        listed = httpx.get(f"{base_url}/v1/plans", timeout=30)
        assert listed.status_code == 200 and listed.json()["total"] == 4


@pytest.mark.slow
@pytest.mark.postgres
def test_postgres_reads_waiting_on_a_table_lock_are_answered_not_refused() -> None:
    """A healthy PostgreSQL store under load: another session holds the plan table's ACCESS
    EXCLUSIVE lock (what VACUUM FULL or ALTER TABLE take) for 2.5 s, half the statement
    timeout, while eight reads of a plan and a listing arrive. Every one waits its turn and
    is answered 200; with the 1 s read wait PostgreSQL had (SQLite's was already its busy
    timeout plus 1 s), they were answered 503 store-unavailable."""
    base = postgres_base_url()
    with scratch_database(base) as (url, _name):
        settings = Settings(database_url=url, store_statement_timeout_s=5.0,
                            time_limit_grace_s=60.0)
        assert settings.read_timeout_s() > 5.0
        with serving_in_thread(create_app(settings)) as base_url:
            created = httpx.post(f"{base_url}/v1/plans", json=plan_body(0), timeout=120)
            assert created.status_code == 201, created.text
            plan_id = created.json()["id"]
            locked = threading.Event()
            engine = create_engine(url)

            def hold() -> None:
                with engine.connect() as connection, connection.begin():
                    connection.execute(text("LOCK TABLE plans IN ACCESS EXCLUSIVE MODE"))
                    locked.set()
                    time.sleep(2.5)

            holder = threading.Thread(target=hold)
            holder.start()
            try:
                assert locked.wait(30)
                calls = [f"/v1/plans/{plan_id}"] * 8 + ["/v1/plans"]
                with ThreadPoolExecutor(max_workers=len(calls)) as pool:
                    answers = list(pool.map(
                        lambda path: timed(lambda: httpx.get(f"{base_url}{path}",
                                                             timeout=60)), calls))
            finally:
                holder.join()
                engine.dispose()
        for response, _took in answers:
            assert response.status_code == 200, response.text
        # They really waited for the lock (past the old 1 s wait), and were answered.
        assert min(took for _, took in answers) > 1.5, [took for _, took in answers]
        assert answers[0][0].json() == created.json()
