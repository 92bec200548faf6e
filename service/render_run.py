"""Human-readable text of the mesh lab and the run-level answers, for the CLI.

Owns: plain-text tables of a mesh layout, the RL memory seesaw, a run estimate, a GPU
frontier, a sensitivity sweep and a calibration fit, each line naming what it shows. Must
not: compute anything beyond unit conversion and layout; it returns strings and never
prints.
"""

from api_schemas.calibration import CalibrationFit, CalibrationProfile
from api_schemas.mesh import MeshResponse
from api_schemas.remote_activations import RemoteActivationsResponse
from api_schemas.rl_seesaw import RlSeesawResponse
from api_schemas.run_level import (
    FrontierResponse,
    RunEstimateResponse,
    SensitivityPoint,
    SensitivityResponse,
)
from api_schemas.units import GIB
from service.render import describe_parallel

MESH_TEXT_MAX_RANKS = 16
"""Ranks printed one per line; the rest are in the JSON answer."""


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]
    return ["  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True))
            for row in [header, *rows]]


def render_remote_activations(result: RemoteActivationsResponse) -> str:
    """Per pipeline rank: GPU GiB before and after, sent and received, traffic per step."""
    header = ["stage", "before", "after", "movable", "sent", "received", "in-flight",
              "GiB/step", "s/step"]
    rows = [[str(s.stage), f"{s.total_bytes_before / GIB:.2f}",
             f"{s.total_bytes_after / GIB:.2f}", f"{s.movable_bytes / GIB:.2f}",
             f"{s.sent_bytes / GIB:.2f}", f"{s.received_bytes / GIB:.2f}",
             str(s.in_flight_units), f"{s.bytes_per_step / GIB:.1f}",
             f"{s.seconds_per_step:.3f}"] for s in result.stages]
    lines = ["Stored activations balanced across the pipeline ranks (GiB per GPU):"]
    lines += _table(header, rows)
    lines.append(f"peak {result.peak_bytes_before / GIB:.2f} -> "
                 f"{result.peak_bytes_after / GIB:.2f} GiB of "
                 f"{result.capacity_bytes / GIB:.2f} usable "
                 f"({'fits' if result.fits_after else 'DOES NOT FIT'}); link: {result.link}")
    lines += [f"assumes: {a}" for a in result.assumptions]
    return "\n".join(lines)


def render_rl_seesaw(result: RlSeesawResponse) -> str:
    """GPU and host memory of each phase, the transitions and their seconds, the KV cache
    and the weight update."""
    header = ["phase", "GPU GiB", "host GiB/GPU", "fits"]
    rows = [[p.name, f"{p.gpu_bytes / GIB:.2f}", f"{p.host_bytes_per_gpu / GIB:.2f}",
             "yes" if p.fits_gpu else "NO"] for p in result.phases]
    lines = [f"Colocated RL on training stage {result.binding_stage}'s GPU "
             f"({result.capacity_bytes / GIB:.2f} GiB usable, "
             f"{result.host_capacity_per_gpu_bytes / GIB:.0f} GiB host per GPU):"]
    lines += _table(header, rows)
    lines.append("transitions:")
    lines += [f"  {t.before} -> {t.after}: {t.name}, {t.bytes_per_gpu / GIB:.2f} GiB per GPU, "
              f"{t.seconds:.2f} s ({t.link})" for t in result.transitions]
    lines.append(f"  total {result.transition_s:.2f} s per iteration")
    kv = result.kv_cache
    lines.append(f"KV cache: {kv.bytes_per_token_per_gpu:.0f} bytes per token per GPU, pool "
                 f"{kv.gpu_pool_bytes / GIB:.2f} GiB = {kv.gpu_pool_tokens} tokens per instance, "
                 f"{kv.active_contexts} whole context(s) on the GPU"
                 + (f", {kv.parked_contexts} parked in {kv.external_pool_bytes_per_gpu / GIB:.0f} "
                    f"GiB of host DRAM per GPU ({kv.prefetch_s:.2f} s to bring one back; "
                    f"{kv.write_back_bytes_per_gpu / GIB:.0f} GiB written back against "
                    f"{kv.write_through_bytes_per_gpu / GIB:.0f} GiB written through)"
                    if kv.external_pool_bytes_per_gpu else ""))
    engine = result.checkpoint_engine
    excess = engine.received_bytes_per_gpu // max(1, engine.needed_bytes_per_gpu)
    lines.append(f"weight update: {engine.weight_bytes / GIB:.0f} GiB in {engine.num_buckets} "
                 f"buckets, serial {engine.serial_s:.1f} s, pipelined {engine.pipelined_s:.1f} s; "
                 f"each GPU receives {excess}x its shard")
    ref = result.reference
    lines.append(f"reference model: {ref.weight_bytes / GIB:.2f} GiB per GPU, "
                 + ("in the gradient buffers" if ref.extra_gpu_bytes == 0 else
                    f"{ref.extra_gpu_bytes / GIB:.2f} GiB extra on the GPU")
                 + f" (per {ref.slot}), {ref.h2d_s:.2f} s from host")
    lines.append("fits" if result.fits else "DOES NOT FIT")
    lines += [f"assumes: {a}" for a in result.assumptions]
    return "\n".join(lines)


