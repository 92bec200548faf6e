"""A lower bound of the pipeline makespan of every activation policy on one mesh and ZeRO
stage, from a table of the mesh's work without a policy: what the search prunes policies
with, beside the exact stage times (`models.core.step_time.stage`) it bounds.

Owns: `WorkTable`, `work_table` and `policy_work_bound_s`. Must not: time a stage, assemble
a step (`models.core.step_time.assembly`) or bound the step's tail
(`models.core.step_time.bounds`).
"""

import itertools
from dataclasses import dataclass

from api_schemas.architecture import ModelSpec
from api_schemas.hardware import ClusterSpec
from api_schemas.parallel import FullLayers, ParallelConfig, RecomputeMode, StagePolicy
from api_schemas.training import TrainingSpec
from models.core.compute import LayerCompute
from models.core.layout import pipeline_layout
from models.core.step_time.assembly import ranks_work_s
from models.core.step_time.makespan import crossings_per_micro_batch
from models.core.step_time.setting import step_setting
from models.core.step_time.stage import (
    TimingKind,
    chunk_timing_kinds,
    layer_parts,
    layer_parts_memo,
    stage_times,
)
from models.core.step_time.step_terms import slowest_gpu_wait_s


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkTable:
    """What `policy_work_bound_s` needs of one mesh and ZeRO stage without a policy, kept to
    bound many policies of it: each rank's work, the micro-batch crossings, each rank's
    running count of each layer timing kind by position, and each kind's recomputation
    times. Kinds are `models.core.step_time.timing_kinds.timing_kind` (MoE or not, linear or full
    attention, attention window and chunk), as `stage_time` times them: a sliding-window layer
    recomputes less than a full-attention one of the same MoE kind, so counting a rank's
    layers as copies of one of them would not bound the rank whose first layer is the
    costlier."""

    busy_s: tuple[float, ...]
    crossings: float
    kind_prefix: tuple[tuple[tuple[int, ...], ...], ...]
    """Per rank and kind (in the order of `layers`): entry j is the number of the rank's
    first j layers of that kind."""
    full_s: tuple[float, ...]
    """Per kind: full recomputation of one layer, the forward and its collectives."""
    layers: tuple[LayerCompute, ...]
    """Per kind: one layer's compute (its selective recomputation by module)."""
    wait_s: float
    """The wait for the slowest GPU without a policy (`slowest_gpu_wait_s` without
    recomputation): every policy's step carries at least this beside its makespan."""

    def bound_s(self, parallel: ParallelConfig, *, more_full_layers: bool = False) -> float:
        """`policy_work_bound_s` of `parallel` (this table's mesh with a policy)."""
        best = 0.0
        uniform = parallel.stage_policies is None
        policy = parallel.policy_of(0)
        # A rank's added recomputation reads only its policy, its size and its kind counts
        # overall and among its first k layers.
        added_of: dict[tuple[object, ...], float] = {}
        for rank, (busy, prefixes) in enumerate(zip(self.busy_s, self.kind_prefix,
                                                    strict=True)):
            if not uniform:
                policy = parallel.policy_of(rank)
            recompute = policy.recompute
            size = len(prefixes[0]) - 1
            k = min(size, recompute.full_layers) if isinstance(recompute, FullLayers) else 0
            counts = tuple([prefix[-1] for prefix in prefixes])
            head = tuple([prefix[k] for prefix in prefixes])
            key = (policy if not uniform else None, counts, head)
            added = added_of.get(key)
            if added is None:
                added = added_of[key] = self._added_s(policy, counts, head, more_full_layers)
            best = max(best, busy + self.crossings * added)
        return best

    def _added_s(self, policy: StagePolicy, counts: tuple[int, ...], head: tuple[int, ...],
                 more_full_layers: bool) -> float:
        """The recomputation `policy` adds to one micro-batch of a rank holding `counts`
        layers of each kind, `head` of them among its first k (k: the policy's fully
        recomputed first layers)."""
        recompute = policy.recompute
        if isinstance(recompute, FullLayers):
            added = 0.0
            for count, first, full, layer in zip(counts, head, self.full_s, self.layers,
                                                 strict=True):
                rest = (layer.recompute_s(policy.recompute_modules)
                        if recompute.others == RecomputeMode.SELECTIVE.value else 0.0)
                if more_full_layers:
                    rest = min(rest, full)
                added += first * full + (count - first) * rest
            return added
        if recompute == RecomputeMode.FULL:
            return sum(count * full for count, full in zip(counts, self.full_s, strict=True))
        if recompute == RecomputeMode.SELECTIVE:
            return sum(count * layer.recompute_s(policy.recompute_modules)
                       for count, layer in zip(counts, self.layers, strict=True))
        return 0.0


