"""Benchmark: MoonEP constructive placement per layer against no-redundancy and EPLB.

For (E=256, R=64, K=8, S=4096) and (E=384, R=16, K=8, S=8192) and every routing skew of
`models.core.moe.skew`, it reports the constructive planner's wall time per layer (validation,
planning, routes and accounting included; median and p90 over repeated single-layer calls
on several batches, and the median per layer of one `plan_constructive_layers` call over
all MoE layers of a model, the batches cycled to DeepSeek-V3's 58 MoE layers), its
redundant experts, remote and migrated tokens, and the max/mean rank load of the
no-redundancy and EPLB-style baselines on the same batches. EPLB is planned from the
other batches of the same popularity (leave-one-out history, favourable to EPLB) with the
global policy and evaluated on the actual batch. A second table schedules the expert GEMM
tiles of one rank (fixed order, LPT, CP-SAT) after MoonEP balancing.

Run: .venv/bin/python benchmarks/bench_moe_placement.py [--batches 3] [--repeats 50]
     [--layers 58] [--skip-gemm]
The machine's load average is printed before and after: time on a quiet machine.
All numbers come from a deterministic model on synthetic routings, not from a cluster.

Figures at E=256, R=64, K=8 (`--skip-gemm --repeats 20`, the previous and the current
planner back to back on the shared 2-core machine under a load average of 3.6-5.3, so about
2-3 times the quiet figures): median single call, uniform 1.45 -> 1.27 ms, over the seven
skews 1.45-1.97 -> 1.03-1.83 ms; all 58 layers in one call 1.60-2.95 -> 1.73-3.05 ms per
layer. Load-independent: Python-level function calls per layer 1,167 -> 622 (single call)
and 1,016 -> 454 (all layers in one call), by cProfile; minor page faults per kept layer
about 210 in both (0.8 MB of new memory: the count copy, the allocation and the routes),
which is why the in-turn and all-layers columns exceed the single-call median. EPLB's plan
alone (global policy, +1 slot per rank) took 5.8-9.3 ms per layer in the same run.

Routes kept as the count matrix until a column is read (`--skip-gemm`, quiet, load average
0.6-0.9, two runs of each): median single call at E=256, R=64, uniform 0.74-0.76 -> 0.32-0.48
ms, over the seven skews 0.38-1.10 -> 0.31-0.89 ms; the expansion into columns, timed apart
(`cols`), 0.07-0.14 ms. Best of five timeit batches of 300 uniform calls, the two releases
alternated three times: 0.44-0.50 -> 0.31-0.38 ms.

One buffer per call for the counts copy and the allocations, chunks of 16 layers, leaner
accounting (`--skip-gemm --repeats 20`, the previous and this release back to back, load
average 0.77-0.94 and 0.95-1.07, the host's speed swinging: EPLB's plan took 2.1-3.8 ms in
both runs). Medians at E=256, R=64, K=8, single call / in turn / all layers in one call:
uniform 0.367/0.574/0.424 -> 0.539/0.508/0.359 ms, zipf 0.445/0.548/0.367 ->
0.441/0.512/0.319, lognormal(1) 0.633/0.445/0.374 -> 0.306/0.551/0.350, lognormal(2)
0.563/0.704/0.497 -> 0.427/0.585/0.398, hot expert 0.516/0.543/0.382 -> 0.363/0.290/0.183,
hot rank 0.542/0.553/0.400 -> 0.407/0.412/0.221, tight 0.958/0.809/0.710 ->
0.641/0.613/0.391. Load-independent: Python-level function calls per layer (cProfile)
598-646 -> 443-488 single and 436-484 -> 326-366 in one call over the six random skews,
805 -> 665 and 601 -> 472 on the tight construction. Page faults per layer of the uniform
case in this benchmark's loop (in turn / one call, process CPU time per layer alongside,
two runs each): 76/89 at 0.56-0.63/0.52-0.53 ms -> 0/0 at 0.38-0.46/0.26-0.28 ms. Whether
the previous release faulted depended on the allocator's state (the earlier skews of a run
often had none); with one buffer per call it raises glibc's dynamic mmap threshold on the
first free and the memory is reused from then on.

The cover rule's candidate experts sorted in plain Python when the donors hold at most 64
(`SMALL_CANDIDATES`, since set to 32: no row of this table sorts between 33 and 64),
with numpy above; the full lower bound without `broadcast_to` and
`take_along_axis` (`--skip-gemm --repeats 20`, the previous and this release back to back,
load average 0.80-1.00, medians single call / all layers in one call). Unchanged where no
receiver needs more than one expert: the six random skews at E=256, R=64 took 0.224-0.268 /
0.204-0.263 -> 0.220-0.265 / 0.211-0.266 ms. Where receivers take several experts: tight at
E=256, R=64 0.478/0.405 -> 0.415/0.373 ms, hot rank at E=384, R=16 0.742/0.603 ->
0.360/0.255 ms, tight at E=384, R=16 0.400/0.268 -> 0.308/0.201 ms. Python-level
calls per single-layer call (cProfile, load-independent): uniform 420 -> 420, tight 641 ->
590 at E=256 and 537 -> 407 at E=384, hot rank at E=384 1,194 -> 538.

Index arrays once per call, one layer's bounds counted directly, many cover candidates
walked in numpy (`--skip-gemm --repeats 20`, the previous and this release back to back,
load average 3.1-3.6). Since the index arrays moved onto the search's memo, a
`plan_constructive` call outside a search built them five times (71 us of CPU each at
E=256, R=64); its entry points now run as a search, and the arrays stay on the memo the
process shares. Medians single call / all
layers in one call at E=256, R=64: uniform 0.772/0.485 -> 0.325/0.355 ms, the other five
random skews 0.651-0.862/0.321-0.469 -> 0.289-0.341/0.299-0.336, tight 0.889/0.478 ->
0.478/0.474; at E=384, R=16 tight 0.563/0.365 -> 0.326/0.179. Process CPU time per single
call (best of 20 batches of 30 calls, two rounds, load average 2.6-4.4), previous release /
the release before the memo move / this one: uniform 0.70 / 0.27-0.30 / 0.31 (0.49 in one
round) ms, the other random skews 0.65-0.70 / 0.25-0.29 / 0.26-0.31, tight 0.88 / 0.43-0.46
/ 0.42. Python-level calls per single-layer call (cProfile): uniform 532-573 -> 440-481,
tight 721 -> 620 (594 before the memo move). Tight stays over 0.3 ms: of its 0.40 ms of CPU
under a kept memo (load average 4.1, best of 20 batches per part), the cover rule takes
0.12 (63 moves: one fill from 252 candidates, about 0.04, then single-cover steps at about
1 us each), routes 0.08, the lower bound 0.03 (0.05 before), validation 0.025, allocation
0.013; building the route-splitting table cost another 0.01 per call while each call had
a memo of its own (`routes._split_cells`; the process's shared memo keeps it since).

Lower bounds from the plan's replica counts (a rank with a deficit hosting one replica has
bound 1; only ranks hosting several are counted, one by one up to two), rank loads by
construction (the invariants still sum the allocation), north-west pieces without repeats
where every demand ends with a supply cell (the tight construction: 3,909 pieces, no inner
cut), cells split by shift and mask at a power-of-two R, a leaner numpy fill of the cover
rule. The previous and this release alternated three times in a scratch loop (5 rounds of
60 single calls per skew, median per round; wall ms, min/median of the rounds; process CPU
time within 0.005 ms of wall; load average 2.6-3.4) at E=256, R=64: uniform 0.282-0.288 ->
0.263-0.268, the other five random skews 0.257-0.291 -> 0.239-0.273, tight 0.402-0.406 ->
0.324-0.329. This benchmark (`--skip-gemm --repeats 20`, two runs each, alternated, load
average 0.9-3.7, noisier): tight 0.438-0.486 -> 0.348-0.404 ms. Tight stays over 0.3 ms; in
context (medians, load average 0.7-1.7) the cover rule takes about 0.12-0.14 ms (62
single-cover heap steps at about 1.2 us each, one numpy fill of 252 candidates about 0.03,
the state 0.012), routes 0.06 (3,909 rows), validation 0.03, allocation 0.02, shared cells
and replicas 0.03, the bound 0.01, the result 0.01.

The cover rule's heap entries as one int (balance x R + rank) instead of a tuple, its
covering expert chosen by comparisons instead of a scaled score, its numpy fill with fewer
calls, a single layer's replicas without a layer index. On tight (E=256, R=64, medians of
timed parts) the state took 14 -> 11.5 us, the fill of 252 candidates 30 -> 27 us and the
59 single-cover steps 61 -> 52 us; the scan of the top donor's E/R experts is about 0.4 us
of a step's 0.9. The previous and this release alternated in one scratch loop (10 rounds of
60 single calls per row, process CPU time, the median of the round medians; two runs, load
average 3.6-3.8 and 3.1) at E=256, R=64: the six random skews 0.202-0.245 -> 0.190-0.230
and 0.221-0.260 -> 0.205-0.244 ms, tight 0.291 -> 0.284 and 0.313 -> 0.294 ms; at E=384,
R=16 within 0.01 ms either way. This benchmark (`--skip-gemm --repeats 20`, the releases
alternated twice, load average 3.1-3.8): tight single 0.320 / 0.333 -> 0.284 / 0.314 ms, in
one call 0.333 / 0.335 -> 0.296 / 0.309 ms. Tight is under 0.3 ms of CPU in both loops but
not in every benchmark run on this loaded host. Placements identical: every field of every
row's results (both rules, single calls and the 58-layer call) compared byte for byte.
"""

