"""Tools of the fault tests: the real server as a subprocess, a loopback TCP proxy that can
stop forwarding, and scratch PostgreSQL databases.

Everything listens on and connects to 127.0.0.1 only, and every wait is bounded.
"""

import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from serving import free_port, serve_in_thread, stop_process_group, wait_until_answering
from small_plan import small_plan
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from service.settings import normalise_database_url

ATLAS_PLANNER = Path(sys.executable).parent / "atlas-planner"
HANG_GUARD_S = 600.0
"""The per-test timeout (pytest-timeout, `hang_guard`) of the tests that run servers as
subprocesses: it stops a test whose server neither answers nor exits, instead of waiting
forever. The tests themselves read no clock; start-up speed is measured by
benchmarks/bench_startup.py."""

hang_guard = pytest.mark.timeout(HANG_GUARD_S)
"""`pytestmark = hang_guard` in a module whose tests start servers."""

LOAD_TOLERANT_ENV = {"ATLAS_STORE_TIMEOUT_S": "30", "ATLAS_STORE_STATEMENT_TIMEOUT_S": "30",
                     "ATLAS_TIME_LIMIT_GRACE_S": "60"}
"""Server settings for the tests whose subject is not the store's or the solver's timeouts:
generous waits, so that a loaded host's slow store call (1 s by default), a SQLite write
waiting on the other server's (5 s) or a slow search wrap-up (10 s of grace) does not turn
into a 503 that the test would read as a failure."""

PG_SKIP_REASON = ("TEST_DATABASE_URL is not set: the PostgreSQL fault tests are skipped "
                  "(CI sets it when a server answers on 127.0.0.1:5432)")


def plan_body(index: int, *, time_limit_s: float = 60.0) -> dict[str, Any]:
    """A small real plan request; `index` makes it distinct (global batch 8 x (index + 1)).
    The search proves its optimum in well under a second on an idle host; the time limit
    is generous so that a loaded host does not end it before any plan (a 503)."""
    return small_plan(time_limit_s=time_limit_s, global_batch_size=8 * (index + 1))


EVALUATE_BODY: dict[str, Any] = {
    "model": {"preset": "llama-3.1-8b"},
    "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 1, "gpus_per_node": 8},
    "training": {"global_batch_size": 64, "sequence_length": 4096},
    "parallel": {"tp": 8, "pp": 1, "dp": 1, "micro_batch_size": 1},
}
"""A configuration to score: /v1/evaluate needs no database."""


@dataclass
class Server:
    """A running `atlas-planner serve` process."""

    process: subprocess.Popen[bytes]
    base_url: str
    log_path: Path

    def log(self) -> str:
        """What the server printed so far."""
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def kill(self) -> None:
        """SIGKILL the server (and its workers, which share its process group)."""
        with suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)


def _address_space_cap(limit_bytes: int) -> Any:
    """A preexec function capping the child's address space (RLIMIT_AS) at `limit_bytes`:
    past it an allocation fails with MemoryError instead of the kernel killing the host."""
    import resource

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))

    return cap


def start_server(database_url: str, log_path: Path, *, workers: int = 1,
                 port: int | None = None, env: dict[str, str] | None = None,
                 wait_healthy: bool = True,
                 address_space_bytes: int | None = None) -> Server:
    """Start the README's serve command on a free loopback port; wait until it answers.
    `address_space_bytes` caps the server's address space (`ulimit -v`)."""
    port = port if port is not None else free_port()
    command = [str(ATLAS_PLANNER), "serve", "--host", "127.0.0.1", "--port", str(port),
               "--database-url", database_url, "--log-level", "warning",
               "--workers", str(workers)]
    environment = {key: value for key, value in os.environ.items() if key != "DATABASE_URL"}
    environment.update(env or {})
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=environment,
            start_new_session=True,
            preexec_fn=(None if address_space_bytes is None
                        else _address_space_cap(address_space_bytes)))
    server = Server(process=process, base_url=f"http://127.0.0.1:{port}", log_path=log_path)
    try:
        # Until it answers or exits; a server that does neither is stopped by `hang_guard`.
        wait_until_answering(process, server.base_url, log_path,
                             degraded_is_up=not wait_healthy)
    except BaseException:
        server.kill()
        raise
    return server


