"""The app factory and `service.app:app`: built on first access, no I/O until start-up."""

from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

import service.app as app_module
from service.settings import Settings, get_settings, normalise_database_url


def test_module_app_is_built_lazily_from_the_environment(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path / 'lazy.db'}")
    monkeypatch.setenv("ATLAS_SOLVER_THREADS", "3")
    get_settings.cache_clear()
    app_module._default_app.cache_clear()
    try:
        built = app_module.app
        assert isinstance(built, FastAPI)
        assert app_module.app is built
        assert get_settings().solver_threads == 3
        assert not (tmp_path / "lazy.db").exists()  # the database opens at start-up only
    finally:
        get_settings.cache_clear()
        app_module._default_app.cache_clear()
    with pytest.raises(AttributeError):
        _ = app_module.not_an_attribute


def test_settings_validation_and_urls(tmp_path: Path) -> None:
    assert normalise_database_url("postgres://u@h/db") == "postgresql+psycopg://u@h/db"
    assert normalise_database_url("postgresql://u@h/db") == "postgresql+psycopg://u@h/db"
    assert Settings(sqlite_path=tmp_path / "x.db").resolved_database_url() == \
        f"sqlite:///{tmp_path / 'x.db'}"
    with pytest.raises(ValueError, match="ATLAS_DEFAULT_TIME_LIMIT_S"):
        Settings(default_time_limit_s=100, max_time_limit_s=10)


def test_the_app_imports_without_the_solver() -> None:
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    # The service's own settings from the environment are left out: other tests in the same
    # worker process may have set them, and this test is about imports, not settings.
    env = {name: value for name, value in os.environ.items() if not name.startswith("ATLAS_")}
    env["PYTHONPATH"] = str(root)
    probe = ("import sys\nfrom service.app import create_app\ncreate_app()\n"
             "print(*[p for p in ('ortools', 'pandas', 'solver.api') if p in sys.modules])")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == []


def test_the_front_page_redirects_to_the_lab(client: httpx.Client) -> None:
    answer = client.get("/", follow_redirects=False)
    assert answer.status_code == 307
    assert answer.headers["location"] == "/lab"
    page = client.get("/", follow_redirects=True)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "<title>atlas-planner Training Systems Lab</title>" in page.text
