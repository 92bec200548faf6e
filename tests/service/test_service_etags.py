"""Strong ETags on stored plans and their pictures: the tag is the SHA-256 of the bytes
answered, stays the same across reads, and `If-None-Match` naming it gives 304 with no
body (RFC 9110 sections 8.8.3, 13.1.2 and 15.4.5)."""

import hashlib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from service_testkit import load_tolerant_settings, serve_in_process
from small_plan import small_plan

from service.app import create_app
from service.etags import entity_tag, matches

SMALL_PLAN = small_plan()


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[httpx.Client, str]]:
    """The service with the real planner, and one stored plan's id."""
    directory: Path = tmp_path_factory.mktemp("etags")
    settings = load_tolerant_settings(f"sqlite:///{directory / 'plans.db'}", solver_threads=1,
                                      solver_queue=2)
    with serve_in_process(create_app(settings)) as client:
        created = client.post("/v1/plans", json=SMALL_PLAN)
        assert created.status_code == 201, created.text
        yield client, created.json()["id"]


@pytest.mark.parametrize("suffix", ["", "/timeline.svg", "/memory.svg", "/trace"])
def test_stored_answers_round_trip_to_304(real: tuple[httpx.Client, str], suffix: str) -> None:
    client, plan_id = real
    url = f"/v1/plans/{plan_id}{suffix}"
    first = client.get(url)
    assert first.status_code == 200, first.text
    tag = first.headers["ETag"]
    assert tag == f'"{hashlib.sha256(first.content).hexdigest()}"'
    assert first.headers["Cache-Control"] == "no-cache"
    again = client.get(url)
    assert again.headers["ETag"] == tag and again.content == first.content

    unchanged = client.get(url, headers={"If-None-Match": tag})
    assert unchanged.status_code == 304
    assert unchanged.content == b""
    assert unchanged.headers["ETag"] == tag
    assert unchanged.headers["Cache-Control"] == "no-cache"
    listed = client.get(url, headers={"If-None-Match": f'"other", W/{tag}'})
    assert listed.status_code == 304
    other = client.get(url, headers={"If-None-Match": '"' + "0" * 64 + '"'})
    assert other.status_code == 200 and other.content == first.content


def test_different_answers_have_different_tags(real: tuple[httpx.Client, str]) -> None:
    client, plan_id = real
    tags = {client.get(f"/v1/plans/{plan_id}{suffix}").headers["ETag"]
            for suffix in ("", "/timeline.svg", "/memory.svg", "/trace")}
    assert len(tags) == 4


def test_unknown_plans_are_still_404(real: tuple[httpx.Client, str]) -> None:
    client, _ = real
    missing = client.get("/v1/plans/" + "f" * 32, headers={"If-None-Match": "*"})
    assert missing.status_code == 404
    assert "ETag" not in missing.headers


def test_if_none_match_comparison() -> None:
    tag = entity_tag(b"plan")
    assert tag == '"' + hashlib.sha256(b"plan").hexdigest() + '"'
    assert matches(tag, tag) and matches(f"W/{tag}", tag) and matches("*", tag)
    assert matches(f' "a" , {tag} ', tag)
    assert not matches(None, tag) and not matches('"a", "b"', tag)
    assert not matches(tag.strip('"'), tag)  # unquoted: malformed, names nothing
    assert not matches(f"{tag} junk", tag)
