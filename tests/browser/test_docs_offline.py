"""/docs and /redoc with every request outside the service aborted: Swagger UI and ReDoc
load from the package, and "Try it out" runs POST /v1/plans."""

import json
from collections.abc import Iterator
from typing import Any

import pytest
from small_plan import small_plan

SMALL_PLAN = small_plan(top_k=2)


@pytest.fixture
def offline_page(browser: Any, base_url: str,
                 viewports: dict[str, dict[str, int]]) -> Iterator[tuple[Any, list[str]]]:
    """A page whose requests to anything but the service are aborted (and recorded)."""
    context = browser.new_context(viewport=viewports["desktop"])
    blocked: list[str] = []

    def route(route: Any) -> None:
        if route.request.url.startswith(base_url):
            route.continue_()
        else:
            blocked.append(route.request.url)
            route.abort()

    context.route("**/*", route)
    page = context.new_page()
    page.set_default_timeout(60_000)
    refused: list[str] = []
    page.on("console", lambda message: refused.append(message.text)
            if "Content Security Policy" in message.text else None)
    page.refused = refused
    yield page, blocked
    context.close()


def test_swagger_ui_works_offline_and_tries_post_plans(
        offline_page: tuple[Any, list[str]], base_url: str) -> None:
    page, blocked = offline_page
    page.goto(f"{base_url}/docs")
    page.wait_for_selector(".swagger-ui .information-container")
    assert "atlas-planner" in page.locator(".swagger-ui .title").inner_text()
    operation = page.locator("#operations-plans-create_plan")
    operation.locator(".opblock-summary").click()
    operation.locator("button.try-out__btn").click()
    body = operation.locator("textarea.body-param__text")
    body.fill(json.dumps(SMALL_PLAN))
    operation.locator("button.execute").click()
    status = operation.locator(".live-responses-table .response .response-col_status").first
    status.wait_for()
    assert status.inner_text().strip() == "201"
    answer = operation.locator(".live-responses-table .microlight").first.inner_text()
    assert '"status": "optimal"' in answer or '"status": "feasible"' in answer
    assert blocked == []
    assert page.refused == [], "Swagger UI breaks its Content-Security-Policy"


def test_redoc_works_offline(offline_page: tuple[Any, list[str]], base_url: str) -> None:
    page, blocked = offline_page
    page.goto(f"{base_url}/redoc")
    page.wait_for_selector("h1:has-text('atlas-planner')")
    assert page.locator("text=Search for the best parallel plan").count() >= 1
    assert blocked == []
