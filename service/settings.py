"""Service configuration read from the environment.

Owns: every knob of the running service (database, body size, solver pool, time limits,
input bounds) with its environment variable, default and meaning. Must not: read the
environment at import time; `get_settings()` builds the object on first use.

Every field is read from `ATLAS_<FIELD NAME IN CAPITALS>`; the database URL is also read
from the conventional `DATABASE_URL`.
"""

import os
from functools import cache
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_SQLITE_PATH = Path("atlas-planner.db")
"""Embedded store used when no database URL is configured (relative to the working dir)."""


class Settings(BaseSettings):
    """Runtime configuration of the API service (environment variables in brackets)."""

    model_config = SettingsConfigDict(env_prefix="ATLAS_", extra="ignore", frozen=True)

    database_url: str | None = Field(
        default=None,
        validation_alias=AliasChoices("DATABASE_URL", "ATLAS_DATABASE_URL"),
        description="SQLAlchemy URL of the plan store [DATABASE_URL], e.g. "
        "postgresql+psycopg://user:pass@host:5432/atlas; unset = SQLite at sqlite_path.",
    )
    sqlite_path: Path = Field(
        default=DEFAULT_SQLITE_PATH,
        description="File of the embedded SQLite store when database_url is unset "
        "[ATLAS_SQLITE_PATH].",
    )
    max_body_bytes: int = Field(
        default=4 * 2**20, ge=1024,
        description="Largest accepted request body in bytes [ATLAS_MAX_BODY_BYTES].")
    solver_threads: int = Field(
        default_factory=lambda: max(1, min(4, os.cpu_count() or 1)), ge=1, le=256,
        description="Threads that run searches (plans, schedule optimisation, placement) "
        "[ATLAS_SOLVER_THREADS].")
    solver_queue: int = Field(
        default=8, ge=0, le=10_000,
        description="Searches that may wait for a thread; beyond threads + queue the service "
        "answers 503 overloaded [ATLAS_SOLVER_QUEUE].")
    max_search_workers: int = Field(
        default=8, ge=1, le=64,
        description="Cap on the CP-SAT worker threads one search may use "
        "[ATLAS_MAX_SEARCH_WORKERS].")
    default_time_limit_s: float = Field(
        default=10.0, gt=0.0,
        description="Search time limit when a request gives none [ATLAS_DEFAULT_TIME_LIMIT_S].")
    max_time_limit_s: float = Field(
        default=60.0, gt=0.0,
        description="Hard cap on any request's search time limit; larger requests are "
        "clamped [ATLAS_MAX_TIME_LIMIT_S].")
    time_limit_grace_s: float = Field(
        default=10.0, ge=0.0,
        description="Extra wall time (model building, scoring, storing) allowed beyond the "
        "search limit before a request answers 503 solver-time-limit "
        "[ATLAS_TIME_LIMIT_GRACE_S].")
    retry_after_s: int = Field(
        default=5, ge=1, description="Retry-After seconds sent with 503 answers "
        "[ATLAS_RETRY_AFTER_S].")
    max_world_size: int = Field(
        default=65_536, ge=1,
        description="Largest cluster or parallel world size in GPUs [ATLAS_MAX_WORLD_SIZE].")
    max_layers: int = Field(
        default=1_024, ge=1, description="Most transformer layers in a model [ATLAS_MAX_LAYERS].")
    max_experts: int = Field(
        default=4_096, ge=1,
        description="Most routed experts per MoE layer [ATLAS_MAX_EXPERTS].")
    max_sequence_length: int = Field(
        default=4 * 2**20, ge=1,
        description="Longest training sequence in tokens [ATLAS_MAX_SEQUENCE_LENGTH].")
    max_global_batch_size: int = Field(
        default=2**20, ge=1,
        description="Largest global batch in sequences [ATLAS_MAX_GLOBAL_BATCH_SIZE].")
    max_pipeline_stages: int = Field(
        default=512, ge=1,
        description="Most pipeline stages (pp) [ATLAS_MAX_PIPELINE_STAGES].")
    max_micro_batches: int = Field(
        default=8_192, ge=1,
        description="Most micro-batches per step per pipeline [ATLAS_MAX_MICRO_BATCHES].")
    max_pipeline_ops: int = Field(
        default=200_000, ge=1,
        description="Largest simulated timeline (stages x micro-batches x chunks x 3 ops) "
        "[ATLAS_MAX_PIPELINE_OPS].")
    max_timeline_ops: int = Field(
        default=20_000, ge=1,
        description="Most ops a response lists one by one in a pipeline timeline (about 2 MB "
        "of JSON); larger schedules must set include_timeline false "
        "[ATLAS_MAX_TIMELINE_OPS].")
    compute_timeout_s: float = Field(
        default=30.0, gt=0.0, le=3600.0,
        description="Longest a pipeline simulation waits for its pool thread before 503 "
        "solver-time-limit [ATLAS_COMPUTE_TIMEOUT_S].")
    max_optimize_ops: int = Field(
        default=100_000, ge=1,
        description="Largest schedule the CP-SAT optimizer takes (stages x micro-batches x "
        "chunks x 3 ops) [ATLAS_MAX_OPTIMIZE_OPS].")
    max_mesh_ranks: int = Field(
        default=16_384, ge=1,
        description="Largest mesh whose ranks are listed one by one [ATLAS_MAX_MESH_RANKS].")
    max_mesh_members: int = Field(
        default=1_000_000, ge=1,
        description="Largest listed mesh: listed ranks x members of their groups "
        "[ATLAS_MAX_MESH_MEMBERS].")
    max_placement_cells: int = Field(
        default=2**20, ge=1,
        description="Largest MoE token matrix (ranks x experts) [ATLAS_MAX_PLACEMENT_CELLS].")
    max_exact_placement_cells: int = Field(
        default=4_096, ge=1,
        description="Largest token matrix the exact (CP-SAT) placement takes "
        "[ATLAS_MAX_EXACT_PLACEMENT_CELLS].")
    max_token_count: int = Field(
        default=2**40, ge=1,
        description="Largest single token count in a placement matrix "
        "[ATLAS_MAX_TOKEN_COUNT].")
    large_body_bytes: int = Field(
        default=2**20, ge=1024,
        description="Bodies larger than this are admitted at most ATLAS_LARGE_BODY_SLOTS at "
        "a time before they are parsed [ATLAS_LARGE_BODY_BYTES].")
    large_body_slots: int = Field(
        default=1, ge=1, le=64,
        description="Requests with bodies over ATLAS_LARGE_BODY_BYTES served at once; the "
        "next is answered 503 large-bodies-busy with Retry-After [ATLAS_LARGE_BODY_SLOTS].")
    max_answer_bytes: int = Field(
        default=64 * 2**20, ge=2**20, le=2**32,
        description="Largest JSON answer the service builds for one request, in bytes; a "
        "larger one (a many-layer MoE placement with every route) is refused with "
        "invalid-request naming this setting [ATLAS_MAX_ANSWER_BYTES].")
    store_timeout_s: float = Field(
        default=1.0, ge=0.1, le=60.0,
        description="Longest a read of the plan store (look-up, read, list, health probe) "
        "is waited for before answering 503 store-unavailable; unset, a read waits as long "
        "as the driver may take on it: SQLite its busy timeout plus 1 s (a SQLite read "
        "queues behind another process's write lock), PostgreSQL the connect, pool and "
        "statement timeouts plus 1 s (a read may wait for a pooled connection, open one, "
        "and queue behind a lock). Set it lower to detect a silent partition sooner, at the "
        "price of 503s on a slow but healthy store [ATLAS_STORE_TIMEOUT_S].")
    store_write_timeout_s: float | None = Field(
        default=None, ge=0.1, le=900.0,
        description="Longest a write of the plan store (a plan, a calibration profile) is "
        "waited for; default: the driver's own bounds (connect + pool + statement timeouts) "
        "plus 1 s, so that no write the database still completes is reported unstored "
        "[ATLAS_STORE_WRITE_TIMEOUT_S].")
    store_connect_timeout_s: int = Field(
        default=2, ge=1, le=60,
        description="PostgreSQL connect timeout in whole seconds (libpq counts at least 2) "
        "[ATLAS_STORE_CONNECT_TIMEOUT_S].")
    store_statement_timeout_s: float = Field(
        default=5.0, ge=0.1, le=600.0,
        description="Server-side limit on one SQL statement (PostgreSQL statement_timeout; "
        "SQLite busy timeout) [ATLAS_STORE_STATEMENT_TIMEOUT_S].")
    store_pool_timeout_s: float = Field(
        default=1.0, ge=0.01, le=60.0,
        description="Longest wait for a free pooled connection [ATLAS_STORE_POOL_TIMEOUT_S].")
    store_threads: int = Field(
        default=8, ge=1, le=256,
        description="Threads that talk to the plan store; requests beyond four times this "
        "many waiting store calls answer 503 store-unavailable [ATLAS_STORE_THREADS].")
    body_read_timeout_s: float = Field(
        default=10.0, ge=0.1, le=3600.0,
        description="Longest wait for the next chunk of a request body before answering 408 "
        "[ATLAS_BODY_READ_TIMEOUT_S].")
    header_read_timeout_s: float = Field(
        default=10.0, ge=0.1, le=3600.0,
        description="Longest a connection may take to deliver a whole request head (request "
        "line and headers), from its opening or the end of its previous response; then 408 "
        "and the connection is closed [ATLAS_HEADER_READ_TIMEOUT_S].")
    keep_alive_timeout_s: int = Field(
        default=5, ge=1, le=600,
        description="Seconds an idle keep-alive connection stays open "
        "[ATLAS_KEEP_ALIVE_TIMEOUT_S].")
    worker_start_timeout_s: float = Field(
        default=60.0, ge=5.0, le=600.0,
        description="How long `serve --workers N` waits for a worker's health answer before "
        "replacing it [ATLAS_WORKER_START_TIMEOUT_S].")
    max_header_bytes: int = Field(
        default=64 * 1024, ge=4096, le=2**20,
        description="Largest request head (request line and headers) in bytes "
        "[ATLAS_MAX_HEADER_BYTES].")
    cors_origins: str = Field(
        default="",
        description="Comma-separated origins that browsers may call the API from, e.g. "
        "'https://a.example,https://b.example'; empty (the default) allows none, so "
        "cross-origin calls and preflights are refused [ATLAS_CORS_ORIGINS].")
    job_queue: Literal["auto", "inprocess", "procrastinate"] = Field(
        default="auto",
        description="Where POST /v1/jobs puts jobs: 'inprocess' runs them on solver_threads "
        "threads of the server process (no broker), 'procrastinate' queues them on the "
        "PostgreSQL store for `atlas-planner worker` processes; 'auto' (the default) picks "
        "procrastinate on PostgreSQL and in-process on SQLite [ATLAS_JOB_QUEUE].")
    job_retention_s: float = Field(
        default=30 * 86400.0, ge=0.0,
        description="Finished jobs (done, failed, cancelled) and their events are deleted "
        "this many seconds after they finished (a sweep's plan jobs with their sweep); their "
        "stored plans stay. 0 keeps them forever [ATLAS_JOB_RETENTION_S].")
    log_level: str = Field(default="INFO", description="Logging level [ATLAS_LOG_LEVEL].")

    @model_validator(mode="after")
    def _limits_ordered(self) -> "Settings":
        if self.default_time_limit_s > self.max_time_limit_s:
            raise ValueError(
                f"ATLAS_DEFAULT_TIME_LIMIT_S={self.default_time_limit_s} exceeds "
                f"ATLAS_MAX_TIME_LIMIT_S={self.max_time_limit_s}: lower the default or raise "
                "the cap")
        return self

    def read_timeout_s(self) -> float:
        """The store's read wait: `store_timeout_s` when set, else the longest the driver
        itself may take on a read that completes, plus 1 s, so that no read the database
        still answers is reported unavailable. SQLite: its busy timeout (a reader waits for
        a writer's lock up to it: SQLite "File Locking And Concurrency in SQLite Version 3",
        section 3, PENDING and EXCLUSIVE locks). PostgreSQL: the same bounds as a write
        (`write_timeout_s`): a pooled connection (SQLAlchemy QueuePool `pool_timeout`),
        a new connection (libpq `connect_timeout`) and the statement, which can wait for a
        lock (a table lock such as VACUUM FULL's or an ALTER TABLE's ACCESS EXCLUSIVE blocks
        reads: PostgreSQL manual, "Explicit Locking", table-level lock modes) until
        `statement_timeout` cancels it."""
        if "store_timeout_s" in self.model_fields_set:
            return self.store_timeout_s
        if self.resolved_database_url().startswith("sqlite"):
            return self.store_statement_timeout_s + 1.0
        return self._driver_bound_s()

    def write_timeout_s(self) -> float:
        """The store's write wait: `store_write_timeout_s`, or the driver's bounds on one
        write (connection, pooled connection, statement or SQLite busy wait) plus 1 s."""
        if self.store_write_timeout_s is not None:
            return self.store_write_timeout_s
        return self._driver_bound_s()

    def _driver_bound_s(self) -> float:
        return (self.store_connect_timeout_s + self.store_pool_timeout_s
                + self.store_statement_timeout_s + 1.0)

    def cors_origin_list(self) -> list[str]:
        """The origins of `cors_origins`, blanks dropped."""
        return [origin.strip() for origin in self.cors_origins.split(",") if origin.strip()]

    def resolved_database_url(self) -> str:
        """The SQLAlchemy URL to connect to (SQLite file when none is configured)."""
        if self.database_url:
            return normalise_database_url(self.database_url)
        return f"sqlite:///{self.sqlite_path}"


def normalise_database_url(url: str) -> str:
    """Pick the psycopg (v3) driver for PostgreSQL URLs that name no driver.

    `postgres://` and `postgresql://` would select psycopg2, which is not installed.
    """
    for prefix in ("postgres://", "postgresql://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix):]
    return url


@cache
def get_settings() -> Settings:
    """The process-wide settings, read from the environment on first use."""
    return Settings()


__all__ = ["DEFAULT_SQLITE_PATH", "Settings", "get_settings", "normalise_database_url"]
