"""The device mesh: rank coordinates and process groups, in Megatron-LM's rank ordering.

Owns: parsing an axis order ('tp-cp-ep-dp-pp'), the dense mesh tp x cp x dp x pp and the
expert mesh etp x ep x edp x pp that folds EP (and ETP) into the same ranks, each rank's
coordinates, the members of every TP, CP, DP, PP, DP x CP, EP, ETP and expert-DP group, and
where each group sits (nodes spanned, ranks per node). Must not: judge whether a mesh suits
a model (that is `models/core/mesh/rules.py`) or time anything.

Rank ordering (Megatron-LM `megatron/core/parallel_state.py`, `RankGenerator` and
`generate_masked_orthogonal_rank_groups`): the first axis of the order varies fastest,
rank = sum_i coord_i * prod_{j<i} size_j. A group of a set of axes varies those axes with the
others fixed; groups are numbered with the first free axis fastest, members are listed with
the first group axis fastest. The dense generator uses sizes (tp, cp, ep=1, dp, pp); the
expert generator the same order string with (tp=etp, cp=1, ep, dp=edp, pp), where
edp = tp * cp * dp / (etp * ep). Ranks are placed on nodes in order, `gpus_per_node` each.
"""

from dataclasses import dataclass, field
from enum import StrEnum
from math import prod

import numpy as np
import numpy.typing as npt

from api_schemas import ParallelConfig
from models.core.search_memo import current_memo, kept
from models.errors import InvalidSpecError

AXIS_NAMES: tuple[str, ...] = ("tp", "cp", "ep", "dp", "pp")
DEFAULT_ORDER = "tp-cp-ep-dp-pp"
"""Megatron-LM's default `order` argument of `initialize_model_parallel`."""

IntArray = npt.NDArray[np.int64]


class GroupKind(StrEnum):
    """Process groups a rank belongs to."""

    TP = "tp"
    CP = "cp"
    DP = "dp"
    PP = "pp"
    DP_CP = "dp_cp"
    """The gradient group of dense parameters: data x context parallel."""
    EP = "ep"
    ETP = "etp"
    EDP = "edp"
    """Expert data parallel: replicas of the same experts (expert gradient group)."""


