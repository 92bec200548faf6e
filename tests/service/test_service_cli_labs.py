"""The `mesh`, `run-estimate`, `frontier` and `sensitivity` subcommands, GPU presets in the
collective lab, and the flags for every constraint, objective and recipe option."""

import json
from pathlib import Path

import pytest

from api_schemas.mesh import MeshResponse
from api_schemas.plan import PlanResponse
from api_schemas.requests import PlanRequest
from api_schemas.run_level import FrontierResponse, RunEstimateResponse, SensitivityResponse
from service import cli
from service.cli.flags import apply_constraint_flags
from service.render import render_plan
from service.render_run import render_run_estimate

SMALL = ["--model", "llama-3.1-8b", "--gpu", "h100-sxm5-80gb", "--nodes", "1",
         "--global-batch", "64", "--seq", "4096", "--time-limit", "60", "--workers", "1"]
"""Searches that finish in well under a second on an idle host; the limit is generous so
that a loaded host does not cut one short and change the answer."""


def test_every_constraint_objective_and_recipe_flag_lands_in_the_request() -> None:
    args = cli.build_parser().parse_args([
        "plan", *SMALL, "--tp", "1,2", "--pp", "1", "--schedule", "1f1b,zb_h1",
        "--zero-stage", "1,2", "--recompute", "none,full", "--cp-kind", "ring",
        "--forbid", "schedule=dualpipe", "--forbid", "tp=8", "--max-gpus", "8",
        "--target-tokens-per-s", "1e5", "--gpu-hour-price", "2.5",
        "--objective", "cost_per_token", "--no-allow-offload", "--no-allow-fp8-activations",
        "--fp8", "--headroom", "0.1", "--margin", "0", "--top-k", "2", "--seed", "7"])
    doc = cli.build_request(args, degrees_key="constraints")
    apply_constraint_flags(doc, args)
    request = PlanRequest.model_validate(doc)
    c = request.constraints
    assert c.tp == [1, 2] and c.pp == 1 and c.zero_stage == [1, 2]
    assert c.schedule == ["1f1b", "zb_h1"] and c.recompute == ["none", "full"]
    assert c.forbid == {"schedule": ["dualpipe"], "tp": [8]}
    assert (c.max_gpus, c.target_tokens_per_s, c.gpu_hour_price) == (8, 1e5, 2.5)
    assert not c.allow_offload and not c.allow_fp8_activations
    assert request.objective == "cost_per_token" and request.training.compute_dtype == "fp8"
    assert request.cluster.memory_headroom_frac == 0.1
    assert request.cluster.memory_margin_frac == 0.0
    assert (request.solver.top_k, request.solver.random_seed, request.solver.num_workers) == (
        2, 7, 1)