import argparse
import os
import platform
import resource
import time
from dataclasses import dataclass

import numpy as np

from models.core.moe import (
    RoutingSkew,
    SkewKind,
    routing_counts,
    tight_tokens_per_rank,
)
from solver.cpsat import SolverConfig
from solver.placement import (
    ConstructiveRule,
    eplb_loads,
    no_redundancy_loads,
    plan_constructive,
    plan_constructive_layers,
    rebalance_experts,
    schedule_exact,
    schedule_fixed_order,
    schedule_lpt,
)

CONFIGS = [(256, 64, 8, 4096), (384, 16, 8, 8192)]
SKEWS = [
    RoutingSkew(kind=SkewKind.UNIFORM),
    RoutingSkew(kind=SkewKind.ZIPF, zipf_exponent=1.0),
    RoutingSkew(kind=SkewKind.LOGNORMAL, sigma=1.0),
    RoutingSkew(kind=SkewKind.LOGNORMAL, sigma=2.0),
    RoutingSkew(kind=SkewKind.HOT_EXPERT, hot_factor=32.0),
    RoutingSkew(kind=SkewKind.HOT_RANK, hot_factor=32.0),
    RoutingSkew(kind=SkewKind.TIGHT),
]
MOE_LAYERS = 58
"""DeepSeek-V3: 61 layers, all but the first three with MoE FFNs (arXiv:2412.19437 Sec. 4.2)."""
TARGET_MS = 0.3
"""Per-layer median the planner must stay under at E=256, R=64, K=8."""
GEMM_WORKERS = 112
"""SM workers for expert GEMMs: 132 SMs of an H800 minus the 20 DeepSeek-V3 gives its
all-to-all kernels (arXiv:2412.19437 Sec. 3.5.1)."""


