"""The lab page in headless Chromium: every tab end to end (form in, API answer and SVG
out), the OOM, invalid and imbalance presets, desktop and mobile viewports, keyboard-only
operation, reduced motion, and no request outside the service."""

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

LABEL = "deterministic model, not a measurement"
TABS = ("plan", "memory", "mesh", "pipeline", "comm", "rl", "run")
ANSWER_TIMEOUT_MS = 90_000
"""Generous: plan searches share the CI machine's cores."""


def screenshot_dir(tmp_path: Path) -> Path:
    """Where tab screenshots go: ATLAS_SCREENSHOT_DIR (docs/, shown by the lab page) or tmp_path."""
    given = os.environ.get("ATLAS_SCREENSHOT_DIR")
    return Path(given) if given else tmp_path


@pytest.fixture
def page_for(browser: Any, base_url: str, viewports: dict[str, dict[str, int]]) -> Iterator[Any]:
    """`page_for(viewport name, **context options)` -> a fresh page on /lab that records every
    request leaving the service and every breach of its Content-Security-Policy; the test
    fails if there is one."""
    contexts: list[Any] = []
    outside: list[str] = []
    refused: list[str] = []

    def open_page(viewport_name: str, **options: Any) -> Any:
        viewport = viewports[viewport_name]
        context = browser.new_context(viewport=viewport, **options)
        contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(ANSWER_TIMEOUT_MS)
        page.on("request", lambda request: None if request.url.startswith(
            (base_url, "blob:", "data:")) else outside.append(request.url))
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.on("console", lambda message: refused.append(message.text)
                if "Content Security Policy" in message.text else None)
        page.goto(f"{base_url}/lab")
        page.wait_for_selector("body[data-ready=true]")
        page.errors = errors
        return page

    yield open_page
    for context in contexts:
        context.close()
    assert outside == [], f"requests outside the service: {outside}"
    assert refused == [], f"refused by the page's Content-Security-Policy: {refused}"


def answer(page: Any, tab: str) -> Any:
    """The results region of `tab` once it shows a figure or a problem."""
    page.wait_for_selector(f"#out-{tab} figure, #out-{tab} .problem, #out-{tab} h2",
                           state="attached")
    page.wait_for_function(f"!document.querySelector('#out-{tab} .busy')")
    return page.locator(f"#out-{tab}")


def assert_labelled_figure(region: Any) -> None:
    svg = region.locator("figure svg").first
    svg.wait_for()
    assert svg.get_attribute("data-label") == LABEL
    assert LABEL in region.inner_text()
    assert region.locator("figure svg .model-label").count() >= 1


