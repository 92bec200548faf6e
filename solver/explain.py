"""Plain-language explanations: the summary, what binds, why each alternative lost, and what
to relax when nothing fits.

Owns: turning cost-model numbers into sentences (GiB and percentages only here, for people).
Must not: compute costs beyond comparing the numbers it is given.
"""

from api_schemas.architecture import ModelSpec
from api_schemas.hardware import ClusterSpec
from api_schemas.parallel import FullLayers, ParallelConfig, RecomputeMode
from api_schemas.units import GIB
from models.core.memory import MemoryLedger
from models.core.pipeline import schedule_traits
from models.core.step_time import StepEstimate, axis_groups
from solver.candidate_eval import Rejection, ScoredPlan


def gib(num_bytes: float) -> str:
    """Bytes as GiB text."""
    return f"{num_bytes / GIB:.1f} GiB"


def describe_parallel(p: ParallelConfig) -> str:
    """'TP8 x PP16 (interleaved_1f1b, v=2) x DP128, ZeRO-1, micro-batch 1'."""
    parts = [f"TP{p.tp}", f"PP{p.pp}"]
    if p.pp > 1:
        parts[-1] += f" ({p.schedule}" + (f", v={p.vpp}" if p.vpp > 1 else "") + ")"
    parts.append(f"DP{p.dp}")
    if p.cp > 1:
        parts.append(f"CP{p.cp} ({p.cp_kind})")
    if p.ep > 1:
        parts.append(f"EP{p.ep}" + (f"/ETP{p.etp}" if p.etp > 1 else ""))
    text = " x ".join(parts) + f", ZeRO-{p.zero_stage}"
    if p.sequence_parallel:
        text += ", sequence parallel"
    return text + f", micro-batch {p.micro_batch_size}"


def describe_policy(p: ParallelConfig) -> str:
    """The activation policies, merged across identical stages."""
    policies = [p.policy_of(s) for s in range(p.pp)]
    texts = []
    for policy in policies:
        rc = policy.recompute
        if isinstance(rc, FullLayers):
            piece = f"full recompute of {rc.full_layers} layers ({rc.others} for the rest)"
        elif rc == RecomputeMode.SELECTIVE:
            modules = ", ".join(m.value for m in policy.recompute_modules)
            piece = f"selective recompute ({modules})"
        else:
            piece = "no recompute" if rc == RecomputeMode.NONE else f"{rc.value} recompute"
        if policy.fp8_activations:
            piece += ", FP8 activation storage"
        if policy.offload_frac:
            piece += f", {policy.offload_frac:.0%} offloaded"
        texts.append(piece)
    if len(set(texts)) == 1:
        return texts[0] + " on every stage"
    return "; ".join(f"stage {s}: {t}" for s, t in enumerate(texts))


def limit_text(ledger: MemoryLedger) -> str:
    """The per-rank limit in words, naming the safety margin when there is one."""
    if not ledger.margin_bytes:
        return gib(ledger.capacity_bytes)
    return (f"{gib(ledger.capacity_bytes)} ({gib(ledger.capacity_bytes + ledger.margin_bytes)} "
            f"less a {gib(ledger.margin_bytes)} safety margin)")


def binding_constraints(ledger: MemoryLedger) -> list[str]:
    """The stage closest to the cap and what fills it."""
    stage = ledger.stages[ledger.binding_stage]
    slack = ledger.capacity_bytes - stage.total_bytes
    top = sorted(stage.components, key=lambda c: -c.bytes)[:3]
    fill = ", ".join(f"{c.name} {gib(c.bytes)}" for c in top)
    lines = [f"stage {stage.stage} is the fullest: {gib(stage.total_bytes)} of "
             f"{limit_text(ledger)} ({gib(abs(slack))} "
             f"{'free' if slack >= 0 else 'over'}); largest items: {fill}"]
    if ledger.host_peak_bytes:
        lines.append(f"host memory: {gib(ledger.host_peak_bytes)} per GPU of "
                     f"{gib(ledger.host_capacity_per_gpu_bytes)}")
    return lines


