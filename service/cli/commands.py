"""The computing commands of `atlas-planner`: `plan`, `evaluate`, `memory`, `collective`,
`simulate`, `placement`, `calibrate` and `catalog`.

Owns: each command's handler: its request, its local computation (the solver is imported
on use) and its `--server` call. Must not: parse flags (`service/cli/parser.py`) or print
(`service/cli/output.py`).
"""

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from api_schemas.collectives import CollectiveEstimateRequest
from api_schemas.moe import MoePlacementRequest, MoePlacementResponse
from api_schemas.pipeline import (
    PipelineOptimizeRequest,
    PipelineSimulateRequest,
    PipelineSimulateResponse,
)
from api_schemas.plan import PlanResponse, PlanStatus
from api_schemas.requests import ClusterInput, EvaluateRequest, PlanRequest
from models.catalog.presets import gpu_ids, model_ids
from models.catalog.resolve import resolve_cluster
from models.core.collectives.report import estimate_collective
from models.core.moe.balance import home_rank_loads
from models.core.pipeline.requests import simulate_request
from service.cli.documents import build_request, load_document
from service.cli.flags import apply_constraint_flags, set_field
from service.cli.output import (
    memory_picture,
    plan_pictures,
    run,
    simulation_pictures,
    stderr_progress,
)
from service.pictures import placement_svg
from service.render import (
    render_collective,
    render_memory,
    render_pipeline,
    render_placement,
    render_placement_layers,
    render_plan,
)
from service.render_run import render_calibration


def cmd_plan(args: argparse.Namespace) -> int:
    """Search for the best plan; exit status 1 when no plan exists."""
    doc = build_request(args, degrees_key="constraints")
    apply_constraint_flags(doc, args)

    def local() -> PlanResponse:
        from solver import plan  # the solver loads on use: `serve` workers start fast

        request = PlanRequest.model_validate(doc)
        sys.stderr.write(f"searching (time limit {request.solver.time_limit_s:g} s)...\n")
        return plan(request, progress=stderr_progress(time.monotonic()))

    def infeasible(result: BaseModel) -> bool:
        return isinstance(result, PlanResponse) and result.status in (
            PlanStatus.INFEASIBLE, PlanStatus.UNKNOWN)

    return run(args, local, lambda client: client.plan(doc), render_plan, label="searching",
               failed=infeasible, pictures=plan_pictures(doc))


def cmd_evaluate(args: argparse.Namespace) -> int:
    """Score one configuration (fits or not, time, bottleneck, fixes)."""
    doc = build_request(args, degrees_key="parallel")
    from solver import evaluate

    return run(args, lambda: evaluate(EvaluateRequest.model_validate(doc)),
               lambda client: client.evaluate(doc), render_plan, pictures=plan_pictures(doc))


def cmd_memory(args: argparse.Namespace) -> int:
    """Per-stage memory ledger of one configuration."""
    doc = build_request(args, degrees_key="parallel")
    from solver import memory_report

    return run(args, lambda: memory_report(EvaluateRequest.model_validate(doc)),
               lambda client: client.memory(doc), render_memory, pictures=memory_picture)


def cmd_collective(args: argparse.Namespace) -> int:
    """Bytes and alpha-beta time of one collective."""
    doc = load_document(args.file) if args.file else {}
    for key in ("collective", "num_ranks", "message_bytes", "ranks_per_node",
                "bandwidth_bytes_per_s", "latency_s", "overlap_frac", "overlap_window_s"):
        set_field(doc, (key,), getattr(args, key))
    if args.gpu:
        # A GPU preset stands for the cluster whose links carry the collective.
        preset = resolve_cluster(ClusterInput(gpu=args.gpu, num_nodes=args.nodes or 1,
                                              gpus_per_node=args.gpus_per_node))
        doc["cluster"] = preset.model_dump(mode="json")
    return run(args, lambda: estimate_collective(CollectiveEstimateRequest.model_validate(doc)),
               lambda client: client.estimate_collective(doc), render_collective)


