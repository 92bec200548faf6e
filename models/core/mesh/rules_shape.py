"""Mesh rules about shapes: world size, axis order, heads, widths, experts, placement.

Owns: one function per rule that returns a `Finding` (with its fix) or None. Each message
names the rule, the offending values and why; the fix is the smallest edit that addresses
this rule (the repair loop in `repair.py` makes the result valid as a whole). Must not:
search for alternatives or raise (that is `validation.py`).
"""

from collections.abc import Callable
from math import prod

from api_schemas import ContextParallelKind, ParallelConfig
from models.core.layer_kinds import attention_kind, has_routed_experts
from models.core.mesh.candidates import (
    Candidate,
    Finding,
    MeshContext,
    Severity,
    degree_room,
    distance,
    largest_divisor,
    nearest_divisor,
    rebalanced,
    with_changes,
)
from models.core.mesh.layout import (
    DEFAULT_ORDER,
    GroupKind,
    expert_data_parallel_size,
    masked_rank_groups,
    parse_order,
    pipeline_groups_agree,
)
from models.errors import InvalidSpecError

E, W = Severity.ERROR, Severity.WARNING


def order_names(_ctx: MeshContext, cand: Candidate) -> Finding | None:
    """The order must name known axes once each and include every axis of degree > 1."""
    p = cand.parallel
    try:
        parse_order(cand.order, sizes={"tp": max(p.tp, p.etp), "cp": p.cp, "ep": p.ep,
                                       "dp": p.dp, "pp": p.pp})
    except InvalidSpecError as err:
        return Finding(rule="order-names", severity=E, field="order", message=err.detail,
                       values={"order": cand.order},
                       fix=lambda _ctx, x: with_changes(x, order=DEFAULT_ORDER))
    return None


def world_size(ctx: MeshContext, cand: Candidate) -> Finding | None:
    """tp * cp * dp * pp must equal the GPUs of the cluster (EP and ETP fold into them)."""
    p, world = cand.parallel, ctx.world_size
    if p.world_size == world:
        return None
    return Finding(
        rule="world-size", severity=E, field="parallel.dp",
        message=f"tp*cp*dp*pp = {p.tp}*{p.cp}*{p.dp}*{p.pp} = {p.world_size} but the cluster "
        f"has {ctx.num_nodes} x {ctx.gpus_per_node} = {world} GPUs; the orthogonal axes must "
        f"fill it exactly (ep and etp fold into tp*cp*dp and add no factor)",
        values={"product": p.world_size, "world_size": world}, fix=_fit_world)