def work_table(spec: ModelSpec, training: TrainingSpec, plain: ParallelConfig,
               cluster: ClusterSpec) -> WorkTable:
    """The `WorkTable` of a configuration without a policy (`plain`). Not memoised here: a
    search keeps each candidate's tables on its `solver.candidate.PlanCandidate` (a table
    is never modified).

    Raises:
        InvalidSpecError: as `models.core.step_time.bounds.pipeline_makespan_bound`.
    """
    setting = step_setting(spec, training, plain, cluster)
    m, fabric, groups = setting.num_micro_batches, setting.fabric, setting.groups
    layouts = pipeline_layout(spec, plain)
    stages = stage_times(spec, training, plain, cluster, layouts, m, fabric, groups)
    memo = layer_parts_memo(spec, training, cluster)
    position: dict[TimingKind, int] = {}
    layers: list[LayerCompute] = []
    full: list[float] = []
    sequences = []
    for layout in layouts:
        sequence = []
        # The kinds of the rank's layers in `layers` order (kept per chunk tuple).
        kinds = itertools.chain.from_iterable(chunk_timing_kinds(spec, layout.chunks))
        for index, kind in zip(layout.layers, kinds, strict=True):
            if kind not in position:
                position[kind] = len(layers)
                lc, comm, _, _ = layer_parts(spec, training, plain, cluster, index,
                                             fabric=fabric, groups=groups, memo=memo)
                layers.append(lc)
                full.append(lc.recompute_full_s + sum(comm.recompute_s.values()))
            sequence.append(position[kind])
        sequences.append(sequence)
    # Running counts by C-level accumulation (True adds 1 to the int start).
    prefixes = tuple([
        tuple([tuple(itertools.accumulate(map(kind.__eq__, sequence), initial=0))
               for kind in range(len(layers))])
        for sequence in sequences])
    return WorkTable(busy_s=tuple(ranks_work_s(plain, stages, m)),
                     crossings=m * crossings_per_micro_batch(plain),
                     kind_prefix=prefixes, full_s=tuple(full), layers=tuple(layers),
                     wait_s=slowest_gpu_wait_s(plain, stages, m, recompute=False))


def policy_work_bound_s(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                        cluster: ClusterSpec, plain: ParallelConfig, *,
                        more_full_layers: bool = False) -> float:
    """A lower bound of the pipeline makespan (so of the step) of `parallel`, whose
    activation policy `plain` lacks (`plain`: the same mesh and ZeRO stage without one, or
    with ZeRO-0 for ZeRO-1 and 2, whose ops time alike): the busiest rank's work without the
    policy plus the recomputation the policy adds to it, every micro-batch crossing.

    A policy adds to a rank's ops its recomputation (full: the layer's forward and its
    forward collectives again; selective: the listed modules), FP8 casts and offload
    stalls, all non-negative (`models.core.step_time.stage.stage_time`); every rank does all its
    work within the makespan (`rank_work_s`). With `more_full_layers` the bound holds for
    the same policy with full recomputation of more first layers too: each layer past the
    first k counts the smaller of its full and its other recomputation.

    Raises:
        InvalidSpecError: as `models.core.step_time.bounds.pipeline_makespan_bound`.
    """
    return work_table(spec, training, plain, cluster).bound_s(
        parallel, more_full_layers=more_full_layers)




__all__ = ["WorkTable", "policy_work_bound_s", "work_table"]
