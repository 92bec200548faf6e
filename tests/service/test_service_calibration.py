"""Calibration over HTTP on SQLite and PostgreSQL: a fit stored as versions of its name,
listed and read back, applied to evaluate and plan requests through `cluster.profile`, and
impossible runs refused with the field and the reason."""

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from service_testkit import ScriptedPlanner, load_tolerant_settings, plan_body, serve_in_process

from models.evidence.error_bands import percentile
from research.calibrate_cluster import CONFIGS, GPU, generated_runs
from service.app import create_app

FIT_JSON: dict[str, Any] = {"num_runs": 4, "method": "least squares", "nested": [1.5, None],
                            "runs": [{"label": "run 0", "measured_step_time_s": 1.25}]}

EVALUATE = {
    "model": {"preset": "llama-3.1-8b"},
    "cluster": {"gpu": GPU, "num_nodes": 1},
    "training": {"global_batch_size": 32, "sequence_length": 4096},
    "parallel": {"tp": 2, "pp": 1, "dp": 4, "micro_batch_size": 1, "zero_stage": 1,
                 "sequence_parallel": True},
}


@pytest.fixture
def scripted() -> ScriptedPlanner:
    return ScriptedPlanner()


@pytest.fixture
def http(database_url: str, scripted: ScriptedPlanner) -> Iterator[httpx.Client]:
    settings = load_tolerant_settings(database_url, solver_threads=2, solver_queue=4)
    with serve_in_process(create_app(settings, planner=scripted)) as client:
        yield client


def fit_body(name: str, scale: float, overhead: float, seed: int) -> dict[str, Any]:
    return {"profile": name, "gpu": GPU, "runs": generated_runs(scale, overhead, 0.02, seed)}


def test_profiles_are_stored_versioned_listed_and_read_back(http: httpx.Client) -> None:
    first = http.post("/v1/calibration/runs", json=fit_body("our-h100", 0.85, 0.3, 1))
    assert first.status_code == 201, first.text
    assert first.headers["location"] == "/v1/calibration/profiles/our-h100?version=1"
    served = first.json()
    assert served["version"] == 1 and served["family"] == "hopper"
    fit = served["fit"]
    assert abs(fit["gemm_efficiency_scale"]["value"] - 0.85) <= (
        3 * fit["gemm_efficiency_scale"]["standard_error"])
    assert fit["leave_one_out_relative_error"] < fit["uncalibrated_relative_error"]
    assert len(fit["runs"]) == len(CONFIGS)

    second = http.post("/v1/calibration/runs", json=fit_body("our-h100", 0.95, 0.1, 2))
    assert second.status_code == 201 and second.json()["version"] == 2
    other = http.post("/v1/calibration/runs", json=fit_body("lab-h100", 1.0, 0.0, 3))
    assert other.status_code == 201 and other.json()["version"] == 1

    listed = http.get("/v1/calibration/profiles").json()["items"]
    assert [(p["name"], p["latest_version"]) for p in listed] == [("lab-h100", 1),
                                                                  ("our-h100", 2)]
    latest = http.get("/v1/calibration/profiles/our-h100").json()
    assert latest["version"] == 2 and latest["constants"] == second.json()["constants"]
    old = http.get("/v1/calibration/profiles/our-h100", params={"version": 1}).json()
    assert old == served
    missing = http.get("/v1/calibration/profiles/nobody")
    assert missing.status_code == 404 and missing.json()["code"] == "profile-not-found"
    gone = http.get("/v1/calibration/profiles/our-h100", params={"version": 9})
    assert gone.status_code == 404


