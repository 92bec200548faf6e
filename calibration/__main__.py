"""`python -m calibration`: measure on GPUs, or read nccl-tests output, into the JSON the
calibration endpoint takes.

    torchrun --nproc-per-node 8 [--nnodes N ...] -m calibration run --out bench.json
    python -m calibration nccl-tests all_reduce.txt all_gather.txt --out nccl.json
    python -m calibration merge bench.json nccl.json --out all.json

Owns: the command line and its exit codes: 0 written, 2 refused (no PyTorch, no CUDA GPU,
unreadable input; the message says why and nothing is written). Must not: measure or
compute entries itself (`bench`, `results`).
"""

import argparse
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path

from api_schemas.collectives import Collective
from api_schemas.microbenchmarks import Microbenchmarks
from calibration import results

REFUSED = 2
"""Exit code of a refusal (nothing measured, nothing written)."""


def _refuse(message: str) -> int:
    print(f"calibration: {message}", file=sys.stderr)
    return REFUSED


def gpu_problem() -> str | None:
    """Why this machine cannot measure (None when it can)."""
    if importlib.util.find_spec("torch") is None:
        return ("PyTorch is not installed: install the kit with "
                "pip install 'atlas-planner[calibration]' on the GPU nodes; nothing was measured")
    import torch

    if not torch.cuda.is_available():
        return ("no CUDA GPU is visible (torch.cuda.is_available() is False): run it on the "
                "GPU nodes, one process per GPU with torchrun; nothing was measured")
    return None


def _run(args: argparse.Namespace) -> int:
    problem = gpu_problem()
    if problem is not None:
        return _refuse(problem)
    from calibration import bench

    plan = bench.Plan(iterations=args.iterations)
    measured = bench.run(plan)
    if measured is not None:
        results.write_results(args.out, measured)
        print(f"calibration: {len(measured.gemm)} GEMM, {len(measured.collectives)} collective, "
              f"{len(measured.attention)} attention and {len(measured.host_link)} host-link "
              f"entries written to {args.out}")
    return 0


def _nccl_tests(args: argparse.Namespace) -> int:
    entries = []
    for path in args.files:
        try:
            text = Path(path).read_text(encoding="utf-8", errors="replace")
            entries += results.read_nccl_tests(text, collective=args.collective)
        except (OSError, results.NcclTestsFormatError) as error:
            return _refuse(f"{path}: {error}")
    results.write_results(args.out, Microbenchmarks(collectives=entries,
                                                    source="nccl-tests output"))
    print(f"calibration: {len(entries)} collective entries written to {args.out}")
    return 0


def _merge(args: argparse.Namespace) -> int:
    try:
        merged = results.read_results([Path(p) for p in args.files])
    except (OSError, ValueError) as error:
        return _refuse(str(error))
    results.write_results(args.out, merged)
    return 0


def parser() -> argparse.ArgumentParser:
    """The command line."""
    top = argparse.ArgumentParser(prog="python -m calibration", description=__doc__,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = top.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="measure on the GPUs (start with torchrun)")
    run.add_argument("--out", type=Path, required=True, help="JSON file to write (rank 0)")
    run.add_argument("--iterations", type=int, default=20, help="timed calls per point")
    run.set_defaults(handler=_run)
    nccl = sub.add_parser("nccl-tests", help="read nccl-tests output files")
    nccl.add_argument("files", nargs="+", help="stdout of all_reduce_perf, all_gather_perf or "
                      "alltoall_perf")
    nccl.add_argument("--collective", type=Collective, default=None,
                      help="the collective, for outputs that do not name their program")
    nccl.add_argument("--out", type=Path, required=True)
    nccl.set_defaults(handler=_nccl_tests)
    merge = sub.add_parser("merge", help="merge result files")
    merge.add_argument("files", nargs="+")
    merge.add_argument("--out", type=Path, required=True)
    merge.set_defaults(handler=_merge)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; the exit code."""
    args = parser().parse_args(argv)
    code: int = args.handler(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
