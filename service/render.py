"""Human-readable text of API results, for the CLI.

Owns: the one bytes -> GiB helper and plain-text tables of a memory ledger, a plan or
evaluation, a collective estimate and a problem. Must not: compute anything beyond unit
conversion and layout; it returns strings and never prints.
"""

from api_schemas.collectives import CollectiveEstimateResponse
from api_schemas.moe import MoePlacementLayersResponse, MoePlacementResponse
from api_schemas.parallel import ParallelConfig, StagePolicy
from api_schemas.pipeline import PipelineOptimizeResponse, PipelineSimulateResponse
from api_schemas.plan import Alternative, MemoryReport, PlanResponse, TimeBreakdown
from api_schemas.problems import ProblemDetail
from api_schemas.units import GIB

TIMELINE_TEXT_MAX_OPS = 400
"""Timelines up to this many ops are printed op by op."""


def gib(num_bytes: float) -> str:
    """Bytes as GiB (2**30) with two decimals, e.g. '79.94 GiB'."""
    return f"{num_bytes / GIB:.2f} GiB"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=True)]
    lines = ["  ".join(cell.rjust(width) for cell, width in zip(header, widths, strict=True))]
    lines += ["  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True))
              for row in rows]
    return lines


def _gib_number(num_bytes: int) -> str:
    return f"{num_bytes / GIB:.2f}"


def render_memory(report: MemoryReport) -> str:
    """Per-stage memory in GiB with the capacity, the binding stage and whether it fits."""
    header = ["stage", "layers", "params", "grads", "optim", "activ", "other", "total",
              "in-flight"]
    rows = [[str(s.stage), str(s.num_layers), _gib_number(s.parameters_bytes),
             _gib_number(s.gradients_bytes), _gib_number(s.optimizer_bytes),
             _gib_number(s.activations_bytes), _gib_number(s.other_bytes),
             _gib_number(s.total_bytes), str(s.in_flight_micro_batches)]
            for s in report.stages]
    verdict = "fits" if report.fits else "DOES NOT FIT"
    lines = [f"Per-GPU memory (GiB) of {len(report.stages)} pipeline stage(s):"]
    lines += _table(header, rows)
    lines.append(f"peak {gib(report.peak_bytes)} on stage {report.binding_stage} of "
                 f"{gib(report.capacity_bytes)} usable: {verdict}")
    if report.margin_bytes:
        lines.append(f"safety margin: {gib(report.margin_bytes)} kept free (limit "
                     f"{gib(report.limit_bytes)}); "
                     + "; ".join(f"{p.name} {gib(p.bytes)}"
                                 f"{' (in the peak)' if p.in_peak else ''}"
                                 for p in report.margin_parts))
    if report.host_peak_bytes:
        lines.append(f"host memory: {gib(report.host_peak_bytes)} per GPU of "
                     f"{gib(report.host_capacity_per_gpu_bytes)}")
    return "\n".join(lines)


def describe_parallel(parallel: ParallelConfig) -> str:
    """A one-line description such as 'TP8 PP16 DP128 | 1f1b, mbs 1, ZeRO-1, SP'."""
    degrees = " ".join(f"{name.upper()}{value}" for name, value in (
        ("tp", parallel.tp), ("pp", parallel.pp), ("dp", parallel.dp), ("cp", parallel.cp),
        ("ep", parallel.ep), ("etp", parallel.etp), ("vpp", parallel.vpp))
        if value > 1 or name in ("tp", "pp", "dp"))
    extras = [str(parallel.schedule.value), f"mbs {parallel.micro_batch_size}",
              f"ZeRO-{parallel.zero_stage}"]
    if parallel.sequence_parallel:
        extras.append("SP")
    policies = {_describe_policy(parallel.policy_of(stage)) for stage in range(parallel.pp)}
    extras.append(policies.pop() if len(policies) == 1 else "per-stage activation policies")
    return f"{degrees} | {', '.join(extras)}"


