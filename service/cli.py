"""The `atlas-planner` command line.

Owns: `serve` (the HTTP service under uvicorn), the computing commands (`plan`, `evaluate`,
`memory`, `collective`, `simulate`, `placement`, and from `service/cli_labs.py` `mesh`,
`run-estimate`, `frontier`, `sensitivity`) that call the library directly, or a running
service with `--server URL`, and `catalog`. Requests come from a JSON or YAML file,
from preset flags (`--model llama-3.1-70b --gpu h100-sxm5-80gb --nodes 8 ...`) or both
(flags override the file). Results print as a readable summary (GiB for people) or, with
`--json`, as the API's JSON; `--output FILE` writes the JSON to a file; `--svg FILE` and
`--trace FILE` write the result's picture and Chrome Trace Event JSON (`service.pictures`,
`service.trace`). Progress of long
searches goes to stderr. Exit status: 0 success, 1 an answered error (invalid input, no
feasible plan, overloaded...), 2 usage errors.
"""

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import yaml
from pydantic import BaseModel, ValidationError

from api_schemas.collectives import CollectiveEstimateRequest
from api_schemas.moe import MoePlacementRequest, MoePlacementResponse
from api_schemas.parallel import PipelineSchedule
from api_schemas.pipeline import (
    PipelineOptimizeRequest,
    PipelineSimulateRequest,
    PipelineSimulateResponse,
)
from api_schemas.plan import MemoryReport, PlanResponse, PlanStatus
from api_schemas.problems import FieldError, ProblemDetail
from api_schemas.requests import ClusterInput, EvaluateRequest, PlanRequest
from models.catalog import gpu_ids, model_ids
from models.collectives.report import estimate_collective
from models.errors import PlannerError
from models.moe.balance import home_rank_loads
from models.pipeline.requests import simulate_request
from models.resolve import resolve_cluster
from service.cli_flags import (
    LIST_AXES,
    add_constraint_flags,
    add_recipe_flags,
    apply_constraint_flags,
    apply_recipe_flags,
    int_or_list,
    str_or_list,
)
from service.cli_labs import register_lab_commands
from service.client import DEFAULT_BASE_URL, ApiProblemError, AtlasClient
from service.pictures import memory_svg, placement_svg, timeline_svg
from service.problems import PROBLEM_TITLES, problem_type
from service.render import (
    render_collective,
    render_memory,
    render_pipeline,
    render_placement,
    render_plan,
    render_problem,
)
from service.trace import trace_document

PROGRESS_INTERVAL_S = 5.0
"""How often a waiting command reports elapsed time on stderr."""


def load_document(source: str) -> dict[str, Any]:
    """A request document from a JSON or YAML file ('-' reads stdin)."""
    text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
    loaded = yaml.safe_load(text) if not source.endswith(".json") else json.loads(text)
    if not isinstance(loaded, dict):
        raise SystemExit(f"atlas-planner: {source} must hold a JSON/YAML object")
    return loaded


