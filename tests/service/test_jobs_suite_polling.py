"""The job suite's poll (`jobs_suite.wait_for`) waits out a store that is busy for a moment,
as a client honouring Retry-After does, and still fails on one that stays unavailable or
answers anything else."""

from typing import Any

import httpx
import pytest
from jobs_suite import BUSY_POLLS, final

BUSY = httpx.Response(503, headers={"Retry-After": "0"},
                      json={"code": "store-unavailable", "status": 503})


def _client(answers: list[httpx.Response]) -> tuple[httpx.Client, list[int]]:
    """A client whose GETs receive `answers` in turn; the list counts the requests."""
    seen: list[int] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(1)
        return answers[min(len(seen), len(answers)) - 1]

    return httpx.Client(transport=httpx.MockTransport(answer), base_url="http://x"), seen


def _done() -> httpx.Response:
    job: dict[str, Any] = {"id": "j", "state": "done"}
    return httpx.Response(200, json=job)


def test_a_busy_store_is_waited_out() -> None:
    client, seen = _client([BUSY] * BUSY_POLLS + [_done()])
    assert final(client, "j", timeout_s=5)["state"] == "done"
    assert len(seen) == BUSY_POLLS + 1


def test_a_store_that_stays_busy_fails_the_poll() -> None:
    client, _ = _client([BUSY] * (BUSY_POLLS + 1) + [_done()])
    with pytest.raises(AssertionError, match="503"):
        final(client, "j", timeout_s=5)


def test_another_refusal_is_not_waited_out() -> None:
    other = httpx.Response(503, headers={"Retry-After": "0"}, json={"code": "overloaded"})
    client, _ = _client([other, _done()])
    with pytest.raises(AssertionError, match="overloaded"):
        final(client, "j", timeout_s=5)
