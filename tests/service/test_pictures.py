"""SVG pictures and Chrome Trace Event JSON: plan timeline and memory stack, the simulator's
?format=svg|trace, the mesh and MoE placement pictures, the `.svg` POST routes, and their
OpenAPI entries."""

import itertools
import json
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from service_testkit import (
    LLAMA_70B_RUN,
    SMALL_MESH,
    load_tolerant_settings,
    serve_in_process,
)

from api_schemas.pipeline import PipelineSimulateRequest, PipelineSimulateResponse
from api_schemas.plan import PlanResponse
from api_schemas.requests import EVALUATE_REQUEST_EXAMPLE, PlanRequest
from api_schemas.rl_seesaw import RL_SEESAW_EXAMPLE
from models.core.pipeline.requests import simulate_request
from service.app import create_app
from service.pictures import MODEL_LABEL
from service.pictures.svg import EM_PER_CHARACTER, document, text, text_right_edge
from solver.plan_pipeline import plan_simulation_request

SVG = "{http://www.w3.org/2000/svg}"
TWO_STAGES = {"model": {"preset": "llama-3.1-70b"},
              # Up to the usable memory (no safety margin): with the default margin 70B on
              # two nodes has no plan.
              "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 2, "gpus_per_node": 8,
                          "memory_margin_frac": 0},
              "training": {"global_batch_size": 32, "sequence_length": 4096},
              # The optimizer states on the GPU: with them in host memory one stage fits.
              "constraints": {"allow_optimizer_offload": False},
              "solver": {"time_limit_s": 60, "top_k": 2, "num_workers": 1}}
SIMULATE = {"schedule": "zb_h1", "num_stages": 4, "num_micro_batches": 8,
            "durations": {"F": 1.0, "B": 1.2, "W": 0.8}, "p2p_latency_s": 0.05}
TRACE_PHASES = set("BEXiIbneCMsftPOND") | {"(", ")"}
"""Every phase letter the Trace Event specification defines."""


@pytest.fixture(scope="module")
def database_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('pictures') / 'plans.db'}"


@pytest.fixture(scope="module")
def real(database_url: str) -> Iterator[httpx.Client]:
    settings = load_tolerant_settings(database_url, solver_threads=2, solver_queue=4)
    with serve_in_process(create_app(settings)) as client:
        yield client


@pytest.fixture(scope="module")
def stored_plan(real: httpx.Client) -> PlanResponse:
    created = real.post("/v1/plans", json=TWO_STAGES)
    assert created.status_code == 201, created.text
    plan = PlanResponse.model_validate(created.json())
    assert plan.parallel is not None and plan.parallel.pp > 1, plan.parallel
    return plan


def parse_svg(response: httpx.Response) -> ET.Element:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("image/svg+xml")
    root = ET.fromstring(response.content)
    assert root.tag == f"{SVG}svg"
    assert root.get("data-label") == MODEL_LABEL
    labels = [t.text for t in root.iter(f"{SVG}text") if t.get("class") == "model-label"]
    assert labels and MODEL_LABEL in (labels[0] or "")
    assert root.find(f"{SVG}title") is not None and root.get("role") == "img"
    return root


def shapes(root: ET.Element, css_class: str) -> list[ET.Element]:
    return [e for e in root.iter() if css_class in (e.get("class") or "").split()]


def assert_bars_match(root: ET.Element, result: PipelineSimulateResponse) -> None:
    bars = shapes(root, "op")
    assert len(bars) == len(result.timeline)
    for bar in bars:
        entry = result.timeline[int(bar.get("data-index", "-1"))]
        assert (int(bar.get("data-stage", "-1")), bar.get("data-op"),
                int(bar.get("data-micro-batch", "-1")), int(bar.get("data-chunk", "-1"))) == (
            entry.stage, entry.op, entry.micro_batch, entry.chunk)
        assert float(bar.get("data-start", "nan")) == entry.start
        assert float(bar.get("data-end", "nan")) == entry.end
    critical = {int(b.get("data-index", "-1")) for b in shapes(root, "critical")}
    assert critical == set(result.critical_path) and critical


