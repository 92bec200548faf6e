"""Microbenchmark results as the calibration endpoint takes them: each entry computed from
what was timed, nccl-tests output read into entries, and the JSON file written.

Owns: the FLOP counts and bus factors that turn a timing into an entry, the reading of
nccl-tests' result tables, and `write_results`. Torch-free, so it is tested on recorded
outputs without a GPU. Must not: time anything (`calibration/bench.py`).
"""

import json
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from api_schemas.collectives import Collective
from api_schemas.dtypes import DType
from api_schemas.microbenchmarks import (
    AttentionMeasurement,
    CollectiveMeasurement,
    GemmMeasurement,
    HostLinkMeasurement,
    Microbenchmarks,
)


def gemm_entry(m: int, n: int, k: int, dtype: DType, seconds: float) -> GemmMeasurement:
    """One GEMM timing as an entry: 2 m n k FLOPs over the time."""
    return GemmMeasurement(m=m, n=n, k=k, dtype=dtype, tflops=2.0 * m * n * k / seconds / 1e12)


def attention_flops(batch: int, heads: int, seq_len: int, head_dim: int, *,
                    causal: bool) -> float:
    """Forward + backward attention FLOPs as the FlashAttention benchmarks count them:
    forward 4 b h s^2 d (two s x s x d matmuls), halved when causal, backward 2.5x forward.
    Source: FlashAttention repository, benchmarks/benchmark_flash_attention.py
    (`flops` and its fwd/bwd/fwd_bwd modes)."""
    forward = 4.0 * batch * heads * seq_len * seq_len * head_dim / (2.0 if causal else 1.0)
    return forward * 3.5


def attention_entry(batch: int, heads: int, seq_len: int, head_dim: int, *, causal: bool,
                    fused: bool, seconds: float) -> AttentionMeasurement:
    """One forward+backward attention timing as an entry."""
    flops = attention_flops(batch, heads, seq_len, head_dim, causal=causal)
    return AttentionMeasurement(seq_len=seq_len, head_dim=head_dim, fused=fused, causal=causal,
                                tflops=flops / seconds / 1e12)


def bus_factor(collective: Collective, num_ranks: int) -> float:
    """nccl-tests' bus-bandwidth factor: all-reduce 2(n-1)/n, all-gather and all-to-all
    (n-1)/n. Source: nccl-tests doc/PERFORMANCE.md and src/all_reduce.cu, all_gather.cu,
    alltoall.cu (`*GetBw`)."""
    n = num_ranks
    if collective == Collective.ALL_REDUCE:
        return 2.0 * (n - 1) / n
    return (n - 1) / n


def collective_entry(collective: Collective, message_bytes: int, num_ranks: int,
                     ranks_per_node: int, seconds: float) -> CollectiveMeasurement:
    """One collective timing as an entry (message size in nccl-tests' convention: the
    all-reduce tensor, the all-gather output, the all-to-all send buffer)."""
    busbw = message_bytes / seconds * bus_factor(collective, num_ranks)
    return CollectiveMeasurement(collective=collective, message_bytes=message_bytes,
                                 num_ranks=num_ranks, ranks_per_node=ranks_per_node,
                                 bus_bandwidth_bytes_per_s=busbw)


def host_link_entry(direction: str, message_bytes: int, seconds: float
                    ) -> HostLinkMeasurement:
    """One pinned host<->GPU copy as an entry."""
    return HostLinkMeasurement(direction="h2d" if direction == "h2d" else "d2h",
                               message_bytes=message_bytes,
                               bandwidth_bytes_per_s=message_bytes / seconds)


NCCL_TESTS_PROGRAMS = {"all_reduce_perf": Collective.ALL_REDUCE,
                       "all_gather_perf": Collective.ALL_GATHER,
                       "alltoall_perf": Collective.ALL_TO_ALL}
"""nccl-tests programs whose tables are read, by the collective they time."""

_RANK = re.compile(r"^#\s+Rank\s+(\d+)\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+(\S+)\s+device")
_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+\S+\s+\S+\s+-?\d+\s+([0-9.eE+]+)\s+([0-9.eE+]+)\s+"
                  r"([0-9.eE+]+)\s+(\S+)")
_PROGRAM = re.compile(r"Collective test concluded:\s*(\S+)")


class NcclTestsFormatError(ValueError):
    """nccl-tests output that cannot be read (the message says what is missing)."""


