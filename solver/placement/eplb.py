"""Baselines for placement: no redundancy, and EPLB-style replication from history.

Owns: a numpy re-implementation of DeepSeek's EPLB policy (groups packed onto nodes,
water-filling replication inside each node, replicas packed onto GPUs; the "global"
policy is the same with one group and one node), the evaluation of such a plan on an
actual batch, and the no-redundancy rank loads. Must not: plan per batch (EPLB is planned
from historical load and re-run from time to time, so it balances only in expectation).

Source: deepseek-ai/EPLB `eplb.py` (commit d52c72d, 2025-03-24) as described in our
placement reference; the README example is a regression fixture (tests pin it exactly).
"""

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from models.core.moe import imbalance_factor
from models.errors import InvalidSpecError
from solver.placement.problem import IntArray, placement_problem

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True, kw_only=True)
class EplbPlan:
    """Physical expert slots of an EPLB plan (one row per layer)."""

    phy2log: IntArray
    """[layers, P] logical expert of physical slot p; slot p is on GPU p // (P / gpus)."""
    log2phy: IntArray
    """[layers, E, max_count] slots of each logical expert, padded with -1."""
    logcnt: IntArray
    """[layers, E] replicas of each logical expert (>= 1)."""
    num_gpus: int


def balanced_packing(weight: FloatArray, num_packs: int) -> tuple[IntArray, IntArray]:
    """Pack n items per row into packs of exactly n/num_packs items, LPT with a cap.

    Items go in descending weight order, each to the lightest pack that still has room
    (the first such pack on ties). Returns (pack index, position inside the pack).
    """
    layers, n = weight.shape
    per_pack = n // num_packs
    if per_pack == 1:
        idx = np.broadcast_to(np.arange(n), (layers, n)).copy()
        return idx, np.zeros((layers, n), dtype=np.int64)
    pack_index = np.full((layers, n), -1, dtype=np.int64)
    rank_in_pack = np.full((layers, n), -1, dtype=np.int64)
    for i in range(layers):
        loads = [0.0] * num_packs
        items = [0] * num_packs
        for item in np.argsort(-weight[i], kind="stable").tolist():
            pack = min((k for k in range(num_packs) if items[k] < per_pack),
                       key=loads.__getitem__)
            pack_index[i, item] = pack
            rank_in_pack[i, item] = items[pack]
            loads[pack] += float(weight[i, item])
            items[pack] += 1
    return pack_index, rank_in_pack


def replicate_experts(weight: FloatArray, num_phy: int) -> tuple[IntArray, IntArray, IntArray]:
    """Water-filling replication: each extra slot to the largest per-replica load w/cnt.

    Returns (phy2log [layers, num_phy], replica index of each slot, logcnt [layers, n]).
    """
    layers, n = weight.shape
    phy2log = np.tile(np.arange(num_phy), (layers, 1))
    replica = np.zeros((layers, num_phy), dtype=np.int64)
    logcnt = np.ones((layers, n), dtype=np.int64)
    rows = np.arange(layers)
    for slot in range(n, num_phy):
        chosen = np.argmax(weight / logcnt, axis=1)
        phy2log[:, slot] = chosen
        replica[:, slot] = logcnt[rows, chosen]
        logcnt[rows, chosen] += 1
    return phy2log, replica, logcnt


def _inverse(perm: IntArray) -> IntArray:
    inv = np.empty_like(perm)
    np.put_along_axis(inv, perm, np.broadcast_to(np.arange(perm.shape[1]), perm.shape), axis=1)
    return inv


