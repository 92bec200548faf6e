"""Fixtures of the service tests: apps on SQLite or PostgreSQL with a scripted planner.

Databases: a SQLite file under tmp_path, and PostgreSQL in a schema of its own when
TEST_DATABASE_URL is set (dropped afterwards).
"""

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from service_testkit import ScriptedPlanner, load_tolerant_settings, serve_in_process
from sqlalchemy import create_engine, text

from service.app import create_app
from service.planning import Planner
from service.settings import Settings, normalise_database_url

PG_SKIP_REASON = ("TEST_DATABASE_URL is not set: the PostgreSQL persistence tests are skipped "
                  "(CI sets it when a server answers on 127.0.0.1:5432)")


def sqlite_url(directory: Path) -> str:
    """A SQLite file URL inside `directory`."""
    return f"sqlite:///{directory / 'plans.db'}"


@pytest.fixture
def sqlite_settings(tmp_path: Path) -> Settings:
    """Settings on a fresh SQLite file (store wait and time-limit grace generous, see
    `load_tolerant_settings`)."""
    return load_tolerant_settings(sqlite_url(tmp_path), solver_threads=2, solver_queue=4)


@pytest.fixture
def planner() -> ScriptedPlanner:
    """A fresh scripted planner."""
    return ScriptedPlanner()


@pytest.fixture
def make_client(sqlite_settings: Settings) -> Callable[..., Any]:
    """`make_client(settings=None, planner=None)` -> a context manager yielding a client."""

    def build(settings: Settings | None = None, planner: Planner | None = None) -> Any:
        return serve_in_process(create_app(settings or sqlite_settings, planner=planner))

    return build


@pytest.fixture
def client(sqlite_settings: Settings, planner: ScriptedPlanner) -> Iterator[httpx.Client]:
    """A client of an app on SQLite with the scripted planner."""
    with serve_in_process(create_app(sqlite_settings, planner=planner)) as http:
        yield http


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A PostgreSQL URL whose search_path is a fresh schema (dropped afterwards)."""
    base = os.environ.get("TEST_DATABASE_URL")
    if not base:
        pytest.skip(PG_SKIP_REASON)
    schema = f"atlas_test_{uuid.uuid4().hex[:12]}"
    base = normalise_database_url(base)
    admin = create_engine(base)
    with admin.begin() as connection:
        connection.execute(text(f'CREATE SCHEMA "{schema}"'))
    separator = "&" if "?" in base else "?"
    try:
        yield f"{base}{separator}options={quote(f'-csearch_path={schema}')}"
    finally:
        with admin.begin() as connection:
            connection.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Each persistence test runs on SQLite and on PostgreSQL (skipped without a server)."""
    if request.param == "sqlite":
        return sqlite_url(tmp_path)
    url: str = request.getfixturevalue("postgres_url")
    return url