def _terms(est: StepEstimate) -> dict[str, float]:
    """`StepEstimate.breakdown_s` under the names the runner-up texts use (offload stalls;
    exposed communication by its upper-case axis)."""
    exposed = {f"{axis} communication": f"exposed {axis.upper()} communication"
               for axis in est.exposed_comm_s}
    return {exposed.get(name, "offload stalls" if name == "offload" else name): value
            for name, value in est.breakdown_s.items()}


def why_not(best: ScoredPlan, other: ScoredPlan, cluster: ClusterSpec) -> str:
    """Why `other` lost: its step-time delta and the terms that grew most."""
    delta = other.estimate.step_time_s / best.estimate.step_time_s - 1.0
    mine, theirs = _terms(best.estimate), _terms(other.estimate)
    grew = sorted(((theirs.get(k, 0.0) - mine.get(k, 0.0), k) for k in set(mine) | set(theirs)),
                  reverse=True)
    floor = 0.005 * best.estimate.step_time_s
    reasons = [f"{name} +{value:.2f} s" for value, name in grew[:2] if value > floor]
    p = other.parallel
    groups = axis_groups(p, gpus_per_node=cluster.gpus_per_node)
    if p.tp > cluster.gpus_per_node or groups["tp"].ranks_per_node < p.tp:
        reasons.insert(0, f"TP={p.tp} crosses the node, so its per-layer collectives run over "
                          f"{cluster.inter_node.bandwidth_bytes_per_s / 1e9:.0f} GB/s links")
    text = f"{describe_parallel(p)}: {delta:+.1%} step time"
    return text + (" (" + "; ".join(reasons) + ")" if reasons else "")


def excess_text(rejection: Rejection) -> str | None:
    """What is over its capacity in a rejection by memory ("stage 2 over by 3.1 GiB", "host
    memory over by 12.0 GiB per GPU"), or None for a rejection by a rule."""
    if rejection.stage is None:
        return None
    if rejection.over_bytes > 0:
        return f"stage {rejection.stage} over by {gib(rejection.over_bytes)}"
    if rejection.host_over_bytes > 0:
        return f"host memory over by {gib(rejection.host_over_bytes)} per GPU"
    return None


def why_rejected(rejection: Rejection) -> str:
    """Why a candidate has no plan at all."""
    c = rejection.candidate
    head = (f"TP{c.tp} x PP{c.pp} ({c.schedule}) x DP{c.dp}"
            + (f" x EP{c.ep}" if c.ep > 1 else "") + f", micro-batch {c.micro_batch_size}")
    if rejection.stage is None:
        return f"{head}: {rejection.reason}"
    extra = ""
    if schedule_traits(c.schedule).weight_copies > 1:
        extra = f" ({c.schedule} keeps two copies of every stage's parameters)"
    even = rejection.reason.replace('does not fit even', 'even')
    if rejection.over_bytes <= 0 < rejection.host_over_bytes:
        return (f"{head}: its GPU memory fits, but host memory stays "
                f"{gib(rejection.host_over_bytes)} per GPU over its share of the node's host "
                f"memory {even}")
    return (f"{head}: stage {rejection.stage} stays {gib(rejection.over_bytes)} over the cap "
            f"{even}{extra}")


def summary(spec: ModelSpec, cluster: ClusterSpec, plan: ScoredPlan) -> str:
    """One paragraph: what was chosen, how fast, what binds."""
    est, ledger = plan.estimate, plan.ledger
    return (
        f"{spec.name} on {est.world_size} x {cluster.gpu.name}: {describe_parallel(plan.parallel)};"
        f" {describe_policy(plan.parallel)}. Predicted {est.step_time_s:.2f} s per step "
        f"({est.num_micro_batches} micro-batches), {est.tokens_per_s:,.0f} tokens/s, "
        f"{est.tflops_per_gpu:.0f} model TFLOP/s per GPU (MFU {est.mfu:.1%}). Peak memory "
        f"{gib(ledger.peak_bytes)} of {limit_text(ledger)} on stage "
        f"{ledger.binding_stage}. Largest time term: {est.bottleneck}. This is a deterministic "
        "cost model, not a measurement.")


__all__ = ["binding_constraints", "describe_parallel", "describe_policy", "gib", "limit_text",
           "summary", "why_not", "why_rejected"]
