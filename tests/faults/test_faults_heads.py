"""The documented 64 KiB limit on a request's head, against the real server: a 100 KB header
sent in one piece (which the HTTP parser's incomplete-head bound never sees) is refused with
431, and a head just under the limit is served."""

from pathlib import Path

import httpx
from faultkit import LOAD_TOLERANT_ENV, hang_guard, running_server

pytestmark = hang_guard

LIMIT_BYTES = 64 * 1024


def test_a_head_over_64_kib_is_refused_and_one_under_it_served(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'plans.db'}"
    with running_server(url, tmp_path / "server.log", env=LOAD_TOLERANT_ENV) as server:
        big = httpx.get(f"{server.base_url}/healthz", headers={"X-Big": "a" * 100_000},
                        timeout=30)
        assert big.status_code == 431, big.text[:300]
        assert "ATLAS_MAX_HEADER_BYTES" in big.json()["detail"]
        under = httpx.get(f"{server.base_url}/healthz",
                          headers={"X-Big": "a" * (LIMIT_BYTES - 1024)}, timeout=30)
        assert under.status_code == 200
