"""Rank coordinates and process groups in Megatron-LM's rank ordering."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from api_schemas import ParallelConfig
from models.core.mesh import (
    GroupKind,
    build_mesh,
    expert_data_parallel_size,
    masked_rank_groups,
    parse_order,
    pipeline_groups_agree,
)
from models.errors import InvalidSpecError


def _groups(mesh, kind: GroupKind) -> list[list[int]]:
    return [list(g.members) for g in mesh.groups(kind)]


def test_masked_rank_groups_matches_megatron_docstring_example() -> None:
    """parallel_state.generate_masked_orthogonal_rank_groups: sizes [2, 3, 4], dp masked."""
    groups = masked_rank_groups([2, 3, 4], [False, True, False]).tolist()
    assert groups[0] == [0, 2, 4]
    assert groups[1] == [1, 3, 5]
    assert groups[7] == [19, 21, 23]
    assert len(groups) == 8


def test_order_tp_pp_dp_matches_megatron_docstring_example() -> None:
    """'tp-pp-dp' with sizes 2-2-2 gives dp groups [[0, 4], [1, 5], [2, 6], [3, 7]]."""
    mesh = build_mesh(ParallelConfig(tp=2, pp=2, dp=2), num_nodes=1, gpus_per_node=8,
                      order="tp-pp-dp")
    assert _groups(mesh, GroupKind.DP) == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert _groups(mesh, GroupKind.PP) == [[0, 2], [1, 3], [4, 6], [5, 7]]


def test_sixteen_gpu_example_of_initialize_model_parallel() -> None:
    """16 GPUs, tp=2, pp=4 (its docstring): 8 DP, 8 TP and 4 PP groups."""
    mesh = build_mesh(ParallelConfig(tp=2, pp=4, dp=2), num_nodes=2, gpus_per_node=8)
    assert _groups(mesh, GroupKind.DP) == [[0, 2], [1, 3], [4, 6], [5, 7], [8, 10], [9, 11],
                                           [12, 14], [13, 15]]
    assert _groups(mesh, GroupKind.TP) == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9], [10, 11],
                                           [12, 13], [14, 15]]
    assert _groups(mesh, GroupKind.PP) == [[0, 4, 8, 12], [1, 5, 9, 13], [2, 6, 10, 14],
                                           [3, 7, 11, 15]]


def test_32_rank_mesh_tp2_cp2_dp4_pp2_ep4_matches_megatron_ordering() -> None:
    """4 nodes x 8 GPUs, TP2 CP2 DP4 PP2, EP4 with ETP2, order tp-cp-ep-dp-pp.

    Derived by hand. Dense mesh: rank = tp + 2 cp + 4 dp + 16 pp. Expert mesh (same order,
    cp folded away, tp -> etp = 2, dp -> edp = 2*2*4 / (2*4) = 2):
    rank = etp + 2 ep + 8 edp + 16 pp.
    """
    p = ParallelConfig(tp=2, cp=2, dp=4, pp=2, ep=4, etp=2)
    mesh = build_mesh(p, num_nodes=4, gpus_per_node=8)
    assert expert_data_parallel_size(p) == 2
    assert _groups(mesh, GroupKind.TP) == [[r, r + 1] for r in range(0, 32, 2)]
    assert _groups(mesh, GroupKind.CP) == [
        [0, 2], [1, 3], [4, 6], [5, 7], [8, 10], [9, 11], [12, 14], [13, 15],
        [16, 18], [17, 19], [20, 22], [21, 23], [24, 26], [25, 27], [28, 30], [29, 31]]
    assert _groups(mesh, GroupKind.DP) == [
        [0, 4, 8, 12], [1, 5, 9, 13], [2, 6, 10, 14], [3, 7, 11, 15],
        [16, 20, 24, 28], [17, 21, 25, 29], [18, 22, 26, 30], [19, 23, 27, 31]]
    assert _groups(mesh, GroupKind.PP) == [[r, r + 16] for r in range(16)]
    assert _groups(mesh, GroupKind.DP_CP) == [
        [0, 2, 4, 6, 8, 10, 12, 14], [1, 3, 5, 7, 9, 11, 13, 15],
        [16, 18, 20, 22, 24, 26, 28, 30], [17, 19, 21, 23, 25, 27, 29, 31]]
    assert _groups(mesh, GroupKind.EP) == [
        [0, 2, 4, 6], [1, 3, 5, 7], [8, 10, 12, 14], [9, 11, 13, 15],
        [16, 18, 20, 22], [17, 19, 21, 23], [24, 26, 28, 30], [25, 27, 29, 31]]
    assert _groups(mesh, GroupKind.ETP) == _groups(mesh, GroupKind.TP)
    assert _groups(mesh, GroupKind.EDP) == [
        [0, 8], [1, 9], [2, 10], [3, 11], [4, 12], [5, 13], [6, 14], [7, 15],
        [16, 24], [17, 25], [18, 26], [19, 27], [20, 28], [21, 29], [22, 30], [23, 31]]
    # EP folds over DP x CP: each EP group lies inside one gradient group.
    dp_cp = [set(g) for g in _groups(mesh, GroupKind.DP_CP)]
    assert all(any(set(g) <= d for d in dp_cp) for g in _groups(mesh, GroupKind.EP))
    assert mesh.coords(13) == {"tp": 1, "cp": 0, "dp": 3, "pp": 0, "etp": 1, "ep": 2, "edp": 1}
    assert mesh.coords(30) == {"tp": 0, "cp": 1, "dp": 3, "pp": 1, "etp": 0, "ep": 3, "edp": 1}
    # Placement: TP, CP, EP stay in a node; DP, PP and expert-DP cross nodes.
    assert mesh.group_of(GroupKind.TP, 13).intra_node
    assert mesh.group_of(GroupKind.EP, 13).members == (9, 11, 13, 15)
    assert mesh.group_of(GroupKind.EP, 13).intra_node
    dp13 = mesh.group_of(GroupKind.DP, 13)
    assert (dp13.members, dp13.num_nodes, dp13.ranks_per_node) == ((1, 5, 9, 13), 2, 2)
    pp0 = mesh.group_of(GroupKind.PP, 0)
    assert (pp0.num_nodes, pp0.ranks_per_node) == (2, 1)
    placement = mesh.placement(GroupKind.DP_CP)
    assert (placement.group_size, placement.num_groups, placement.max_nodes_spanned,
            placement.ranks_per_node, placement.all_intra_node) == (8, 4, 2, 4, False)


def test_ep_spans_tp_when_etp_is_one() -> None:
    """With etp=1 the expert mesh starts at ep, so EP groups take consecutive ranks."""
    mesh = build_mesh(ParallelConfig(tp=2, cp=2, dp=4, pp=2, ep=4, etp=1), num_nodes=4,
                      gpus_per_node=8)
    assert _groups(mesh, GroupKind.EP)[:2] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert _groups(mesh, GroupKind.EDP)[:2] == [[0, 4, 8, 12], [1, 5, 9, 13]]


def test_user_order_puts_dp_innermost() -> None:
    mesh = build_mesh(ParallelConfig(tp=2, dp=4), num_nodes=1, gpus_per_node=8,
                      order="dp-tp-pp-cp-ep")
    assert _groups(mesh, GroupKind.DP) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert _groups(mesh, GroupKind.TP) == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert mesh.order == ("dp", "tp", "pp", "cp", "ep")


def test_uneven_node_placement_is_reported() -> None:
    """6 GPUs per node and tp=4: some TP groups straddle two nodes."""
    mesh = build_mesh(ParallelConfig(tp=4, dp=3), num_nodes=2, gpus_per_node=6)
    groups = mesh.groups(GroupKind.TP)
    assert [g.num_nodes for g in groups] == [1, 2, 1]
    assert groups[1].ranks_per_node == 2
    assert mesh.placement(GroupKind.TP).max_nodes_spanned == 2


def test_split_placement_of_usp_axes() -> None:
    """CP=8 as Ulysses 4 (consecutive members) x ring 2 on 2 nodes of 4 GPUs."""
    mesh = build_mesh(ParallelConfig(cp=8, cp_kind="usp", ulysses_degree=4), num_nodes=2,
                      gpus_per_node=4)
    inner, outer = mesh.split_placement(GroupKind.CP, 4)
    assert (inner.group_size, inner.all_intra_node) == (4, True)
    assert (outer.group_size, outer.max_nodes_spanned, outer.ranks_per_node) == (2, 2, 1)


@pytest.mark.parametrize("order, match", [
    ("tp-xp-dp-pp", "unknown axes"),
    ("tp-tp-dp-pp", "repeats"),
    ("tp-dp", "leaves out"),
])
def test_bad_orders_raise(order: str, match: str) -> None:
    with pytest.raises(InvalidSpecError, match=match):
        parse_order(order, sizes={"tp": 2, "cp": 1, "ep": 1, "dp": 2, "pp": 2})


def test_build_mesh_rejects_wrong_world_and_unfoldable_experts() -> None:
    with pytest.raises(InvalidSpecError, match="make the product equal 16"):
        build_mesh(ParallelConfig(tp=2, dp=2), num_nodes=2, gpus_per_node=8)
    with pytest.raises(InvalidSpecError, match="does not divide tp x cp x dp"):
        build_mesh(ParallelConfig(tp=2, dp=4, ep=3), num_nodes=1, gpus_per_node=8)
    mesh = build_mesh(ParallelConfig(tp=2, dp=4), num_nodes=1, gpus_per_node=8)
    with pytest.raises(InvalidSpecError, match="outside the mesh"):
        mesh.coords(8)


def _pow2(max_exp: int) -> st.SearchStrategy[int]:
    return st.integers(0, max_exp).map(lambda e: 2**e)


@settings(max_examples=60, deadline=None)
@given(tp=_pow2(2), cp=_pow2(2), dp=_pow2(3), pp=_pow2(2), ep_exp=st.integers(0, 3),
       etp_exp=st.integers(0, 2), gpus_per_node=st.sampled_from([1, 2, 4, 8]),
       order=st.permutations(["tp", "cp", "ep", "dp", "pp"]))
def test_groups_partition_the_ranks(tp: int, cp: int, dp: int, pp: int, ep_exp: int,
                                    etp_exp: int, gpus_per_node: int,
                                    order: list[str]) -> None:
    folded = tp * cp * dp
    ep, etp = 2**ep_exp, 2**etp_exp
    if folded % (ep * etp):
        return
    world = folded * pp
    if world % gpus_per_node:
        return
    edp = folded // (ep * etp)
    p = ParallelConfig(tp=tp, cp=cp, dp=dp, pp=pp, ep=ep, etp=etp)
    if (ep > 1 or etp > 1) and not pipeline_groups_agree(p, tuple(order)):
        with pytest.raises(InvalidSpecError, match="put 'pp' last"):
            build_mesh(p, num_nodes=world // gpus_per_node, gpus_per_node=gpus_per_node,
                       order="-".join(order))
        order = [a for a in order if a != "pp"] + ["pp"]
    mesh = build_mesh(p, num_nodes=world // gpus_per_node, gpus_per_node=gpus_per_node,
                      order="-".join(order))
    sizes = {GroupKind.TP: tp, GroupKind.CP: cp, GroupKind.DP: dp, GroupKind.PP: pp,
             GroupKind.DP_CP: dp * cp, GroupKind.EP: ep, GroupKind.ETP: etp,
             GroupKind.EDP: edp}
    for kind, size in sizes.items():
        groups = mesh.groups(kind)
        members = sorted(r for g in groups for r in g.members)
        assert members == list(range(world))
        assert all(g.size == size for g in groups)
    for rank in range(world):
        c = mesh.coords(rank)
        assert rank in mesh.group_of(GroupKind.DP_CP, rank).members
        # Coordinates change only along their own axis inside a group.
        for member in mesh.group_of(GroupKind.TP, rank).members:
            other = mesh.coords(member)
            assert (other["cp"], other["dp"], other["pp"]) == (c["cp"], c["dp"], c["pp"])
        # Dense and expert meshes agree on the pipeline stage of every rank.
        for member in mesh.group_of(GroupKind.EP, rank).members:
            assert mesh.coords(member)["pp"] == c["pp"]


def test_meshes_are_kept_by_degrees_and_read_only() -> None:
    # Only the degrees decide a mesh: in one search, a configuration differing in ZeRO
    # stage, schedule or recomputation gets the same (read-only) mesh instead of a
    # rebuild.
    import numpy as np

    from api_schemas import ParallelConfig
    from models.core.mesh.layout import build_mesh
    from models.core.search_memo import search_memo

    with search_memo():
        first = build_mesh(ParallelConfig(tp=8, pp=8, dp=4), num_nodes=32, gpus_per_node=8)
        again = build_mesh(ParallelConfig(tp=8, pp=8, dp=4, zero_stage=3, recompute="full"),
                           num_nodes=32, gpus_per_node=8)
        assert again is first
        other = build_mesh(ParallelConfig(tp=4, pp=8, dp=8), num_nodes=32, gpus_per_node=8)
    assert other is not first
    arrays = [a for a in first._members.values() if isinstance(a, np.ndarray)]
    assert arrays and not any(a.flags.writeable for a in arrays)


def _counted(members: tuple[int, ...], gpus_per_node: int) -> tuple[int, int]:
    """(nodes spanned, members on the fullest node) of one group, counted one by one."""
    per_node: dict[int, int] = {}
    for rank in members:
        per_node[rank // gpus_per_node] = per_node.get(rank // gpus_per_node, 0) + 1
    return len(per_node), max(per_node.values())


@settings(max_examples=80, deadline=None)
@given(tp=st.sampled_from([1, 2, 3, 4]), cp=st.sampled_from([1, 2]),
       dp=st.sampled_from([1, 2, 3, 4, 6]), pp=st.sampled_from([1, 2, 3]),
       gpus_per_node=st.sampled_from([1, 2, 3, 4, 6, 8]),
       order=st.permutations(["tp", "cp", "ep", "dp", "pp"]))
def test_each_groups_nodes_are_counted_member_by_member(tp: int, cp: int, dp: int, pp: int,
                                                        gpus_per_node: int,
                                                        order: list[str]) -> None:
    # The spans and fullest nodes the mesh keeps per group (run lengths of node ids, all
    # groups at once) are what counting each group's members gives, on any rank order and
    # node size, and every kind's placement is its widest group's.
    world = tp * cp * dp * pp
    if world % gpus_per_node:
        return
    mesh = build_mesh(ParallelConfig(tp=tp, cp=cp, dp=dp, pp=pp), gpus_per_node=gpus_per_node,
                      num_nodes=world // gpus_per_node, order="-".join(order))
    for kind in (GroupKind.TP, GroupKind.CP, GroupKind.DP, GroupKind.PP, GroupKind.DP_CP):
        groups = mesh.groups(kind)
        assert all(list(g.members) == sorted(g.members) for g in groups)
        counted = [_counted(g.members, gpus_per_node) for g in groups]
        assert [(g.num_nodes, g.ranks_per_node) for g in groups] == counted
        widest = max(range(len(groups)), key=lambda i: (counted[i][0], -i))
        place = mesh.placement(kind)
        assert (place.max_nodes_spanned, place.ranks_per_node) == counted[widest]
        assert place.all_intra_node == all(spans == 1 for spans, _ in counted)
    if cp * dp > 1:
        inner_size = cp if cp > 1 else dp
        inner, outer = mesh.split_placement(GroupKind.DP_CP, inner_size)
        rows = [g.members for g in mesh.groups(GroupKind.DP_CP)]
        inner_rows = [row[i:i + inner_size] for row in rows
                      for i in range(0, len(row), inner_size)]
        outer_rows = [row[i::inner_size] for row in rows for i in range(inner_size)]
        for place, split in ((inner, inner_rows), (outer, outer_rows)):
            counted = [_counted(r, gpus_per_node) for r in split]
            widest = max(range(len(split)), key=lambda i: (counted[i][0], -i))
            assert (place.max_nodes_spanned, place.ranks_per_node) == counted[widest]