def cmd_simulate(args: argparse.Namespace) -> int:
    """Simulate a pipeline schedule, or optimise it under --memory-limit (CP-SAT)."""
    doc = load_document(args.file) if args.file else {}
    for key, value in (("schedule", args.schedule), ("num_stages", args.stages),
                       ("num_micro_batches", args.micro_batches), ("num_chunks", args.chunks),
                       ("memory_limit", args.memory_limit), ("time_limit_s", args.time_limit)):
        set_field(doc, (key,), value)
    for op in ("F", "B", "W"):
        set_field(doc, ("durations", op), getattr(args, op.lower()))
    if args.no_timeline:
        doc["include_timeline"] = False
    render = render_pipeline
    if args.svg or args.trace:
        # The pictures need the timeline; --no-timeline then keeps it out of the text only.
        doc["include_timeline"] = True
        if args.no_timeline:
            def render(result: PipelineSimulateResponse) -> str:
                return render_pipeline(result.model_copy(update={"timeline": []}))
    if "memory_limit" in doc:
        from solver.schedule.requests import optimize_request

        return run(args, lambda: optimize_request(PipelineOptimizeRequest.model_validate(doc)),
                   lambda client: client.optimize_pipeline(doc), render,
                   label="optimising the schedule", pictures=simulation_pictures)
    return run(args, lambda: simulate_request(PipelineSimulateRequest.model_validate(doc)),
               lambda client: client.simulate_pipeline(doc), render,
               pictures=simulation_pictures)


def cmd_placement(args: argparse.Namespace) -> int:
    """MoonEP redundant-expert placement from a token-count matrix, or from one matrix per
    layer (`layers`), every layer in one call."""
    doc = load_document(args.file)
    set_field(doc, ("planner",), args.planner)
    set_field(doc, ("time_limit_s",), args.time_limit)
    for key, value in (("gpu", args.placement_gpu), ("hidden_size", args.hidden_size),
                       ("expert_ffn_hidden_size", args.expert_ffn),
                       ("tile_rows", args.tile_rows)):
        set_field(doc, (key,), value)

    def picture(result: BaseModel) -> tuple[str | None, dict[str, Any] | None]:
        request = MoePlacementRequest.model_validate(doc)
        if not isinstance(result, MoePlacementResponse) or request.tokens is None:
            return None, None
        expert_loads = [sum(column) for column in zip(*request.tokens, strict=True)]
        before = home_rank_loads(expert_loads, num_ranks=len(request.tokens)).tolist()
        return placement_svg(result, home_loads=before), None

    from solver.placement.api import plan_placement, plan_placement_layers

    if doc.get("layers") is not None:
        return run(args, lambda: plan_placement_layers(MoePlacementRequest.model_validate(doc)),
                   lambda client: client.moe_placement_layers(doc), render_placement_layers,
                   label="placing experts of every layer")
    return run(args, lambda: plan_placement(MoePlacementRequest.model_validate(doc)),
               lambda client: client.moe_placement(doc), render_placement,
               label="placing experts", pictures=picture)


def cmd_calibrate(args: argparse.Namespace) -> int:
    """Fit a cluster profile to measured runs: locally (the fit only), or with --server
    fitted and stored as the profile's next version."""
    doc = load_document(args.file)
    set_field(doc, ("profile",), args.profile)
    base = Path(args.file).resolve().parent if args.file != "-" else Path.cwd()
    for index, log in enumerate(doc.get("logs") or []):
        if isinstance(log, dict) and "text_file" in log:
            path = base / str(log.pop("text_file"))
            try:
                log["text"] = path.read_text(encoding="utf-8", errors="replace")
            except OSError as error:
                raise SystemExit(f"atlas-planner: logs.{index}.text_file: cannot read {path}: "
                                 f"{error.strerror}") from error
    if args.microbenchmarks is not None:
        doc["microbenchmarks"] = load_document(args.microbenchmarks)

    def local() -> BaseModel:
        from api_schemas.calibration import CalibrationRunsRequest
        from solver.calibration import calibrate

        return calibrate(CalibrationRunsRequest.model_validate(doc)).fit

    return run(args, local, lambda client: client.calibrate(doc), render_calibration,
               label="fitting")


def cmd_catalog(args: argparse.Namespace) -> int:
    """List the GPU or model presets."""
    names = gpu_ids() if args.kind == "gpus" else model_ids()
    sys.stdout.write("\n".join(names) + "\n")
    return 0