def _fit_world(ctx: MeshContext, cand: Candidate) -> Candidate | None:
    """Complete the product with one axis (dp first, then tp, cp, pp); failing that, shrink
    pp, cp and tp in turn until the rest divides the cluster and dp fills it."""
    p, world = cand.parallel, ctx.world_size
    degrees = {"tp": p.tp, "cp": p.cp, "pp": p.pp, "dp": p.dp}
    singles = []
    for axis in ("dp", "tp", "cp", "pp"):
        rest = prod(v for k, v in degrees.items() if k != axis)
        if world % rest == 0:
            changed = with_changes(cand, **{axis: world // rest})
            if changed is not None:
                singles.append(changed)
    if singles:
        return min(singles, key=lambda c: distance(p, c.parallel))
    shrunk = {"tp": p.tp, "cp": p.cp, "pp": p.pp}
    for axis in ("pp", "cp", "tp"):
        others = prod(v for k, v in shrunk.items() if k != axis)
        shrunk[axis] = largest_divisor(shrunk[axis], _fits(world, others)) or 1
        fitted = rebalanced(ctx, cand, **shrunk)
        if fitted is not None:
            return fitted
    return None


def _fits(world: int, others: int) -> Callable[[int], bool]:
    """Accept a degree d when others * d divides the cluster."""
    return lambda d: world % (others * d) == 0


def tp_divides_heads(ctx: MeshContext, cand: Candidate) -> Finding | None:
    """TP splits attention heads, so tp must divide the query heads."""
    return _tp_must_divide("tp-divides-heads", cand.parallel.tp,
                           ("num_attention_heads", "heads", ctx.arch.num_attention_heads),
                           "tensor parallelism gives each rank a whole number of heads")


def tp_kv_heads(ctx: MeshContext, cand: Candidate) -> Finding | None:
    """TP must divide the KV heads, or be a multiple of them (each KV head then replicated)."""
    if not attention_kind(ctx.arch).shards_kv_heads:
        return None
    kv, tp = ctx.arch.kv_heads, cand.parallel.tp
    if kv % tp == 0:
        return None
    def fix(c: MeshContext, x: Candidate) -> Candidate | None:
        return _shrink_tp(c, x, lambda d: c.arch.kv_heads % d == 0 and _tp_ok(c, d))

    if tp % kv == 0:
        return Finding(
            rule="kv-heads-replicated", severity=W, field="parallel.tp",
            message=f"tp={tp} exceeds num_kv_heads={kv}: each KV head is replicated on "
            f"tp/kv = {tp // kv} ranks (its K/V projection weights and gradients too); "
            "Megatron-core rejects this (num_query_groups must be divisible by tp)",
            values={"tp": tp, "kv_heads": kv, "replicas": tp // kv}, fix=fix)
    return Finding(
        rule="tp-divides-kv-heads", severity=E, field="parallel.tp",
        message=f"tp={tp} neither divides num_kv_heads={kv} nor is a multiple of it: the KV "
        "heads can be neither split evenly nor replicated evenly over the TP group",
        values={"tp": tp, "kv_heads": kv}, fix=fix)


def tp_divides_ffn(ctx: MeshContext, cand: Candidate) -> Finding | None:
    """TP splits the MLP's intermediate width."""
    return _tp_must_divide("tp-divides-ffn", cand.parallel.tp,
                           ("ffn_hidden_size", "ffn_hidden_size", ctx.arch.ffn_hidden_size),
                           "column-parallel MLP weights need equal shards")


def _tp_must_divide(rule: str, tp: int, size: tuple[str, str, int],
                    reason: str) -> Finding | None:
    """The error `rule` where `tp` does not divide a model size, `size` = (its field name,
    its key in the finding's values, its value); the fix shrinks TP to a degree every
    TP rule accepts."""
    name, key, value = size
    if value % tp == 0:
        return None
    return Finding(
        rule=rule, severity=E, field="parallel.tp",
        message=f"tp={tp} does not divide {name}={value}: {reason}",
        values={"tp": tp, key: value},
        fix=lambda c, x: _shrink_tp(c, x, lambda d: _tp_ok(c, d)))


def _tp_ok(ctx: MeshContext, tp: int) -> bool:
    if ctx.model is None:
        return True
    m = ctx.model
    kv_ok = (not attention_kind(m).shards_kv_heads or m.kv_heads % tp == 0
             or tp % m.kv_heads == 0)
    return m.num_attention_heads % tp == 0 and m.ffn_hidden_size % tp == 0 and kv_ok


def _shrink_tp(ctx: MeshContext, cand: Candidate, accept: Callable[[int], bool]
               ) -> Candidate | None:
    """The accepted tp nearest the current one that, with dp rebalanced, fills the cluster."""
    p = cand.parallel
    best = nearest_divisor(degree_room(ctx, p, "tp"), p.tp, accept)
    return rebalanced(ctx, cand, tp=best) if best is not None else None


def ep_needs_moe(ctx: MeshContext, cand: Candidate) -> Finding | None:
    """Expert parallelism only exists for a model with routed experts."""
    p = cand.parallel
    if has_routed_experts(ctx.arch) or (p.ep == 1 and p.etp == 1):
        return None
    return Finding(
        rule="ep-needs-moe", severity=E, field="parallel.ep",
        message=f"ep={p.ep}, etp={p.etp} on a dense model ('{ctx.arch.name}' has no moe "
        "block): there are no experts to place", values={"ep": p.ep, "etp": p.etp},
        fix=lambda _ctx, x: with_changes(x, ep=1, etp=1))


def ep_divides_experts(ctx: MeshContext, cand: Candidate) -> Finding | None:
    """EP gives every rank the same number of routed experts."""
    moe, ep = ctx.arch.moe, cand.parallel.ep
    if moe is None or moe.num_experts % ep == 0:
        return None
    return Finding(
        rule="ep-divides-experts", severity=E, field="parallel.ep",
        message=f"ep={ep} does not divide moe.num_experts={moe.num_experts}: each EP rank "
        "must hold the same number of routed experts",
        values={"ep": ep, "num_experts": moe.num_experts}, fix=_shrink_ep)


def expert_fold(_ctx: MeshContext, cand: Candidate) -> Finding | None:
    """The expert mesh etp x ep x edp must fold into the dense tp x cp x dp of a stage."""
    p = cand.parallel
    folded = p.tp * p.cp * p.dp
    if folded % (p.etp * p.ep) == 0:
        return None
    return Finding(
        rule="expert-fold", severity=E, field="parallel.ep",
        message=f"etp*ep = {p.etp}*{p.ep} = {p.etp * p.ep} does not divide tp*cp*dp = "
        f"{folded}: MoE layers reuse the ranks of one pipeline stage, so the expert mesh "
        "etp x ep x edp must tile them (edp = tp*cp*dp / (etp*ep))",
        values={"etp": p.etp, "ep": p.ep, "tp_cp_dp": folded}, fix=_shrink_ep)


def _shrink_ep(ctx: MeshContext, cand: Candidate) -> Candidate | None:
    p = cand.parallel
    moe = ctx.model.moe if ctx.model is not None else None
    experts = moe.num_experts if moe is not None else p.ep
    folded = p.tp * p.cp * p.dp

    def ok(ep: int, etp: int) -> bool:
        return experts % ep == 0 and folded % (ep * etp) == 0

    ep = nearest_divisor(experts, p.ep, lambda d: ok(d, p.etp))
    if ep is not None:
        return with_changes(cand, ep=ep)
    etp = largest_divisor(p.etp, lambda d: ok(1, d))
    return with_changes(cand, ep=1, etp=etp or 1)


def etp_divides_expert_ffn(ctx: MeshContext, cand: Candidate) -> Finding | None:
    """Expert TP splits each expert's intermediate width."""
    moe, etp = ctx.arch.moe, cand.parallel.etp
    if moe is None or moe.expert_ffn_hidden_size % etp == 0:
        return None
    f = moe.expert_ffn_hidden_size
    return Finding(
        rule="etp-divides-expert-ffn", severity=E, field="parallel.etp",
        message=f"etp={etp} does not divide moe.expert_ffn_hidden_size={f}",
        values={"etp": etp, "expert_ffn_hidden_size": f},
        fix=lambda _ctx, x: with_changes(x, etp=largest_divisor(etp, lambda d: f % d == 0)))


def expert_pp_order(_ctx: MeshContext, cand: Candidate) -> Finding | None:
    """With pp not last in the order, MoE and dense layers must share DP size and PP groups."""
    p = cand.parallel
    if p.ep == 1 and p.etp == 1:
        return None
    try:
        axes = parse_order(cand.order, sizes={"tp": max(p.tp, p.etp), "cp": p.cp, "ep": p.ep,
                                              "dp": p.dp, "pp": p.pp})
    except InvalidSpecError:
        return None
    if pipeline_groups_agree(p, axes):
        return None
    edp = expert_data_parallel_size(p)
    new_order = "-".join([t for t in axes if t != "pp"] + ["pp"])
    return Finding(
        rule="expert-pp-order", severity=E, field="order",
        message=f"order='{cand.order}' does not end with 'pp' while pp={p.pp}, and the expert "
        f"mesh (etp={p.etp}, ep={p.ep}, edp={edp}) differs from the dense one (tp={p.tp}, "
        f"cp={p.cp}, dp={p.dp}) before 'pp': MoE and dense layers would get different "
        "pipeline groups (Megatron-core asserts they match)",
        values={"order": cand.order, "edp": edp, "dp": p.dp},
        fix=lambda _ctx, x: with_changes(x, order=new_order))


def ulysses_heads(ctx: MeshContext, cand: Candidate) -> Finding | None:
    """Ulysses re-splits each TP rank's heads over its degree; KV heads too (or replicate)."""
    p, m = cand.parallel, ctx.arch
    u = _ulysses_degree(p)
    if u <= 1 or m.num_attention_heads % p.tp:
        return None
    q_local = m.num_attention_heads // p.tp
    kv_local = attention_kind(m).local_kv_heads(m, p.tp)
    if q_local % u:
        return Finding(
            rule="ulysses-divides-heads", severity=E, field="parallel.cp",
            message=f"Ulysses degree {u} does not divide the {q_local} query heads per TP "
            f"rank (num_attention_heads={m.num_attention_heads} / tp={p.tp}): the all-to-all "
            "swaps a sequence shard for a head shard, so the degree is at most the head count "
            "and must divide it", values={"ulysses_degree": u, "heads_per_tp_rank": q_local},
            fix=lambda _ctx, x: _shrink_ulysses(x, lambda d: q_local % d == 0))
    if kv_local % u == 0:
        return None
    def fix(_ctx: MeshContext, x: Candidate) -> Candidate | None:
        return _shrink_ulysses(x, lambda d: q_local % d == 0 and kv_local % d == 0)

    if u % kv_local == 0:
        return Finding(
            rule="ulysses-kv-replicated", severity=W, field="parallel.cp",
            message=f"Ulysses degree {u} exceeds the {kv_local} KV heads per TP rank: each KV "
            f"head is replicated {u // kv_local} times in the all-to-all (more K/V traffic)",
            values={"ulysses_degree": u, "kv_heads_per_tp_rank": kv_local}, fix=fix)
    return Finding(
        rule="ulysses-divides-kv-heads", severity=E, field="parallel.cp",
        message=f"Ulysses degree {u} neither divides nor is a multiple of the {kv_local} KV "
        "heads per TP rank", values={"ulysses_degree": u, "kv_heads_per_tp_rank": kv_local},
        fix=fix)


def _ulysses_degree(p: ParallelConfig) -> int:
    if p.cp_kind == ContextParallelKind.ULYSSES:
        return p.cp
    if p.cp_kind == ContextParallelKind.USP:
        return p.ulysses_degree or 1
    return 1


def _shrink_ulysses(cand: Candidate, accept: Callable[[int], bool]) -> Candidate | None:
    """Keep cp; move the part Ulysses cannot take onto a ring axis (USP)."""
    u = largest_divisor(cand.parallel.cp, accept) or 1
    if u == 1:
        return with_changes(cand, cp_kind=ContextParallelKind.RING, ulysses_degree=None)
    if u == cand.parallel.cp:
        return with_changes(cand, cp_kind=ContextParallelKind.ULYSSES, ulysses_degree=None)
    return with_changes(cand, cp_kind=ContextParallelKind.USP, ulysses_degree=u)


def tp_crosses_nodes(ctx: MeshContext, cand: Candidate) -> Finding | None:
    """TP talks every layer; a TP group that leaves the node is legal but slow."""
    p = cand.parallel
    if p.tp == 1 or p.world_size != ctx.world_size:
        return None
    try:
        axes = parse_order(cand.order, sizes={"tp": p.tp, "cp": p.cp, "ep": p.ep,
                                              "dp": p.dp, "pp": p.pp})
    except InvalidSpecError:
        return None
    sizes = {"tp": p.tp, "cp": p.cp, "ep": 1, "dp": p.dp, "pp": p.pp}
    groups = masked_rank_groups([sizes[a] for a in axes], [a == "tp" for a in axes])
    nodes = groups // ctx.gpus_per_node
    crossing = int((nodes.max(axis=1) != nodes.min(axis=1)).sum())
    if crossing == 0:
        return None
    g = ctx.gpus_per_node
    return Finding(
        rule="tp-crosses-nodes", severity=W, field="parallel.tp",
        message=f"{crossing} of {groups.shape[0]} {GroupKind.TP.value} groups (tp={p.tp}, order "
        f"'{cand.order}') span more than one node of {g} GPUs: their per-layer collectives "
        "run over the NICs instead of NVLink",
        values={"tp": p.tp, "gpus_per_node": g, "crossing_groups": crossing},
        fix=lambda c, x: _shrink_tp(c, x, lambda d: g % d == 0 and _tp_ok(c, d)))


__all__ = [
    "ep_divides_experts",
    "ep_needs_moe",
    "etp_divides_expert_ffn",
    "expert_fold",
    "expert_pp_order",
    "order_names",
    "tp_crosses_nodes",
    "tp_divides_ffn",
    "tp_divides_heads",
    "tp_kv_heads",
    "ulysses_heads",
    "world_size",
]