def render_mesh(result: MeshResponse) -> str:
    """World size, validity, degrees, problems, group placement and the first ranks."""
    degrees = " ".join(f"{axis}={value}" for axis, value in result.degrees.items())
    lines = [(f"mesh of {result.world_size} GPUs, order {result.order}: "
             f"{'valid' if result.valid else 'INVALID'} ({degrees})")]
    for problem in result.problems:
        fix = f" -> try {problem.alternative.change}" if problem.alternative else ""
        lines.append(f"  {problem.severity.value} [{problem.rule}] {problem.field}: "
                     f"{problem.message}{fix}")
    if result.axes:
        header = ["group", "size", "groups", "intra-node", "nodes spanned", "collectives"]
        rows = [[axis.kind, str(axis.group_size), str(axis.num_groups),
                 "yes" if axis.all_intra_node else "no", str(axis.max_nodes_spanned),
                 ", ".join(f"{c.collective.value} {c.frequency}" for c in axis.collectives)
                 or "-"] for axis in result.axes]
        lines += _table(header, rows)
    shown = result.ranks[:MESH_TEXT_MAX_RANKS]
    if shown:
        lines.append("rank  node  coordinates  (tp group | dp group | pp group)")
    for rank in shown:
        coords = " ".join(f"{k}{v}" for k, v in rank.coords.items() if result.degrees.get(k, 1) > 1)
        groups = " | ".join(",".join(map(str, rank.groups.get(kind, [])))
                            for kind in ("tp", "dp", "pp"))
        lines.append(f"{rank.rank:4d}  {rank.node:4d}  {coords or '-'}  ({groups})")
    if shown and (result.ranks_truncated or len(result.ranks) > len(shown)):
        lines.append(f"  ... {result.world_size - len(shown)} more ranks (see --json)")
    return "\n".join(lines)


def render_run_estimate(result: RunEstimateResponse) -> str:
    """Steps, wall time, GPU-hours and cost of the run, and the layout they rest on."""
    layout = (describe_parallel(result.plan.parallel) if result.plan.parallel is not None
              else "the given configuration")
    cost = (f", cost {result.cost:,.0f} at {result.gpu_hour_price:g} per GPU-hour"
            if result.cost is not None and result.gpu_hour_price is not None else "")
    return "\n".join([
        (f"train {result.token_budget:,} tokens: {result.num_steps:,} steps of "
        f"{result.tokens_per_step:,} tokens"),
        f"  step time   {result.step_time_s:.3f} s on {result.world_size} GPUs ({layout})",
        f"  wall time   {result.train_days:.1f} days ({result.train_time_s:,.0f} s)",
        f"  GPU-hours   {result.gpu_hours:,.0f}{cost}",
        *_range_lines(result),
        *_reliability_lines(result),
        f"  plan        {result.status.value}: {result.plan.explanation.summary}",
    ])


