"""Mesh rules about layers, schedules, batches and sequences.

Owns: one function per rule returning a `Finding` (with its fix) or None: pipeline depth
against the layer count, the layer split and interleaving, schedule prerequisites (DualPipe's
even PP and micro-batch count), batch divisibility, sequence divisibility for CP and
sequence parallelism. Rules that need the training recipe are skipped without one. Must
not: search for alternatives or raise (that is `validation.py`).
"""

from collections.abc import Callable
from math import log2

from api_schemas import ContextParallelKind, PipelineSchedule
from models.core.layer_kinds import has_routed_experts
from models.core.mesh.candidates import (
    Candidate,
    Finding,
    MeshContext,
    Severity,
    balanced_layers,
    degree_room,
    divisors,
    largest_divisor,
    nearest_divisor,
    num_micro_batches,
    rebalanced,
    with_changes,
)
from models.core.pipeline import StagePlacement, schedule_traits

E, W = Severity.ERROR, Severity.WARNING


def pp_at_most_layers(ctx: MeshContext, cand: Candidate) -> Finding | None:
    """Every pipeline rank needs at least one layer."""
    pp, layers = cand.parallel.pp, ctx.arch.num_layers
    if pp <= layers:
        return None
    return Finding(
        rule="pp-at-most-layers", severity=E, field="parallel.pp",
        message=f"pp={pp} exceeds num_layers={layers}: some pipeline ranks would hold no layer",
        values={"pp": pp, "num_layers": layers},
        fix=lambda c, x: _shrink_pp(c, x, lambda d: d <= layers))


def layers_split(ctx: MeshContext, cand: Candidate) -> Finding | None:
    """Without layers_per_stage, pp (x vpp) must divide the layers; with it, it must add up."""
    p, layers = cand.parallel, ctx.arch.num_layers
    if p.pp > layers:
        return None
    if p.layers_per_stage is not None:
        total = sum(p.layers_per_stage)
        if total != layers:
            return Finding(
                rule="layers-per-stage-sum", severity=E, field="parallel.layers_per_stage",
                message=f"layers_per_stage sums to {total} but the model has {layers} layers",
                values={"sum": total, "num_layers": layers}, fix=_even_split)
        bad = [n for n in p.layers_per_stage if n % p.vpp]
        if bad:
            return Finding(
                rule="vpp-divides-layers", severity=W, field="parallel.layers_per_stage",
                message=f"vpp={p.vpp} does not divide the stage sizes {bad}: chunks of a rank "
                "differ by one layer, which Megatron-LM only runs with an explicit uneven "
                "split", values={"vpp": p.vpp}, fix=_even_split)
        return None
    units = p.pp * p.vpp
    if layers % units == 0:
        return None
    rule = "pp-divides-layers" if p.vpp == 1 else "vpp-divides-layers"
    return Finding(
        rule=rule, severity=W, field="parallel.pp" if p.vpp == 1 else "parallel.vpp",
        message=f"pp*vpp = {p.pp}*{p.vpp} = {units} does not divide num_layers={layers} and "
        "no layers_per_stage is given: the plan gives the extra layers to middle stages, "
        "which Megatron-LM runs only with an explicit uneven split "
        "(--decoder-first/last-pipeline-num-layers)",
        values={"pp": p.pp, "vpp": p.vpp, "num_layers": layers}, fix=_even_split)


