"""Running a command and printing its answer.

Owns: `run` (compute locally, or send to a running service with `--server`, with a
progress ticker on stderr; problems printed as such, exit status 1), printing the answer
(readable or `--json`, `--output FILE`) and writing its pictures (`--svg`, `--trace`).
Must not: know which command it runs.
"""

import argparse
import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from pydantic import BaseModel, ValidationError

from api_schemas.pipeline import PipelineSimulateResponse
from api_schemas.plan import MemoryReport, PlanResponse
from api_schemas.problems import FieldError, ProblemDetail
from api_schemas.requests import PlanRequest
from models.core.pipeline.requests import simulate_request
from models.errors import PlannerError
from service.client import ApiProblemError, AtlasClient
from service.pictures import memory_svg, timeline_svg
from service.problems import PROBLEM_TITLES, problem_type
from service.render import render_problem
from service.trace import trace_document

PROGRESS_INTERVAL_S = 5.0
"""How often a waiting command reports elapsed time on stderr."""


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


def emit(args: argparse.Namespace, result: BaseModel, render: Callable[[Any], str]) -> None:
    text = result.model_dump_json(indent=2)
    if args.output:
        Path(args.output).write_text(text + "\n", encoding="utf-8")
    sys.stdout.write((text if args.json else render(result)) + "\n")


Pictures = Callable[[BaseModel], tuple[str | None, dict[str, Any] | None]]
"""A result -> (its SVG, its trace); either may be None."""


def write_pictures(args: argparse.Namespace, result: BaseModel, pictures: Pictures) -> None:
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


def local_problem(error: PlannerError | ValidationError) -> ProblemDetail:
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


def run(args: argparse.Namespace, local: Callable[[], BaseModel],
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
        sys.stderr.write(render_problem(local_problem(error)) + "\n")
        return 1
    except httpx.TransportError as error:
        sys.stderr.write(f"error: cannot reach {args.server}: {error}\n")
        return 1
    emit(args, result, render)
    if pictures is not None:
        try:
            write_pictures(args, result, pictures)
        except (PlannerError, ValidationError) as error:
            sys.stderr.write(render_problem(local_problem(error)) + "\n")
            return 1
    return 1 if failed is not None and failed(result) else 0


def plan_pictures(doc: dict[str, Any]) -> Pictures:
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


def simulation_pictures(result: BaseModel) -> tuple[str | None, dict[str, Any] | None]:
    if not isinstance(result, PipelineSimulateResponse) or not result.timeline:
        return None, None
    return timeline_svg(result), trace_document(result)


def memory_picture(result: BaseModel) -> tuple[str | None, dict[str, Any] | None]:
    return (memory_svg(result), None) if isinstance(result, MemoryReport) else (None, None)


def stderr_progress(started: float) -> Callable[[str], None]:
    def report(message: str) -> None:
        sys.stderr.write(f"  [{time.monotonic() - started:6.1f} s] {message}\n")
        sys.stderr.flush()

    return report