def _range_lines(result: RunEstimateResponse) -> list[str]:
    """The wall time and GPU-hours at the ends of the plan's predicted step-time range, and
    what backs it (or why there is none)."""
    band = result.plan.predicted_range
    if band is None:
        return []
    if result.train_days_low is None or result.train_days_high is None or \
            result.gpu_hours_low is None or result.gpu_hours_high is None:
        return [f"  range       {band.text}"]
    return [f"  range       {result.train_days_low:.1f}-{result.train_days_high:.1f} days, "
            f"{result.gpu_hours_low:,.0f}-{result.gpu_hours_high:,.0f} GPU-hours; "
            f"{band.text}"]


def _reliability_lines(result: RunEstimateResponse) -> list[str]:
    """Checkpoints and failures: the run's expected wall time beside the failure-free one."""
    rel = result.reliability
    cost = f", cost {rel.cost:,.0f}" if rel.cost is not None else ""
    return [
        (f"  checkpoint  {rel.checkpoint_bytes / GIB:,.0f} GiB "
         f"({rel.checkpoint_bytes_per_rank / GIB:.2f} GiB per rank), written in "
         f"{rel.checkpoint_write_s:.1f} s, blocks {rel.checkpoint_blocking_s:.1f} s"),
        (f"  failures    job MTBF {rel.job_mtbf_s / 3600:.1f} h, about "
         f"{rel.expected_failures:,.1f} over the run; save every "
         f"{rel.checkpoint_interval_s / 60:.0f} min (Daly {rel.daly_interval_s / 60:.0f}, "
         f"Young {rel.young_interval_s / 60:.0f})"),
        (f"  with them   {rel.wall_days:.1f} days, goodput {rel.goodput:.1%}, "
         f"{rel.gpu_hours:,.0f} GPU-hours{cost}"),
    ]


def render_frontier(result: FrontierResponse) -> str:
    """One row per cluster size; '*' marks the Pareto-optimal ones."""
    header = ["pareto", "nodes", "GPUs", "used", "step s", "tokens/s", "GPU-h/step",
              "cost/token", "layout"]
    rows = []
    for p in result.points:
        rows.append([
            "*" if p.pareto else "", str(p.num_nodes), str(p.num_gpus), str(p.world_size),
            f"{p.step_time_s:.3f}" if p.step_time_s is not None else p.status.value,
            f"{p.tokens_per_s:,.0f}" if p.tokens_per_s is not None else "-",
            f"{p.gpu_hours_per_step:.4f}" if p.gpu_hours_per_step is not None else "-",
            f"{p.cost_per_token:.3e}" if p.cost_per_token is not None else "-",
            describe_parallel(p.parallel) if p.parallel is not None else "-"])
    lines = ["GPU count against step time and cost (a deterministic model):"]
    lines += _table(header, rows)
    lines.append(f"Pareto-optimal GPU counts: {', '.join(map(str, result.pareto_num_gpus))} "
                 f"({result.wall_time_s:.1f} s)")
    return "\n".join(lines)


def _sensitivity_row(point: SensitivityPoint) -> list[str]:
    factor = point.factor.value if point.factor is not None else "baseline"
    base = ("no longer fits" if point.baseline_fits is False else
            f"{point.baseline_step_time_s:.3f}" if point.baseline_step_time_s is not None
            else "-")
    # 0.0 for a change that rounds to zero, so that -0.00004 does not print as "-0.0%".
    change = (f"{round(point.step_time_change_frac, 3) + 0.0:+.1%}"
              if point.step_time_change_frac is not None else "-")
    return [factor, f"{point.delta:+.0%}",
            f"{point.step_time_s:.3f}" if point.step_time_s is not None else point.status.value,
            change, "yes" if point.plan_changed else "no", base,
            describe_parallel(point.parallel) if point.parallel is not None else "-"]


