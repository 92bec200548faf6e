"""Engines and schema: SQLite embedded by default, PostgreSQL through a URL.

Owns: building an engine from a URL (SQLite file directories created, thread check off;
PostgreSQL with pre-ping), creating the schema at start-up and the reachability probe of
/healthz. Must not: read settings or the environment (the caller passes the URL).
"""

import logging
from pathlib import Path

from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import StaticPool
from sqlmodel import SQLModel

from service.persistence import tables  # noqa: F401 - registers the tables in the metadata

logger = logging.getLogger(__name__)


def make_engine(url: str) -> Engine:
    """An engine for a SQLAlchemy URL.

    SQLite files get their directory created; in-memory SQLite uses one shared connection
    (`StaticPool`) so every session sees the same database.
    """
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database or ""
        in_memory = database in ("", ":memory:") or database.startswith("file::memory:")
        if in_memory:
            return create_engine(url, connect_args={"check_same_thread": False},
                                 poolclass=StaticPool)
        Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        return create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})
    return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20)


SCHEMA_LOCK_KEY = 0x61746C6173
"""PostgreSQL advisory-lock key held while creating the schema ('atlas' in ASCII), so that
several server processes starting together do not race on CREATE TABLE."""


def init_db(engine: Engine) -> None:
    """Create the tables that do not exist yet (idempotent, safe for concurrent starts).

    On PostgreSQL the creation runs under a transaction-scoped advisory lock; elsewhere a
    creation that lost a race to another process is retried once (the table then exists).
    """
    if engine.dialect.name == "postgresql":
        with engine.begin() as connection:
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"),
                               {"key": SCHEMA_LOCK_KEY})
            SQLModel.metadata.create_all(connection)
    else:
        try:
            SQLModel.metadata.create_all(engine)
        except DBAPIError:
            logger.info("schema created concurrently by another process; checking again")
            SQLModel.metadata.create_all(engine)
    logger.info("plan store ready at %s", engine.url.render_as_string(hide_password=True))


def check_database(engine: Engine) -> bool:
    """True when a trivial query succeeds (database reachable)."""
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except Exception:
        logger.warning("database probe failed", exc_info=True)
        return False
    return True


__all__ = ["check_database", "init_db", "make_engine"]