def test_plan_reports_cost_as_a_field_and_alternatives_with_v_and_gpus(
        tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    argv = ["plan", *SMALL, "--nodes", "2", "--gpu-hour-price", "2", "--objective",
            "cost_per_token", "--top-k", "2", "-o", str(out)]
    assert cli.main(argv) == 0
    plan = PlanResponse.model_validate_json(out.read_text(encoding="utf-8"))
    assert plan.cost is not None and plan.throughput is not None
    assert plan.cost.cost_per_token == pytest.approx(
        2 * plan.world_size / 3600 / plan.throughput.tokens_per_s)
    assert plan.alternatives and all(a.world_size == a.parallel.world_size
                                     for a in plan.alternatives)
    text = render_plan(plan)
    assert "per token" in text and " GPUs, v=" in text


def test_mesh_command_takes_presets_and_exits_1_on_errors(tmp_path: Path) -> None:
    out = tmp_path / "mesh.json"
    good = ["mesh", "--gpu", "h100-sxm5-80gb", "--nodes", "2", "--tp", "4", "--pp", "2",
            "--dp", "2", "--model", "llama-3.1-70b", "--max-ranks", "4", "-o", str(out)]
    assert cli.main(good) == 0
    mesh = MeshResponse.model_validate_json(out.read_text(encoding="utf-8"))
    assert mesh.world_size == 16 and mesh.valid and len(mesh.ranks) == 4
    bad = ["mesh", "--gpu", "h100-sxm5-80gb", "--nodes", "1", "--tp", "3", "--dp", "2",
           "--model", "llama-3.1-8b", "-o", str(out)]
    assert cli.main(bad) == 1
    rules = {p.rule for p in MeshResponse.model_validate_json(out.read_text()).problems}
    assert "tp-divides-heads" in rules


def test_collective_command_takes_a_gpu_preset(tmp_path: Path) -> None:
    out = tmp_path / "collective.json"
    argv = ["collective", "--collective", "all_reduce", "--num-ranks", "16",
            "--message-bytes", "268435456", "--gpu", "h100-sxm5-80gb", "--nodes", "2",
            "--ranks-per-node", "8", "-o", str(out)]
    assert cli.main(argv) == 0
    answer = json.loads(out.read_text())
    # The preset's node links: NVLink inside a node, the NIC across two nodes.
    assert answer["link"] == "cross_node" and answer["num_ranks"] == 16
    single = ["collective", "--collective", "all_reduce", "--num-ranks", "8",
              "--message-bytes", "268435456", "--gpu", "h100-sxm5-80gb", "-o", str(out)]
    assert cli.main(single) == 0
    assert json.loads(out.read_text())["link"] != "cross_node"


def test_collective_overlap_and_placement_timing_flags(tmp_path: Path) -> None:
    out = tmp_path / "collective.json"
    argv = ["collective", "--collective", "all_reduce", "--num-ranks", "8",
            "--message-bytes", "268435456", "--gpu", "h100-sxm5-80gb",
            "--overlap-frac", "0.5", "--overlap-window-s", "1e-4", "-o", str(out)]
    assert cli.main(argv) == 0
    answer = json.loads(out.read_text())
    assert answer["hidden_s"] == pytest.approx(1e-4)
    assert answer["exposed_s"] == pytest.approx(answer["time_s"] - 1e-4)
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"num_experts": 4, "top_k": 1,
                                  "tokens": [[40, 8, 8, 8], [8, 40, 8, 8]]}))
    placed = tmp_path / "placed.json"
    assert cli.main(["placement", str(tokens), "--placement-gpu", "h100-sxm5-80gb",
                     "--hidden-size", "4096", "--expert-ffn", "1024", "--tile-rows", "64",
                     "-o", str(placed)]) == 0
    result = json.loads(placed.read_text())
    assert len(result["rank_expert_gemm_s"]) == 2 and result["expert_gemm_imbalance"] >= 1.0


