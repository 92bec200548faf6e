"""Start-up cost of the service: import times and `serve --workers N` up to its first answer.

Run: .venv/bin/python benchmarks/bench_startup.py [--runs 3] [--workers 2] [--watch 20]

Prints, each as the median of `--runs` fresh interpreters:
- `import service.cli`: what every `serve` worker process imports before it can answer
  uvicorn's health check (a spawned worker re-imports the command's main module), with the
  heavy packages it loads (none is the goal);
- `import service.app`: the app module with every router (imported by the worker after its
  health-check thread runs), and `create_app()` on top of it; the solver (OR-Tools, pandas)
  is not among them: the lifespan imports it in a thread;
- `atlas-planner --help`: the console command's start-up (under 1 s is the goal);
then starts `atlas-planner serve --workers N` on a free loopback port with SQLite in a
temporary directory and reports the seconds to the first 200 from /healthz, and how many
workers the supervisor replaced in the following `--watch` seconds (0 is the goal; every
replacement is a worker that missed the health check).
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from bench_service_load import ATLAS_PLANNER, free_port, stop_process_group


def command_seconds(command: list[str], runs: int) -> float:
    """Median wall seconds of `command` run `runs` times, each a fresh process."""
    times = []
    for _ in range(runs):
        start = time.monotonic()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        times.append(time.monotonic() - start)
    return statistics.median(times)


def import_seconds(module: str, runs: int) -> float:
    """Median wall seconds of `python -c "import <module>"` in a fresh interpreter."""
    return command_seconds([sys.executable, "-c", f"import {module}"], runs)


HEAVY = ("ortools", "pandas", "numpy", "sqlalchemy", "pydantic", "fastapi")


def heavy_imports(module: str) -> list[str]:
    """Which of the heavy packages `import <module>` loads (in a fresh interpreter)."""
    probe = (f"import sys, {module}; "
             f"print(' '.join(p for p in {HEAVY!r} if p in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True,
                         text=True).stdout
    return out.split()


def serve_start(workers: int, watch_s: float) -> tuple[float, int]:
    """(seconds from launch to the first healthy answer, workers replaced while watching)."""
    with tempfile.TemporaryDirectory() as scratch:
        port = free_port()
        log_path = Path(scratch) / "server.log"
        env = {key: value for key, value in os.environ.items() if key != "DATABASE_URL"}
        command = [str(ATLAS_PLANNER), "serve", "--host", "127.0.0.1", "--port", str(port),
                   "--workers", str(workers), "--sqlite-path", str(Path(scratch) / "p.db"),
                   "--log-level", "info"]
        start = time.monotonic()
        with log_path.open("wb") as log:
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env,
                                       start_new_session=True)
        try:
            while True:
                if process.poll() is not None or time.monotonic() - start > 180:
                    raise SystemExit("server did not start:\n" + log_path.read_text())
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                time.sleep(0.05)
            ready_s = time.monotonic() - start
            time.sleep(watch_s)
        finally:
            stop_process_group(process, wait_s=30)
        text = log_path.read_text(errors="replace")
        replaced = text.count("Child process") + text.count("died unexpectedly")
        return ready_s, replaced


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--watch", type=float, default=20.0)
    args = parser.parse_args()
    print(f"host: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    for module in ("service.cli", "service.app"):
        loaded = ", ".join(heavy_imports(module)) or "none"
        print(f"import {module:<12} {import_seconds(module, args.runs):6.2f} s "
              f"(median of {args.runs}; loads {loaded})")
    build = [sys.executable, "-c", "from service.app import create_app; create_app()"]
    print(f"create_app()        {command_seconds(build, args.runs):6.2f} s "
          f"(median of {args.runs}, import included)")
    cli_help = command_seconds([str(ATLAS_PLANNER), "--help"], args.runs)
    print(f"atlas-planner --help {cli_help:5.2f} s (median of {args.runs}, a fresh process)")
    ready_s, replaced = serve_start(args.workers, args.watch)
    print(f"serve --workers {args.workers}: first healthy answer after {ready_s:.1f} s; "
          f"{replaced} workers replaced in the next {args.watch:g} s")


if __name__ == "__main__":
    main()
