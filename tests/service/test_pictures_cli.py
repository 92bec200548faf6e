"""`--svg FILE` and `--trace FILE` of the command line write the same pictures and traces
the service draws from the same results."""

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from api_schemas.pipeline import PipelineSimulateRequest
from api_schemas.requests import EvaluateRequest
from models.core.pipeline.requests import simulate_request
from service import cli
from service.pictures import MODEL_LABEL, memory_svg, timeline_svg
from service.trace import trace_document
from solver import memory_report
from solver.plan_pipeline import plan_simulation_request

EVALUATE_FLAGS = ["--model", "llama-3.1-8b", "--gpu", "h100-sxm5-80gb", "--nodes", "1",
                  "--global-batch", "32", "--seq", "4096", "--tp", "2", "--pp", "2", "--dp", "2",
                  "--schedule", "1f1b", "--recompute", "selective"]


def test_simulate_writes_the_timeline_and_the_trace(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    svg, trace = tmp_path / "timeline.svg", tmp_path / "trace.json"
    argv = ["simulate", "--schedule", "zb_h1", "--stages", "4", "--micro-batches", "8",
            "-F", "1", "-B", "1", "-W", "1", "--no-timeline", "--svg", str(svg),
            "--trace", str(trace)]
    assert cli.main(argv) == 0
    result = simulate_request(PipelineSimulateRequest.model_validate(
        {"schedule": "zb_h1", "num_stages": 4, "num_micro_batches": 8}))
    assert svg.read_text(encoding="utf-8") == timeline_svg(result)
    assert json.loads(trace.read_text(encoding="utf-8")) == json.loads(
        json.dumps(trace_document(result)))
    captured = capsys.readouterr()
    assert f"wrote picture to {svg}" in captured.err
    # The pictures keep the timeline; --no-timeline keeps it out of the text.
    assert "op order per rank" not in captured.out and "makespan 27.0000 s" in captured.out


def test_evaluate_writes_the_plan_timeline(tmp_path: Path) -> None:
    svg, trace = tmp_path / "plan.svg", tmp_path / "plan.json"
    assert cli.main(["evaluate", *EVALUATE_FLAGS, "--svg", str(svg), "--trace", str(trace)]) == 0
    request = EvaluateRequest.model_validate(cli.build_request(
        cli.build_parser().parse_args(["evaluate", *EVALUATE_FLAGS]), degrees_key="parallel"))
    expected = simulate_request(plan_simulation_request(request, request.parallel))
    root = ET.fromstring(svg.read_bytes())
    bars = [e for e in root.iter() if e.get("class", "").startswith("op")]
    assert [(float(b.get("data-start", "nan")), float(b.get("data-end", "nan")))
            for b in bars] == [(e.start, e.end) for e in expected.timeline]
    events = json.loads(trace.read_text(encoding="utf-8"))["traceEvents"]
    assert len([e for e in events if e["ph"] == "X" and e["pid"] == 1]) == len(expected.timeline)


def test_memory_writes_the_stack(tmp_path: Path) -> None:
    svg = tmp_path / "memory.svg"
    assert cli.main(["memory", *EVALUATE_FLAGS, "--svg", str(svg)]) == 0
    request = EvaluateRequest.model_validate(cli.build_request(
        cli.build_parser().parse_args(["memory", *EVALUATE_FLAGS]), degrees_key="parallel"))
    written = svg.read_text(encoding="utf-8")
    assert written == memory_svg(memory_report(request)) and MODEL_LABEL in written


def test_placement_writes_its_picture(tmp_path: Path) -> None:
    request, svg = tmp_path / "tokens.json", tmp_path / "placement.svg"
    request.write_text(json.dumps({"num_experts": 4, "top_k": 1,
                                   "tokens": [[4, 0, 0, 0], [3, 1, 0, 0]]}), encoding="utf-8")
    assert cli.main(["placement", str(request), "--svg", str(svg)]) == 0
    root = ET.fromstring(svg.read_bytes())
    before = [int(e.get("data-tokens", "0")) for e in root.iter()
              if e.get("class") == "load before"]
    assert before == [8, 0]