def test_every_tab_end_to_end_on_a_desktop(page_for: Any, tmp_path: Path) -> None:
    page = page_for("desktop")
    shots = screenshot_dir(tmp_path)

    # Plan: fill the form by hand, get the plan, see its timeline and memory stack.
    page.click("#tab-plan")
    form = page.locator("#form-plan")
    form.locator("select[name=model]").select_option("llama-3.1-8b")
    form.locator("select[name=gpu]").select_option("h100-sxm5-80gb")
    form.locator("input[name=num_nodes]").fill("1")
    form.locator("input[name=global_batch_size]").fill("64")
    form.locator("input[name=sequence_length]").fill("4096")
    form.locator("input[name=time_limit_s]").fill("20")
    form.locator("button[type=submit]").click()
    region = answer(page, "plan")
    assert region.locator("h2").inner_text().startswith("Plan ")
    assert region.locator("figure svg.timeline").count() == 1
    assert region.locator("figure svg.memory").count() == 1
    assert region.locator("figure svg.timeline rect.op").count() > 0
    assert_labelled_figure(region)
    assert region.locator("a[download$='trace.json']").count() == 1
    page.screenshot(path=str(shots / "lab-plan.png"), full_page=True)

    # Plan: the OOM preset answers no-feasible-plan with its reason and the fixes.
    page.click("[data-preset=plan-oom]")
    problem = answer(page, "plan").locator(".problem")
    text = problem.inner_text()
    assert "no-feasible-plan" in text and "memory bound" in text
    assert "Smallest changes" in text

    # Memory ledger: the OOM preset names the stage and its largest item.
    page.click("#tab-memory")
    page.click("[data-preset=memory-oom]")
    region = answer(page, "memory")
    assert "Out of memory" in region.locator(".problem").inner_text()
    assert "Stage 0 needs" in region.locator(".problem").inner_text()
    assert region.locator("svg.memory text.verdict").get_attribute("data-fits") == "false"
    assert_labelled_figure(region)
    page.screenshot(path=str(shots / "lab-memory.png"), full_page=True)
    page.click("[data-preset=memory-invalid]")
    assert "invalid-spec" in answer(page, "memory").locator(".problem").inner_text()
    page.click("[data-preset=memory-imbalance]")
    region = answer(page, "memory")
    assert region.locator("svg.memory g.stage").count() == 8
    # Its what-if: the front 1F1B stages keep part of their activations on the back ones.
    what_if = region.locator("section.what-if")
    assert "What-if, remote offload" in what_if.locator("h3").inner_text()
    assert what_if.locator("tbody tr").count() == 8

    # Parallel mesh: valid mesh picture, then the invalid preset's rule and message.
    page.click("#tab-mesh")
    page.click("[data-preset=mesh-fits]")
    region = answer(page, "mesh")
    assert region.locator("svg.mesh g.rank").count() == 32
    assert_labelled_figure(region)
    page.click("[data-preset=mesh-invalid]")
    region = answer(page, "mesh")
    assert "world-size" in region.locator(".problem").first.inner_text()
    page.click("[data-preset=mesh-imbalance]")
    region = answer(page, "mesh")
    assert region.locator("svg.mesh .cross-node").count() >= 1

    # Pipeline: DeepSeek-V3 and Kimi K2 side by side, then the invalid and OOM presets.
    page.click("#tab-pipeline")
    page.click("#compare")
    region = answer(page, "pipeline")
    choices = region.locator(".side-by-side .choice")
    assert choices.count() == 2
    assert "dualpipe" in choices.nth(0).inner_text()
    assert "interleaved_1f1b" in choices.nth(1).inner_text()
    assert region.locator("figure svg.timeline").count() == 2
    assert_labelled_figure(region)
    page.screenshot(path=str(shots / "lab-pipeline.png"), full_page=True)
    page.click("[data-preset=pipeline-invalid]")
    assert "num_chunks=1 is not allowed" in answer(page, "pipeline").inner_text()
    page.click("[data-preset=pipeline-oom]")
    assert "no-feasible-plan" in answer(page, "pipeline").locator(".problem").inner_text()
    page.click("[data-preset=pipeline-imbalance]")
    region = answer(page, "pipeline")
    assert region.locator("svg.timeline rect.bubble").count() > 0

    # Communication / MoE: the imbalance preset, then a collective and its invalid preset.
    page.click("#tab-comm")
    page.click("[data-preset=comm-imbalance]")
    region = answer(page, "comm")
    assert "(imbalanced)" in region.inner_text()
    assert region.locator("svg.placement rect.load.after").count() == 4
    assert_labelled_figure(region)
    page.click("[data-preset=comm-fits]")
    assert "alpha (latency)" in answer(page, "comm").inner_text()
    page.click("[data-preset=comm-invalid]")
    assert "invalid-request" in answer(page, "comm").locator(".problem").inner_text()
    page.click("[data-preset=comm-oom]")
    region = answer(page, "comm")
    problems = region.locator(".problem")
    assert problems.count() == 1 and "DeepEP-style worst case" in problems.inner_text()
    assert "MoonEP fixed" in region.locator(".verdict-ok").inner_text()

    # RL memory seesaw: the phases of Kimi K2's colocated iteration, its OOM (Adam), the
    # invalid NVMe tier and the 1M-token contexts with the external KV pool.
    page.click("#tab-rl")
    page.click("[data-preset=rl-fits]")
    region = answer(page, "rl")
    assert "Every phase fits" in region.locator(".verdict-ok").inner_text()
    assert region.locator("svg.seesaw g.phase").count() == 4
    assert region.locator("svg.seesaw g.transition").count() == 4
    assert_labelled_figure(region)
    page.screenshot(path=str(shots / "lab-rl-seesaw.png"), full_page=True)
    page.click("[data-preset=rl-oom]")
    region = answer(page, "rl")
    assert "train needs" in region.locator(".problem").inner_text()
    assert region.locator("svg.seesaw text.verdict").get_attribute("data-fits") == "false"
    page.click("[data-preset=rl-invalid]")
    assert "nvme_bandwidth_bytes_per_s" in answer(page, "rl").locator(".problem").inner_text()
    page.click("[data-preset=rl-imbalance]")
    region = answer(page, "rl")
    assert "parked contexts" in region.inner_text()
    assert region.locator("svg.seesaw [data-name='external KV pool (write-back)']").count() == 1
    assert page.errors == []


