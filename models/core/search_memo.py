"""The memo of the cost model: the pieces searches derive again and again, kept on one object
the process shares, under keys that hold every input of each piece, so that a key cannot
miss a field and one memo serves every search and every direct call.

Owns: `SearchMemo` (the tables of pieces that do not read a model, each keyed by every input
of the piece it keeps), `ModelTables` (the pieces derived from one model, on an object that
serves that model alone), `node_free_cluster` (the key a cluster enters under where its piece
never reads the node count), the shared memo and its bound (`SHARED_MEMO_ENTRIES`, checked as
a search starts: `search_memo`, `within_search_memo`), `current_memo` (the memo in force),
`kept` (a piece's lookup in one of the tables, made on its first ask), and emptying it
(`release_shared_memo` for the service's idle release, `forget_memos` for scripts that change
a constant the pieces read). Must not: compute a piece (each module that defines one reads
and fills its table here).

A cluster in a key: a piece that never reads the cluster's node count (nor its world size:
a configuration's degrees fix the GPUs it is timed on) keys by `node_free_cluster`, the
cluster with every other field its own, so that the sizes of a frontier, a relaxation's
node counts and the objectives that search every smaller world share it; a piece that reads
the node count keys by the cluster itself.
"""

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from api_schemas.architecture import ModelSpec

if TYPE_CHECKING:
    from api_schemas.collectives import Collective
    from api_schemas.hardware import ClusterSpec
    from api_schemas.parallel import (
        FullLayers,
        ParallelConfig,
        PipelineSchedule,
        RecomputeMode,
        RecomputeModule,
    )
    from api_schemas.training import TrainingSpec
    from models.catalog.kernels import KernelProfile
    from models.core.activations import LayerActivationBytes, LayerActivationContext
    from models.core.collectives.alpha_beta import CollectiveCost
    from models.core.collectives.fabric import Fabric
    from models.core.compute import ComputeContext, LayerCompute, OpTimes
    from models.core.flops import FlopKind
    from models.core.layer_kinds.base import MlpBlockRecord
    from models.core.layout import StageLayout
    from models.core.ledger_items import RankParameters
    from models.core.mesh.layout import DeviceMesh
    from models.core.pipeline.in_flight import InFlightProfile
    from models.core.pipeline.simulator import OrderArray
    from models.core.precision import StateBytesPerParam
    from models.core.rank_activations import ContextInputs
    from models.core.rank_states import WeightKinds
    from models.core.step_time.layer_inputs import LayerPartsInputs, TimingKind
    from models.core.step_time.stage import KindCount, LayerParts, StageBucket
    from models.core.traffic.layer import LayerCall
    from models.core.traffic.weights import StageWeights

_P = ParamSpec("_P")
_R = TypeVar("_R")
_K = TypeVar("_K")
_V = TypeVar("_V")

Chunks = tuple[tuple[int, ...], ...]
"""The layer indices of each chunk of a rank."""
ChunkKinds = tuple[tuple["TimingKind", ...], ...]
"""The timing kind of each layer of each chunk of a rank."""