def rebalance_experts(
    weight: object, *, num_replicas: int, num_groups: int, num_nodes: int, num_gpus: int
) -> EplbPlan:
    """EPLB: replicate and place experts from a load statistic [layers, E].

    Hierarchical when num_groups % num_nodes == 0, else the global policy (one group, one
    node). Legend: P=num_replicas physical slots, P/num_gpus per GPU.

    Raises:
        InvalidSpecError: when the sizes do not divide as EPLB requires.
    """
    w = np.atleast_2d(np.asarray(weight, dtype=np.float64))
    layers, e = w.shape
    if num_groups % num_nodes:
        num_groups, num_nodes = 1, 1
    checks = ((e % num_groups == 0, f"num_groups={num_groups} must divide E={e}"),
              (num_gpus % num_nodes == 0, f"num_nodes={num_nodes} must divide num_gpus={num_gpus}"),
              (num_replicas % num_gpus == 0 and num_replicas >= e,
               f"num_replicas={num_replicas} must be a multiple of num_gpus={num_gpus} and >= E"))
    for ok, message in checks:
        if not ok:
            raise InvalidSpecError(message, field="num_replicas")
    group_size, per_gpu = e // num_groups, num_replicas // num_gpus
    groups_per_node = num_groups // num_nodes
    group_load = w.reshape(layers, num_groups, group_size).sum(axis=2)
    g_pack, g_rank = balanced_packing(group_load, num_nodes)
    log2mlog = (((g_pack * groups_per_node + g_rank) * group_size)[:, :, None]
                + np.arange(group_size)).reshape(layers, e)
    mlog2log = _inverse(log2mlog)
    per_node_log = e // num_nodes
    mlog_load = np.take_along_axis(w, mlog2log, axis=1).reshape(-1, per_node_log)
    phy2mlog, phyrank, mlogcnt = replicate_experts(mlog_load, num_replicas // num_nodes)
    phy_load = np.take_along_axis(mlog_load / mlogcnt, phy2mlog, axis=1)
    pack, rank_in_pack = balanced_packing(phy_load, num_gpus // num_nodes)
    pphy2phy = _inverse(pack * per_gpu + rank_in_pack)
    pphy2mlog = np.take_along_axis(phy2mlog, pphy2phy, axis=1)
    offsets = (np.arange(num_nodes) * per_node_log)[None, :, None]
    pphy2mlog = (pphy2mlog.reshape(layers, num_nodes, -1) + offsets).reshape(layers, -1)
    phy2log = np.take_along_axis(mlog2log, pphy2mlog, axis=1)
    pphyrank = np.take_along_axis(phyrank, pphy2phy, axis=1).reshape(layers, -1)
    logcnt = np.take_along_axis(mlogcnt.reshape(layers, -1), log2mlog, axis=1)
    width = int(logcnt.max())
    log2phy = np.full((layers, e * width), -1, dtype=np.int64)
    np.put_along_axis(log2phy, phy2log * width + pphyrank,
                      np.broadcast_to(np.arange(num_replicas), phy2log.shape), axis=1)
    return EplbPlan(phy2log=phy2log, log2phy=log2phy.reshape(layers, e, width),
                    logcnt=logcnt, num_gpus=num_gpus)


def eplb_rank_loads(plan: EplbPlan, expert_tokens: object, *, layer: int = 0) -> IntArray:
    """[gpus] tokens each GPU computes when a batch meets an EPLB plan.

    Each expert's T_e tokens are split as evenly as integers allow over its replicas (the
    expectation of a random replica per token, rounded): replica j of expert e gets
    floor(T_e / c_e) plus one if j < T_e mod c_e.
    """
    t = np.asarray(expert_tokens, dtype=np.int64)
    phy2log = plan.phy2log[layer]
    cnt = plan.logcnt[layer]
    if t.shape != cnt.shape:
        raise InvalidSpecError(
            f"expert_tokens has {t.size} experts but the plan has {cnt.size}",
            field="expert_tokens",
        )
    slots = plan.log2phy[layer]
    replica = np.zeros(phy2log.size, dtype=np.int64)
    filled = slots >= 0
    replica[slots[filled]] = np.broadcast_to(np.arange(slots.shape[1]), slots.shape)[filled]
    share = t[phy2log] // cnt[phy2log] + (replica < t[phy2log] % cnt[phy2log])
    return np.asarray(share.reshape(plan.num_gpus, -1).sum(axis=1), dtype=np.int64)


@dataclass(frozen=True, slots=True, kw_only=True)
class BaselineLoads:
    """Rank loads of a baseline on one batch."""

    name: str
    rank_loads: IntArray
    imbalance: float
    """max rank load / mean."""


def no_redundancy_loads(counts: object, *, top_k: int) -> BaselineLoads:
    """Each expert computed only on its home rank."""
    p = placement_problem(counts, top_k=top_k)
    loads = np.asarray(p.home_loads, dtype=np.int64)
    return BaselineLoads(name="no-redundancy", rank_loads=loads, imbalance=imbalance_factor(loads))


def eplb_loads(
    counts: object, *, top_k: int, history: object, redundant_per_rank: int = 1,
    num_groups: int = 1, num_nodes: int = 1,
) -> BaselineLoads:
    """An EPLB plan made from `history` ([E] expert loads), evaluated on this batch.

    Args:
        counts: [R, E] the actual batch.
        top_k: K.
        history: [E] load statistic the plan is made from (e.g. a moving average).
        redundant_per_rank: extra slots per GPU (P = E + R * redundant_per_rank).
        num_groups: expert groups (hierarchical policy when divisible by num_nodes).
        num_nodes: nodes spanned by the EP group.
    """
    p = placement_problem(counts, top_k=top_k)
    plan = rebalance_experts(np.asarray(history, dtype=np.float64)[None, :],
                             num_replicas=p.num_experts + p.num_ranks * redundant_per_rank,
                             num_groups=num_groups, num_nodes=num_nodes, num_gpus=p.num_ranks)
    loads = eplb_rank_loads(plan, p.expert_tokens)
    return BaselineLoads(name=f"eplb(+{redundant_per_rank}/rank)", rank_loads=loads,
                         imbalance=imbalance_factor(loads))


__all__ = [
    "BaselineLoads",
    "EplbPlan",
    "balanced_packing",
    "eplb_loads",
    "eplb_rank_loads",
    "no_redundancy_loads",
    "rebalance_experts",
    "replicate_experts",
]