_DENSE_KINDS: dict[GroupKind, tuple[str, ...]] = {
    GroupKind.TP: ("tp",), GroupKind.CP: ("cp",), GroupKind.DP: ("dp",),
    GroupKind.PP: ("pp",), GroupKind.DP_CP: ("cp", "dp"),
}
_EXPERT_KINDS: dict[GroupKind, tuple[str, ...]] = {
    GroupKind.EP: ("ep",), GroupKind.ETP: ("tp",), GroupKind.EDP: ("dp",),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class RankGroup:
    """One process group and where its members sit."""

    kind: GroupKind
    index: int
    members: tuple[int, ...]
    num_nodes: int
    ranks_per_node: int
    """Most members on any one node."""

    @property
    def intra_node(self) -> bool:
        """True when every member is on the same node."""
        return self.num_nodes == 1

    @property
    def size(self) -> int:
        """Number of members."""
        return len(self.members)


@dataclass(frozen=True, slots=True, kw_only=True)
class AxisPlacement:
    """How all groups of one kind sit on the nodes (the worst group decides)."""

    kind: GroupKind
    group_size: int
    num_groups: int
    all_intra_node: bool
    max_nodes_spanned: int
    ranks_per_node: int
    """Members per node in the group spanning the most nodes."""


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class DeviceMesh:
    """All ranks of a cluster with their coordinates and groups.

    Groups are stored as integer arrays (num_groups x group_size) so a 16k-GPU mesh stays
    cheap; `group_of` and `groups` build `RankGroup` values on demand.
    """

    world_size: int
    num_nodes: int
    gpus_per_node: int
    order: tuple[str, ...]
    dense_sizes: dict[str, int]
    expert_sizes: dict[str, int]
    _members: dict[GroupKind, IntArray]
    _spans: dict[GroupKind, IntArray]
    _per_node: dict[GroupKind, IntArray]
    _group_of_rank: dict[GroupKind, IntArray] = field(
        default_factory=dict, init=False, repr=False)
    """Per kind, the group index of every rank: built on the first `group_of` of that kind
    (the planner's searches read placements only)."""
    _placements: dict[GroupKind, "AxisPlacement"] = field(
        default_factory=dict, init=False, repr=False)
    """`placement` of each kind, computed once per mesh."""
    _splits: dict[tuple[GroupKind, int], tuple["AxisPlacement", "AxisPlacement"]] = field(
        default_factory=dict, init=False, repr=False)
    """`split_placement` of each kind and inner size, computed once per mesh."""

    def node_of(self, rank: int) -> int:
        """Node index of a rank (ranks fill nodes in order)."""
        return rank // self.gpus_per_node

    def coords(self, rank: int) -> dict[str, int]:
        """Coordinates of a rank: tp, cp, dp, pp (dense) and etp, ep, edp (expert)."""
        self._check_rank(rank)
        dense = _coords_of(rank, self.order, self.dense_sizes)
        expert = _coords_of(rank, self.order, self.expert_sizes)
        return {"tp": dense["tp"], "cp": dense["cp"], "dp": dense["dp"], "pp": dense["pp"],
                "etp": expert["tp"], "ep": expert["ep"], "edp": expert["dp"]}

    def group_of(self, kind: GroupKind, rank: int) -> RankGroup:
        """The group of `kind` that contains `rank`."""
        self._check_rank(rank)
        owner = self._group_of_rank.get(kind)
        if owner is None:
            owner = self._group_of_rank[kind] = _inverse(self._members[kind], self.world_size)
            owner.flags.writeable = False
        return self._group(kind, int(owner[rank]))

    def groups(self, kind: GroupKind) -> tuple[RankGroup, ...]:
        """All groups of one kind, in Megatron's group order."""
        return tuple(self._group(kind, i) for i in range(self._members[kind].shape[0]))

    def placement(self, kind: GroupKind) -> AxisPlacement:
        """Where the groups of one kind sit; the group spanning most nodes decides."""
        found = self._placements.get(kind)
        if found is None:
            found = self._placements[kind] = _placement(
                kind, self._members[kind], self._spans[kind], self._per_node[kind])
        return found

    def split_placement(self, kind: GroupKind, inner: int
                        ) -> tuple[AxisPlacement, AxisPlacement]:
        """Placement of the two sub-axes of a group split as inner x outer.

        Each group's member list (Megatron order) is cut into blocks of `inner` consecutive
        members (the inner sub-groups) and the members `inner` apart (the outer ones), as
        Megatron's hierarchical context-parallel groups do (first level innermost).
        """
        found = self._splits.get((kind, inner))
        if found is None:
            found = self._splits[kind, inner] = self._split_placement(kind, inner)
        return found

    def _split_placement(self, kind: GroupKind, inner: int
                         ) -> tuple[AxisPlacement, AxisPlacement]:
        members = self._members[kind]
        size = members.shape[1]
        if inner < 1 or size % inner:
            raise InvalidSpecError(
                f"inner={inner} does not divide the {kind.value} group size {size}",
                field="parallel.ulysses_degree")
        blocks = members.reshape(-1, size // inner, inner)
        inner_groups = blocks.reshape(-1, inner)
        outer_groups = blocks.transpose(0, 2, 1).reshape(-1, size // inner)
        return (self._placement_of(kind, inner_groups), self._placement_of(kind, outer_groups))

    def _placement_of(self, kind: GroupKind, members: IntArray) -> AxisPlacement:
        return _placement(kind, members, *_node_runs(members, self.gpus_per_node))

    def _group(self, kind: GroupKind, index: int) -> RankGroup:
        return RankGroup(
            kind=kind, index=index,
            members=tuple(int(r) for r in self._members[kind][index]),
            num_nodes=int(self._spans[kind][index]),
            ranks_per_node=int(self._per_node[kind][index]),
        )

    def _check_rank(self, rank: int) -> None:
        if not 0 <= rank < self.world_size:
            raise InvalidSpecError(
                f"rank={rank} is outside the mesh of {self.world_size} ranks: use 0.."
                f"{self.world_size - 1}", field="rank")


def parse_order(order: str, *, sizes: dict[str, int]) -> tuple[str, ...]:
    """Normalise an axis order: known names, no repeats, size-1 axes appended if missing.

    Raises:
        InvalidSpecError: an unknown or repeated name, or a missing axis whose size is > 1.
    """
    return _parse_order(order, frozenset(a for a, size in sizes.items() if size > 1))


def _parse_order(order: str, used: frozenset[str]) -> tuple[str, ...]:
    """`parse_order` for the set of axes whose degree is > 1."""
    tokens = tuple(t.strip().lower() for t in order.split("-") if t.strip())
    unknown = [t for t in tokens if t not in AXIS_NAMES]
    if unknown:
        raise InvalidSpecError(
            f"order='{order}' names unknown axes {unknown}: use the names "
            f"{list(AXIS_NAMES)} joined by '-', e.g. '{DEFAULT_ORDER}'", field="order")
    if len(set(tokens)) != len(tokens):
        raise InvalidSpecError(
            f"order='{order}' repeats an axis: name each of {list(AXIS_NAMES)} at most once, "
            f"e.g. '{DEFAULT_ORDER}'", field="order")
    missing = [a for a in AXIS_NAMES if a not in tokens]
    needed = [a for a in missing if a in used]
    if needed:
        raise InvalidSpecError(
            f"order='{order}' leaves out {needed}, whose degree is > 1: add them, e.g. "
            f"'{DEFAULT_ORDER}'", field="order")
    return tokens + tuple(missing)


def expert_data_parallel_size(parallel: ParallelConfig) -> int:
    """edp = tp * cp * dp / (etp * ep): the replicas of each expert within a PP stage.

    Source: Megatron-LM `parallel_state.initialize_model_parallel` (expert_data_parallel_size
    = world / (etp * ep * pp)); seed ledger Sec. 0.3 (EP folds into DP x CP for MoE layers).
    Legend: etp = expert_tensor_parallel_size, ep = expert_model_parallel_size.

    Raises:
        InvalidSpecError: etp * ep does not divide tp * cp * dp.
    """
    folded = parallel.tp * parallel.cp * parallel.dp
    if folded % (parallel.etp * parallel.ep):
        raise InvalidSpecError(
            f"etp x ep = {parallel.etp} x {parallel.ep} does not divide tp x cp x dp = "
            f"{folded}: the expert mesh folds into the dense ranks of a stage; pick ep and etp "
            f"with etp*ep dividing {folded}", field="parallel.ep")
    return folded // (parallel.etp * parallel.ep)


def build_mesh(parallel: ParallelConfig, *, num_nodes: int, gpus_per_node: int,
               order: str = DEFAULT_ORDER) -> DeviceMesh:
    """Coordinates and groups of every rank for a parallel configuration on a cluster.

    Only the degrees (tp, cp, dp, pp, ep, etp) decide the mesh, so a search keeps its
    meshes by them, the cluster shape and the order on its memo (a 16,384-GPU mesh of TP 8
    x PP 16 x DP 128 takes about 1.1 ms to build on a 2-core x86 host; the search asks for
    the same one for every activation policy, and the step-time model's axis groups of
    every candidate it times); each mesh keeps its group placements, and its group arrays
    are read-only.

    Raises:
        InvalidSpecError: the degrees do not multiply to num_nodes * gpus_per_node, the
            expert mesh does not fold into the dense one, or the order is malformed.
    """
    degrees = (parallel.tp, parallel.cp, parallel.dp, parallel.pp, parallel.ep, parallel.etp)
    key = (degrees, num_nodes, gpus_per_node, order)
    memo = current_memo()
    return kept(memo.meshes, key,
                lambda: _mesh_of_degrees(*key))


def _mesh_of_degrees(degrees: tuple[int, int, int, int, int, int], num_nodes: int,
                     gpus_per_node: int, order: str) -> DeviceMesh:
    """`build_mesh` of the degrees (tp, cp, dp, pp, ep, etp)."""
    tp, cp, dp, pp, ep, etp = degrees
    parallel = ParallelConfig.model_construct(tp=tp, cp=cp, dp=dp, pp=pp, ep=ep, etp=etp)
    world = num_nodes * gpus_per_node
    if parallel.world_size != world:
        raise InvalidSpecError(
            f"tp*cp*dp*pp = {parallel.world_size} but the cluster has {num_nodes} x "
            f"{gpus_per_node} = {world} GPUs: make the product equal {world}",
            field="parallel.dp")
    edp = expert_data_parallel_size(parallel)
    dense = {"tp": parallel.tp, "cp": parallel.cp, "ep": 1, "dp": parallel.dp, "pp": parallel.pp}
    expert = {"tp": parallel.etp, "cp": 1, "ep": parallel.ep, "dp": edp, "pp": parallel.pp}
    axes = parse_order(order, sizes={**dense, "ep": parallel.ep})
    if (parallel.ep > 1 or parallel.etp > 1) and not pipeline_groups_agree(parallel, axes):
        raise InvalidSpecError(
            f"order='{order}' gives MoE and dense layers different pipeline groups (etp="
            f"{parallel.etp} vs tp={parallel.tp}, edp={edp} vs dp={parallel.dp} before 'pp'): "
            "put 'pp' last, e.g. 'tp-cp-ep-dp-pp'", field="order")
    members: dict[GroupKind, IntArray] = {}
    for kinds, sizes in ((_DENSE_KINDS, dense), (_EXPERT_KINDS, expert)):
        for kind, names in kinds.items():
            members[kind] = masked_rank_groups([sizes[a] for a in axes],
                                               [a in names for a in axes])
    spans: dict[GroupKind, IntArray] = {}
    per_node: dict[GroupKind, IntArray] = {}
    for kind, m in members.items():
        spans[kind], per_node[kind] = _node_runs(m, gpus_per_node)
    for table in (members, spans, per_node):
        for array in table.values():
            array.flags.writeable = False
    return DeviceMesh(
        world_size=world, num_nodes=num_nodes, gpus_per_node=gpus_per_node, order=axes,
        dense_sizes=dense, expert_sizes=expert, _members=members, _spans=spans,
        _per_node=per_node,
    )


def pipeline_groups_agree(parallel: ParallelConfig, axes: tuple[str, ...]) -> bool:
    """True when the dense and the expert mesh put the same ranks in each PP group.

    Source: Megatron-LM `initialize_model_parallel` asserts exactly this (and, when 'pp' is
    not last, that edp == dp); with 'pp' last both hold by construction. Callers enforce it
    only when an expert mesh is in use (ep > 1 or etp > 1); otherwise the expert groups are
    informational.
    """
    folded = parallel.tp * parallel.cp * parallel.dp
    if parallel.pp == 1 or axes[-1] == "pp" or folded % (parallel.etp * parallel.ep):
        return True
    edp = expert_data_parallel_size(parallel)
    if edp != parallel.dp:
        return False
    dense = {"tp": parallel.tp, "cp": parallel.cp, "ep": 1, "dp": parallel.dp,
             "pp": parallel.pp}
    expert = {"tp": parallel.etp, "cp": 1, "ep": parallel.ep, "dp": edp, "pp": parallel.pp}
    mask = [a == "pp" for a in axes]
    return bool(np.array_equal(masked_rank_groups([dense[a] for a in axes], mask),
                               masked_rank_groups([expert[a] for a in axes], mask)))


def masked_rank_groups(sizes: list[int], mask: list[bool]) -> IntArray:
    """Rank groups (num_groups x group_size) varying the masked axes, Megatron's numbering.

    `sizes` lists the axis sizes in order (first axis fastest in the rank number). A group
    fixes every unmasked coordinate; groups are numbered with the first unmasked axis
    fastest and members listed with the first masked axis fastest.
    Source: Megatron-LM `generate_masked_orthogonal_rank_groups` (its docstring's example:
    sizes [2, 3, 4], mask [False, True, False] gives [0, 2, 4], [1, 3, 5], ...).
    """
    k = len(sizes)
    # C-order array whose last index is the first (fastest) axis.
    grid = np.arange(prod(sizes), dtype=np.int64).reshape(tuple(reversed(sizes)))
    position = {axis: k - 1 - axis for axis in range(k)}
    free = [position[a] for a in reversed(range(k)) if not mask[a]]
    grouped = [position[a] for a in reversed(range(k)) if mask[a]]
    group_size = prod(s for s, m in zip(sizes, mask, strict=True) if m)
    return grid.transpose(free + grouped).reshape(-1, group_size)


def _coords_of(rank: int, axes: tuple[str, ...], sizes: dict[str, int]) -> dict[str, int]:
    coords: dict[str, int] = {}
    stride = 1
    for axis in axes:
        coords[axis] = (rank // stride) % sizes[axis]
        stride *= sizes[axis]
    return coords


def _inverse(members: IntArray, world: int) -> IntArray:
    owner = np.empty(world, dtype=np.int64)
    owner[members] = np.arange(members.shape[0], dtype=np.int64)[:, None]
    return owner


def _placement(kind: GroupKind, members: IntArray, spans: IntArray,
               per_node: IntArray) -> AxisPlacement:
    """The placement of groups `members` whose nodes spanned and most ranks per node are
    `spans` and `per_node` (`_node_runs`)."""
    worst = int(np.argmax(spans))
    return AxisPlacement(
        kind=kind, group_size=int(members.shape[1]), num_groups=int(members.shape[0]),
        all_intra_node=bool(spans.max() == 1), max_nodes_spanned=int(spans[worst]),
        ranks_per_node=int(per_node[worst]))


def _node_runs(members: IntArray, gpus_per_node: int) -> tuple[IntArray, IntArray]:
    """Per group (row of `members`): the nodes it spans and its members on its fullest
    node.

    A row's node ids, in ascending order, fall into runs of equal ids, one per node: the
    runs are counted and the longest taken, for all rows at once (a maximum reduced over
    each row's run lengths). The rows must be ascending, and are: `masked_rank_groups`
    lists each group's members with the first masked axis fastest, and the axes' strides
    grow in their order, so the ranks ascend; `split_placement`'s consecutive blocks and
    every-k-th members of an ascending row ascend too (`test_mesh_layout.py` checks both
    against a member-by-member count).
    """
    rows, width = members.shape
    spans: IntArray = np.empty(rows, dtype=np.int64)
    if width == 1:  # groups of one (an axis of degree 1): one node, one member on it
        spans.fill(1)
        return spans, spans
    nodes = members // gpus_per_node
    # ndarray methods and ufuncs rather than numpy's Python-level helpers (diff,
    # flatnonzero, count_nonzero): this runs for every group kind of every mesh built.
    starts = np.empty((rows, width), dtype=bool)  # where a run of one node id begins
    starts[:, 0] = True
    np.not_equal(nodes[:, 1:], nodes[:, :-1], out=starts[:, 1:])
    starts.sum(axis=1, out=spans)
    first = starts.ravel().nonzero()[0]
    lengths = np.empty_like(first)  # every row opens with a run, so none spans two rows
    np.subtract(first[1:], first[:-1], out=lengths[:-1])
    lengths[-1] = rows * width - first[-1]
    row_first = np.zeros(rows, dtype=np.int64)
    spans[:-1].cumsum(out=row_first[1:])
    longest: IntArray = np.maximum.reduceat(lengths, row_first)
    return spans, longest


__all__ = [
    "AXIS_NAMES",
    "DEFAULT_ORDER",
    "AxisPlacement",
    "DeviceMesh",
    "GroupKind",
    "RankGroup",
    "build_mesh",
    "expert_data_parallel_size",
    "masked_rank_groups",
    "parse_order",
    "pipeline_groups_agree",
]
