"""Every lab tab at 1280 and 1920 px wide: no console error and no text past its box.

Each tab runs a preset that draws its picture (the pipeline tab, DeepSeek-V3 against Kimi K2
side by side) and one more, and after each the page is measured: a non-scrolling element
whose content is wider than it, a picture wider than its box, or a line of a picture's text
that runs past the picture's edge (where the browser would clip it) or out of a mesh rank's
cell fails the test, as does
any console error (a blocked style, a missing resource) or uncaught exception from loading
the page on.
"""

from collections.abc import Iterator
from typing import Any

import pytest

pytestmark = pytest.mark.slow

ANSWER_TIMEOUT_MS = 120_000
WIDTHS = (1280, 1920)
PRESETS = {"plan": ("plan-fits",), "memory": ("memory-imbalance", "memory-fits"),
           "mesh": ("mesh-fits", "mesh-cross"), "pipeline": ("#compare", "pipeline-imbalance"),
           "comm": ("comm-imbalance", "comm-fits"), "rl": ("rl-fits", "rl-imbalance"),
           "run": ("run-fits", "run-imbalance")}
"""The buttons each tab is exercised with: answers with pictures and tables; the first of
each draws a picture."""

OVERFLOW = """(panel) => {
  const found = [];
  const root = document.querySelector(panel);
  for (const node of root.querySelectorAll("*")) {
    if (node.closest("svg")) continue;
    const style = getComputedStyle(node);
    if (style.display === "inline" || node.clientWidth === 0) continue;
    if (style.overflowX === "auto" || style.overflowX === "scroll") continue;
    if (node.scrollWidth > node.clientWidth + 1) {
      found.push(`${node.tagName.toLowerCase()}.${node.className}: content ` +
                 `${node.scrollWidth} px in ${node.clientWidth} px: ` +
                 node.textContent.trim().slice(0, 60));
    }
  }
  for (const svg of root.querySelectorAll("svg")) {
    const view = svg.viewBox.baseVal;
    for (const line of svg.querySelectorAll("text")) {
      const box = line.getBBox();
      if (box.width > 0 && (box.x < view.x - 1 || box.x + box.width > view.x + view.width + 1)) {
        found.push(`${svg.getAttribute("class")}: text ${box.x.toFixed(0)}-` +
                   `${(box.x + box.width).toFixed(0)} px past its ${view.width} px picture: ` +
                   line.textContent.slice(0, 60));
      }
    }
    for (const cell of svg.querySelectorAll("g.rank")) {
      const box = cell.querySelector("rect").getBBox();
      for (const line of cell.querySelectorAll("text")) {
        const inner = line.getBBox();
        if (inner.x < box.x - 1 || inner.x + inner.width > box.x + box.width + 1) {
          found.push(`${svg.getAttribute("class")}: text past its cell: ${line.textContent}`);
        }
      }
    }
    const holder = svg.parentElement.getBoundingClientRect();
    if (svg.getBoundingClientRect().width > holder.width + 1) {
      found.push(`${svg.getAttribute("class")}: picture wider than its box`);
    }
  }
  return found;
}"""


@pytest.fixture
def desktop_page(browser: Any, base_url: str) -> Iterator[Any]:
    """`desktop_page(width)` -> the lab at that width, recording console errors and uncaught
    exceptions in `page.problems`."""
    contexts: list[Any] = []

    def open_page(width: int) -> Any:
        context = browser.new_context(viewport={"width": width, "height": 900})
        contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(ANSWER_TIMEOUT_MS)
        problems: list[str] = []
        page.on("console", lambda message: problems.append(f"console {message.text}")
                if message.type == "error" else None)
        page.on("pageerror", lambda error: problems.append(f"exception {error}"))
        page.problems = problems
        page.goto(f"{base_url}/lab")
        page.wait_for_selector("body[data-ready=true]")
        return page

    yield open_page
    for context in contexts:
        context.close()


@pytest.mark.parametrize("width", WIDTHS)
def test_every_tab_fits_its_boxes_without_console_errors(desktop_page: Any, width: int) -> None:
    page = desktop_page(width)
    found: dict[str, list[str]] = {}
    for tab, buttons in PRESETS.items():
        page.click(f"#tab-{tab}")
        for index, button in enumerate(buttons):
            selector = button if button.startswith("#") else f"[data-preset={button}]"
            page.click(f"#panel-{tab} {selector}")
            page.wait_for_selector(f"#out-{tab} figure, #out-{tab} .problem, #out-{tab} h2",
                                   state="attached")
            page.wait_for_function(f"!document.querySelector('#out-{tab} .busy')")
            if index == 0:
                assert page.locator(f"#out-{tab} figure svg").count() >= 1, tab
            overflow = page.evaluate(OVERFLOW, f"#panel-{tab}")
            if overflow:
                found[f"{tab} {button}"] = overflow
    assert found == {}
    assert page.problems == []