def assert_trace_format(document: dict[str, Any], result: PipelineSimulateResponse) -> None:
    """The JSON object format of the Trace Event specification."""
    assert set(document) <= {"traceEvents", "displayTimeUnit", "otherData", "metadata",
                             "stackFrames", "samples", "systemTraceEvents",
                             "powerTraceAsString", "controllerTraceDataKey"}
    assert document["displayTimeUnit"] in ("ms", "ns")
    assert document["otherData"]["label"] == MODEL_LABEL
    events = document["traceEvents"]
    named: dict[tuple[int, int], str] = {}
    processes: dict[int, str] = {}
    for event in events:
        assert event["ph"] in TRACE_PHASES
        assert isinstance(event["name"], str) and event["name"]
        assert isinstance(event["pid"], int) and isinstance(event["tid"], int)
        if event["ph"] == "M":
            assert event["name"] in ("process_name", "process_sort_index", "thread_name",
                                     "thread_sort_index", "process_labels")
            if event["name"] == "thread_name":
                named[(event["pid"], event["tid"])] = event["args"]["name"]
            if event["name"] == "process_name":
                processes[event["pid"]] = event["args"]["name"]
        else:
            assert event["ph"] == "X"
            assert isinstance(event["ts"], float) and isinstance(event["dur"], float)
            assert event["ts"] >= 0 and event["dur"] >= 0
            assert isinstance(event["cat"], str)
            assert (event["pid"], event["tid"]) in named, event
    ops = [e for e in events if e["ph"] == "X" and e["pid"] == 1]
    assert len(ops) == len(result.timeline)
    for event, entry in zip(ops, result.timeline, strict=True):
        assert event["tid"] == entry.stage
        assert event["ts"] == pytest.approx(entry.start * 1e6, rel=1e-12, abs=1e-9)
        assert event["ts"] + event["dur"] == pytest.approx(entry.end * 1e6, rel=1e-12)
    ranks = {tid for pid, tid in named if pid == 1}
    assert ranks == set(range(len(result.busy_s)))
    sends = [e for e in events if e["ph"] == "X" and e["pid"] == 2]
    assert len(sends) == len(result.transfers)
    assert all(MODEL_LABEL in name for name in processes.values())


def test_plan_timeline_bars_are_the_simulator_op_times(real: httpx.Client,
                                                        stored_plan: PlanResponse) -> None:
    assert stored_plan.parallel is not None and stored_plan.time is not None
    expected = simulate_request(plan_simulation_request(
        PlanRequest.model_validate(TWO_STAGES), stored_plan.parallel))
    # The plan's timeline is the simulation its step time came from.
    assert expected.makespan == pytest.approx(
        stored_plan.time.details["pipeline_makespan_s"], rel=1e-9)
    root = parse_svg(real.get(f"/v1/plans/{stored_plan.id}/timeline.svg"))
    assert_bars_match(root, expected)
    for rank, busy in enumerate(expected.busy_s):
        lane = [b for b in shapes(root, "op") if b.get("data-stage") == str(rank)]
        assert sum(float(b.get("data-end", "0")) - float(b.get("data-start", "0"))
                   for b in lane) == pytest.approx(busy, rel=1e-9)
    # The same op times through the public simulator.
    public = real.post("/v1/pipeline/simulate", json=plan_simulation_request(
        PlanRequest.model_validate(TWO_STAGES), stored_plan.parallel).model_dump(
            mode="json", by_alias=True)).json()
    assert PipelineSimulateResponse.model_validate(public).timeline == expected.timeline


def test_plan_memory_stack_segments_sum_to_the_ledger(real: httpx.Client,
                                                      stored_plan: PlanResponse) -> None:
    assert stored_plan.memory is not None
    root = parse_svg(real.get(f"/v1/plans/{stored_plan.id}/memory.svg"))
    stages = shapes(root, "stage")
    assert len(stages) == len(stored_plan.memory.stages)
    for group, stage in zip(stages, stored_plan.memory.stages, strict=True):
        gpu = [int(s.get("data-bytes", "0")) for s in shapes(group, "gpu")]
        host = [int(s.get("data-bytes", "0")) for s in shapes(group, "host")]
        assert sum(gpu) == stage.total_bytes and len(gpu) == len(stage.components)
        assert sum(host) == stage.host_bytes
    capacity = shapes(root, "capacity")[0]
    assert int(capacity.get("data-bytes", "0")) == stored_plan.memory.capacity_bytes


def test_plan_trace_follows_the_trace_event_format(real: httpx.Client,
                                                   stored_plan: PlanResponse) -> None:
    assert stored_plan.parallel is not None
    response = real.get(f"/v1/plans/{stored_plan.id}/trace")
    assert response.status_code == 200
    assert "attachment" in response.headers["content-disposition"]
    expected = simulate_request(plan_simulation_request(
        PlanRequest.model_validate(TWO_STAGES), stored_plan.parallel))
    assert_trace_format(response.json(), expected)


