"""Human-readable text of API results, for the CLI.

Owns: the one bytes -> GiB helper and plain-text tables of a memory ledger, a plan or
evaluation, a collective estimate and a problem. Must not: compute anything beyond unit
conversion and layout; it returns strings and never prints.
"""

from api_schemas.collectives import CollectiveEstimateResponse
from api_schemas.parallel import ParallelConfig
from api_schemas.plan import MemoryReport, PlanResponse
from api_schemas.problems import ProblemDetail
from api_schemas.units import GIB


def gib(num_bytes: int | float) -> str:
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
    recompute = parallel.recompute if isinstance(parallel.recompute, str) else (
        f"full x{parallel.recompute.full_layers} layers")
    extras = [str(parallel.schedule.value), f"mbs {parallel.micro_batch_size}",
              f"ZeRO-{parallel.zero_stage}", f"recompute {recompute}"]
    if parallel.sequence_parallel:
        extras.append("SP")
    return f"{degrees} | {', '.join(extras)}"


def render_plan(plan: PlanResponse) -> str:
    """Status, configuration, step time, throughput, memory, explanation, alternatives."""
    lines = [f"{plan.status.value.upper()}: {plan.model_name or 'model'} on "
             f"{plan.world_size} x {plan.gpu or 'GPU'}" + (f"  (plan {plan.id})" if plan.id
                                                            else "")]
    if plan.parallel is not None:
        lines.append(f"  layout      {describe_parallel(plan.parallel)}, "
                     f"{plan.num_micro_batches} micro-batches")
    if plan.time is not None:
        exposed = ", ".join(f"{axis} {seconds:.3f} s"
                            for axis, seconds in plan.time.exposed_comm_s.items() if seconds)
        lines.append(f"  step time   {plan.time.step_time_s:.3f} s (compute "
                     f"{plan.time.compute_s:.3f} s, recompute {plan.time.recompute_s:.3f} s, "
                     f"bubble {plan.time.bubble_s:.3f} s"
                     + (f", exposed comm {exposed}" if exposed else "") + ")")
    if plan.throughput is not None:
        t = plan.throughput
        lines.append(f"  throughput  {t.tokens_per_s:,.0f} tokens/s, {t.tflops_per_gpu:.0f} "
                     f"TFLOP/s per GPU, MFU {t.mfu:.1%}, HFU {t.hfu:.1%}")
    if plan.memory is not None:
        m = plan.memory
        lines.append(f"  memory      peak {gib(m.peak_bytes)} (stage {m.binding_stage}) of "
                     f"{gib(m.capacity_bytes)}: {'fits' if m.fits else 'DOES NOT FIT'}")
    if plan.bottleneck:
        lines.append(f"  bottleneck  {plan.bottleneck}")
    lines.append(f"  why         {plan.explanation.summary}")
    lines += [f"  binding     {item}" for item in plan.explanation.binding_constraints]
    lines += [f"  fix         {item}" for item in plan.explanation.relaxations]
    for alt in plan.alternatives:
        step = f"{alt.step_time_s:.3f} s" if alt.step_time_s is not None else "-"
        lines.append(f"  alternative {describe_parallel(alt.parallel)}: {step}; {alt.why_not}")
    if plan.solver is not None:
        s = plan.solver
        gap = f", gap {s.gap:.2%}" if s.gap is not None else ""
        lines.append(f"  search      {s.candidates} candidates, {s.pruned} pruned, "
                     f"{s.evaluated} scored in {s.wall_time_s:.2f} s{gap}")
    return "\n".join(lines)


def render_collective(result: CollectiveEstimateResponse) -> str:
    """Algorithm, links, bytes per rank and the alpha-beta split of one collective."""
    lines = [f"{result.collective.value} of {gib(result.message_bytes)} over "
             f"{result.num_ranks} ranks: {result.algorithm.value} on {result.link.value}",
             f"  time {result.time_s * 1e3:.3f} ms (alpha {result.alpha_s * 1e3:.3f} ms, "
             f"beta {result.beta_s * 1e3:.3f} ms)",
             f"  sent per rank {gib(result.bytes_sent_per_rank)}; bus bandwidth "
             f"{result.bus_bandwidth_bytes_per_s / 1e9:.1f} GB/s"]
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
    "render_plan",
    "render_problem",
]
