"""docker-compose.yml and the Dockerfile (no Docker engine here: their content is checked,
the stack itself is not started)."""

import shlex
from pathlib import Path
from typing import Any

import yaml

from service.cli import build_parser
from service.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


def _compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text("utf-8"))
    return loaded


def test_compose_runs_the_api_on_postgres_with_health_checks() -> None:
    services = _compose()["services"]
    assert set(services) == {"api", "db", "worker"}
    api, db = services["api"], services["db"]
    assert "pg_isready" in " ".join(db["healthcheck"]["test"])
    assert "/healthz" in " ".join(api["healthcheck"]["test"])
    assert api["depends_on"]["db"]["condition"] == "service_healthy"
    url = api["environment"]["DATABASE_URL"]
    assert url.startswith("postgresql+psycopg://") and "@db:5432/" in url
    environment = {key: str(value) for key, value in api["environment"].items()}
    settings = Settings(**{key.removeprefix("ATLAS_").lower(): value
                           for key, value in environment.items() if key.startswith("ATLAS_")})
    assert settings.solver_threads == 4
    args = build_parser().parse_args(api["command"][1:])
    assert (args.command, args.host, args.port) == ("serve", "0.0.0.0", 8000)


def test_compose_runs_a_job_worker_on_the_api_database() -> None:
    services = _compose()["services"]
    api, worker = services["api"], services["worker"]
    assert worker["environment"]["DATABASE_URL"] == api["environment"]["DATABASE_URL"]
    assert worker["depends_on"]["db"]["condition"] == "service_healthy"
    args = build_parser().parse_args(worker["command"][1:])
    assert (args.command, args.concurrency) == ("worker", 2)


def test_dockerfile_serves_with_the_cli() -> None:
    lines = (ROOT / "Dockerfile").read_text("utf-8").splitlines()
    cmd = next(line for line in lines if line.startswith("CMD "))
    argv = yaml.safe_load(cmd.removeprefix("CMD "))
    assert argv[0] == "atlas-planner"
    args = build_parser().parse_args(argv[1:])
    assert args.command == "serve" and args.host == "0.0.0.0"
    copied = {shlex.split(line)[1] for line in lines if line.startswith("COPY ")}
    assert {"api_schemas", "models", "solver", "service"} <= copied
