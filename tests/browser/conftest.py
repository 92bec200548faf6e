"""Fixtures of the browser tests: the real service on a free local port (uvicorn in a
thread, SQLite in a temporary directory) and headless Chromium from the system's packages,
driven by Playwright for Python.

The tests need the `browser` extra (`pip install -e '.[test,browser]'`) and a Chromium
binary (`apt-get install chromium`; `.ci/run` installs both). Where either is missing they
are skipped with that reason; set ATLAS_CHROMIUM to use another binary.
"""

import os
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
from serving import free_port

from service.app import create_app
from service.settings import Settings

playwright_sync = pytest.importorskip(
    "playwright.sync_api", reason="Playwright for Python is not installed: "
    "pip install -e '.[test,browser]'")

VIEWPORTS = {"desktop": {"width": 1366, "height": 900}, "mobile": {"width": 390, "height": 844}}


@pytest.fixture(scope="session")
def viewports() -> dict[str, dict[str, int]]:
    """The screen sizes the pages are checked at, by name (a fixture, so that test modules
    need not import this conftest by module name)."""
    return VIEWPORTS


def chromium_path() -> str | None:
    """The system Chromium (ATLAS_CHROMIUM, else chromium or chromium-browser on PATH)."""
    given = os.environ.get("ATLAS_CHROMIUM")
    if given:
        return given
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="session")
def base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The service on 127.0.0.1 (real HTTP), stopped after the session."""
    directory: Path = tmp_path_factory.mktemp("browser-store")
    # Store wait, search grace and simulation wait are generous (1 s, 10 s and 30 s by
    # default): these tests are about the pages, and a loaded host would otherwise answer a
    # (documented) 503 that the page shows instead of the answer the test waits for.
    settings = Settings(database_url=f"sqlite:///{directory / 'plans.db'}", solver_threads=2,
                        solver_queue=8, store_timeout_s=30.0, time_limit_grace_s=60.0,
                        compute_timeout_s=300.0)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(settings), host="127.0.0.1", port=port,
                                           log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    # Started, or the thread ended with the error that stopped it: no clock involved.
    while not server.started:
        assert thread.is_alive(), "the service thread ended before it started"
        time.sleep(0.05)
    try:
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=15)


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    """Headless system Chromium, one per test module: Playwright's sync API keeps an asyncio
    event loop running on the main thread while it is open, so a session-wide one would
    make every later test that starts its own loop (asyncio.run, anyio.run) fail."""
    executable = chromium_path()
    if executable is None:
        pytest.skip("no Chromium binary: apt-get install chromium (or set ATLAS_CHROMIUM)")
    with playwright_sync.sync_playwright() as driver:
        launched = driver.chromium.launch(executable_path=executable, headless=True,
                                          args=["--no-sandbox", "--disable-gpu",
                                                "--disable-dev-shm-usage"])
        try:
            yield launched
        finally:
            launched.close()