def _describe_policy(policy: StagePolicy) -> str:
    recompute = policy.recompute if isinstance(policy.recompute, str) else (
        f"full x{policy.recompute.full_layers} layers")
    text = f"recompute {recompute}"
    if policy.fp8_activations:
        text += ", FP8 activations"
    if policy.offload_frac:
        text += f", {policy.offload_frac:.0%} offloaded"
    return text


def _step_time_line(time: TimeBreakdown) -> str:
    """The step time and its parts: every term that prints as at least a millisecond, so
    the printed parts add up to the step time."""
    exposed = ", ".join(f"{axis} {seconds:.3f} s"
                        for axis, seconds in time.exposed_comm_s.items() if seconds)
    others = {"offload": time.offload_stall_s, "optimizer": time.optimizer_s,
              **time.overheads_s}
    rest = "".join(f", {name} {seconds:.3f} s" for name, seconds in others.items()
                   if seconds >= 5e-4)
    return (f"  step time   {time.step_time_s:.3f} s (compute "
            f"{time.compute_s:.3f} s, recompute {time.recompute_s:.3f} s, "
            f"bubble {time.bubble_s:.3f} s"
            + (f", exposed comm {exposed}" if exposed else "") + rest + ")")


def _configuration_lines(plan: PlanResponse) -> list[str]:
    """Layout, step time, throughput, predicted range and memory, where the plan has them."""
    lines = []
    if plan.parallel is not None:
        lines.append(f"  layout      {describe_parallel(plan.parallel)}, "
                     f"{plan.num_micro_batches} micro-batches")
    if plan.time is not None:
        lines.append(_step_time_line(plan.time))
    if plan.throughput is not None:
        t = plan.throughput
        lines.append(f"  throughput  {t.tokens_per_s:,.0f} tokens/s, {t.tflops_per_gpu:.0f} "
                     f"TFLOP/s per GPU, MFU {t.mfu:.1%}, HFU {t.hfu:.1%}")
    if plan.predicted_range is not None:
        lines.append(f"  range       {plan.predicted_range.text}")
    if plan.memory is not None:
        m = plan.memory
        margin = (f" less a {gib(m.margin_bytes)} safety margin" if m.margin_bytes else "")
        lines.append(f"  memory      peak {gib(m.peak_bytes)} (stage {m.binding_stage}) of "
                     f"{gib(m.capacity_bytes)}{margin}: {'fits' if m.fits else 'DOES NOT FIT'}")
    return lines


def _runtime_lines(plan: PlanResponse) -> list[str]:
    """The runtime features taken, and why the planner left each other one off."""
    taken = [use.feature for use in plan.runtime_features if use.on]
    lines = ([f"  runtime     {', '.join(taken) if taken else 'none'}"]
             if plan.runtime_features else [])
    return lines + [f"  runtime off {use.feature}: {use.why_not}"
                    for use in plan.runtime_features
                    if not use.on and use.decided_by == "planner" and use.why_not]


def _alternative_line(alt: Alternative) -> str:
    step = f"{alt.step_time_s:.3f} s" if alt.step_time_s is not None else "does not fit"
    delta = f" {alt.delta_frac:+.1%}" if alt.delta_frac is not None else ""
    gpus = alt.world_size or alt.parallel.world_size
    band = alt.predicted_range
    if band is not None and band.step_time_s_low is not None and \
            band.step_time_s_high is not None:
        step += f" (range {band.step_time_s_low:.3f}-{band.step_time_s_high:.3f} s)"
    return (f"  alternative [{step}{delta}, {gpus} GPUs, v={alt.parallel.vpp}, "
            f"{describe_parallel(alt.parallel)}] {alt.why_not}")


