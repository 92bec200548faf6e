"""The `atlas-planner` command line.

Owns: the list of commands and `main`. The commands are `serve` (the HTTP service under
uvicorn, `service/cli/serve.py`), `worker` (runs jobs from the PostgreSQL queue,
`service/cli/worker.py`), the computing commands (`plan`, `evaluate`, `memory`,
`collective`, `simulate`, `placement`, `catalog` in `service/cli/commands.py`; `mesh`,
`run-estimate`, `frontier`, `sensitivity` in `service/cli/labs.py`) that call the library
directly, or a running service with `--server URL`. Requests come from a JSON or YAML file,
from preset flags (`--model llama-3.1-70b --gpu h100-sxm5-80gb --nodes 8 ...`) or both
(flags override the file; `service/cli/documents.py`, `service/cli/flags.py`). Results print
as a readable summary (GiB for people) or, with `--json`, as the API's JSON; `--output FILE`
writes the JSON to a file; `--svg FILE` and `--trace FILE` write the result's picture and
Chrome Trace Event JSON (`service/cli/output.py`). Progress of long searches goes to stderr.
Exit status: 0 success, 1 an answered error (invalid input, no feasible plan,
overloaded...), 2 usage errors.

Start-up: this module imports only `argparse`. `atlas-planner`, `atlas-planner --help` and a
mistyped command are answered from the command list alone; the full parser
(`service/cli/parser.py`, with the schemas, presets and handlers) is imported once a
command is named, and the solver only when a command computes locally. A `serve` worker
process, which re-imports this module, therefore starts at once.
Must not: import anything heavy at module level.
"""

import argparse
import sys
from collections.abc import Callable
from typing import Any

DESCRIPTION = ("Plan parallel LLM training: mesh, schedule, ZeRO, activation policy, under a "
               "cited cost model.")

COMMAND_HELP = {
    "serve": "run the HTTP API",
    "worker": "run queued jobs (PostgreSQL store)",
    "plan": "search for the best parallel plan",
    "evaluate": "score one configuration",
    "memory": "per-GPU memory ledger of one configuration",
    "collective": "alpha-beta time of one collective",
    "simulate": "simulate a pipeline schedule (or optimise it with --memory-limit)",
    "placement": "MoonEP expert placement from token counts",
    "mesh": "rank coordinates, groups and mesh problems",
    "rl-seesaw": "GPU memory by phase of colocated RL training and rollout",
    "remote-activations": "what-if: stored activations moved to other pipeline ranks",
    "run-estimate": "time and cost to train on a token budget",
    "frontier": "GPU count against step time and cost over cluster sizes",
    "sensitivity": "the plan under changed network, HBM and kernel efficiency",
    "calibrate": "fit a cluster profile to measured runs",
    "catalog": "list presets",
}
"""Every command and its one-line help, in the order `--help` lists them."""


def overview_parser() -> argparse.ArgumentParser:
    """The parser that only knows the command names: it answers `--help`, no command and a
    mistyped command without importing any command's flags."""
    parser = argparse.ArgumentParser(prog="atlas-planner", description=DESCRIPTION)
    commands = parser.add_subparsers(dest="command", required=True)
    for name, text in COMMAND_HELP.items():
        commands.add_parser(name, help=text, add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of `atlas-planner`."""
    arguments = sys.argv[1:] if argv is None else argv
    if not arguments or arguments[0] not in COMMAND_HELP:
        overview_parser().parse_args(arguments)  # prints help or the usage error, exits
    from service.cli.parser import build_parser

    args = build_parser().parse_args(arguments)
    handler: Callable[[argparse.Namespace], int] = args.handler
    return handler(args)


def __getattr__(name: str) -> Any:
    """`build_parser`, `build_request` and `load_document`, imported on first use."""
    if name == "build_parser":
        from service.cli.parser import build_parser
        return build_parser
    if name in ("build_request", "load_document"):
        from service.cli import documents
        return getattr(documents, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["COMMAND_HELP", "DESCRIPTION", "build_parser", "build_request", "load_document",
           "main", "overview_parser"]