@dataclass(slots=True, eq=False)
class ModelTables:
    """The pieces derived from one model (`spec`), each table keyed by the other inputs of
    its piece: the model is the object's, so no key hashes it, and `SearchMemo.tables`
    hands the object only to that model or one equal to it (every piece reads the model's
    fields, never its identity)."""

    spec: ModelSpec
    kind_layers: "tuple[tuple[TimingKind, int, int], ...] | None" = None
    """`models.core.step_time.timing_kinds.kind_layers` (made on first ask)."""
    layer_kinds: "tuple[TimingKind, ...] | None" = None
    """`models.core.step_time.timing_kinds.timing_kind` of every layer by index (made on
    first ask)."""
    mlp_blocks: "tuple[MlpBlockRecord, ...] | None" = None
    """`models.core.layer_kinds.mlp_blocks` (made on first ask)."""
    cheap_recompute_modules: "tuple[RecomputeModule, ...] | None" = None
    """`models.core.layer_kinds.kind_recompute_modules` with `cheap_only` (made on first
    ask)."""
    flop_kinds: "tuple[FlopKind, ...] | None" = None
    """`models.core.flops.flop_kinds`: each layer's FLOP kind by index (made on first ask)."""
    timing_kinds: dict[Chunks, ChunkKinds] = field(default_factory=dict)
    """`chunk_timing_kinds` by chunk tuple."""
    weight_kinds: "dict[Chunks, WeightKinds]" = field(default_factory=dict)
    """`chunk_weight_kinds` by chunk tuple."""
    stage_weights: "dict[tuple[int, int, tuple[StageLayout, ...]], tuple[StageWeights, ...]]" = (
        field(default_factory=dict))
    """`models.core.traffic.weights.stage_weights` by (tp, expert split, rank layouts)."""
    rank_parameters: ("dict[tuple[int, int, int, tuple[tuple[int, int], ...], int, int, int], "
                      "RankParameters]") = field(default_factory=dict)
    """`models.core.rank_states` parameter groups by (tp, ep, etp, layer mix, embeddings,
    heads, MTP modules)."""
    layer_compute: ("dict[tuple[bool, ComputeContext, int | None, bool, int | None], "
                    "LayerCompute]") = field(default_factory=dict)
    """`models.core.compute.layer_compute` by (MoE, context, window, linear, chunk)."""
    head_compute: "dict[ComputeContext, OpTimes]" = field(default_factory=dict)
    """`models.core.compute.head_compute` by compute context."""
    activation_bytes: ("dict[tuple[bool, LayerActivationContext, bool], "
                       "LayerActivationBytes]") = field(default_factory=dict)
    """`models.core.activations.kind_activation_bytes` by (MoE, context, linear)."""
    layer_parts: ("dict[tuple[TrainingSpec, ClusterSpec], "
                  "dict[LayerPartsInputs, LayerParts]]") = field(default_factory=dict)
    """`models.core.step_time.stage.layer_parts_memo` by (recipe, `node_free_cluster`)."""
    stage_times: ("dict[tuple[TrainingSpec, ClusterSpec, ParallelConfig, int], "
                  "StageBucket]") = field(default_factory=dict)
    """`models.core.step_time.stage.stage_times` by (recipe, `node_free_cluster`,
    configuration, micro-batches)."""
    layer_calls: "dict[tuple[object, ...], tuple[LayerCall, ...]]" = field(
        default_factory=dict)
    """`models.core.step_time.exposure.layer_calls` by the recipe, the configuration fields,
    mesh and fabric they read and the layer's MoE and linear-attention kinds."""
    call_families: ("dict[tuple[TrainingSpec, Fabric], "
                    "dict[tuple[object, ...], tuple[LayerCall, ...]]]") = field(
        default_factory=dict)
    """Per (recipe, fabric), each family of a layer's calls under the inputs its rule
    reads (`models.core.step_time.exposure`)."""
    layouts: "dict[tuple[object, ...], tuple[StageLayout, ...]]" = field(default_factory=dict)
    """`models.core.layout.pipeline_layout` by its `LAYOUT_FIELDS`."""
    stored_bytes: ("dict[tuple[WeightKinds, RecomputeMode | FullLayers, "
                   "tuple[RecomputeModule, ...], LayerActivationContext], "
                   "tuple[tuple[int, ...], int]]") = field(default_factory=dict)
    """`models.core.rank_activations.chunk_stored_bytes` by (weight kinds, recompute,
    modules, context)."""
    bound_cores: "dict[tuple[TrainingSpec, ClusterSpec], dict[Any, Any]]" = field(
        default_factory=dict)
    """The search bounds' layer and head times of a candidate's core
    (`solver.bounds.BoundTables.core`) by (time-bound recipe, `node_free_cluster`), so that
    the searches of one request (the wide one and the one after it, the robust choice's)
    and the sizes of a sweep share them."""


