"""Intra-rank expert-GEMM order: which SM worker runs which GEMM tile.

Owns: the tiling of a rank's per-expert token counts into GEMM tiles, and three schedules
of those tiles on identical SM workers: the fixed-order baseline (tile t on worker
t mod W, the static persistent-kernel loop), LPT (longest tile first to the least loaded
worker) and a CP-SAT makespan-optimal schedule. Must not: price GEMMs in seconds (costs are
row-equivalents: a tile of n rows costs n + `tile_overhead_rows`; the caller scales).

Why it matters: seed ledger Sec. 6.5 (Kimi K3 Sec. 5.2.1): exact rank balance gives every
rank S*K rows, but the experts inside a rank stay skewed, so a fixed GEMM order leaves SM
workers with different makespans; MoonEP adds a workload-aware expert-GEMM scheduler.

CP-SAT formulation (tile kinds k with cost c_k and multiplicity n_k, workers w):
  x[k,w] in [0, n_k] tiles of kind k on worker w
  C1  sum_w x[k,w] = n_k                 every tile runs once
  C2  sum_k c_k x[k,w] <= Cmax           makespan
  C3  load_w >= load_{w+1}               identical workers, sorted (symmetry breaking)
  minimise Cmax; the LPT schedule is the hint.
"""

import heapq
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

from models.core.moe import DEFAULT_TILE_ROWS
from models.errors import InvalidSpecError
from solver.cpsat import CpModel, IntVar, LinearExpr, SolverConfig, SolveStatus, solve


@dataclass(frozen=True, slots=True, kw_only=True)
class GemmTile:
    """One tile of one expert's GEMM."""

    expert: int
    """Index into the rank's expert list (local experts, then prefetched ones)."""
    rows: int
    cost: int
    """rows + tile_overhead_rows."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GemmSchedule:
    """Tiles assigned to workers and the resulting makespan."""

    name: str
    tiles: tuple[GemmTile, ...]
    worker_of_tile: tuple[int, ...]
    worker_loads: tuple[int, ...]
    makespan: int
    """Largest worker load, in row-equivalents."""
    lower_bound: int
    """max(largest tile, ceil(total / workers)), or CP-SAT's proven bound if higher."""
    status: SolveStatus
    """OPTIMAL when makespan == a proven bound."""


def gemm_tiles(
    expert_tokens: Sequence[int], *, tile_rows: int = DEFAULT_TILE_ROWS,
    tile_overhead_rows: int = 0,
) -> tuple[GemmTile, ...]:
    """Split each expert's rows into full tiles and one partial tile, expert-major.

    Raises:
        InvalidSpecError: on a negative count or non-positive tile size.
    """
    if tile_rows < 1 or tile_overhead_rows < 0:
        raise InvalidSpecError(
            f"tile_rows={tile_rows} must be >= 1 and tile_overhead_rows={tile_overhead_rows} "
            ">= 0", field="tile_rows",
        )
    tiles: list[GemmTile] = []
    for e, n in enumerate(expert_tokens):
        if n < 0:
            raise InvalidSpecError(f"expert_tokens[{e}]={n} is negative", field="expert_tokens")
        full, rest = divmod(int(n), tile_rows)
        sizes = [tile_rows] * full + ([rest] if rest else [])
        tiles.extend(GemmTile(expert=e, rows=s, cost=s + tile_overhead_rows) for s in sizes)
    return tuple(tiles)