def test_evaluate_and_plan_with_a_profile_use_its_constants(
        http: httpx.Client, scripted: ScriptedPlanner) -> None:
    assert http.post("/v1/calibration/runs",
                     json=fit_body("slow-h100", 0.8, 0.4, 4)).status_code == 201
    plain = http.post("/v1/evaluate", json=EVALUATE)
    assert plain.status_code == 200, plain.text
    profiled_body = {**EVALUATE, "cluster": {**EVALUATE["cluster"], "profile": "slow-h100"}}
    profiled = http.post("/v1/evaluate", json=profiled_body)
    assert profiled.status_code == 200, profiled.text
    base_s = plain.json()["time"]["step_time_s"]
    calibrated_s = profiled.json()["time"]["step_time_s"]
    assert calibrated_s > base_s * 1.1  # 80% GEMM efficiency and 0.4 s per step
    constants = http.get("/v1/calibration/profiles/slow-h100").json()["constants"]
    assert profiled.json()["time"]["overheads_s"][
        "per-step overhead (calibration profile)"] == pytest.approx(
        constants["step_overhead_s"])
    assert any("calibration profile 'slow-h100' version 1" in note
               for note in profiled.json()["explanation"]["notes"])
    # The range comes from the profile's own leave-one-out errors, not published rows.
    runs = http.get("/v1/calibration/profiles/slow-h100").json()["fit"]["runs"]
    errors = [r["measured_step_time_s"] / r["leave_one_out_step_time_s"] - 1 for r in runs]
    assert constants["leave_one_out_errors"] == pytest.approx(errors)
    band = profiled.json()["predicted_range"]
    assert band["basis"] == "profile" and band["num_rows"] == len(CONFIGS)
    assert band["step_time_error_low"] == pytest.approx(percentile(errors, 10))
    assert band["step_time_error_high"] == pytest.approx(percentile(errors, 90))
    assert band["step_time_s_high"] == pytest.approx(
        calibrated_s * (1 + percentile(errors, 90)))
    assert band["sources"][0]["id"] == "profile 'slow-h100' v1"
    assert plain.json()["predicted_range"]["basis"] == "published"

    # Plans: the planner receives the newest version's constants, which are part of the
    # request's hash (a refit is a new plan, not the one stored under the old constants).
    planned = http.post("/v1/plans", json=plan_body(
        cluster={"gpu": GPU, "num_nodes": 8, "profile": "slow-h100"}))
    assert planned.status_code == 201, planned.text
    given = scripted.calls[-1].cluster
    assert given.profile is None and given.calibration is not None
    assert given.calibration.model_dump(mode="json") == constants
    assert http.post("/v1/calibration/runs",
                     json=fit_body("slow-h100", 0.9, 0.2, 6)).status_code == 201
    replanned = http.post("/v1/plans", json=plan_body(
        cluster={"gpu": GPU, "num_nodes": 8, "profile": "slow-h100"}))
    assert replanned.status_code == 201 and len(scripted.calls) == 2
    assert scripted.calls[-1].cluster.calibration is not None
    assert scripted.calls[-1].cluster.calibration.version == 2

    unknown = http.post("/v1/evaluate", json={
        **EVALUATE, "cluster": {**EVALUATE["cluster"], "profile": "nobody"}})
    assert unknown.status_code == 422
    assert unknown.json()["errors"][0]["loc"] == ["body", "cluster", "profile"]
    other_gpu = http.post("/v1/evaluate", json={
        **EVALUATE, "cluster": {"gpu": "a100-sxm4-80gb", "num_nodes": 1,
                                "profile": "slow-h100"}})
    assert other_gpu.status_code == 422 and "fitted on 'h100-sxm5-80gb'" in other_gpu.text


def test_constants_given_directly_are_checked_against_the_peak(http: httpx.Client) -> None:
    given = {**EVALUATE, "cluster": {**EVALUATE["cluster"], "calibration": {
        "gemm_efficiency_scale": 1.1, "step_overhead_s": 0.2}}}
    scored = http.post("/v1/evaluate", json=given)
    assert scored.status_code == 200, scored.text
    assert scored.json()["time"]["overheads_s"][
        "per-step overhead (calibration profile)"] == pytest.approx(0.2)
    assert any(note.startswith("cluster.calibration: GEMM efficiency x 1.1")
               for note in scored.json()["explanation"]["notes"])
    # Constants without their fit's held-out errors back no range.
    assert scored.json()["predicted_range"]["basis"] == "none"
    assert "without their leave-one-out errors" in scored.json()["predicted_range"]["text"]
    over = http.post("/v1/evaluate", json={**EVALUATE, "cluster": {
        **EVALUATE["cluster"], "calibration": {"gemm_efficiency_scale": 1.7}}})
    assert over.status_code == 422
    assert over.json()["errors"][0]["loc"] == ["body", "cluster", "calibration",
                                               "gemm_efficiency_scale"]
    assert "outside [10%, 100%]" in over.json()["detail"]
    both = http.post("/v1/evaluate", json={**EVALUATE, "cluster": {
        **EVALUATE["cluster"], "profile": "x", "calibration": {}}})
    assert both.status_code == 422 and "not both" in both.text


def test_an_impossible_run_is_refused_with_its_field(http: httpx.Client) -> None:
    body = fit_body("bad", 1.0, 0.0, 5)
    body["runs"][3]["step_time_s"] = 0.01
    refused = http.post("/v1/calibration/runs", json=body)
    assert refused.status_code == 422
    problem = refused.json()
    assert problem["code"] == "invalid-spec"
    assert problem["detail"].startswith("runs.3.step_time_s: ")
    assert "physically impossible" in problem["detail"]
    assert problem["errors"][0]["loc"] == ["body", "runs", "3", "step_time_s"]
    body["runs"][3]["step_time_s"] = -1.0
    negative = http.post("/v1/calibration/runs", json=body)
    assert negative.status_code == 422 and negative.json()["code"] == "invalid-request"
    assert negative.json()["errors"][0]["loc"] == ["body", "runs", 3, "step_time_s"]
    assert http.get("/v1/calibration/profiles").json()["items"] == []