def read_nccl_tests(text: str, *, collective: Collective | None = None
                    ) -> list[CollectiveMeasurement]:
    """The out-of-place rows of one nccl-tests run as entries.

    Reads the table nccl-tests prints (src/util.cu: `size  count  type  redop  root` then
    out-of-place `time(us)  algbw  busbw  #wrong` and in-place columns, bandwidths in GB/s
    of 10^9 bytes), the `#  Rank r Group g Pid p on HOST device d` lines (GPUs per host give
    the group's span) and the closing `# Collective test concluded: PROGRAM` line (older
    releases omit it: pass `collective`). Rows with wrong elements are refused.

    Raises:
        NcclTestsFormatError: no rank lines, no rows, an unknown program, or a row with
            wrong elements.
    """
    hosts: dict[int, str] = {}
    rows: list[tuple[int, float]] = []
    program = None
    for line in text.splitlines():
        rank = _RANK.match(line)
        if rank:
            hosts[int(rank.group(1))] = rank.group(2)
            continue
        found = _PROGRAM.search(line)
        if found:
            program = found.group(1)
            continue
        row = _ROW.match(line)
        if row and not line.lstrip().startswith("#"):
            wrong = row.group(6)
            if wrong not in ("0", "N/A"):
                raise NcclTestsFormatError(
                    f"the {row.group(1)}-byte row reports {wrong} wrong elements: a result "
                    "that failed validation is not a measurement")
            rows.append((int(row.group(1)), float(row.group(5)) * 1e9))
    if program is not None:
        if program not in NCCL_TESTS_PROGRAMS:
            raise NcclTestsFormatError(
                f"'{program}' is not one of {sorted(NCCL_TESTS_PROGRAMS)}")
        collective = NCCL_TESTS_PROGRAMS[program]
    if collective is None:
        raise NcclTestsFormatError("the output does not name its program (no 'Collective test "
                                   "concluded' line): give the collective")
    if not hosts:
        raise NcclTestsFormatError("no '#  Rank ... on HOST device ...' lines: the group's "
                                   "size and span are unknown")
    if not rows:
        raise NcclTestsFormatError("no result rows")
    per_host: dict[str, int] = {}
    for host in hosts.values():
        per_host[host] = per_host.get(host, 0) + 1
    counts = set(per_host.values())
    if len(counts) != 1:
        raise NcclTestsFormatError(f"ranks per host differ ({per_host}): the fit takes groups "
                                   "with the same number of GPUs on each node")
    num_ranks, ranks_per_node = len(hosts), counts.pop()
    return [CollectiveMeasurement(collective=collective, message_bytes=size,
                                  num_ranks=num_ranks, ranks_per_node=ranks_per_node,
                                  bus_bandwidth_bytes_per_s=busbw)
            for size, busbw in rows if size > 0 and busbw > 0]


def merge(parts: Iterable[Microbenchmarks]) -> Microbenchmarks:
    """Several result sets (nodes, runs, nccl-tests outputs) as one."""
    out = Microbenchmarks()
    for part in parts:
        out = Microbenchmarks(
            gemm=[*out.gemm, *part.gemm], collectives=[*out.collectives, *part.collectives],
            attention=[*out.attention, *part.attention],
            host_link=[*out.host_link, *part.host_link],
            device_name=out.device_name or part.device_name,
            source=out.source or part.source)
    return out


def write_results(path: Path, results: Microbenchmarks) -> None:
    """The JSON file the endpoint takes as `microbenchmarks` (validated on the way out)."""
    checked = Microbenchmarks.model_validate(results.model_dump(mode="json"))
    path.write_text(json.dumps(checked.model_dump(mode="json", exclude_none=True), indent=1)
                    + "\n", encoding="utf-8")


def read_results(paths: Sequence[Path]) -> Microbenchmarks:
    """Result files written by `write_results`, merged."""
    return merge(Microbenchmarks.model_validate_json(p.read_text(encoding="utf-8"))
                 for p in paths)


__all__ = [
    "NCCL_TESTS_PROGRAMS",
    "NcclTestsFormatError",
    "attention_entry",
    "attention_flops",
    "bus_factor",
    "collective_entry",
    "gemm_entry",
    "host_link_entry",
    "merge",
    "read_nccl_tests",
    "read_results",
    "write_results",
]