def _schedule(name: str, tiles: tuple[GemmTile, ...], workers: list[int], num_workers: int,
              status: SolveStatus = SolveStatus.FEASIBLE, bound: int = 0) -> GemmSchedule:
    loads = [0] * num_workers
    for tile, w in zip(tiles, workers, strict=True):
        loads[w] += tile.cost
    total = sum(loads)
    lower = max(bound, max((t.cost for t in tiles), default=0), -(-total // num_workers))
    makespan = max(loads)
    if makespan == lower:
        status = SolveStatus.OPTIMAL
    return GemmSchedule(name=name, tiles=tiles, worker_of_tile=tuple(workers),
                        worker_loads=tuple(loads), makespan=makespan, lower_bound=lower,
                        status=status)


def _check_workers(num_workers: int) -> None:
    if num_workers < 1:
        raise InvalidSpecError(f"num_workers={num_workers} must be at least 1", field="num_workers")


def schedule_fixed_order(
    expert_tokens: Sequence[int], *, num_workers: int, tile_rows: int = DEFAULT_TILE_ROWS,
    tile_overhead_rows: int = 0,
) -> GemmSchedule:
    """Baseline: tile t (expert-major order) on worker t mod W (static persistent loop)."""
    _check_workers(num_workers)
    tiles = gemm_tiles(expert_tokens, tile_rows=tile_rows, tile_overhead_rows=tile_overhead_rows)
    return _schedule("fixed", tiles, [t % num_workers for t in range(len(tiles))], num_workers)


def schedule_lpt(
    expert_tokens: Sequence[int], *, num_workers: int, tile_rows: int = DEFAULT_TILE_ROWS,
    tile_overhead_rows: int = 0,
) -> GemmSchedule:
    """Longest processing time first: costliest tile to the least loaded worker.

    Source: R. L. Graham, "Bounds on multiprocessing timing anomalies", SIAM J. Appl. Math.
    17(2), 1969 (LPT is within 4/3 - 1/(3W) of the optimal makespan; tight example with
    2W+1 jobs 2W-1, 2W-1, ..., W+1, W+1, W, W, W).
    Legend: W=num_workers.
    """
    _check_workers(num_workers)
    tiles = gemm_tiles(expert_tokens, tile_rows=tile_rows, tile_overhead_rows=tile_overhead_rows)
    heap = [(0, w) for w in range(num_workers)]
    workers = [0] * len(tiles)
    for t in sorted(range(len(tiles)), key=lambda i: -tiles[i].cost):
        load, w = heapq.heappop(heap)
        workers[t] = w
        heapq.heappush(heap, (load + tiles[t].cost, w))
    return _schedule("lpt", tiles, workers, num_workers)


def schedule_exact(
    expert_tokens: Sequence[int], *, num_workers: int, tile_rows: int = DEFAULT_TILE_ROWS,
    tile_overhead_rows: int = 0, config: SolverConfig | None = None,
) -> GemmSchedule:
    """Makespan-optimal tile schedule by CP-SAT (C1-C3 of the module docstring)."""
    lpt = schedule_lpt(expert_tokens, num_workers=num_workers, tile_rows=tile_rows,
                       tile_overhead_rows=tile_overhead_rows)
    if lpt.status == SolveStatus.OPTIMAL or not lpt.tiles:
        return GemmSchedule(name="exact", tiles=lpt.tiles, worker_of_tile=lpt.worker_of_tile,
                            worker_loads=lpt.worker_loads, makespan=lpt.makespan,
                            lower_bound=lpt.lower_bound, status=SolveStatus.OPTIMAL)
    kinds = sorted(Counter(t.cost for t in lpt.tiles).items(), reverse=True)
    model = CpModel()
    x = {(k, w): model.new_int_var(0, n, f"x[{c},{w}]")
         for k, (c, n) in enumerate(kinds) for w in range(num_workers)}
    cmax = model.new_int_var(lpt.lower_bound, lpt.makespan, "makespan")
    loads = []
    for w in range(num_workers):
        load = LinearExpr.weighted_sum([x[k, w] for k in range(len(kinds))],
                                       [c for c, _ in kinds])
        model.add(load <= cmax)  # C2
        loads.append(load)
    for k, (_, n) in enumerate(kinds):
        model.add(LinearExpr.sum([x[k, w] for w in range(num_workers)]) == n)  # C1
    for w in range(num_workers - 1):
        model.add(loads[w] >= loads[w + 1])  # C3
    _hint_lpt(model, x, kinds, lpt)
    model.minimize(cmax)
    outcome = solve(model, config or SolverConfig())
    if not outcome.has_solution:
        return replace(lpt, name="exact", status=SolveStatus.UNKNOWN)
    per_kind = {c: [w for w in range(num_workers) for _ in range(outcome.solver.value(x[k, w]))]
                for k, (c, _) in enumerate(kinds)}
    workers = [per_kind[t.cost].pop() for t in lpt.tiles]
    bound = round(outcome.best_bound or 0)
    return _schedule("exact", lpt.tiles, workers, num_workers, status=outcome.status, bound=bound)


def _hint_lpt(model: CpModel, x: dict[tuple[int, int], IntVar], kinds: list[tuple[int, int]],
              lpt: GemmSchedule) -> None:
    """Hint the LPT schedule with workers renumbered by descending load (matches C3)."""
    rank = sorted(range(len(lpt.worker_loads)), key=lambda w: -lpt.worker_loads[w])
    new_index = {w: i for i, w in enumerate(rank)}
    counts = Counter((t.cost, new_index[w]) for t, w in zip(lpt.tiles, lpt.worker_of_tile,
                                                             strict=True))
    for k, (c, _) in enumerate(kinds):
        for w in range(len(rank)):
            model.add_hint(x[k, w], counts.get((c, w), 0))


__all__ = [
    "DEFAULT_TILE_ROWS",
    "GemmSchedule",
    "GemmTile",
    "gemm_tiles",
    "schedule_exact",
    "schedule_fixed_order",
    "schedule_lpt",
]