def test_run_estimate_command(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    argv = ["run-estimate", *SMALL, "--token-budget", "1000000000000", "--gpu-hour-price",
            "2.5", "-o", str(out)]
    assert cli.main(argv) == 0
    run = RunEstimateResponse.model_validate_json(out.read_text(encoding="utf-8"))
    assert run.cost == pytest.approx(run.gpu_hours * 2.5)
    assert run.reliability.checkpoint_interval_s == run.reliability.daly_interval_s
    assert run.train_days_low is not None and run.train_days_high is not None
    assert run.cost_high == pytest.approx(run.gpu_hours_high * 2.5)
    assert (f"  range       {run.train_days_low:.1f}-{run.train_days_high:.1f} days"
            in render_run_estimate(run))


def test_run_estimate_reliability_flags(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    argv = ["run-estimate", *SMALL, "--token-budget", "1000000000000",
            "--failures-per-gpu-hour", "0.001", "--storage-bandwidth", "1e11",
            "--node-storage-bandwidth", "5e10", "--restart-s", "300",
            "--checkpoint-interval-s", "1800", "--async-save", "-o", str(out)]
    assert cli.main(argv) == 0
    rel = RunEstimateResponse.model_validate_json(out.read_text(encoding="utf-8")).reliability
    assert rel.checkpoint_interval_s == 1800
    assert rel.job_mtbf_s == pytest.approx(3600 / (8 * 0.001))
    assert rel.checkpoint_write_s == pytest.approx(rel.checkpoint_bytes / 5e10)
    assert rel.checkpoint_blocking_s < rel.checkpoint_write_s


def test_frontier_command(tmp_path: Path) -> None:
    out = tmp_path / "frontier.json"
    argv = ["frontier", *SMALL, "--nodes-options", "1,2", "-o", str(out)]
    assert cli.main(argv) == 0
    result = FrontierResponse.model_validate_json(out.read_text(encoding="utf-8"))
    assert [p.num_nodes for p in result.points] == [1, 2]


def test_sensitivity_command(tmp_path: Path) -> None:
    out = tmp_path / "sensitivity.json"
    argv = ["sensitivity", *SMALL, "--factors", "kernel_efficiency", "--deltas=-0.2,0.2",
            "-o", str(out)]
    assert cli.main(argv) == 0
    result = SensitivityResponse.model_validate_json(out.read_text(encoding="utf-8"))
    slower, faster = result.points
    assert slower.step_time_s is not None and faster.step_time_s is not None
    assert slower.step_time_s > faster.step_time_s


def test_bad_list_flags_are_usage_errors() -> None:
    with pytest.raises(SystemExit):
        cli.main(["plan", *SMALL, "--forbid", "schedule"])
    with pytest.raises(SystemExit):
        cli.main(["frontier", *SMALL, "--nodes-options", "one"])


def test_calibrate_fits_locally_and_prints_the_constants(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    from api_schemas.calibration import CalibrationFit
    from service.routes.calibration import RUNS_EXAMPLE

    runs = tmp_path / "runs.json"
    runs.write_text(json.dumps(RUNS_EXAMPLE))
    out = tmp_path / "fit.json"
    assert cli.main(["calibrate", str(runs), "-o", str(out)]) == 0
    fit = CalibrationFit.model_validate_json(out.read_text(encoding="utf-8"))
    assert fit.num_runs == 4 and fit.gemm_efficiency_scale.value > 0
    assert cli.main(["calibrate", str(runs)]) == 0
    text = capsys.readouterr().out
    assert "GEMM efficiency x" in text and "leave-one-out" in text and "not stored" in text
    bad = dict(RUNS_EXAMPLE, runs=[dict(r, step_time_s=1e-6) for r in RUNS_EXAMPLE["runs"]])
    runs.write_text(json.dumps(bad))
    assert cli.main(["calibrate", str(runs)]) == 1


def test_calibrate_reads_log_files_and_microbenchmarks(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    """Logs named by file next to the request and the kit's JSON go into one fit."""
    import shutil

    from api_schemas.calibration import CalibrationFit

    logs = Path(__file__).resolve().parents[1] / "solver" / "training_logs"
    entries = []
    for name, framework, nodes in (("megatron_llama3-8b_tp2_dp4.log", "megatron-lm", 1),
                                   ("megatron_llama3-8b_tp2_dp8_2nodes.log", "megatron-lm", 2),
                                   ("torchtitan_llama3-8b_fsdp8.log", "torchtitan", 1),
                                   ("torchtitan_llama3-8b_fsdp16_2nodes.log", "torchtitan", 2)):
        shutil.copy(logs / name, tmp_path / name)
        entries.append({"framework": framework, "text_file": name,
                        "model": {"preset": "llama-3.1-8b"}, "num_nodes": nodes})
    request = tmp_path / "calibration.yaml"
    request.write_text(json.dumps({"profile": "lab", "gpu": "h100-sxm5-80gb",
                                   "logs": entries}))
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({"host_link": [
        {"direction": "h2d", "message_bytes": 2**28, "bandwidth_bytes_per_s": 52e9},
        {"direction": "d2h", "message_bytes": 2**28, "bandwidth_bytes_per_s": 50e9}]}))
    out = tmp_path / "fit.json"
    assert cli.main(["calibrate", str(request), "--microbenchmarks", str(bench),
                     "-o", str(out)]) == 0
    fit = CalibrationFit.model_validate_json(out.read_text(encoding="utf-8"))
    assert len(fit.logs) == 4 and fit.microbenchmarks is not None
    assert fit.microbenchmarks.applied.host_link_bandwidth_bytes_per_s == pytest.approx(
        (52e9 * 50e9) ** 0.5)
    assert cli.main(["calibrate", str(request)]) == 0
    text = capsys.readouterr().out
    assert "log megatron-lm log 0: megatron-lm, steps 10..40 used" in text
    entries[0]["text_file"] = "missing.log"
    request.write_text(json.dumps({"profile": "lab", "gpu": "h100-sxm5-80gb",
                                   "logs": entries}))
    with pytest.raises(SystemExit, match="logs.0.text_file"):
        cli.main(["calibrate", str(request)])