def _even_split(ctx: MeshContext, cand: Candidate) -> Candidate | None:
    p, layers = cand.parallel, ctx.arch.num_layers
    if p.vpp > 1 and layers % (p.pp * p.vpp) == 0:
        return with_changes(cand, layers_per_stage=None)
    split = balanced_layers(layers, p.pp, p.vpp)
    if split is not None:
        return with_changes(cand, layers_per_stage=split)
    if schedule_traits(p.schedule).placement == StagePlacement.LOOPED and layers % p.pp == 0:
        vpp = nearest_divisor(layers // p.pp, p.vpp, lambda d: d > 1)
        return with_changes(cand, vpp=vpp or 1, layers_per_stage=None)
    return with_changes(cand, schedule=PipelineSchedule.ONE_F_ONE_B, vpp=1,
                        layers_per_stage=None)


def schedule_needs_pp(_ctx: MeshContext, cand: Candidate) -> Finding | None:
    """Looped, V-shaped and bidirectional schedules need more than one pipeline rank."""
    p = cand.parallel
    if p.pp > 1 or schedule_traits(p.schedule).placement == StagePlacement.LINEAR:
        return None
    return Finding(
        rule="schedule-needs-pp", severity=E, field="parallel.schedule",
        message=f"schedule='{p.schedule}' with pp=1: there is no pipeline to interleave "
        "(Megatron requires pp > 1 for the interleaved schedule)",
        values={"schedule": str(p.schedule), "pp": p.pp},
        fix=lambda _ctx, x: with_changes(x, schedule=PipelineSchedule.ONE_F_ONE_B, vpp=1))


def dualpipe_even_pp(_ctx: MeshContext, cand: Candidate) -> Finding | None:
    """Bidirectional schedules (DualPipe, Chimera) feed micro-batches from both ends, so PP
    must be even."""
    p = cand.parallel
    if schedule_traits(p.schedule).num_pipes != 2 or p.pp % 2 == 0 or p.pp == 1:
        return None
    return Finding(
        rule="dualpipe-even-pp", severity=E, field="parallel.pp",
        message=f"schedule='{p.schedule}' needs an even pp, got pp={p.pp} (DeepSeek-V3, arXiv:"
        "2412.19437 Sec. 3.2.1: DualPipe requires PP and the micro-batch count to be even)",
        values={"pp": p.pp}, fix=_even_pp)


def _even_pp(ctx: MeshContext, cand: Candidate) -> Candidate | None:
    p = cand.parallel
    room = ctx.world_size // (p.tp * p.cp) if ctx.world_size % (p.tp * p.cp) == 0 else 0
    evens = [d for d in divisors(room) if d % 2 == 0 and d <= ctx.max_pp] if room else []
    if evens:
        best = min(evens, key=lambda d: (abs(log2(d) - log2(p.pp)), d))
        fitted = rebalanced(ctx, cand, pp=best)
        if fitted is not None:
            return fitted
    return with_changes(cand, schedule=PipelineSchedule.DUALPIPEV, vpp=2)


def _shrink_pp(ctx: MeshContext, cand: Candidate, accept: Callable[[int], bool]
               ) -> Candidate | None:
    """The accepted pp nearest the current one that, with dp rebalanced, fills the cluster."""
    best = nearest_divisor(degree_room(ctx, cand.parallel, "pp"), cand.parallel.pp, accept)
    return rebalanced(ctx, cand, pp=best) if best is not None else None


def batch_divisible(ctx: MeshContext, cand: Candidate) -> Finding | None:
    """global_batch = micro_batch_size x dp x micro-batches, in whole micro-batches."""
    if ctx.training is None:
        return None
    p, gbs = cand.parallel, ctx.training.global_batch_size
    per_step = p.micro_batch_size * p.dp
    m = p.num_micro_batches
    if (m is None and gbs % per_step == 0) or (m is not None and per_step * m == gbs):
        return None
    given = f" x num_micro_batches={m}" if m is not None else ""
    return Finding(
        rule="batch-divisible", severity=E, field="parallel.micro_batch_size",
        message=f"micro_batch_size={p.micro_batch_size} x dp={p.dp}{given} does not make "
        f"global_batch_size={gbs}: each step must consist of whole micro-batches on every "
        "data-parallel rank",
        values={"micro_batch_size": p.micro_batch_size, "dp": p.dp, "global_batch_size": gbs},
        fix=lambda c, x: _fit_batch(c, x, even=False))


def _fit_batch(ctx: MeshContext, cand: Candidate, *, even: bool) -> Candidate | None:
    assert ctx.training is not None
    p, gbs = cand.parallel, ctx.training.global_batch_size

    def ok(mbs: int) -> bool:
        total = mbs * p.dp
        return gbs % total == 0 and (not even or (gbs // total) % 2 == 0)

    mbs = largest_divisor(p.micro_batch_size, ok)
    if mbs is None:
        return None
    return with_changes(cand, micro_batch_size=mbs, num_micro_batches=None)


def dualpipe_even_micro_batches(ctx: MeshContext, cand: Candidate) -> Finding | None:
    """Bidirectional schedules split the micro-batches into two equal streams."""
    p = cand.parallel
    m = num_micro_batches(ctx, p)
    if schedule_traits(p.schedule).num_pipes != 2 or m is None or m % 2 == 0:
        return None
    return Finding(
        rule="dualpipe-even-micro-batches", severity=E, field="parallel.micro_batch_size",
        message=f"schedule='{p.schedule}' needs an even number of micro-batches, got {m} (DeepSeek-"
        "V3, arXiv:2412.19437 Sec. 3.2.1)", values={"num_micro_batches": m},
        fix=lambda c, x: _fit_batch(c, x, even=True))


def micro_batches_vs_pp(ctx: MeshContext, cand: Candidate) -> Finding | None:
    """Warn when the pipeline cannot fill (m < pp) or the interleaved schedule's m % pp."""
    p = cand.parallel
    m = num_micro_batches(ctx, p)
    if p.pp == 1 or m is None:
        return None
    if m < p.pp:
        return Finding(
            rule="few-micro-batches", severity=W, field="parallel.micro_batch_size",
            message=f"{m} micro-batches for pp={p.pp}: the pipeline never fills and the "
            f"bubble (p-1)/m = {(p.pp - 1) / m:.2f} exceeds the work",
            values={"num_micro_batches": m, "pp": p.pp},
            fix=lambda c, x: _shrink_mbs(c, x, lambda k: k >= x.parallel.pp))
    if schedule_traits(p.schedule).placement == StagePlacement.LOOPED and m % p.pp:
        return Finding(
            rule="interleaved-micro-batches", severity=W, field="parallel.micro_batch_size",
            message=f"{m} micro-batches is not a multiple of pp={p.pp}: the interleaved "
            "schedule of Megatron-LM 2021 (arXiv:2104.04473 Sec. 2.2.2) assumes it; newer "
            "Megatron relaxes this with microbatch groups",
            values={"num_micro_batches": m, "pp": p.pp},
            fix=lambda c, x: _shrink_mbs(c, x, lambda k: k % x.parallel.pp == 0))
    return None


def _shrink_mbs(ctx: MeshContext, cand: Candidate, accept: Callable[[int], bool]
                ) -> Candidate | None:
    if ctx.training is None:
        return None
    gbs, p = ctx.training.global_batch_size, cand.parallel
    mbs = largest_divisor(
        p.micro_batch_size,
        lambda d: gbs % (d * p.dp) == 0 and accept(gbs // (d * p.dp)))
    return with_changes(cand, micro_batch_size=mbs, num_micro_batches=None) if mbs else None


def cp_divides_sequence(ctx: MeshContext, cand: Candidate) -> Finding | None:
    """CP splits each sequence into cp equal shards (2 x cp chunks when load-balanced)."""
    if ctx.training is None or cand.parallel.cp == 1:
        return None
    p, seq = cand.parallel, ctx.training.sequence_length
    if seq % p.cp:
        return Finding(
            rule="cp-divides-sequence", severity=E, field="parallel.cp",
            message=f"cp={p.cp} does not divide sequence_length={seq}",
            values={"cp": p.cp, "sequence_length": seq},
            fix=lambda c, x: _shrink_cp(c, x, lambda d: seq % d == 0))
    if p.cp_kind != ContextParallelKind.ULYSSES and seq % (2 * p.cp):
        return Finding(
            rule="cp-load-balance", severity=W, field="parallel.cp",
            message=f"sequence_length={seq} is not divisible by 2*cp = {2 * p.cp}: the causal "
            "load balancing of ring attention (each rank takes chunk i and 2cp-1-i) cannot "
            "be used, so the ranks get unequal attention work",
            values={"cp": p.cp, "sequence_length": seq},
            fix=lambda c, x: _shrink_cp(c, x, lambda d: seq % (2 * d) == 0))
    return None


def _shrink_cp(ctx: MeshContext, cand: Candidate, accept: Callable[[int], bool]
               ) -> Candidate | None:
    best = nearest_divisor(degree_room(ctx, cand.parallel, "cp"), cand.parallel.cp, accept)
    if best is None:
        return None
    if cand.parallel.cp_kind != ContextParallelKind.USP:
        return rebalanced(ctx, cand, cp=best)
    u = cand.parallel.ulysses_degree or 1
    return rebalanced(ctx, cand, cp=best,
                      ulysses_degree=largest_divisor(best, lambda d: u % d == 0) or 1)


def sequence_parallel(ctx: MeshContext, cand: Candidate) -> Finding | None:
    """Megatron SP shards the sequence over TP: it needs tp > 1 and s/cp divisible by tp."""
    p = cand.parallel
    if not p.sequence_parallel:
        return None
    def off(_ctx: MeshContext, x: Candidate) -> Candidate | None:
        return with_changes(x, sequence_parallel=False)

    if p.tp == 1:
        return Finding(
            rule="sequence-parallel-needs-tp", severity=W, field="parallel.sequence_parallel",
            message="sequence_parallel=true with tp=1 does nothing (Megatron turns it off)",
            values={"tp": p.tp}, fix=off)
    if ctx.training is None or ctx.training.sequence_length % p.cp:
        return None
    local = ctx.training.sequence_length // p.cp
    if local % p.tp == 0:
        return None
    return Finding(
        rule="sequence-parallel-divides-sequence", severity=E, field="parallel.tp",
        message=f"sequence_parallel=true shards the {local} tokens per CP rank over tp={p.tp}, "
        "which does not divide them", values={"tokens_per_cp_rank": local, "tp": p.tp},
        fix=off)


def moe_tp_needs_sequence_parallel(ctx: MeshContext, cand: Candidate) -> Finding | None:
    """Megatron-LM runs MoE layers with TP only under sequence parallelism.

    Source: Megatron-LM `megatron/training/arguments.py` asserts "When using MoE and tensor
    parallelism, sequence parallelism must be used"; `TransformerConfig.__post_init__`
    raises the same for ep > 1 with tp > 1.
    """
    p = cand.parallel
    if (ctx.model is None or not has_routed_experts(ctx.model) or p.tp == 1
            or p.sequence_parallel):
        return None
    return Finding(
        rule="moe-tp-needs-sequence-parallel", severity=E, field="parallel.sequence_parallel",
        message=f"tp={p.tp} on a MoE model without sequence_parallel: Megatron-LM refuses "
        "MoE layers with tensor parallelism unless sequence parallelism is on",
        values={"tp": p.tp, "sequence_parallel": False},
        fix=lambda _ctx, x: with_changes(x, sequence_parallel=True))


__all__ = [
    "batch_divisible",
    "cp_divides_sequence",
    "dualpipe_even_micro_batches",
    "dualpipe_even_pp",
    "layers_split",
    "micro_batches_vs_pp",
    "moe_tp_needs_sequence_parallel",
    "pp_at_most_layers",
    "schedule_needs_pp",
    "sequence_parallel",
]