@dataclass
class Row:
    """Aggregates of one (config, skew) over its batches."""

    times_ms: list[float]
    batch_ms: list[float]
    batch_faults: list[float]
    seq_ms: list[float]
    ref_times_ms: list[float]
    eplb_ms: list[float]
    columns_ms: list[float]
    redundant: list[int]
    ref_redundant: list[int]
    max_per_rank: list[int]
    lower_bound: list[int]
    remote_frac: list[float]
    migrated_frac: list[float]
    none_imb: list[float]
    eplb1_imb: list[float]
    eplb_full_imb: list[float]


def batches(skew: RoutingSkew, e: int, r: int, k: int, s: int, n: int) -> list[np.ndarray]:
    if skew.kind == SkewKind.TIGHT:
        s = tight_tokens_per_rank(num_experts=e, num_ranks=r, top_k=k, at_least=s)
        return [routing_counts(skew, num_experts=e, num_ranks=r, top_k=k, tokens_per_rank=s,
                               seed=0)] * n
    return [routing_counts(skew, num_experts=e, num_ranks=r, top_k=k, tokens_per_rank=s,
                           seed=2024, batch=b) for b in range(n)]


def timed(counts: np.ndarray, k: int, rule: ConstructiveRule, repeats: int) -> tuple[list[float],
                                                                                       object]:
    times, res = [], None
    for _ in range(repeats):
        started = time.perf_counter()
        res = plan_constructive(counts, top_k=k, rule=rule)
        times.append((time.perf_counter() - started) * 1e3)
    return times, res


def timed_columns(counts: np.ndarray, k: int, repeats: int) -> list[float]:
    """ms to turn a fresh placement's routes into columns (done on the first read of a
    column, outside the planner's wall time)."""
    times = []
    for _ in range(repeats):
        routes = plan_constructive(counts, top_k=k).routes
        started = time.perf_counter()
        _ = routes.tokens
        times.append((time.perf_counter() - started) * 1e3)
    return times