def _set(doc: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    if value is None:
        return
    node = doc
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value


_MODEL_FLAGS = (("gpu", ("cluster", "gpu")), ("nodes", ("cluster", "num_nodes")),
                ("gpus_per_node", ("cluster", "gpus_per_node")),
                ("global_batch", ("training", "global_batch_size")),
                ("seq", ("training", "sequence_length")))
_PARALLEL_FLAGS = ("tp", "pp", "dp", "cp", "ep", "etp", "vpp", "schedule", "zero_stage",
                   "recompute")


def build_request(args: argparse.Namespace, *, degrees_key: str) -> dict[str, Any]:
    """The request document: the file (if any) with the flags applied over it.

    Args:
        args: parsed flags.
        degrees_key: where --tp, --pp, ... go: 'parallel' (evaluate, memory: the
            configuration) or 'constraints' (plan: pins on the search).
    """
    doc = load_document(args.file) if args.file else {}
    if args.model:
        doc["model"] = {"preset": args.model}
    if args.hf_config:
        doc["model"] = {"hf_config": load_document(args.hf_config)}
    for flag, path in _MODEL_FLAGS:
        _set(doc, path, getattr(args, flag))
    for flag in _PARALLEL_FLAGS:
        _set(doc, (degrees_key, flag), getattr(args, flag))
    _set(doc, (degrees_key, "micro_batch_size"), args.mbs)
    if args.sp:
        _set(doc, (degrees_key, "sequence_parallel"), True)
    apply_recipe_flags(doc, args)
    return doc


def _add_request_flags(parser: argparse.ArgumentParser, *, pins: bool = False,
                       svg: str | None = None, trace: bool = False) -> None:
    parser.add_argument("file", nargs="?", help="request as a JSON or YAML file ('-' = stdin)")
    parser.add_argument("--model", help=f"model preset, one of: {', '.join(model_ids())}")
    parser.add_argument("--hf-config", help="a Hugging Face config.json as the model")
    parser.add_argument("--gpu", help=f"GPU preset, one of: {', '.join(gpu_ids())}")
    parser.add_argument("--nodes", type=int, help="number of nodes")
    parser.add_argument("--gpus-per-node", type=int, help="GPUs per node (default: preset)")
    parser.add_argument("--global-batch", type=int, help="sequences per optimizer step")
    parser.add_argument("--seq", type=int, help="tokens per sequence")
    what = "pin (N) or allow (N,M,...) the search's" if pins else "the configuration's"
    number = int_or_list if pins else int
    for axis in LIST_AXES:
        parser.add_argument(f"--{axis}", type=number, help=f"{what} {axis} degree")
    parser.add_argument("--mbs", type=number, help=f"{what} micro-batch size")
    parser.add_argument("--schedule", type=str_or_list if pins else str,
                        help=f"{what} pipeline schedule, e.g. 1f1b, zb_h1")
    if pins:
        parser.add_argument("--zero-stage", type=int_or_list, help=f"{what} ZeRO stage")
        parser.add_argument("--recompute", type=str_or_list, help=f"{what} recomputation "
                            "(none, selective, full)")
    else:
        parser.add_argument("--zero-stage", type=int, choices=(0, 1, 2, 3),
                            help=f"{what} ZeRO stage")
        parser.add_argument("--recompute", choices=("none", "selective", "full"),
                            help=f"{what} recomputation")
    parser.add_argument("--sp", action="store_true", help="Megatron sequence parallelism")
    add_recipe_flags(parser)
    if pins:
        add_constraint_flags(parser)
    _add_output_flags(parser, svg=svg, trace=trace)


def _add_output_flags(parser: argparse.ArgumentParser, *, svg: str | None = None,
                      trace: bool = False) -> None:
    parser.add_argument("--server", metavar="URL", help="send to a running service instead "
                        f"of computing here (e.g. {DEFAULT_BASE_URL})")
    parser.add_argument("--json", action="store_true", help="print the JSON answer")
    parser.add_argument("-o", "--output", metavar="FILE", help="also write the JSON answer")
    if svg is not None:
        parser.add_argument("--svg", metavar="FILE", help=f"also write {svg} as SVG")
    if trace:
        parser.add_argument("--trace", metavar="FILE", help="also write the pipeline "
                            "iteration as Chrome Trace Event JSON (open it in Perfetto)")


@contextmanager
def progress_ticker(label: str) -> Iterator[None]:
    """Report elapsed time on stderr every few seconds while the body runs."""
    done = threading.Event()
    start = time.monotonic()

    def tick() -> None:
        while not done.wait(PROGRESS_INTERVAL_S):
            sys.stderr.write(f"  ... {label}: {time.monotonic() - start:.0f} s\n")
            sys.stderr.flush()

    thread = threading.Thread(target=tick, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def _emit(args: argparse.Namespace, result: BaseModel, render: Callable[[Any], str]) -> None:
    text = result.model_dump_json(indent=2)
    if args.output:
        Path(args.output).write_text(text + "\n", encoding="utf-8")
    sys.stdout.write((text if args.json else render(result)) + "\n")


Pictures = Callable[[BaseModel], tuple[str | None, dict[str, Any] | None]]
"""A result -> (its SVG, its trace); either may be None."""


def _write_pictures(args: argparse.Namespace, result: BaseModel, pictures: Pictures) -> None:
    svg_path, trace_path = getattr(args, "svg", None), getattr(args, "trace", None)
    if not svg_path and not trace_path:
        return
    svg, trace = pictures(result)
    for path, content, what in ((svg_path, svg, "picture"), (trace_path, trace, "trace")):
        if not path:
            continue
        if content is None:
            sys.stderr.write(f"no {what} written: the result has nothing to draw\n")
            continue
        text = content if isinstance(content, str) else json.dumps(content)
        Path(path).write_text(text, encoding="utf-8")
        sys.stderr.write(f"wrote {what} to {path}\n")


def _local_problem(error: PlannerError | ValidationError) -> ProblemDetail:
    if isinstance(error, ValidationError):
        errors = [FieldError(loc=[str(p) for p in e["loc"]], msg=e["msg"], type=e["type"])
                  for e in error.errors()]
        return ProblemDetail(type=problem_type("invalid-request"),
                             title=PROBLEM_TITLES["invalid-request"], status=422,
                             detail=f"{error.error_count()} invalid field(s) in the request",
                             code="invalid-request", errors=errors)
    code = error.code
    return ProblemDetail(type=problem_type(code), title=PROBLEM_TITLES[code], status=0,
                         detail=error.detail, code=code, diagnostics=error.diagnostics)


def _run(args: argparse.Namespace, local: Callable[[], BaseModel],
         remote: Callable[[AtlasClient], BaseModel], render: Callable[[Any], str], *,
         label: str | None = None, failed: Callable[[BaseModel], bool] | None = None,
         pictures: Pictures | None = None) -> int:
    try:
        if args.server:
            with AtlasClient(args.server) as client, progress_ticker(f"waiting for {args.server}"):
                result = remote(client)
        elif label is not None:
            with progress_ticker(label):
                result = local()
        else:
            result = local()
    except ApiProblemError as error:
        sys.stderr.write(render_problem(error.problem) + "\n")
        return 1
    except (PlannerError, ValidationError) as error:
        sys.stderr.write(render_problem(_local_problem(error)) + "\n")
        return 1
    except httpx.TransportError as error:
        sys.stderr.write(f"error: cannot reach {args.server}: {error}\n")
        return 1
    _emit(args, result, render)
    if pictures is not None:
        try:
            _write_pictures(args, result, pictures)
        except (PlannerError, ValidationError) as error:
            sys.stderr.write(render_problem(_local_problem(error)) + "\n")
            return 1
    return 1 if failed is not None and failed(result) else 0


def _plan_pictures(doc: dict[str, Any]) -> Pictures:
    """The timeline SVG and trace of a plan's (or evaluated configuration's) pipeline."""

    def draw(result: BaseModel) -> tuple[str | None, dict[str, Any] | None]:
        if not isinstance(result, PlanResponse) or result.parallel is None:
            return None, None
        from solver.plan_pipeline import plan_simulation_request

        request = PlanRequest.model_validate({k: v for k, v in doc.items()
                                              if k in ("model", "cluster", "training")})
        simulation = simulate_request(plan_simulation_request(request, result.parallel))
        title = f"Pipeline of {result.model_name} on {result.world_size} x {result.gpu}"
        return timeline_svg(simulation, title=title), trace_document(simulation, title=title)

    return draw


def _simulation_pictures(result: BaseModel) -> tuple[str | None, dict[str, Any] | None]:
    if not isinstance(result, PipelineSimulateResponse) or not result.timeline:
        return None, None
    return timeline_svg(result), trace_document(result)


def _memory_picture(result: BaseModel) -> tuple[str | None, dict[str, Any] | None]:
    return (memory_svg(result), None) if isinstance(result, MemoryReport) else (None, None)


def _stderr_progress(started: float) -> Callable[[str], None]:
    def report(message: str) -> None:
        sys.stderr.write(f"  [{time.monotonic() - started:6.1f} s] {message}\n")
        sys.stderr.flush()

    return report


def cmd_plan(args: argparse.Namespace) -> int:
    """Search for the best plan; exit status 1 when no plan exists."""
    doc = build_request(args, degrees_key="constraints")
    apply_constraint_flags(doc, args)

    def local() -> PlanResponse:
        from solver import plan  # the solver loads on use: `serve` workers start fast

        request = PlanRequest.model_validate(doc)
        sys.stderr.write(f"searching (time limit {request.solver.time_limit_s:g} s)...\n")
        return plan(request, progress=_stderr_progress(time.monotonic()))

    def infeasible(result: BaseModel) -> bool:
        return isinstance(result, PlanResponse) and result.status == PlanStatus.INFEASIBLE

    return _run(args, local, lambda client: client.plan(doc), render_plan, label="searching",
                failed=infeasible, pictures=_plan_pictures(doc))


def cmd_evaluate(args: argparse.Namespace) -> int:
    """Score one configuration (fits or not, time, bottleneck, fixes)."""
    doc = build_request(args, degrees_key="parallel")
    from solver import evaluate

    return _run(args, lambda: evaluate(EvaluateRequest.model_validate(doc)),
                lambda client: client.evaluate(doc), render_plan, pictures=_plan_pictures(doc))


def cmd_memory(args: argparse.Namespace) -> int:
    """Per-stage memory ledger of one configuration."""
    doc = build_request(args, degrees_key="parallel")
    from solver import memory_report

    return _run(args, lambda: memory_report(EvaluateRequest.model_validate(doc)),
                lambda client: client.memory(doc), render_memory, pictures=_memory_picture)


def cmd_collective(args: argparse.Namespace) -> int:
    """Bytes and alpha-beta time of one collective."""
    doc = load_document(args.file) if args.file else {}
    for key in ("collective", "num_ranks", "message_bytes", "ranks_per_node",
                "bandwidth_bytes_per_s", "latency_s"):
        _set(doc, (key,), getattr(args, key))
    if args.gpu:
        # A GPU preset stands for the cluster whose links carry the collective.
        preset = resolve_cluster(ClusterInput(gpu=args.gpu, num_nodes=args.nodes or 1,
                                              gpus_per_node=args.gpus_per_node))
        doc["cluster"] = preset.model_dump(mode="json")
    return _run(args, lambda: estimate_collective(CollectiveEstimateRequest.model_validate(doc)),
                lambda client: client.estimate_collective(doc), render_collective)


def cmd_simulate(args: argparse.Namespace) -> int:
    """Simulate a pipeline schedule, or optimise it under --memory-limit (CP-SAT)."""
    doc = load_document(args.file) if args.file else {}
    for key, value in (("schedule", args.schedule), ("num_stages", args.stages),
                       ("num_micro_batches", args.micro_batches), ("num_chunks", args.chunks),
                       ("memory_limit", args.memory_limit), ("time_limit_s", args.time_limit)):
        _set(doc, (key,), value)
    for op in ("F", "B", "W"):
        _set(doc, ("durations", op), getattr(args, op.lower()))
    if args.no_timeline:
        doc["include_timeline"] = False
    if args.svg or args.trace:
        doc["include_timeline"] = True
    if "memory_limit" in doc:
        from solver.schedule.requests import optimize_request

        return _run(args, lambda: optimize_request(PipelineOptimizeRequest.model_validate(doc)),
                    lambda client: client.optimize_pipeline(doc), render_pipeline,
                    label="optimising the schedule", pictures=_simulation_pictures)
    return _run(args, lambda: simulate_request(PipelineSimulateRequest.model_validate(doc)),
                lambda client: client.simulate_pipeline(doc), render_pipeline,
                pictures=_simulation_pictures)


def cmd_placement(args: argparse.Namespace) -> int:
    """MoonEP redundant-expert placement from a token-count matrix."""
    doc = load_document(args.file)
    _set(doc, ("planner",), args.planner)
    _set(doc, ("time_limit_s",), args.time_limit)

    def picture(result: BaseModel) -> tuple[str | None, dict[str, Any] | None]:
        request = MoePlacementRequest.model_validate(doc)
        expert_loads = [sum(column) for column in zip(*request.tokens, strict=True)]
        before = home_rank_loads(expert_loads, num_ranks=len(request.tokens)).tolist()
        if not isinstance(result, MoePlacementResponse):
            return None, None
        return placement_svg(result, home_loads=before), None

    from solver.placement.api import plan_placement

    return _run(args, lambda: plan_placement(MoePlacementRequest.model_validate(doc)),
                lambda client: client.moe_placement(doc), render_placement,
                label="placing experts", pictures=picture)


def cmd_catalog(args: argparse.Namespace) -> int:
    """List the GPU or model presets."""
    names = gpu_ids() if args.kind == "gpus" else model_ids()
    sys.stdout.write("\n".join(names) + "\n")
    return 0


def server_timeouts() -> dict[str, Any]:
    """uvicorn's keep-alive, request-head and worker health-check timeouts from the
    settings."""
    from service.server import protocol_factory
    from service.settings import get_settings

    settings = get_settings()
    return {"http": protocol_factory(settings.header_read_timeout_s),
            "timeout_keep_alive": settings.keep_alive_timeout_s,
            "timeout_worker_healthcheck": settings.worker_start_timeout_s,
            "h11_max_incomplete_event_size": settings.max_header_bytes}


def cmd_serve(args: argparse.Namespace) -> int:
    """Run the HTTP service under uvicorn (the app is built per worker by the factory)."""
    import uvicorn

    if args.database_url:
        os.environ["DATABASE_URL"] = args.database_url
    if args.sqlite_path:
        os.environ["ATLAS_SQLITE_PATH"] = args.sqlite_path
    os.environ["ATLAS_LOG_LEVEL"] = args.log_level.upper()
    uvicorn.run("service.app:create_app", factory=True, host=args.host, port=args.port,
                workers=args.workers, log_level=args.log_level, proxy_headers=True,
                **server_timeouts())
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(
        prog="atlas-planner", description="Plan parallel LLM training: mesh, schedule, ZeRO, "
        "activation policy, under a cited cost model.")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the HTTP API")
    serve.add_argument("--host", default="127.0.0.1", help="interface to bind")
    serve.add_argument("--port", type=int, default=8000, help="TCP port")
    serve.add_argument("--workers", type=int, default=1, help="server processes")
    serve.add_argument("--database-url", help="SQLAlchemy URL (default: SQLite file)")
    serve.add_argument("--sqlite-path", help="SQLite file when no database URL is given")
    serve.add_argument("--log-level", default="info",
                       choices=("critical", "error", "warning", "info", "debug"))
    serve.set_defaults(handler=cmd_serve)

    plan_cmd = commands.add_parser("plan", help="search for the best parallel plan")
    _add_request_flags(plan_cmd, pins=True, svg="the pipeline timeline", trace=True)
    plan_cmd.set_defaults(handler=cmd_plan)

    evaluate_cmd = commands.add_parser("evaluate", help="score one configuration")
    _add_request_flags(evaluate_cmd, svg="the pipeline timeline", trace=True)
    evaluate_cmd.set_defaults(handler=cmd_evaluate)

    memory = commands.add_parser("memory", help="per-GPU memory ledger of one configuration")
    _add_request_flags(memory, svg="the per-stage memory stack")
    memory.set_defaults(handler=cmd_memory)

    collective = commands.add_parser("collective", help="alpha-beta time of one collective")
    collective.add_argument("file", nargs="?", help="request as a JSON or YAML file")
    collective.add_argument("--collective", help="all_reduce, reduce_scatter, all_gather, "
                            "all_to_all, broadcast or p2p")
    collective.add_argument("--num-ranks", type=int, help="ranks in the group")
    collective.add_argument("--message-bytes", type=int, help="message size in bytes")
    collective.add_argument("--ranks-per-node", type=int, help="group members per node")
    collective.add_argument("--bandwidth-bytes-per-s", type=float, help="explicit bandwidth")
    collective.add_argument("--latency-s", type=float, help="explicit latency")
    collective.add_argument("--gpu", help=f"GPU preset whose node links carry the collective, "
                            f"one of: {', '.join(gpu_ids())}")
    collective.add_argument("--nodes", type=int, help="nodes of that cluster (default 1)")
    collective.add_argument("--gpus-per-node", type=int, help="GPUs per node (default: preset)")
    _add_output_flags(collective)
    collective.set_defaults(handler=cmd_collective)

    simulate = commands.add_parser(
        "simulate", help="simulate a pipeline schedule (or optimise it with --memory-limit)")
    simulate.add_argument("file", nargs="?", help="request as a JSON or YAML file")
    simulate.add_argument("--schedule", help=", ".join(PipelineSchedule))
    simulate.add_argument("--stages", type=int, help="pipeline ranks (pp)")
    simulate.add_argument("--micro-batches", type=int, help="micro-batches per iteration")
    simulate.add_argument("--chunks", type=int, help="model chunks per rank")
    for op, meaning in (("f", "forward"), ("b", "input-gradient backward"),
                        ("w", "weight-gradient backward")):
        simulate.add_argument(f"-{op.upper()}", dest=op, type=float,
                              help=f"seconds of one {meaning} op on one chunk")
    simulate.add_argument("--memory-limit", type=float, help="optimise (CP-SAT) with at most "
                          "this many stages of activations in flight per rank")
    simulate.add_argument("--time-limit", type=float, help="optimizer time limit, seconds")
    simulate.add_argument("--no-timeline", action="store_true", help="omit the timeline")
    _add_output_flags(simulate, svg="the timeline", trace=True)
    simulate.set_defaults(handler=cmd_simulate)

    placement = commands.add_parser("placement", help="MoonEP expert placement from token "
                                    "counts")
    placement.add_argument("file", help="JSON or YAML: num_experts, top_k, tokens (R x E)")
    placement.add_argument("--planner", choices=("constructive", "exact"))
    placement.add_argument("--time-limit", type=float, help="exact planner limit per phase")
    _add_output_flags(placement, svg="the loads, replicas and routes")
    placement.set_defaults(handler=cmd_placement)

    register_lab_commands(commands, run=_run, add_request_flags=_add_request_flags,
                          add_output_flags=_add_output_flags, build=build_request,
                          load=load_document)

    catalog = commands.add_parser("catalog", help="list presets")
    catalog.add_argument("kind", choices=("gpus", "models"))
    catalog.set_defaults(handler=cmd_catalog)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of `atlas-planner`."""
    args = build_parser().parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["build_parser", "build_request", "load_document", "main"]