def test_repository_round_trip_and_versions(database_url: str) -> None:
    from sqlmodel import Session

    from service.calibration import summary_of
    from service.persistence import init_db, make_engine
    from service.persistence.repo import (
        get_profile,
        latest_profile,
        list_profiles,
        save_profile_version,
    )
    from service.persistence.tables import CalibrationProfileRecord

    engine = make_engine(database_url)
    init_db(engine)
    try:
        def row(name: str, scale: float) -> CalibrationProfileRecord:
            return CalibrationProfileRecord(
                name=name, version=1, gpu=GPU, family="hopper", gemm_efficiency_scale=scale,
                step_overhead_s=0.125, fit_json=FIT_JSON,
                request_json={"profile": name})

        with Session(engine) as session:
            assert save_profile_version(session=session, record=row("a", 0.9)).version == 1
            assert save_profile_version(session=session, record=row("a", 0.8)).version == 2
            assert save_profile_version(session=session, record=row("b", 1.1)).version == 1
        with Session(engine) as session:
            latest = latest_profile(session=session, name="a")
            assert latest is not None and latest.version == 2
            assert latest.gemm_efficiency_scale == 0.8
            first = get_profile(session=session, name="a", version=1)
            assert first is not None and first.gemm_efficiency_scale == 0.9
            assert first.fit_json == FIT_JSON
            assert summary_of(first).created_at.tzinfo is not None
            assert summary_of(first).num_runs == 4
            assert get_profile(session=session, name="a", version=3) is None
            assert latest_profile(session=session, name="c") is None
            assert [(r.name, r.version) for r in list_profiles(session=session)] == [
                ("a", 2), ("b", 1)]
    finally:
        engine.dispose()