def render_sensitivity(result: SensitivityResponse) -> str:
    """The winner at every point, its change against the baseline, and the baseline layout's
    step time there."""
    header = ["factor", "change", "step s", "vs baseline", "plan changed",
              "baseline layout s", "winning layout"]
    rows = [_sensitivity_row(result.baseline)] + [_sensitivity_row(p) for p in result.points]
    lines = ["Sensitivity of the plan (a deterministic model):"]
    lines += _table(header, rows)
    lines += [f"  note: {note}" for note in result.notes]
    return "\n".join(lines)


def render_calibration(result: CalibrationProfile | CalibrationFit) -> str:
    """The fitted constants with their uncertainty, the errors before and after, and each
    run; a stored profile also names its version."""
    fit = result.fit if isinstance(result, CalibrationProfile) else result
    head = (f"profile {result.name} v{result.version} ({result.gpu}, {result.family} kernels)"
            if isinstance(result, CalibrationProfile) else "fit (not stored: no --server)")
    scale, overhead = fit.gemm_efficiency_scale, fit.step_overhead_s
    lines = [
        f"{head}: {fit.num_runs} runs, {fit.method}",
        (f"  GEMM efficiency x{scale.value:.4f} +- {scale.standard_error:.4f} "
         f"(leave-one-out {scale.leave_one_out_min:.4f}..{scale.leave_one_out_max:.4f})"),
        (f"  step overhead   {overhead.value:.4f} s +- {overhead.standard_error:.4f} s "
         f"(leave-one-out {overhead.leave_one_out_min:.4f}..{overhead.leave_one_out_max:.4f})"),
        *([f"  MoE host issue  {issue.value * 1e3:.3f} ms +- {issue.standard_error * 1e3:.3f} ms "
           f"(leave-one-out {issue.leave_one_out_min * 1e3:.3f}.."
           f"{issue.leave_one_out_max * 1e3:.3f})"] if (issue := fit.moe_host_issue_s) else []),
        *([f"  note: {fit.moe_host_issue_note}"] if fit.moe_host_issue_note else []),
        (f"  mean |error|    uncalibrated {fit.uncalibrated_relative_error:.1%}, "
         f"leave-one-out {fit.leave_one_out_relative_error:.1%}, "
         f"fitted {fit.fitted_relative_error:.1%}"),
        f"  {'run':24s} {'measured s':>10s} {'uncal. s':>9s} {'fitted s':>9s} {'held-out s':>10s}",
    ]
    lines += [f"  {r.label[:24]:24s} {r.measured_step_time_s:10.3f} "
              f"{r.uncalibrated_step_time_s:9.3f} {r.fitted_step_time_s:9.3f} "
              f"{r.leave_one_out_step_time_s:10.3f}" for r in fit.runs]
    for parsed in fit.logs:
        lines.append(f"  log {parsed.label}: {parsed.framework.value}, steps "
                     f"{parsed.steps_used[0]}..{parsed.steps_used[-1]} used "
                     f"({len(parsed.steps_used)} lines, warm-up {parsed.warmup_skipped} "
                     f"skipped), median {parsed.step_time_s:.3f} s")
    if fit.microbenchmarks is not None:
        for c in fit.microbenchmarks.constants:
            lines.append(f"  microbenchmark {c.name}: {c.value:.4g} +- {c.standard_error:.2g} "
                         f"({c.num_entries} entries; mean |error| uncalibrated "
                         f"{c.uncalibrated_relative_error:.1%}, fitted "
                         f"{c.fitted_relative_error:.1%})")
        lines += [f"  note: {note}" for note in fit.microbenchmarks.notes]
    lines.append("  (a deterministic model fitted to the runs given, not a measurement)")
    return "\n".join(lines)


__all__ = ["render_calibration", "render_frontier", "render_mesh", "render_remote_activations",
           "render_rl_seesaw", "render_run_estimate", "render_sensitivity"]