def render_plan(plan: PlanResponse) -> str:
    """Status, configuration, step time, throughput, memory, explanation, alternatives."""
    # No configuration (infeasible, or out of time): name the GPU without a count of 0.
    on = (f"{plan.world_size} x {plan.gpu or 'GPU'}" if plan.world_size
          else plan.gpu or "GPU")
    lines = [f"{plan.status.value.upper()}: {plan.model_name or 'model'} on {on}"
             + (f"  (plan {plan.id})" if plan.id else "")]
    lines += _configuration_lines(plan)
    if plan.bottleneck:
        lines.append(f"  bottleneck  {plan.bottleneck}")
    lines.append(f"  why         {plan.explanation.summary}")
    lines += [f"  binding     {item}" for item in plan.explanation.binding_constraints]
    lines += [f"  fix         {item}" for item in plan.explanation.relaxations]
    if plan.cost is not None:
        c = plan.cost
        lines.append(f"  cost        {c.cost_per_token:.3e} per token "
                     f"({c.cost_per_million_tokens:.4f} per million, {c.cost_per_step:.2f} per "
                     f"step) at {c.gpu_hour_price:g} per GPU-hour")
    lines += _runtime_lines(plan)
    if plan.expert_parallel is not None:
        lines.append(f"  experts     {plan.expert_parallel.summary}")
    lines += [_alternative_line(alt) for alt in plan.alternatives]
    if plan.solver is not None:
        s = plan.solver
        gap = f", gap {s.gap:.2%}" if s.gap is not None else ""
        lines.append(f"  search      {s.candidates} candidates, {s.pruned} pruned, "
                     f"{s.evaluated} scored in {s.wall_time_s:.2f} s{gap}")
    return "\n".join(lines)


def render_collective(result: CollectiveEstimateResponse) -> str:
    """Algorithm, links, bytes per rank, the alpha-beta split of one collective and its
    exposed against hidden time."""
    lines = [f"{result.collective.value} of {gib(result.message_bytes)} over "
             f"{result.num_ranks} ranks: {result.algorithm.value} on {result.link.value}",
             f"  time {result.time_s * 1e3:.3f} ms (alpha {result.alpha_s * 1e3:.3f} ms, "
             f"beta {result.beta_s * 1e3:.3f} ms)",
             f"  sent per rank {gib(result.bytes_sent_per_rank)}; bus bandwidth "
             f"{result.bus_bandwidth_bytes_per_s / 1e9:.1f} GB/s",
             f"  exposed {result.exposed_s * 1e3:.3f} ms, hidden behind compute "
             f"{result.hidden_s * 1e3:.3f} ms"]
    return "\n".join(lines)


def render_pipeline(result: PipelineSimulateResponse) -> str:
    """Makespan, bubble, per-rank peaks, the optimizer's proof or gap, and for short
    timelines the op order of every rank."""
    lines = [f"makespan {result.makespan:.4f} s, bubble {result.bubble_fraction:.1%} "
             f"(span bubble {result.span_bubble_fraction:.1%})"]
    if isinstance(result, PipelineOptimizeResponse):
        baseline = result.baseline_schedule.value if result.baseline_schedule else "none"
        lines.append("optimised op order on the requested schedule's chunk placement (the "
                     "order is free, so it is not that schedule's own), at most "
                     f"{result.memory_limit_chunks} micro-batch chunks in flight per rank")
        lines.append(f"{result.status}: lower bound {result.lower_bound:.4f} s, gap "
                     f"{result.gap:.2%}, method {result.method}; best handcrafted "
                     f"({baseline}) {result.baseline_makespan:.4f} s")
    header = ["rank", "busy s", "idle s", "peak in-flight", "peak until B"]
    rows = [[str(r), f"{busy:.4f}", f"{idle:.4f}", f"{peak:g}", f"{until_b:g}"]
            for r, (busy, idle, peak, until_b) in enumerate(zip(
                result.busy_s, result.idle_s, result.peak_in_flight, result.peak_until_b,
                strict=True))]
    lines += _table(header, rows)
    if result.timeline and len(result.timeline) <= TIMELINE_TEXT_MAX_OPS:
        by_rank: dict[int, list[str]] = {}
        for entry in sorted(result.timeline, key=lambda e: (e.stage, e.start)):
            chunk = f"/{entry.chunk}" if any(e.chunk for e in result.timeline) else ""
            by_rank.setdefault(entry.stage, []).append(f"{entry.op}{entry.micro_batch}{chunk}")
        lines.append("op order per rank (op, micro-batch[/chunk]):")
        lines += [f"  {rank}: {' '.join(ops)}" for rank, ops in sorted(by_rank.items())]
    return "\n".join(lines)