def test_checkpoint_interval_and_its_problems_on_a_desktop(page_for: Any,
                                                           tmp_path: Path) -> None:
    # Checkpoints: the run's goodput against the interval with Young's and Daly's optima,
    # the invalid budget, the configuration that does not fit, and a failure-prone cluster.
    page = page_for("desktop")
    page.click("#tab-run")
    page.click("[data-preset=run-fits]")
    region = answer(page, "run")
    assert "Goodput 99." in region.locator(".verdict-ok").inner_text()
    assert region.locator("svg.checkpoints circle.point").count() == 41
    assert region.locator("svg.checkpoints g.mark[data-mark=daly]").count() == 1
    assert_labelled_figure(region)
    page.screenshot(path=str(screenshot_dir(tmp_path) / "lab-checkpoints.png"), full_page=True)
    fitted = float(region.locator("svg.checkpoints g.mark[data-mark=daly]")
                   .get_attribute("data-interval-s"))
    fitted_goodput = _goodput(region)
    page.click("[data-preset=run-invalid]")
    assert "token_budget" in answer(page, "run").locator(".problem").inner_text()
    page.click("[data-preset=run-oom]")
    assert "does NOT fit" in answer(page, "run").locator(".problem").inner_text()
    page.click("[data-preset=run-imbalance]")
    region = answer(page, "run")
    region.locator("svg.checkpoints").wait_for()
    # Ten times the failures and a store 40 times slower: each save stops training 40 times
    # longer, so the optimum moves out (sqrt(2 x 40 / 10) = 2x Daly's first-order interval)
    # and goodput falls.
    daly = float(region.locator("svg.checkpoints g.mark[data-mark=daly]")
                 .get_attribute("data-interval-s"))
    assert 1.8 < daly / fitted < 2.2
    assert _goodput(region) < fitted_goodput - 0.02
    assert page.errors == []


def _goodput(region: Any) -> float:
    """The goodput the verdict prints, as a fraction."""
    verdict = region.locator(".verdict-ok").inner_text()
    found = re.search(r"Goodput ([0-9.]+)%", verdict)
    assert found, verdict
    return float(found.group(1)) / 100


def test_mesh_oom_and_the_communication_splits_on_a_desktop(page_for: Any,
                                                            tmp_path: Path) -> None:
    page = page_for("desktop")
    shots = screenshot_dir(tmp_path)

    # Parallel mesh: the OOM preset lays out the mesh and sizes its per-GPU memory.
    page.click("#tab-mesh")
    page.click("[data-preset=mesh-oom]")
    region = answer(page, "mesh")
    region.locator(".problem").wait_for()
    problem = region.locator(".problem").inner_text()
    assert "Out of memory" in problem and "Stage 0 needs" in problem
    assert region.locator("h2").inner_text() == "8 GPUs: valid mesh"
    assert region.locator("svg.mesh g.rank").count() == 8
    assert_labelled_figure(region)
    page.screenshot(path=str(shots / "lab-mesh.png"), full_page=True)
    # Without a model the tab stays a mesh-only lab.
    page.click("[data-preset=mesh-fits]")
    region = answer(page, "mesh")
    assert region.locator(".problem").count() == 0
    assert region.locator("h3", has_text="Per-GPU memory").count() == 0

    # Collective: a ring all-reduce of 1 GiB over 16 ranks takes 30 x 10 us + 2 x 15/16 GiB
    # / 50 GB/s = 40.57 ms; 90% may overlap but only 20 ms of compute is there to hide
    # behind, so 20 ms hide and 20.57 ms stay exposed.
    page.click("#tab-comm")
    page.click("[data-preset=comm-fits]")
    region = answer(page, "comm")
    text = region.inner_text()
    assert "Exposed against hidden time" in text
    rows = {row.locator("td").nth(0).inner_text(): row.locator("td").nth(1).inner_text()
            for row in region.locator("table").nth(1).locator("tbody tr").all()}
    assert rows["hidden behind compute"] == "20.000 ms"
    assert rows["exposed (on the critical path)"] == "20.565 ms"
    assert region.locator(".split .exposed").count() == 1

    # MoE: exact rank balance, apart from the skew of expert GEMMs inside each rank.
    page.click("[data-preset=comm-imbalance]")
    region = answer(page, "comm")
    text = region.inner_text()
    assert "Rank balance (tokens each rank computes)" in text
    assert "after placement max/mean 1.000" in text
    makespan = region.locator(".expert-makespan").inner_text()
    assert "Slowest rank's expert GEMMs" in makespan and "skewed inside ranks" in makespan
    per_rank = region.locator("table", has=page.locator("caption", has_text="Per-rank"))
    assert per_rank.locator("tbody tr").count() == 4
    assert_labelled_figure(region)
    page.screenshot(path=str(shots / "lab-comm.png"), full_page=True)
    assert page.errors == []


