"""The SQLite file of a running server made read-only, deleted, or left on a full disk: each
time /healthz turns degraded within 5 s, a new plan is answered 503 store-unavailable (never
200 without an id), and once the file is usable again the server recovers without a restart.

Each test first stores a plan (the store works), then proves the fault took hold (a direct
write to the file fails the way the server's would) before asking the server anything.
"""

import os
import shutil
import sqlite3
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from faultkit import LOAD_TOLERANT_ENV, hang_guard, plan_body, running_server

pytestmark = hang_guard

DEGRADED_BOUND_S = 5.0
"""How soon /healthz must report a file fault, or its repair."""


def _health_within(base_url: str, status: int) -> float:
    """Seconds until /healthz answers `status` (at most `DEGRADED_BOUND_S`)."""
    start = time.monotonic()
    while True:
        answer = httpx.get(f"{base_url}/healthz", timeout=DEGRADED_BOUND_S)
        took = time.monotonic() - start
        if answer.status_code == status:
            if status == 503:
                assert answer.json()["status"] == "degraded"
                assert answer.headers["Retry-After"]
            return took
        assert took < DEGRADED_BOUND_S, f"/healthz still {answer.status_code} after {took:.1f} s"
        time.sleep(0.2)


def _direct_write_fails(path: Path) -> str:
    """Write the file on a new connection; the error the fault gives (fails if none)."""
    connection = sqlite3.connect(path, isolation_level=None, timeout=5)
    try:
        connection.execute("BEGIN IMMEDIATE")
        connection.execute("PRAGMA user_version = 7")
        connection.execute("COMMIT")
    except sqlite3.Error as error:
        return str(error)
    finally:
        connection.close()
    pytest.fail(f"the fault did not take hold: {path} is still writable")


def _fault_cycle(tmp_path: Path, path: Path, *, break_it: Callable[[], None],
                 mend_it: Callable[[], None], proves: tuple[str, ...]) -> None:
    """Store a plan; break the file; degraded + 503; mend it; healthy + stored again."""
    with running_server(f"sqlite:///{path}", tmp_path / "server.log",
                        env=LOAD_TOLERANT_ENV) as server:
        base = server.base_url
        first = httpx.post(f"{base}/v1/plans", json=plan_body(0), timeout=120)
        assert first.status_code == 201, first.text
        break_it()
        if path.exists():
            error = _direct_write_fails(path)
            assert any(word in error for word in proves), error
        else:
            assert "gone" in proves
        degraded_s = _health_within(base, 503)
        refused = httpx.post(f"{base}/v1/plans", json=plan_body(1), timeout=120)
        assert refused.status_code == 503, refused.text
        assert refused.json()["code"] == "store-unavailable"
        assert refused.headers["Retry-After"]

        mend_it()
        healthy_s = _health_within(base, 200)
        again = httpx.post(f"{base}/v1/plans", json=plan_body(1), timeout=120)
        assert again.status_code == 201 and again.json()["id"] is not None, again.text
        read = httpx.get(f"{base}/v1/plans/{first.json()['id']}", timeout=30)
        assert read.status_code == 200
        assert server.process.poll() is None
        print(f"degraded after {degraded_s:.2f} s, healthy {healthy_s:.2f} s after the repair")


def _set_read_only(path: Path, read_only: bool) -> None:
    """Read-only even for root: the immutable attribute when root, else file mode 0444."""
    if os.geteuid() == 0:
        flag = "+i" if read_only else "-i"
        done = subprocess.run(["chattr", flag, str(path)], capture_output=True, check=False)
        if done.returncode != 0:
            pytest.skip(f"running as root without chattr: {done.stderr.decode()[:200]}")
    else:
        path.chmod(0o444 if read_only else 0o644)


def test_a_read_only_sqlite_file_degrades_and_recovers(tmp_path: Path) -> None:
    path = tmp_path / "plans.db"
    try:
        _fault_cycle(tmp_path, path, break_it=lambda: _set_read_only(path, True),
                     mend_it=lambda: _set_read_only(path, False),
                     proves=("readonly", "read-only"))
    finally:
        if path.exists() and os.geteuid() == 0:
            subprocess.run(["chattr", "-i", str(path)], check=False)


def test_a_deleted_sqlite_file_degrades_and_recovers_when_restored(tmp_path: Path) -> None:
    path = tmp_path / "plans.db"
    backup = tmp_path / "backup.db"

    def delete() -> None:
        shutil.copyfile(path, backup)
        path.unlink()

    _fault_cycle(tmp_path, path, break_it=delete,
                 mend_it=lambda: shutil.copyfile(backup, path), proves=("gone",))


@contextmanager
def _small_tmpfs(where: Path, size_bytes: int) -> Iterator[Path]:
    """A tmpfs of `size_bytes` mounted at `where` (root only; skipped otherwise)."""
    where.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs",
                           str(where)], capture_output=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {done.stderr.decode()[:200]}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_sqlite_file_on_a_full_disk_degrades_and_recovers(tmp_path: Path) -> None:
    with _small_tmpfs(tmp_path / "disk", 8 * 2**20) as disk:
        path = disk / "plans.db"
        filler = disk / "filler"

        def fill() -> None:
            with filler.open("wb") as out:
                try:
                    while True:
                        out.write(b"\0" * 65536)
                        out.flush()
                except OSError:
                    pass
            assert shutil.disk_usage(disk).free < 65536

        _fault_cycle(tmp_path, path, break_it=fill, mend_it=filler.unlink,
                     proves=("full", "disk"))
