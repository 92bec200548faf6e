"""Schema fuzzing of the live service under a 4 GB address-space cap, every phase.

Run: .venv/bin/python benchmarks/fuzz_capped.py [--database-url URL] [--phase-seconds 180]
                    [--coverage-op-seconds 6] [--max-examples 40] [--cap-gib 4] [--out DIR]

Starts `atlas-planner serve` on a free loopback port under RLIMIT_AS (set in the child
before exec, so every thread and allocation of the server counts against it), with the real
planner and short search limits (ATLAS_DEFAULT_TIME_LIMIT_S=1, ATLAS_MAX_TIME_LIMIT_S=2);
SQLite in a temporary folder unless --database-url names a PostgreSQL store, in which case
one `atlas-planner worker` (same cap) runs the queued jobs. Then it sends the
degenerate frontier request (Llama 3.1 70B, 1-byte GPUs, 1 B/s links) and runs schemathesis's
CLI (`st run`) per phase: examples, fuzzing and stateful once each with `--max-examples` per
operation and `--phase-seconds`, coverage once per operation with `--coverage-op-seconds`
(one budget for all ended it after five operations), checking `not_a_server_error`. After
each phase it checks that the server process is alive and /healthz answers. Prints requests
by status per phase (from schemathesis's HAR report), every 5xx with its request, the
server's peak RSS, and exits 1 on any 5xx, crash or dead server.
"""

import argparse
import json
import os
import re
import resource
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from bench_service_load import free_port

BIN = Path(sys.executable).parent
PHASES = ("examples", "coverage", "fuzzing", "stateful")

DEGENERATE_FRONTIER = {
    "model": {"preset": "llama-3.1-70b"},
    "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 4, "gpu_memory_bytes": 1,
                "memory_headroom_frac": 0.0, **{key: 1 for key in (
                    "hbm_bandwidth_bytes_per_s", "intra_node_bandwidth_bytes_per_s",
                    "inter_node_bandwidth_bytes_per_s", "pcie_bandwidth_bytes_per_s",
                    "host_memory_bandwidth_bytes_per_s")}},
    "training": {"global_batch_size": 64, "sequence_length": 4096},
    "num_nodes_options": [4, 8, 16],
}
"""The request that once grew the process to 24 GB (cluster numbers degenerate but
finite)."""


def _capped(cap_bytes: int) -> Any:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (cap_bytes, cap_bytes))
        os.setsid()
    return limit


def _peak_rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def _healthy(base_url: str, server: subprocess.Popen[bytes]) -> tuple[bool, str]:
    if server.poll() is not None:
        return False, f"server exited with {server.returncode}"
    try:
        started = time.monotonic()
        answer = httpx.get(f"{base_url}/healthz", timeout=10)
        return answer.status_code == 200, (f"/healthz {answer.status_code} in "
                                           f"{time.monotonic() - started:.2f} s")
    except httpx.HTTPError as error:
        return False, f"/healthz failed: {error!r}"


def _entries(har: Path) -> list[dict[str, Any]]:
    if not har.exists():
        return []
    entries: list[dict[str, Any]] = json.loads(har.read_text())["log"]["entries"]
    return entries


def _show(entry: dict[str, Any]) -> str:
    request = entry["request"]
    body = (request.get("postData") or {}).get("text", "")
    answer = entry["response"].get("content", {}).get("text", "")
    return (f"  {entry['response']['status']} {request['method']} {request['url']}\n"
            f"    body: {body[:600]}\n    answer: {answer[:400]}")


def _phase(phase: str, base_url: str, out: Path, args: argparse.Namespace, *,
           operation: str | None = None) -> "PhaseRun":
    """One `st run` of `phase` (of one operation, when given)."""
    name = phase if operation is None else f"{phase}-{operation}"
    har = out / f"{name}.har"
    seconds = args.phase_seconds if operation is None else args.coverage_op_seconds
    command = [str(BIN / "st"), "run", f"{base_url}/openapi.json", "--phases", phase,
               "--max-examples", str(args.max_examples), "--max-time", str(seconds),
               "--checks", "not_a_server_error", "--workers", "1", "--seed", str(args.seed),
               "--request-timeout", "120", "--suppress-health-check", "all", "--no-shrink",
               "--continue-on-failure", "--report", "har", "--report-har-path", str(har),
               "--report-dir", str(out)]
    if operation is not None:
        command += ["--include-operation-id", operation]
    started = time.monotonic()
    run = subprocess.run(command, capture_output=True, text=True, check=False, cwd=out)
    elapsed = time.monotonic() - started
    (out / f"{name}.log").write_text(run.stdout + run.stderr)
    entries = _entries(har)
    tested = re.search(r"Tested: (\d+)", run.stdout)
    return PhaseRun(statuses=Counter(int(entry["response"]["status"]) for entry in entries),
                    errors=[entry for entry in entries if int(entry["response"]["status"]) >= 500],
                    exit_codes={run.returncode}, seconds=elapsed,
                    tested=int(tested.group(1)) if tested else 0)