@contextmanager
def running_server(database_url: str, log_path: Path, **options: Any) -> Iterator[Server]:
    """`start_server` as a context: the server is stopped (SIGTERM, then SIGKILL) after."""
    server = start_server(database_url, log_path, **options)
    try:
        yield server
    finally:
        if server.process.poll() is None:
            stop_process_group(server.process)


serving_in_thread = serve_in_thread
"""Serve an app object with uvicorn on a loopback port in a thread; yields its URL."""


@dataclass
class TcpProxy:
    """A loopback TCP proxy to `target_port` that can stop forwarding without closing
    anything (a silent partition: connections stay open, bytes stop flowing)."""

    target_port: int
    port: int = 0
    forwarding: threading.Event = field(default_factory=threading.Event)
    _closed: threading.Event = field(default_factory=threading.Event)
    _sockets: list[socket.socket] = field(default_factory=list)
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> "TcpProxy":
        """Listen on a free loopback port and forward."""
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen(128)
        listener.settimeout(0.1)
        self.port = listener.getsockname()[1]
        self._sockets.append(listener)
        self.forwarding.set()
        self._spawn(self._accept, listener)
        return self

    def _spawn(self, target: Any, *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept(self, listener: socket.socket) -> None:
        while not self._closed.is_set():
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self._sockets.append(client)
            self._spawn(self._pump, client)

    def _pump(self, client: socket.socket) -> None:
        # A partitioned proxy does not even reach the upstream for new connections.
        while not self.forwarding.is_set():
            if self._closed.wait(0.05):
                return
        try:
            upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
        except OSError:
            client.close()
            return
        self._sockets.append(upstream)
        peers = {client: upstream, upstream: client}
        while not self._closed.is_set():
            if not self.forwarding.is_set():
                time.sleep(0.05)
                continue
            try:
                readable, _, _ = select.select(list(peers), [], [], 0.1)
            except (OSError, ValueError):
                # close() shut a socket under us (fd -1 or EBADF): the proxy is done.
                return
            for sock in readable:
                try:
                    data = sock.recv(65536)
                except OSError:
                    data = b""
                if not data:
                    for end in peers:
                        with suppress(OSError):
                            end.close()
                    return
                try:
                    peers[sock].sendall(data)
                except OSError:
                    return

    def partition(self) -> None:
        """Stop forwarding (silently: nothing is closed or refused)."""
        self.forwarding.clear()

    def heal(self) -> None:
        """Forward again."""
        self.forwarding.set()

    def close(self) -> None:
        """Close every socket and stop the threads."""
        self._closed.set()
        self.forwarding.set()
        for sock in self._sockets:
            with suppress(OSError):
                sock.close()
        for thread in self._threads:
            thread.join(timeout=5)


def postgres_base_url() -> str:
    """TEST_DATABASE_URL (psycopg driver), or skip with the reason."""
    base = os.environ.get("TEST_DATABASE_URL")
    if not base:
        pytest.skip(PG_SKIP_REASON)
    return normalise_database_url(base)


def admin_engine(base_url: str) -> Any:
    """An autocommit engine on the server's `postgres` database (to create and drop)."""
    return create_engine(make_url(base_url).set(database="postgres"),
                         isolation_level="AUTOCOMMIT")


@contextmanager
def scratch_database(base_url: str) -> Iterator[tuple[str, str]]:
    """A new, empty PostgreSQL database; yields (its URL, its name); dropped after."""
    name = f"atlas_fault_{uuid.uuid4().hex[:12]}"
    admin = admin_engine(base_url)
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(base_url).set(database=name).render_as_string(hide_password=False), name
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def url_through(url: str, port: int) -> str:
    """The same database URL, connecting through 127.0.0.1:`port`."""
    return make_url(url).set(host="127.0.0.1", port=port).render_as_string(hide_password=False)


def timed(call: Any) -> tuple[Any, float]:
    """(call(), seconds it took)."""
    start = time.monotonic()
    result = call()
    return result, time.monotonic() - start


__all__ = [
    "EVALUATE_BODY",
    "LOAD_TOLERANT_ENV",
    "Server",
    "TcpProxy",
    "admin_engine",
    "free_port",
    "plan_body",
    "postgres_base_url",
    "running_server",
    "scratch_database",
    "serving_in_thread",
    "start_server",
    "timed",
    "url_through",
]
