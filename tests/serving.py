"""Serving over HTTP in a test: an app object in a thread (shared by
`tests/service/service_testkit.py` and `tests/faults/faultkit.py`), and a server process
started in a session of its own: waiting for its first answer and stopping its process group
(shared by `tests/faults/faultkit.py`, the README example's test and the benchmarks that
start `atlas-planner serve`). This folder is on the import path through its conftest.
"""

import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import httpx


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextmanager
def serve_in_thread(app: Any) -> Iterator[str]:
    """Serve `app` with uvicorn on a free loopback port in a thread (lifespan included);
    yields its base URL; stops the server afterwards."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=free_port(),
                                           log_level="warning", lifespan="on"))
    port = server.config.port
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def wait_until_answering(process: subprocess.Popen[bytes], base_url: str, log_path: Path, *,
                         degraded_is_up: bool = False) -> None:
    """Poll `base_url`/healthz every 0.2 s until it answers 200 (or 503, a degraded store,
    with `degraded_is_up`).

    Raises:
        AssertionError: the server process exited first; the message is its log.
    """
    while True:
        assert process.poll() is None, log_path.read_text(encoding="utf-8", errors="replace")
        # A refused or dropped connection means the server is not listening yet.
        with suppress(httpx.TransportError):
            status = httpx.get(f"{base_url}/healthz", timeout=5.0).status_code
            if status == 200 or (status == 503 and degraded_is_up):
                return
        time.sleep(0.2)


def stop_process_group(process: subprocess.Popen[bytes], *, wait_s: float = 20.0) -> None:
    """Stop a server started with `start_new_session=True` and the workers in its process
    group: SIGTERM, then SIGKILL when it has not exited within `wait_s` seconds."""
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:
        with suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=wait_s)