def test_plan_pictures_of_unknown_or_infeasible_plans_are_problems(real: httpx.Client) -> None:
    for suffix in ("timeline.svg", "memory.svg", "trace"):
        missing = real.get(f"/v1/plans/{'0' * 32}/{suffix}")
        assert missing.status_code == 404 and missing.json()["code"] == "plan-not-found"
    too_big = {**TWO_STAGES, "model": {"preset": "llama-3.1-405b"},
               "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 1, "gpus_per_node": 8}}
    infeasible = real.post("/v1/plans", json=too_big)
    assert infeasible.status_code == 422
    answer = real.get(f"/v1/plans/{infeasible.json()['instance']}/timeline.svg")
    assert answer.status_code == 422 and "no configuration" in answer.json()["detail"]
    assert answer.json()["errors"][0]["loc"] == ["path", "plan_id"]


def test_plan_pictures_over_the_timeline_bound(database_url: str,
                                               stored_plan: PlanResponse) -> None:
    """A stored plan whose iteration has more ops than ATLAS_MAX_TIMELINE_OPS: its timeline
    picture shows each rank's busy spans (their op durations summing to the rank's busy
    time), its trace is refused naming the GET's own path parameter and the bound."""
    assert stored_plan.parallel is not None
    simulation = plan_simulation_request(PlanRequest.model_validate(TWO_STAGES),
                                         stored_plan.parallel)
    expected = simulate_request(simulation)
    ops = 3 * simulation.num_stages * simulation.num_micro_batches * simulation.num_chunks
    settings = load_tolerant_settings(database_url, max_timeline_ops=ops - 1)
    with serve_in_process(create_app(settings)) as small:
        root = parse_svg(small.get(f"/v1/plans/{stored_plan.id}/timeline.svg"))
        assert "timeline-summary" in (root.get("class") or "")
        spans = [r for r in root.iter(f"{SVG}rect") if r.get("class") == "busy"]
        assert 0 < len(spans) < ops
        for rank, busy_s in enumerate(expected.busy_s):
            mine = [r for r in spans if r.get("data-stage") == str(rank)]
            assert sum(float(r.get("data-busy-s") or 0) for r in mine) == \
                pytest.approx(busy_s, rel=1e-9)
            assert sum(int(r.get("data-ops") or 0) for r in mine) == \
                sum(1 for entry in expected.timeline if entry.stage == rank)
            assert max(float(r.get("data-end") or 0) for r in mine) <= expected.makespan
        answer = small.get(f"/v1/plans/{stored_plan.id}/trace")
        assert answer.status_code == 422, answer.text
        problem = answer.json()
        assert problem["code"] == "invalid-request"
        assert problem["errors"][0]["loc"] == ["path", "plan_id"]
        assert f"{ops:,} ops to list one by one" in problem["detail"]
        assert "ATLAS_MAX_TIMELINE_OPS" in problem["detail"]
        assert "include_timeline" not in answer.text
        assert small.get(f"/v1/plans/{stored_plan.id}/memory.svg").status_code == 200
    settings = load_tolerant_settings(database_url, max_timeline_ops=ops)
    with serve_in_process(create_app(settings)) as exact:
        root = parse_svg(exact.get(f"/v1/plans/{stored_plan.id}/timeline.svg"))
        assert "timeline-summary" not in (root.get("class") or "")
        assert exact.get(f"/v1/plans/{stored_plan.id}/trace").status_code == 200


@pytest.mark.parametrize("how", [{"params": {"format": "svg"}},
                                 {"headers": {"Accept": "image/svg+xml"}}])
def test_simulate_as_svg(real: httpx.Client, how: dict[str, Any]) -> None:
    body = {**SIMULATE, "include_timeline": False}
    root = parse_svg(real.post("/v1/pipeline/simulate", json=body, **how))
    assert_bars_match(root, simulate_request(PipelineSimulateRequest.model_validate(SIMULATE)))
    assert len(shapes(root, "transfer")) > 0 and len(shapes(root, "bubble")) > 0


def test_simulate_critical_path_and_transfers_add_up() -> None:
    result = simulate_request(PipelineSimulateRequest.model_validate(SIMULATE))
    path = [result.timeline[i] for i in result.critical_path]
    assert path[0].start == 0.0 and path[-1].end == result.makespan
    for before, after in itertools.pairwise(path):
        gap = after.start - before.end
        latency = SIMULATE["p2p_latency_s"] if before.stage != after.stage else 0.0
        assert gap == pytest.approx(latency, abs=1e-12)
    assert all(t.end - t.start == pytest.approx(0.05) and t.src_stage != t.dst_stage
               for t in result.transfers)
    # A forward crosses 3 boundaries, a backward 3: 6 messages per micro-batch.
    assert len(result.transfers) == 6 * SIMULATE["num_micro_batches"]


def test_simulate_as_trace(real: httpx.Client) -> None:
    response = real.post("/v1/pipeline/simulate", json=SIMULATE, params={"format": "trace"})
    assert response.status_code == 200
    assert_trace_format(response.json(),
                        simulate_request(PipelineSimulateRequest.model_validate(SIMULATE)))
    json.dumps(response.json())


def test_simulate_json_is_unchanged_by_default(real: httpx.Client) -> None:
    response = real.post("/v1/pipeline/simulate", json={**SIMULATE, "include_timeline": False})
    assert response.headers["content-type"].startswith("application/json")
    assert response.json()["timeline"] == [] and response.json()["critical_path"] == []


def test_mesh_picture_places_every_rank(real: httpx.Client) -> None:
    body = {"cluster": {"num_nodes": 2, "gpus_per_node": 8},
            "parallel": {"tp": 4, "pp": 2, "dp": 2}, "order": "tp-cp-ep-dp-pp",
            "max_ranks": 16}
    report = real.post("/v1/mesh", json=body).json()
    root = parse_svg(real.post("/v1/mesh", json=body, params={"format": "svg",
                                                              "colour_by": "dp"}))
    cells = shapes(root, "rank")
    assert [(int(c.get("data-rank", "-1")), int(c.get("data-node", "-1"))) for c in cells] == [
        (r["rank"], r["node"]) for r in report["ranks"]]
    colours = {}
    for cell in cells:
        rect = cell.find(f"{SVG}rect")
        assert rect is not None
        colours.setdefault(cell.get("data-group"), set()).add(rect.get("fill"))
    assert all(len(fills) == 1 for fills in colours.values())
    crossing = {a.get("data-kind") for a in shapes(root, "cross-node")}
    assert crossing == {a["kind"] for a in report["axes"] if not a["all_intra_node"] and any(
        c["frequency"] != "per_step" for c in a["collectives"])}


def test_invalid_mesh_picture_names_the_problem(real: httpx.Client) -> None:
    body = {"cluster": {"num_nodes": 2, "gpus_per_node": 8},
            "parallel": {"tp": 3, "pp": 2, "dp": 2}, "max_ranks": 16}
    report = real.post("/v1/mesh", json=body).json()
    root = parse_svg(real.post("/v1/mesh", json=body, headers={"Accept": "image/svg+xml"}))
    assert shapes(root, "verdict")[0].get("data-valid") == "false"
    errors = shapes(root, "error")
    assert len(errors) == len([p for p in report["problems"] if p["severity"] == "error"]) > 0
    assert report["problems"][0]["rule"] in (errors[0].text or "")


def test_placement_picture_shows_loads_before_and_after(real: httpx.Client) -> None:
    tokens = [[6, 2, 1, 1, 2, 1, 2, 1], [5, 3, 2, 0, 1, 2, 1, 2],
              [4, 4, 1, 1, 2, 0, 2, 2], [6, 3, 0, 2, 1, 1, 2, 1]]
    body = {"num_experts": 8, "top_k": 2, "tokens": tokens}
    result = real.post("/v1/moe/placement", json=body).json()
    root = parse_svg(real.post("/v1/moe/placement", json=body, params={"format": "svg"}))
    after = [int(b.get("data-tokens", "0")) for b in shapes(root, "after")]
    before = [int(b.get("data-tokens", "0")) for b in shapes(root, "before")]
    assert after == result["rank_loads"]
    assert sum(before) == sum(map(sum, tokens)) == sum(after)
    assert max(before) * len(before) / sum(before) == pytest.approx(
        result["no_redundancy_imbalance"])
    routed = sum(int(r.get("data-tokens", "0")) for r in shapes(root, "route"))
    assert routed == sum(route["tokens"] for route in result["routes"])


def test_openapi_lists_pictures_and_traces_with_examples(real: httpx.Client) -> None:
    document = real.get("/openapi.json").json()
    paths = document["paths"]
    for path in ("/v1/plans/{plan_id}/timeline.svg", "/v1/plans/{plan_id}/memory.svg"):
        content = paths[path]["get"]["responses"]["200"]["content"]
        assert MODEL_LABEL in content["image/svg+xml"]["example"]
    trace = paths["/v1/plans/{plan_id}/trace"]["get"]["responses"]["200"]["content"]
    assert trace["application/json"]["schema"]["$ref"].endswith("/TraceDocument")
    assert trace["application/json"]["example"]["traceEvents"]
    assert "TraceDocument" in document["components"]["schemas"]
    simulate = paths["/v1/pipeline/simulate"]["post"]
    assert {p["name"] for p in simulate["parameters"]} == {"format"}
    content = simulate["responses"]["200"]["content"]
    assert "image/svg+xml" in content and "trace" in content["application/json"]["examples"]
    for path in ("/v1/mesh", "/v1/moe/placement"):
        assert "image/svg+xml" in paths[path]["post"]["responses"]["200"]["content"]


def test_a_picture_is_widened_to_hold_its_longest_line() -> None:
    heading = text("Memory of a model with a long name: peak 70.77 GiB of 78.40 GiB", x=60,
                   y=22, font_size=15, font_weight="600")
    right = 60 + 63 * 15 * EM_PER_CHARACTER["bold"]
    assert text_right_edge(heading) == pytest.approx(right)
    assert text_right_edge(text("a & b", x=500, font_size=10, text_anchor="end")) == 500
    assert text_right_edge(text("abcd", x=100, font_size=10, text_anchor="middle")) == \
        pytest.approx(100 + 2 * 10 * EM_PER_CHARACTER["normal"])
    root = ET.fromstring(document(heading, width=400, height=100, title="t", description="d",
                                  kind="memory").split("\n", 1)[1])
    assert float(root.get("width") or 0) >= right
    assert root.get("viewBox") == f"0 0 {root.get('width')} 100"
    narrow = ET.fromstring(document(text("ok", x=8, font_size=11), width=900, height=100,
                                    title="t", description="d", kind="memory").split("\n", 1)[1])
    assert narrow.get("width") == "900"


PLACEMENT = {"num_experts": 8, "top_k": 2,
             "tokens": [[6, 2, 1, 1, 2, 1, 2, 1], [5, 3, 2, 0, 1, 2, 1, 2],
                        [4, 4, 1, 1, 2, 0, 2, 2], [6, 3, 0, 2, 1, 1, 2, 1]]}
SVG_ROUTES = [("/v1/ledger/memory", EVALUATE_REQUEST_EXAMPLE, "memory.svg"),
              ("/v1/mesh", SMALL_MESH, "mesh.svg"),
              ("/v1/moe/placement", PLACEMENT, "placement.svg"),
              ("/v1/pipeline/simulate", SIMULATE, "timeline.svg"),
              ("/v1/lab/rl-seesaw", RL_SEESAW_EXAMPLE, "rl-seesaw.svg"),
              ("/v1/run/estimate", LLAMA_70B_RUN, "checkpoint-interval.svg")]
"""Every POST route that draws its answer, with a body and the picture's file name."""


@pytest.mark.parametrize(("path", "body", "filename"), SVG_ROUTES)
def test_svg_route_answers_the_picture_of_format_svg(real: httpx.Client, path: str,
                                                     body: dict[str, Any],
                                                     filename: str) -> None:
    """`POST <path>.svg` (one media type, which generated clients keep) answers the same
    picture as `POST <path>?format=svg`, which keeps working."""
    picture = real.post(f"{path}.svg", json=body)
    negotiated = real.post(path, json=body, params={"format": "svg"})
    parse_svg(picture)
    assert picture.content == negotiated.content
    assert picture.headers["content-disposition"] == f'inline; filename="{filename}"'
    assert real.post(path, json=body).headers["content-type"].startswith("application/json")


def test_svg_routes_refuse_as_their_json_routes_do(real: httpx.Client) -> None:
    layers = {"num_experts": 8, "top_k": 2, "layers": [PLACEMENT["tokens"]] * 2}
    refused = real.post("/v1/moe/placement.svg", json=layers)
    assert refused.status_code == 422 and refused.json()["code"] == "invalid-spec"
    too_many = real.post("/v1/mesh.svg", json={**SMALL_MESH, "cluster": {"num_nodes": 10**6,
                                                                   "gpus_per_node": 8}})
    assert too_many.status_code == 422
    assert real.post("/v1/mesh.svg", json=SMALL_MESH,
                     params={"colour_by": "nope"}).status_code == 422


def test_openapi_svg_routes_answer_only_svg(real: httpx.Client) -> None:
    paths = real.get("/openapi.json").json()["paths"]
    for path, _, _ in SVG_ROUTES:
        content = paths[f"{path}.svg"]["post"]["responses"]["200"]["content"]
        assert list(content) == ["image/svg+xml"], path
        assert content["image/svg+xml"]["schema"]["type"] == "string"
        assert paths[f"{path}.svg"]["post"]["operationId"] == \
            paths[path]["post"]["operationId"] + "_svg"