@dataclass(slots=True, eq=False)
class SearchMemo:
    """The pieces the searches derive that do not read a model, each table keyed by every
    input of its piece, and the `ModelTables` of each model they price (`tables`)."""

    models: dict[ModelSpec, ModelTables] = field(default_factory=dict)
    """By the model (equal models share their tables: every piece reads the model's fields,
    never its identity)."""
    last: ModelTables | None = None
    """The tables asked for last (a search prices one model: no hash on the next ask)."""
    meshes: "dict[tuple[tuple[int, ...], int, int, str], DeviceMesh]" = field(
        default_factory=dict)
    """`models.core.mesh.layout.build_mesh` by (degrees, nodes, GPUs per node, order)."""
    in_flight: ("dict[tuple[PipelineSchedule, int, int, int, int | None], "
                "InFlightProfile]") = field(default_factory=dict)
    """`models.core.pipeline.in_flight_profile` by (schedule, stages, micro-batches,
    chunks, group size)."""
    op_orders: ("dict[tuple[PipelineSchedule, int, int, int, int | None], "
                "OrderArray]") = field(default_factory=dict)
    """The simulator's recorded op order of a schedule's program
    (`models.core.pipeline.simulator.VisitOrder.segments`) by (schedule, stages,
    micro-batches, chunks, group size): `models.core.step_time.makespan.compiled_schedule`
    hands it to the shape's program when it compiles it again (the 1-100 node frontier of
    `benchmarks/bench_frontier.py` keeps 715, 37 MB)."""
    profiles: "dict[tuple[str, float, float], KernelProfile]" = field(default_factory=dict)
    """Scaled kernel profiles by (family, GEMM scale, attention scale)."""
    collective_costs: "dict[tuple[Collective, int, int, int, Fabric], CollectiveCost]" = (
        field(default_factory=dict))
    """`collective_cost` by (collective, ranks, message bytes, ranks per node, fabric)."""
    activation_contexts: "dict[ContextInputs, LayerActivationContext]" = field(
        default_factory=dict)
    """One shared `LayerActivationContext` per `ContextInputs` record."""
    state_bytes: "dict[tuple[TrainingSpec, bool, bool], StateBytesPerParam]" = field(
        default_factory=dict)
    """`models.core.precision.state_bytes_per_param` by (recipe, GEMM weight, matrix)."""
    kind_counts: ("dict[tuple[Chunks, ChunkKinds, RecomputeMode | FullLayers], "
                  "tuple[tuple[KindCount, ...], ...]]") = field(default_factory=dict)
    """`models.core.step_time.stage` kind counts by (chunks, kinds, recompute)."""
    index_arrays: dict[tuple[str, int, int], Any] = field(default_factory=dict)
    """Read-only index arrays of an array shape, by (what they index, two sizes): the
    expert placement's (`solver.placement.routes`)."""
    straggler_max: dict[int, float] = field(default_factory=dict)
    """`expected_max_standard_normal` by draw count."""
    node_free: "dict[ClusterSpec, ClusterSpec]" = field(default_factory=dict)
    """`node_free_cluster` by cluster."""
    last_cluster: "tuple[ClusterSpec, ClusterSpec] | None" = None
    """The cluster asked `node_free_cluster` for last and its key (a search prices one
    cluster: no hash on the next ask)."""
    recipes: dict[tuple["TrainingSpec", frozenset[str]],
                  tuple["TrainingSpec", "TrainingSpec"]] = field(default_factory=dict)
    """`solver.runtime_choice.resolved` by (the request's recipe, features on), each with
    the recipe object it was decided from: one object per decided recipe, which the ledger
    memos tell apart by identity."""

    def entries(self) -> int:
        """Pieces kept, over every table of the memo and of its models (a table of tables
        counts its inner entries)."""
        return _entries(self) + sum(_entries(tables) for tables in list(self.models.values()))

    def clear(self) -> None:
        """Forget every piece."""
        for name in _TABLES[type(self)]:
            getattr(self, name).clear()
        self.models.clear()
        self.last = None
        self.last_cluster = None

    def tables(self, spec: ModelSpec) -> ModelTables:
        """The tables of `spec` (made on first ask)."""
        last = self.last
        if last is not None and last.spec is spec:
            return last
        found = self.models.get(spec)
        if found is None:
            found = self.models[spec] = ModelTables(spec=spec)
        self.last = found
        return found


_TABLES = {kind: tuple(f.name for f in fields(kind) if f.name not in ("models", "spec")
                       and f.default_factory is dict)
           for kind in (SearchMemo, ModelTables)}
"""The dict fields of each memo class: its tables."""


def _entries(memo: "SearchMemo | ModelTables") -> int:
    total = 0
    for name in _TABLES[type(memo)]:
        table = getattr(memo, name)
        # list(): taken in one C call, so a search of another thread adding meanwhile does
        # not change the dict under the iteration.
        total += len(table) + sum(len(inner) for inner in list(table.values())
                                  if isinstance(inner, dict))
    return total


