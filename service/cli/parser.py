"""The full argument parser of `atlas-planner`: every command's flags and handler.

Owns: `build_parser`. Must not: run anything (handlers live in `service/cli/commands.py`,
`service/cli/labs.py` and `service/cli/serve.py`).
"""

import argparse
from typing import Any

from api_schemas.parallel import PipelineSchedule
from models.catalog.presets import gpu_ids
from service.cli import COMMAND_HELP, DESCRIPTION
from service.cli.commands import (
    cmd_calibrate,
    cmd_catalog,
    cmd_collective,
    cmd_evaluate,
    cmd_memory,
    cmd_placement,
    cmd_plan,
    cmd_simulate,
)
from service.cli.documents import build_request, load_document
from service.cli.flags import add_output_flags, add_request_flags
from service.cli.labs import register_lab_commands
from service.cli.output import run
from service.cli.serve import cmd_serve
from service.cli.worker import cmd_worker

Commands = Any
"""The subcommands of the parser (`argparse.ArgumentParser.add_subparsers`)."""


def _add_server_commands(commands: Commands) -> None:
    """`serve` and `worker`."""
    serve = commands.add_parser("serve", help=COMMAND_HELP["serve"])
    serve.add_argument("--host", default="127.0.0.1", help="interface to bind")
    serve.add_argument("--port", type=int, default=8000, help="TCP port")
    serve.add_argument("--workers", type=int, default=1, help="server processes")
    serve.add_argument("--database-url", help="SQLAlchemy URL (default: SQLite file)")
    serve.add_argument("--sqlite-path", help="SQLite file when no database URL is given")
    serve.add_argument("--log-level", default="info",
                       choices=("critical", "error", "warning", "info", "debug"))
    serve.set_defaults(handler=cmd_serve)

    worker = commands.add_parser("worker", help=COMMAND_HELP["worker"])
    worker.add_argument("--database-url", help="the service's PostgreSQL (default: "
                        "DATABASE_URL)")
    worker.add_argument("--concurrency", type=int, help="jobs at once (default: "
                        "ATLAS_SOLVER_THREADS)")
    worker.add_argument("--heartbeat", type=float, default=10.0,
                        help="seconds between the worker's heartbeats")
    worker.add_argument("--stalled-after", type=float, default=30.0,
                        help="seconds without a heartbeat after which a worker's jobs are "
                        "re-queued")
    worker.add_argument("--log-level", default="info",
                        choices=("critical", "error", "warning", "info", "debug"))
    worker.set_defaults(handler=cmd_worker)


def _add_model_commands(commands: Commands) -> None:
    """`plan`, `evaluate` and `memory`: a training request each."""
    plan_cmd = commands.add_parser("plan", help=COMMAND_HELP["plan"])
    add_request_flags(plan_cmd, pins=True, svg="the pipeline timeline", trace=True)
    plan_cmd.set_defaults(handler=cmd_plan)

    evaluate_cmd = commands.add_parser("evaluate", help=COMMAND_HELP["evaluate"])
    add_request_flags(evaluate_cmd, svg="the pipeline timeline", trace=True)
    evaluate_cmd.set_defaults(handler=cmd_evaluate)

    memory = commands.add_parser("memory", help=COMMAND_HELP["memory"])
    add_request_flags(memory, svg="the per-stage memory stack")
    memory.set_defaults(handler=cmd_memory)


def _add_collective_command(commands: Commands) -> None:
    """`collective`: one collective's time."""
    collective = commands.add_parser("collective", help=COMMAND_HELP["collective"])
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
    collective.add_argument("--overlap-frac", type=float, help="share of the time that "
                            "may run behind compute, 0..1")
    collective.add_argument("--overlap-window-s", type=float, help="compute available to "
                            "hide it behind, seconds")
    add_output_flags(collective)
    collective.set_defaults(handler=cmd_collective)


def _add_simulate_command(commands: Commands) -> None:
    """`simulate`: a pipeline schedule, optimised under a memory limit."""
    simulate = commands.add_parser("simulate", help=COMMAND_HELP["simulate"])
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
    add_output_flags(simulate, svg="the timeline", trace=True)
    simulate.set_defaults(handler=cmd_simulate)


def _add_placement_command(commands: Commands) -> None:
    """`placement`: redundant experts for token counts."""
    placement = commands.add_parser("placement", help=COMMAND_HELP["placement"])
    placement.add_argument("file", help="JSON or YAML: num_experts, top_k, tokens (R x E), "
                           "or layers (L x R x E) for every layer in one call")
    placement.add_argument("--planner", choices=("constructive", "exact"))
    placement.add_argument("--time-limit", type=float, help="exact planner limit per phase")
    placement.add_argument("--placement-gpu", dest="placement_gpu",
                           help="GPU preset to time each rank's expert GEMMs")
    placement.add_argument("--hidden-size", type=int, help="model width (expert GEMM times)")
    placement.add_argument("--expert-ffn", type=int, help="expert intermediate width")
    placement.add_argument("--tile-rows", type=int, help="GEMM tile rows tokens pad to")
    add_output_flags(placement, svg="the loads, replicas and routes")
    placement.set_defaults(handler=cmd_placement)


def _add_calibration_commands(commands: Commands) -> None:
    """`calibrate` and `catalog`."""
    calibrate = commands.add_parser("calibrate", help=COMMAND_HELP["calibrate"])
    calibrate.add_argument("file", help="JSON or YAML: profile, gpu, node, runs and logs, as "
                           "POST /v1/calibration/runs takes them (a log may name its file as "
                           "text_file, relative to this file); with --server the fit is stored")
    calibrate.add_argument("--profile", help="profile name (overrides the file's)")
    calibrate.add_argument("--microbenchmarks", metavar="FILE",
                           help="the calibration kit's JSON (GEMM, collective, attention and "
                           "host-link results) to fit with the runs")
    add_output_flags(calibrate)
    calibrate.set_defaults(handler=cmd_calibrate)

    catalog = commands.add_parser("catalog", help=COMMAND_HELP["catalog"])
    catalog.add_argument("kind", choices=("gpus", "models"))
    catalog.set_defaults(handler=cmd_catalog)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(prog="atlas-planner", description=DESCRIPTION)
    commands = parser.add_subparsers(dest="command", required=True)
    _add_server_commands(commands)
    _add_model_commands(commands)
    _add_collective_command(commands)
    _add_simulate_command(commands)
    _add_placement_command(commands)
    register_lab_commands(commands, run=run, add_request_flags=add_request_flags,
                          add_output_flags=add_output_flags, build=build_request,
                          load=load_document)
    _add_calibration_commands(commands)
    return parser