def test_mobile_viewport_fits_the_screen(page_for: Any, tmp_path: Path,
                                        viewports: dict[str, dict[str, int]]) -> None:
    page = page_for("mobile", is_mobile=True, has_touch=True, device_scale_factor=2)
    for tab in TABS:
        page.click(f"#tab-{tab}")
        assert page.locator(f"#panel-{tab}").is_visible()
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"{tab}: the page is {overflow} px wider than the screen"
    page.click("#tab-pipeline")
    page.click("[data-preset=pipeline-fits]")
    region = answer(page, "pipeline")
    assert_labelled_figure(region)
    box = region.locator("figure").first.bounding_box()
    assert box is not None and box["x"] + box["width"] <= viewports["mobile"]["width"] + 1
    assert page.evaluate("document.documentElement.scrollWidth - window.innerWidth") <= 0
    page.screenshot(path=str(screenshot_dir(tmp_path) / "lab-mobile.png"), full_page=False)


def focused(page: Any) -> str:
    return page.evaluate("""() => { const e = document.activeElement;
        return e.id || e.getAttribute('name') || e.dataset.preset || e.textContent.trim(); }""")


def test_keyboard_only(page_for: Any) -> None:
    page = page_for("desktop")
    page.keyboard.press("Tab")
    assert focused(page) == "Skip to the lab"
    while focused(page) != "tab-plan":
        page.keyboard.press("Tab")
    # Arrow keys move between tabs and show their panels (Home / End wrap around).
    for tab in TABS[1:]:
        page.keyboard.press("ArrowRight")
        assert focused(page) == f"tab-{tab}"
        assert page.locator(f"#panel-{tab}").is_visible()
    page.keyboard.press("Home")
    assert focused(page) == "tab-plan" and page.locator("#panel-plan").is_visible()
    page.keyboard.press("End")
    assert focused(page) == f"tab-{TABS[-1]}"
    # Every control of every panel is reached with Tab alone.
    for tab in TABS:
        page.locator(f"#tab-{tab}").focus()
        page.keyboard.press("Enter")
        selector = ", ".join(f"#panel-{tab} {kind}"
                             for kind in ("button", "input", "select", "textarea", "a[href]"))
        controls = page.evaluate("""(selector) => [...document.querySelectorAll(selector)].map(
            e => e.id || e.getAttribute('name') || e.dataset.preset || e.textContent.trim())""",
                                 selector)
        reached = set()
        page.keyboard.press("Tab")  # the panel itself
        for _ in range(len(controls) + 2):
            page.keyboard.press("Tab")
            reached.add(focused(page))
        assert set(controls) <= reached, (tab, set(controls) - reached)
    # Operate a form with the keyboard only: type, then Enter submits.
    page.locator("#tab-pipeline").focus()
    page.keyboard.press("Enter")
    page.locator("#form-pipeline input[name=num_stages]").focus()
    page.keyboard.press("Control+A")
    page.keyboard.type("3")
    page.keyboard.press("Enter")
    region = answer(page, "pipeline")
    assert "p=3" in region.locator("h2").inner_text()
    assert region.locator("svg.timeline text", has_text="rank 2").count() == 1
    # A preset button is pressed with Space.
    page.locator("[data-preset=pipeline-invalid]").focus()
    page.keyboard.press("Space")
    assert "invalid-spec" in answer(page, "pipeline").locator(".problem").inner_text()
    # Focus is visible.
    outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
    assert outline != "none"


@pytest.mark.parametrize(("motion", "duration"), [("reduce", "0s"),
                                                   ("no-preference", "0.18s")])
def test_reduced_motion(page_for: Any, motion: str, duration: str) -> None:
    page = page_for("desktop", reduced_motion=motion)
    assert page.evaluate("matchMedia('(prefers-reduced-motion: reduce)').matches") == (
        motion == "reduce")
    assert page.evaluate(
        "getComputedStyle(document.querySelector('#panel-plan')).transitionDuration") == duration
    page.click("#tab-pipeline")
    page.click("[data-preset=pipeline-fits]")
    assert_labelled_figure(answer(page, "pipeline"))