def render_placement(result: MoePlacementResponse) -> str:
    """Per-rank load and hosted replicas, with the traffic the placement costs; apart from
    rank balance, each rank's padded expert rows and (with a GPU) its expert GEMM time."""
    lines = [f"{result.planner.value} placement ({result.status.value}): every rank computes "
             f"{result.capacity_per_rank} tokens; {result.num_redundant_experts} replicas "
             f"(bound E/R = {result.redundant_bound_per_rank} per rank); without replicas "
             f"max/mean load {result.no_redundancy_imbalance:.3f}"]
    times = result.rank_expert_gemm_s
    header = ["rank", "load", "replicated expert ids", "lower bound", "padded rows",
              "expert GEMMs"]
    rows = [[str(r), str(load), ",".join(map(str, hosted)) or "-", str(bound), str(padded),
             f"{times[r] * 1e6:.2f} us" if times is not None else "-"]
            for r, (load, hosted, bound, padded) in enumerate(zip(
                result.rank_loads, result.redundant_experts, result.lower_bound_per_rank,
                result.rank_gemm_rows, strict=True))]
    lines += _table(header, rows)
    inside = (f"slowest rank's expert GEMMs {result.expert_gemm_makespan_s * 1e6:.2f} us "
              f"(max/mean {result.expert_gemm_imbalance:.3f})"
              if result.expert_gemm_makespan_s is not None
              and result.expert_gemm_imbalance is not None
              else f"padded rows max/mean {result.gemm_rows_imbalance:.3f}")
    lines.append(f"rank balance after placement max/mean {result.rank_load_imbalance:.3f}; "
                 f"inside ranks: {inside}")
    lines.append(f"remote tokens {result.remote_tokens}, migrated {result.migrated_tokens}; "
                 f"prefetch {gib(result.prefetch_bytes)}, gradient reduce "
                 f"{gib(result.grad_reduce_bytes)}; {result.wall_time_s * 1e3:.2f} ms")
    return "\n".join(lines)


def render_placement_layers(result: MoePlacementLayersResponse) -> str:
    """One line per layer: status, replicas against the bound and the lower bound, traffic;
    then the planning time of all layers."""
    header = ["layer", "status", "replicas", "lower bound", "max/rank", "bound E/R",
              "remote tokens", "migrated", "max/mean before"]
    rows = [[str(i), x.status.value, str(x.num_redundant_experts),
             str(sum(x.lower_bound_per_rank)), str(x.max_redundant_per_rank),
             str(x.redundant_bound_per_rank), str(x.remote_tokens), str(x.migrated_tokens),
             f"{x.no_redundancy_imbalance:.3f}"] for i, x in enumerate(result.layers)]
    lines = [f"{len(result.layers)} layers placed; every rank of every layer computes "
             "exactly S*K tokens"]
    lines += _table(header, rows)
    lines.append(f"{result.wall_time_s * 1e3:.2f} ms for all layers "
                 f"({result.wall_time_s / len(result.layers) * 1e3:.3f} ms per layer)")
    return "\n".join(lines)

def render_problem(problem: ProblemDetail) -> str:
    """'error [code]: detail' plus field errors, one per line."""
    lines = [f"error [{problem.code}]: {problem.detail}"]
    for err in problem.errors or []:
        lines.append(f"  {'.'.join(str(part) for part in err.loc)}: {err.msg}")
    return "\n".join(lines)


__all__ = [
    "describe_parallel",
    "gib",
    "render_collective",
    "render_memory",
    "render_pipeline",
    "render_placement",
    "render_placement_layers",
    "render_plan",
    "render_problem",
]