@dataclass
class PhaseRun:
    """What one phase did: requests by status, the 5xx entries, st's exit codes, the
    seconds, and the operations st reports as tested."""

    statuses: Counter[int] = field(default_factory=Counter)
    errors: list[dict[str, Any]] = field(default_factory=list)
    exit_codes: set[int] = field(default_factory=set)
    seconds: float = 0.0
    tested: int = 0

    def add(self, other: "PhaseRun") -> None:
        self.statuses += other.statuses
        self.errors += other.errors
        self.exit_codes |= other.exit_codes
        self.seconds += other.seconds
        self.tested += other.tested


def _run_phase(phase: str, base_url: str, out: Path, args: argparse.Namespace,
               operations: list[str]) -> PhaseRun:
    """A phase over every operation: the coverage phase one operation at a time (its
    deterministic cases for one operation can take minutes, and one time budget for all
    would end it after the first few), the others in one run."""
    if phase != "coverage":
        return _phase(phase, base_url, out, args)
    total = PhaseRun()
    for operation in operations:
        total.add(_phase(phase, base_url, out, args, operation=operation))
    return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--phase-seconds", type=int, default=180)
    parser.add_argument("--max-examples", type=int, default=40)
    parser.add_argument("--coverage-op-seconds", type=int, default=6,
                        help="coverage phase: seconds per operation")
    parser.add_argument("--cap-gib", type=float, default=4.0)
    parser.add_argument("--seed", type=int, default=37)
    parser.add_argument("--out", default=None, help="folder for the HAR reports and logs")
    args = parser.parse_args()
    cap = int(args.cap_gib * 2**30)
    out = Path(args.out or tempfile.mkdtemp(prefix="atlas-fuzz-"))
    out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    env = {key: value for key, value in os.environ.items() if key != "DATABASE_URL"}
    env.update({"ATLAS_DEFAULT_TIME_LIMIT_S": "1", "ATLAS_MAX_TIME_LIMIT_S": "2",
                "ATLAS_LOG_LEVEL": "WARNING"})
    if args.database_url:
        env["ATLAS_DATABASE_URL"] = args.database_url
    else:
        env["ATLAS_SQLITE_PATH"] = str(out / "plans.db")
    backend = "PostgreSQL" if args.database_url else "SQLite"
    log = (out / "server.log").open("wb")
    server = subprocess.Popen([str(BIN / "atlas-planner"), "serve", "--host", "127.0.0.1",
                               "--port", str(port)], stdout=log, stderr=subprocess.STDOUT,
                              env=env, preexec_fn=_capped(cap))
    worker = None
    if args.database_url:
        worker = subprocess.Popen([str(BIN / "atlas-planner"), "worker"], stdout=log,
                                  stderr=subprocess.STDOUT, env=env, preexec_fn=_capped(cap))
    failed = False
    try:
        deadline = time.monotonic() + 120
        while not _healthy(base_url, server)[0]:
            if time.monotonic() > deadline or server.poll() is not None:
                print(f"server did not start; see {out / 'server.log'}")
                return 1
            time.sleep(0.5)
        print(f"{backend}: server pid {server.pid} under RLIMIT_AS={args.cap_gib:g} GiB, "
              f"reports in {out}")
        started = time.monotonic()
        answer = httpx.post(f"{base_url}/v1/frontier", json=DEGENERATE_FRONTIER, timeout=120)
        print(f"degenerate frontier: {answer.status_code} "
              f"{answer.json().get('code', '') if answer.status_code >= 400 else ''} in "
              f"{time.monotonic() - started:.1f} s; {_healthy(base_url, server)[1]}")
        failed |= answer.status_code >= 500
        operations = [op["operationId"] for item in httpx.get(
            f"{base_url}/openapi.json", timeout=30).json()["paths"].values()
            for op in item.values()]
        total: Counter[int] = Counter()
        for phase in PHASES:
            run = _run_phase(phase, base_url, out, args, operations)
            total += run.statuses
            alive, health = _healthy(base_url, server)
            print(f"{phase}: {sum(run.statuses.values())} requests in {run.seconds:.0f} s, "
                  f"{run.tested} operation runs tested of {len(operations)} operations, st "
                  f"exit {sorted(run.exit_codes)}; by status {dict(sorted(run.statuses.items()))}"
                  f"; {health}")
            for entry in run.errors[:20]:
                print(_show(entry))
            failed |= bool(run.errors) or not alive
            if not alive:
                break
        print(f"{backend} total: {sum(total.values())} requests; by status "
              f"{dict(sorted(total.items()))}; 5xx: {sum(n for s, n in total.items() if s >= 500)}"
              f"; server peak RSS {_peak_rss_mib(server.pid):.0f} MiB; "
              f"{'FAILED' if failed else 'no 5xx, server alive'}")
    finally:
        for process in (worker, server):
            if process is not None and process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
        log.close()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