_SHARED = SearchMemo()
"""The memo the process shares: every key holds every input of its piece, so one memo serves
any number of searches and direct calls of the cost model."""

_CURRENT: ContextVar[SearchMemo] = ContextVar("search_memo", default=_SHARED)

current_memo = _CURRENT.get
"""The memo in force in this context: the shared one (a C call: no Python frame on the hot
paths that ask)."""

SHARED_MEMO_ENTRIES = 100_000
"""Entries (`SearchMemo.entries`) past which a search starting empties the shared memo: its
bound. Searches close together (the lab re-planning as a field changes, a frontier's sizes,
a benchmark's repeats, a research script's rows) find the pieces they share. The eight
problems of `benchmarks/bench_planner.py --open` leave about 57,000 entries in all (one
search of DeepSeek-V3 on 2,048 H800 about 17,000, with every mechanism open about 22,000),
the process at 1.1 GB peak RSS; the service empties it when its solver pool falls idle
(`service/search_caches.py`)."""


def _bounded() -> None:
    """Empty the shared memo once it holds `SHARED_MEMO_ENTRIES` (a search is starting)."""
    if _SHARED.entries() > SHARED_MEMO_ENTRIES:
        _SHARED.clear()


def release_shared_memo() -> int:
    """Empty the shared memo (the service's idle release); the entries it held. A search
    running meanwhile keeps its answer exact: it makes again what it asks for next."""
    dropped = _SHARED.entries()
    _SHARED.clear()
    return dropped


def forget_memos() -> None:
    """Forget every kept piece, the shared memo's and the context's (for scripts that change
    a kernel profile or a calibrated constant between estimates: a key holds the inputs of a
    piece, not the module constants it reads)."""
    _CURRENT.get().clear()
    _SHARED.clear()


_IN_SEARCH: ContextVar[bool] = ContextVar("in_search", default=False)
"""Whether a search runs in this context (its nested searches do not check the bound)."""


@contextmanager
def search_memo() -> Iterator[SearchMemo]:
    """The memo a search runs on: the one in force (the shared memo, emptied first once it
    holds `SHARED_MEMO_ENTRIES`, as the outermost search of a context starts)."""
    if _IN_SEARCH.get():
        yield _CURRENT.get()
        return
    _bounded()
    searching = _IN_SEARCH.set(True)
    try:
        yield _CURRENT.get()
    finally:
        _IN_SEARCH.reset(searching)


def within_search_memo(function: Callable[_P, _R]) -> Callable[_P, _R]:
    """`function` run as a search (`search_memo`)."""

    @functools.wraps(function)
    def scoped(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        if _IN_SEARCH.get():
            return function(*args, **kwargs)
        with search_memo():
            return function(*args, **kwargs)

    return scoped


def kept(table: dict[_K, _V], key: _K, make: Callable[[], _V]) -> _V:
    """The value `table` keeps under `key`, made by `make` and kept on its first ask. The one
    way a piece is kept on a memo table: `key` holds every input of the piece its table does
    not fix."""
    found = table.get(key)
    if found is None:
        found = table[key] = make()
    return found


def node_free_cluster(cluster: "ClusterSpec") -> "ClusterSpec":
    """The key of `cluster` in the tables of pieces that never read its node count: the
    cluster with `num_nodes` 1 and every other field its own (its GPU, node shape, links,
    topology, host, memory and calibration fields), one per cluster on the memo in force."""
    memo = _CURRENT.get()
    last = memo.last_cluster
    if last is not None and last[0] is cluster:
        return last[1]
    found = memo.node_free.get(cluster)
    if found is None:
        found = memo.node_free[cluster] = cluster.model_copy(update={"num_nodes": 1})
    memo.last_cluster = (cluster, found)
    return found


def model_tables(spec: ModelSpec) -> ModelTables:
    """The tables of `spec` on the memo in force."""
    return _CURRENT.get().tables(spec)


__all__ = ["SHARED_MEMO_ENTRIES", "ModelTables", "SearchMemo", "current_memo", "forget_memos",
           "kept", "model_tables", "node_free_cluster", "release_shared_memo", "search_memo",
           "within_search_memo"]
