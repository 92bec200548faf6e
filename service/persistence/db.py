"""Engines and schema: SQLite embedded by default, PostgreSQL through a URL.

Owns: building an engine from a URL with the store timeouts (SQLite file directories
created, thread check off, busy timeout; PostgreSQL with pre-ping, connect, statement and
pool-checkout timeouts and TCP keepalives), creating the schema (idempotent, also when a
database came back empty), recognising a missing schema, and the reachability probe of
/healthz (a read, and for a SQLite file a write on a new connection and the file's
presence). Must not: read settings or the environment (the caller passes the URL).
"""

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.pool import StaticPool
from sqlmodel import SQLModel

from service.jobs import tables as job_tables  # noqa: F401 - registers the job tables
from service.persistence import tables  # noqa: F401 - registers the tables in the metadata

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreTimeouts:
    """How long the driver may wait on the database before giving up."""

    connect_s: int = 2
    """Connect timeout (libpq `connect_timeout`, whole seconds; libpq counts at least 2)."""
    statement_s: float = 5.0
    """Longest statement: PostgreSQL `statement_timeout`, SQLite busy timeout."""
    pool_s: float = 1.0
    """Longest wait for a pooled connection to be free."""

    def postgres_connect_args(self, url_options: str | None) -> dict[str, Any]:
        """libpq parameters: connect timeout, TCP keepalives and user timeout (so a silent
        partition breaks the socket within seconds), and the statement timeouts, appended to
        the URL's own `options`."""
        statement_ms = max(1, round(self.statement_s * 1000))
        options = " ".join(part for part in (
            url_options or "",
            f"-c statement_timeout={statement_ms}",
            f"-c lock_timeout={statement_ms}",
            f"-c idle_in_transaction_session_timeout={4 * statement_ms}",
        ) if part)
        return {
            "connect_timeout": self.connect_s,
            "keepalives": 1,
            "keepalives_idle": 2,
            "keepalives_interval": 1,
            "keepalives_count": 3,
            "tcp_user_timeout": 4 * statement_ms,
            "options": options,
        }


def make_engine(url: str, timeouts: StoreTimeouts | None = None) -> Engine:
    """An engine for a SQLAlchemy URL, with the store timeouts on every connection.

    SQLite files get their directory created; in-memory SQLite uses one shared connection
    (`StaticPool`) so every session sees the same database.
    """
    limits = timeouts if timeouts is not None else StoreTimeouts()
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database or ""
        in_memory = database in ("", ":memory:") or database.startswith("file::memory:")
        if in_memory:
            return create_engine(url, connect_args={"check_same_thread": False},
                                 poolclass=StaticPool)
        Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        return create_engine(url, pool_timeout=limits.pool_s, connect_args={
            "check_same_thread": False, "timeout": limits.statement_s})
    url_options = parsed.query.get("options")
    given = url_options if isinstance(url_options, str) else None
    return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20,
                         pool_timeout=limits.pool_s,
                         connect_args=limits.postgres_connect_args(given))


def is_missing_schema(error: BaseException) -> bool:
    """Whether a database error says the plan table does not exist (a database that came
    back empty): PostgreSQL SQLSTATE 42P01, SQLite 'no such table'."""
    original = getattr(error, "orig", error)
    if getattr(original, "sqlstate", None) == "42P01":
        return True
    return "no such table" in str(original)


SCHEMA_LOCK_KEY = 0x61746C6173
"""PostgreSQL advisory-lock key held while creating the schema ('atlas' in ASCII), so that
several server processes starting together do not race on CREATE TABLE."""


def init_db(engine: Engine) -> None:
    """Create the tables that do not exist yet (idempotent, safe for concurrent starts).

    On PostgreSQL the creation runs under a transaction-scoped advisory lock. Elsewhere a
    creation that lost a race to another process is retried: each lost race means the other
    process created at least one more table, so one try per table plus one always ends
    (a race can be lost on every table in turn).
    """
    if engine.dialect.name == "postgresql":
        with engine.begin() as connection:
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"),
                               {"key": SCHEMA_LOCK_KEY})
            SQLModel.metadata.create_all(connection)
    else:
        tries_left = len(SQLModel.metadata.tables) + 1
        while True:
            try:
                SQLModel.metadata.create_all(engine)
                break
            except DBAPIError:
                tries_left -= 1
                if tries_left == 0:
                    raise
                logger.info("schema created concurrently by another process; checking again")
    logger.info("plan store ready at %s", engine.url.render_as_string(hide_password=True))


def sqlite_file(engine: Engine) -> Path | None:
    """The file of a SQLite file engine (None for in-memory SQLite and other backends)."""
    if engine.dialect.name != "sqlite":
        return None
    database = engine.url.database or ""
    if database in ("", ":memory:") or database.startswith("file::memory:"):
        return None
    return Path(database).expanduser()


class StoreFileGone(OSError):
    """The SQLite file the store was created in is no longer at its path."""


def check_sqlite_file(path: Path) -> None:
    """Raise `StoreFileGone` when the store's SQLite file is missing: connecting would
    silently create an empty one (and pooled connections keep writing the deleted one)."""
    if not path.exists():
        raise StoreFileGone(f"the SQLite file {path} is gone; restore it (or create an empty "
                            "file there, and the schema is created again)")


def probe_database(engine: Engine) -> None:
    """Read the plan table once (raises when the database or the schema is missing); for
    a SQLite file, also write it once on a new connection (raises when the file is gone,
    read-only, moved or on a full disk: faults a read on a pooled connection misses)."""
    with engine.connect() as connection:
        connection.execute(text("SELECT 1 FROM plans LIMIT 1"))
    path = sqlite_file(engine)
    if path is not None:
        check_sqlite_file(path)
        _write_probe(engine)


def _write_probe(engine: Engine) -> None:
    """Rewrite the SQLite header's user_version with its own value, committed, on a DBAPI
    connection outside the pool: a write transaction with a journal and a sync, so it fails
    as a plan's write would."""
    cargs, cparams = engine.dialect.create_connect_args(engine.url)
    raw = engine.dialect.dbapi.connect(*cargs, **cparams)  # type: ignore[union-attr]
    try:
        version = int(raw.execute("PRAGMA user_version").fetchone()[0])
        raw.execute("BEGIN IMMEDIATE")
        raw.execute(f"PRAGMA user_version = {version}")
        raw.commit()
    except Exception as error:
        raise OperationalError("PRAGMA user_version (write probe)", None, error) from error
    finally:
        raw.close()


def check_database(engine: Engine) -> bool:
    """True when a trivial query on the plan table succeeds (database and schema there)."""
    try:
        probe_database(engine)
    except Exception:
        logger.warning("database probe failed", exc_info=True)
        return False
    return True


__all__ = ["StoreFileGone", "StoreTimeouts", "check_database", "check_sqlite_file", "init_db",
           "is_missing_schema", "make_engine", "probe_database", "sqlite_file"]