def test_concurrent_fits_of_one_name_get_distinct_versions(database_url: str) -> None:
    import threading

    from sqlmodel import Session

    from service.persistence import init_db, make_engine
    from service.persistence.repo import list_profiles, save_profile_version
    from service.persistence.tables import CalibrationProfileRecord

    engine = make_engine(database_url)
    init_db(engine)
    versions: list[int] = []
    start = threading.Barrier(4)

    def write() -> None:
        start.wait()
        with Session(engine) as session:
            saved = save_profile_version(session=session, record=CalibrationProfileRecord(
                name="shared", version=1, gpu=GPU, family="hopper",
                gemm_efficiency_scale=0.9, step_overhead_s=0.0, fit_json=FIT_JSON,
                request_json={}))
            versions.append(saved.version)

    try:
        threads = [threading.Thread(target=write) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        assert sorted(versions) == [1, 2, 3, 4]
        with Session(engine) as session:
            assert [(r.name, r.version) for r in list_profiles(session=session)] == [
                ("shared", 4)]
    finally:
        engine.dispose()


def test_run_level_answers_apply_a_named_profile(http: httpx.Client,
                                                 scripted: ScriptedPlanner) -> None:
    assert http.post("/v1/calibration/runs",
                     json=fit_body("slow-h100", 0.8, 0.4, 4)).status_code == 201
    constants = http.get("/v1/calibration/profiles/slow-h100").json()["constants"]
    body = {**plan_body(cluster={"gpu": GPU, "num_nodes": 8, "profile": "slow-h100"}),
            "token_budget": 1e12}
    estimated = http.post("/v1/run/estimate", json=body)
    # The scripted planner answers "no plan"; what matters is what it was given.
    assert estimated.json()["code"] == "no-feasible-plan", estimated.text
    given = scripted.calls[-1].cluster
    assert given.profile is None and given.calibration is not None
    assert given.calibration.model_dump(mode="json") == constants
    unknown = http.post("/v1/run/estimate", json={
        **body, "cluster": {"gpu": GPU, "num_nodes": 8, "profile": "nobody"}})
    assert unknown.status_code == 422
    assert unknown.json()["errors"][0]["loc"] == ["body", "cluster", "profile"]


def test_logs_and_microbenchmarks_over_http_store_every_constant(http: httpx.Client) -> None:
    """Recorded-format training logs become the runs; the microbenchmarks' link and
    attention constants are stored with the profile and applied by `cluster.profile`."""
    from microbenchmark_data import generated_microbenchmarks
    from test_calibration_inputs import logs

    bench, truth = generated_microbenchmarks(seed=2, sigma=0.01)
    # Without the GEMM table the logs fit the GEMM level themselves: their timings are
    # written for the published H100 constants, and the generated GEMMs (0.85 of the peak,
    # 0.94 of the table level) would leave no room for their per-step overhead.
    full = bench
    bench = bench.model_copy(update={"gemm": []})
    body = {"profile": "from-logs", "gpu": GPU, "logs": logs(),
            "microbenchmarks": bench.model_dump(mode="json")}
    made = http.post("/v1/calibration/runs", json=body)
    assert made.status_code == 201, made.text
    served = made.json()
    assert [p["steps_used"][0] for p in served["fit"]["logs"]] == [10, 10, 10, 5]
    constants = served["constants"]
    assert constants["inter_node_bandwidth_scale"] == pytest.approx(
        truth["inter_node_bandwidth_scale"], rel=0.05)
    assert constants["attention_efficiency_scale"] == pytest.approx(
        truth["attention_efficiency_scale"], rel=0.05)
    assert http.get("/v1/calibration/profiles/from-logs").json()["constants"] == constants
    evaluated = http.post("/v1/evaluate", json={
        **EVALUATE, "cluster": {**EVALUATE["cluster"], "profile": "from-logs"}})
    assert evaluated.status_code == 200, evaluated.text
    note = next(n for n in evaluated.json()["explanation"]["notes"]
                if "calibration profile 'from-logs'" in n)
    assert "from microbenchmarks: attention efficiency x 1.1" in note
    assert "scale-out bandwidth x 0.8" in note

    corrupt = full.model_dump(mode="json")
    corrupt["gemm"][0]["tflops"] = -3.0
    negative = http.post("/v1/calibration/runs", json={**body, "microbenchmarks": corrupt})
    assert negative.status_code == 422
    assert negative.json()["errors"][0]["loc"] == ["body", "microbenchmarks", "gemm", 0,
                                                   "tflops"]
    corrupt["gemm"][0]["tflops"] = 2500.0
    impossible = http.post("/v1/calibration/runs", json={**body, "microbenchmarks": corrupt})
    assert impossible.status_code == 422
    assert impossible.json()["errors"][0]["loc"] == ["body", "microbenchmarks", "gemm", "0",
                                                     "tflops"]
    assert "physically impossible" in impossible.json()["detail"]

    bad = {**body, "logs": [{**log, "text": "no arguments here\n"} for log in logs()]}
    refused = http.post("/v1/calibration/runs", json=bad)
    assert refused.status_code == 422
    assert refused.json()["errors"][0]["loc"] == ["body", "logs", "0", "text"]
    assert "arguments" in refused.json()["detail"]


def test_a_fitted_moe_host_time_is_stored_and_applied_through_the_profile(
        http: httpx.Client) -> None:
    """The MoE layer's fitted host issue time travels with the profile: stored in the fit,
    served in the constants, and applied by `cluster.profile` exactly as the same constants
    given directly."""
    from test_calibration_moe import TRUTH
    from test_calibration_moe import generated_runs as moe_runs

    made = http.post("/v1/calibration/runs", json={
        "profile": "moe-h100", "gpu": GPU, "runs": moe_runs(TRUTH, 0.02, seed=1)})
    assert made.status_code == 201, made.text
    served = made.json()
    issue = served["fit"]["moe_host_issue_s"]
    assert abs(issue["value"] - 0.012) <= 3 * issue["standard_error"]
    assert served["constants"]["moe_host_issue_s"] == issue["value"]
    assert http.get("/v1/calibration/profiles/moe-h100").json()["constants"] == (
        served["constants"])
    moe = {"model": {"preset": "qwen3-30b-a3b"}, "cluster": {"gpu": GPU, "num_nodes": 1},
           "training": {"global_batch_size": 32, "sequence_length": 4096},
           "parallel": {"tp": 1, "pp": 1, "dp": 8, "ep": 8, "micro_batch_size": 1}}
    profiled = http.post("/v1/evaluate", json={
        **moe, "cluster": {**moe["cluster"], "profile": "moe-h100"}})
    assert profiled.status_code == 200, profiled.text
    constants = {k: served["constants"][k] for k in (
        "gemm_efficiency_scale", "step_overhead_s", "moe_host_issue_s")}
    direct = http.post("/v1/evaluate", json={
        **moe, "cluster": {**moe["cluster"], "calibration": constants}})
    without = http.post("/v1/evaluate", json={**moe, "cluster": {**moe["cluster"], "calibration": {
        **constants, "moe_host_issue_s": None}}})
    step = profiled.json()["time"]["step_time_s"]
    assert step == pytest.approx(direct.json()["time"]["step_time_s"])
    assert step > without.json()["time"]["step_time_s"] * 1.1  # 12 ms against 7.4 ms
    assert any("MoE layer host issue 12" in note
               for note in profiled.json()["explanation"]["notes"])
    dense = http.post("/v1/calibration/runs", json=fit_body("dense-h100", 0.9, 0.1, 7))
    assert dense.json()["fit"]["moe_host_issue_s"] is None
    assert dense.json()["constants"]["moe_host_issue_s"] is None
    assert "0 of the 7 runs are MoE runs" in dense.json()["fit"]["moe_host_issue_note"]