def timed_eplb(history: np.ndarray, r: int, repeats: int) -> list[float]:
    """ms of one EPLB plan (global policy, one extra slot per rank) from [E] history."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        rebalance_experts(history[None], num_replicas=history.size + r, num_groups=1,
                          num_nodes=1, num_gpus=r)
        times.append((time.perf_counter() - started) * 1e3)
    return times


def timed_layers(data: list[np.ndarray], k: int, layers: int,
                 repeats: int) -> tuple[list[float], list[float], list[float]]:
    """Per-layer ms of one call placing `layers` layers (the batches cycled), and of one
    single-layer call per layer over the same layers, in turn (same conditions; the results
    are kept in both, as a caller placing a whole model keeps them), and the minor page faults
    per layer of the one call."""
    stack = np.stack([data[i % len(data)] for i in range(layers)])
    together, one_by_one, faults = [], [], []
    for _ in range(repeats):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        started = time.perf_counter()
        plan_constructive_layers(stack, top_k=k)
        together.append((time.perf_counter() - started) * 1e3 / layers)
        faults.append((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / layers)
        started = time.perf_counter()
        kept = [plan_constructive(layer, top_k=k) for layer in stack]
        one_by_one.append((time.perf_counter() - started) * 1e3 / layers)
        del kept
    return together, one_by_one, faults


def measure(e: int, r: int, k: int, s: int, skew: RoutingSkew, n: int, repeats: int,
            layers: int) -> Row:
    data = batches(skew, e, r, k, s, n)
    row = Row(*([] for _ in range(16)))
    for i, counts in enumerate(data):
        history = sum(d.sum(axis=0) for j, d in enumerate(data) if j != i) if n > 1 else \
            counts.sum(axis=0)
        times, res = timed(counts, k, ConstructiveRule.COVER, repeats)
        ref_times, ref = timed(counts, k, ConstructiveRule.REFERENCE, max(5, repeats // 5))
        row.eplb_ms += timed_eplb(history, r, max(3, repeats // 10))
        row.columns_ms += timed_columns(counts, k, max(5, repeats // 5))
        total = int(counts.sum())
        row.times_ms += times
        row.ref_times_ms += ref_times
        row.redundant.append(res.num_redundant)
        row.ref_redundant.append(ref.num_redundant)
        row.max_per_rank.append(res.max_redundant_per_rank)
        row.lower_bound.append(int(res.lower_bound_per_rank.sum()))
        row.remote_frac.append(res.remote_tokens / total)
        row.migrated_frac.append(res.migrated_tokens / total)
        row.none_imb.append(no_redundancy_loads(counts, top_k=k).imbalance)
        row.eplb1_imb.append(eplb_loads(counts, top_k=k, history=history,
                                        redundant_per_rank=1).imbalance)
        row.eplb_full_imb.append(eplb_loads(counts, top_k=k, history=history,
                                            redundant_per_rank=e // r).imbalance)
    row.batch_ms, row.seq_ms, row.batch_faults = timed_layers(data, k, layers, max(3, repeats // 5))
    return row


def placement_table(n: int, repeats: int, layers: int) -> None:
    head = (f"{'config':<22}{'skew':<20}{'med ms':>7}{'p90 ms':>7}{'seq ms':>7}{'all ms':>7}"
            f"{'ref ms':>7}{'eplb ms':>8}{'cols':>6}{'flt':>5}"
            f"{'repl':>6}{'ref':>5}{'lb':>5}{'max/r':>6}{'remote':>8}{'migr':>7}"
            f"{'none':>7}{'eplb+1':>8}{'eplb+m':>8}")
    print(head)
    print("-" * len(head))
    targets: list[tuple[float, float, float]] = []
    for e, r, k, s in CONFIGS:
        for skew in SKEWS:
            row = measure(e, r, k, s, skew, n, repeats, layers)
            med, p90 = np.median(row.times_ms), np.percentile(row.times_ms, 90)
            batch, seq = float(np.median(row.batch_ms)), float(np.median(row.seq_ms))
            if (e, r, k) == (256, 64, 8) and skew.kind == SkewKind.UNIFORM:
                targets.append((med, seq, batch))
            print(f"{f'E={e} R={r} K={k} S={s}':<22}{skew.label:<20}{med:>7.3f}{p90:>7.3f}"
                  f"{seq:>7.3f}{batch:>7.3f}{np.median(row.ref_times_ms):>7.3f}"
                  f"{np.median(row.eplb_ms):>8.3f}{np.median(row.columns_ms):>6.3f}"
                  f"{np.median(row.batch_faults):>5.0f}"
                  f"{np.mean(row.redundant):>6.1f}"
                  f"{np.mean(row.ref_redundant):>5.0f}{np.mean(row.lower_bound):>5.0f}"
                  f"{max(row.max_per_rank):>6d}{np.mean(row.remote_frac):>8.3f}"
                  f"{np.mean(row.migrated_frac):>7.3f}{np.mean(row.none_imb):>7.3f}"
                  f"{np.mean(row.eplb1_imb):>8.3f}{np.mean(row.eplb_full_imb):>8.3f}")
    print()
    print("columns: med/p90 ms = constructive (cover rule) wall time of a single-layer call,")
    print(f"repeated on one batch; seq ms = per layer, single-layer calls over {layers} layers in")
    print(f"turn; all ms = per layer, one call placing the same {layers} layers; ref ms = MoonEP")
    print("reference rule; eplb ms = one EPLB plan (global policy, +1 slot per rank) from the")
    print("other batches' history; cols = ms to expand one layer's routes into columns on")
    print("the first read of a column (the rows of experts without replicas are kept as the")
    print("count matrix until then; not in the planner's time); flt = minor page faults per")
    print("layer of the all-layers call (new memory the kept results take; each costs about a")
    print("microsecond, more under load);")
    print("repl/ref = redundant experts (cover/reference); lb = sum of per-rank")
    print("lower bounds; max/r = most replicas on one rank (bound E/R); remote = tokens leaving")
    print("their source rank / all tokens; migr = tokens computed on a replica / all tokens;")
    print("none, eplb+1, eplb+m = max/mean rank load without redundancy, with EPLB and 1 or E/R")
    print("extra slots per rank (MoonEP: 1.000 by construction).")
    for single, seq, batch in targets:
        print(f"target at E=256 R=64 K=8 uniform, median per layer < {TARGET_MS} ms: single "
              f"call {_judged(single)}, all layers in one call {_judged(batch)}; in turn, "
              f"every result kept {_judged(seq)} (a caller's own loop: the kept results' new "
              "memory is cache-cold)")


def _judged(ms: float) -> str:
    return f"{ms:.3f} ms ({'under' if ms < TARGET_MS else 'OVER'})"


GEMM_SETTINGS = [(128, 32, GEMM_WORKERS), (1024, 64, 16)]
"""(tile rows, overhead rows per tile, workers): fine tiles on every SM, and coarse tiles on
16 SM groups, where each worker gets only a few tiles and the order matters."""


def gemm_table() -> None:
    print()
    print("expert-GEMM tiles of ranks 0 and 1 after MoonEP balancing, lognormal(sigma=2);")
    print("makespan in row-equivalents (a tile of n rows costs n + overhead); CP-SAT 5 s limit")
    head = (f"{'config':<22}{'rank':>5}{'tile':>6}{'ovh':>5}{'W':>5}{'tiles':>6}{'fixed':>7}"
            f"{'lpt':>7}{'exact':>7}{'bound':>7}")
    print(head + "  status   exact s")
    print("-" * (len(head) + 18))
    config = SolverConfig(max_time_s=5.0, num_workers=1)
    for e, r, k, s in CONFIGS:
        counts = batches(SKEWS[3], e, r, k, s, 1)[0]
        res = plan_constructive(counts, top_k=k)
        for rank in (0, 1):
            experts = [int(x) for x in res.allocation[:, rank] if x > 0]
            for tile_rows, overhead, workers in GEMM_SETTINGS:
                kw = {"num_workers": workers, "tile_rows": tile_rows,
                      "tile_overhead_rows": overhead}
                fixed, lpt = schedule_fixed_order(experts, **kw), schedule_lpt(experts, **kw)
                started = time.perf_counter()
                exact = schedule_exact(experts, config=config, **kw)
                took = time.perf_counter() - started
                print(f"{f'E={e} R={r} K={k} S={s}':<22}{rank:>5d}{tile_rows:>6d}{overhead:>5d}"
                      f"{workers:>5d}{len(fixed.tiles):>6d}{fixed.makespan:>7d}"
                      f"{lpt.makespan:>7d}{exact.makespan:>7d}{exact.lower_bound:>7d}  "
                      f"{exact.status.value:<9}{took:>6.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--layers", type=int, default=MOE_LAYERS)
    parser.add_argument("--skip-gemm", action="store_true", help="placement table only")
    args = parser.parse_args()
    print(f"python {platform.python_version()}, numpy {np.__version__}, "
          f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; "
          f"batches={args.batches}, repeats={args.repeats}, layers={args.layers}")
    print("load average (1, 5, 15 min) before: " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))
    placement_table(args.batches, args.repeats, args.layers)
    print("load average (1, 5, 15 min) after: " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))
    if not args.skip_gemm:
        gemm_table()


if __name__ == "__main__":
    main()
