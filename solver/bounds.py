"""Cheap lower bounds of step time and peak memory for mesh candidates.

Owns: per-"core" (tp, cp, micro-batch, ep, etp, sp, schedule family) layer times computed
once and reused, and the two bounds the search prunes and orders with:
- time: max(m x average stage busy time, the schedule's closed-form makespan at the
  lightest stage's op costs) with the fastest activation policy; both are lower bounds of
  the simulated makespan (every rank does its work; fixed-order schedules are monotone in
  op durations); the queue adds the wait for the slowest GPU of the layers' compute
  (`wait_bound_s`), which every plan's step carries beside its makespan;
- memory: the stage-averaged model states at the strongest ZeRO stage allowed plus the
  averaged activations under the most frugal policy (full recomputation, FP8 storage and
  the largest offload allowed), which no stage can beat on average.
Must not: decide anything; the planner does.
"""

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

from api_schemas.architecture import ModelSpec
from api_schemas.hardware import ClusterSpec
from api_schemas.parallel import (
    ContextParallelKind,
    ParallelConfig,
    PipelineSchedule,
    RecomputeMode,
)
from api_schemas.requests import Constraints
from api_schemas.training import TrainingSpec
from models.core.activations import (
    LayerActivationContext,
    head_activation_bytes,
    layer_activation_bytes,
)
from models.core.collectives import fabric_of
from models.core.compute import LayerCompute, head_compute
from models.core.ledger_memo import LedgerMemo
from models.core.memory_floors import (
    RUNTIME_RESERVE_BYTES,
    head_in_flight_floor,
    peak_floor_bytes,
    stored_activation_floor_bytes,
)
from models.core.params import count_parameters, mtp_module_params
from models.core.pipeline import (
    SCHEDULES,
    closed_form_makespan,
    rank_peaks_in_flight_chunks,
)
from models.core.precision import sharded_state_bytes, state_bytes_per_param
from models.core.runtime_features import ep_overlap_active
from models.core.search_memo import model_tables, node_free_cluster
from models.core.step_time import (
    axis_groups,
    compute_context,
    kind_layers,
    layer_parts,
    layer_parts_memo,
    zero3_exposed_s,
)
from models.core.step_time.variability import slowest_gpu_share
from models.errors import InvalidSpecError
from solver.space import MeshCandidate


@dataclass(frozen=True, slots=True, kw_only=True)
class KindTimes:
    """One layer timing kind of the model (`models.core.step_time.timing_kind`: MoE or not,
    linear or full attention, attention window) under a core, fastest policy: its first
    layer, how many layers of the model share it, and one layer's per-micro-batch times
    with its exposed collectives."""

    index: int
    count: int
    forward_s: float
    backward_s: float
    weight_s: float
    compute: LayerCompute
    """The layer's compute (for ZeRO-3 exposure and the slowest-GPU wait)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CoreTimes:
    """Per-micro-batch time of every layer timing kind for one core, fastest policy.

    Each kind is timed by its own first layer and counted by its own layers, as
    `stage_time` times them: a model whose layers of one MoE kind differ in attention
    (gpt-oss alternates sliding-window and full attention) is summed exactly rather than
    as copies of one layer, which would overstate the work where that layer is the
    costlier one and so not bound it."""

    kinds: tuple[KindTimes, ...]
    head_s: float
    layer_f: float
    """Forward time of every layer of the model."""
    layer_b: float
    """Input-gradient backward time of every layer of the model."""
    layer_w: float
    """Weight-gradient backward time of every layer of the model."""
    layer_compute_s: float
    """Compute time (F + B + W, no collectives) of every layer of the model, the
    slowest-GPU wait's base (`BoundTables.wait_bound_s`)."""

    @classmethod
    def of(cls, kinds: tuple[KindTimes, ...], head_s: float) -> "CoreTimes":
        """The core's times from its kinds (the totals count each kind's layers)."""
        return cls(kinds=kinds, head_s=head_s,
                   layer_f=sum(k.count * k.forward_s for k in kinds),
                   layer_b=sum(k.count * k.backward_s for k in kinds),
                   layer_w=sum(k.count * k.weight_s for k in kinds),
                   layer_compute_s=sum([k.count * k.compute.times.total_s for k in kinds]))


class CoreInputs(NamedTuple):
    """What the layer and head times of a candidate's core read under one model, recipe and
    cluster (`BoundTables.core`): the degrees that shard a layer's work, the micro-batch,
    sequence parallelism, and whether the schedule hides the expert all-to-alls. Candidates
    with equal records share their core times."""

    tp: int
    cp: int
    cp_kind: ContextParallelKind
    ulysses_degree: int | None
    micro_batch_size: int
    ep: int
    etp: int
    sequence_parallel: bool
    ep_overlapped: bool

    @classmethod
    def of(cls, c: MeshCandidate, training: TrainingSpec) -> "CoreInputs":
        """The record of candidate `c` under `training`."""
        # Built as a tuple: the generated `__new__` costs a Python call per record.
        return tuple.__new__(cls, (
            c.tp, c.cp, c.cp_kind, c.ulysses_degree, c.micro_batch_size, c.ep, c.etp,
            c.sequence_parallel,
            SCHEDULES[c.schedule].overlapped_pairs
            or ep_overlap_active(training, c.schedule, pp=c.pp, ep=c.ep,
                                 num_micro_batches=c.num_micro_batches)))


class ActivationDegrees(NamedTuple):
    """The fields of a candidate the activation bytes `BoundTables` keeps per candidate read
    (`BoundTables._activation_context`); the context is built from this record alone."""

    tp: int
    cp: int
    etp: int
    micro_batch_size: int
    sequence_parallel: bool

    @classmethod
    def of(cls, c: MeshCandidate) -> "ActivationDegrees":
        """The record of candidate `c`."""
        # Built as a tuple: the generated `__new__` costs a Python call per record.
        return tuple.__new__(cls, (c.tp, c.cp, c.etp, c.micro_batch_size, c.sequence_parallel))


class Zero3Inputs(NamedTuple):
    """What the exposed ZeRO-3 traffic of a candidate's layers reads
    (`BoundTables.zero3_time_bound_s`): its core (the layers' times) and the data and
    pipeline degrees that size the ZeRO-3 groups."""

    core: CoreInputs
    dp: int
    pp: int


class StatesDegrees(NamedTuple):
    """What the mean model states of a candidate read (`BoundTables._mean_states_bytes`):
    the degrees that shard them, the schedule's weight copies and the strongest ZeRO stage
    allowed."""

    tp: int
    cp: int
    dp: int
    pp: int
    ep: int
    etp: int
    weight_copies: int
    max_zero: int


class BoundTables:
    """Caches of core times for one search (spec, recipe and cluster fixed), made with the
    search and gone with it, but for the core times, which stay on the search memo."""

    def __init__(self, spec: ModelSpec, training: TrainingSpec, cluster: ClusterSpec, *,
                 host_gradients: bool = False,
                 host_optimizer: bool = False,
                 memory_training: TrainingSpec | None = None) -> None:
        self.spec = spec
        self.memory_training = memory_training or training
        """The recipe the memory floors read: the request's own, whose unset runtime features
        the cost model reads as off (no DeepEP buffers, no extra EP-overlap micro-batch), the
        least memory of any runtime choice; `training` (the time bounds') may turn them
        on."""
        self.host_gradients = host_gradients
        """Pipeline ZeRO-2 on every candidate: gradients leave the GPU bound (its two chunk
        buffers are not counted, which keeps the bound below the ledger)."""
        self.host_optimizer = host_optimizer
        """Optimizer states may be in host memory (chosen by the search or pinned): the
        mean-states bound counts no optimizer bytes at ZeRO stages from 1."""
        self.training = training
        self.cluster = cluster
        self.fabric = fabric_of(cluster)
        self.kind_layers = kind_layers(spec)
        """Each layer timing kind's first layer and number of layers."""
        self.params = count_parameters(spec)
        self.mtp_experts = (spec.num_mtp_layers * mtp_module_params(spec).routed_experts
                            if spec.num_mtp_layers else 0)
        self._core_cache: dict[CoreInputs, CoreTimes] = model_tables(spec).bound_cores.setdefault(
            (training, node_free_cluster(cluster)), {})
        """Core times by `CoreInputs` (what they read), on the search memo in force: the
        searches of one request and the sizes of a sweep under the same time-bound recipe
        share them, since no core time reads the cluster's node count (the layer parts it
        is made of are kept the same way, `layer_parts_memo`)."""
        self._input_cache: dict[ActivationDegrees, int] = {}
        """The first layer's input bytes (`_layer_input_bytes`) by the degrees they read."""
        self._head_cache: dict[ActivationDegrees, int] = {}
        """The output head's activation bytes (`_head_share_bytes`) by the degrees they
        read."""
        self._zero3_cache: dict[Zero3Inputs, float] = {}
        """Per core and data and pipeline degrees, the exposed ZeRO-3 traffic of all layers."""
        self._states_cache: dict[StatesDegrees, float] = {}
        """`_mean_states_bytes` per degrees, weight copies and ZeRO stage (all it reads)."""
        self._in_flight: dict[tuple[PipelineSchedule, int, int, int], float] = {}
        """`_mean_in_flight` by its arguments (the schedule's shape)."""
        self._wait_shares: dict[int, float] = {}
        """`slowest_gpu_share` by world size (`wait_bound_s`)."""

    @classmethod
    def of_request(cls, spec: ModelSpec, training: TrainingSpec, cluster: ClusterSpec,
                   constraints: Constraints, *,
                   memory_training: TrainingSpec | None = None) -> "BoundTables":
        """The tables of a search under `constraints`: gradients off the GPU where every
        candidate has Pipeline ZeRO-2 or the search may choose it, optimizer states off it
        where they are pinned there or the search may move them (`allow_optimizer_offload`
        with no share fixed), so that the memory bounds hold for every plan the search
        can take."""
        return cls(spec, training, cluster, memory_training=memory_training,
                   host_gradients=constraints.gradient_host_shards
                   or constraints.allow_gradient_host_shards,
                   host_optimizer=bool(constraints.optimizer_offload_frac)
                   or (constraints.optimizer_offload_frac is None
                       and constraints.allow_optimizer_offload))

    def core(self, c: MeshCandidate) -> CoreTimes:
        """Layer and head times of the candidate's core (cached)."""
        key = CoreInputs.of(c, self.training)
        if key not in self._core_cache:
            self._core_cache[key] = self._compute_core(c)
        return self._core_cache[key]

    def _compute_core(self, c: MeshCandidate) -> CoreTimes:
        spec, tr = self.spec, self.training
        parallel = c.parallel()
        ctx = compute_context(tr, parallel, self.cluster)
        groups = axis_groups(parallel, gpus_per_node=self.cluster.gpus_per_node)
        # The parts the stage times of candidates of this mesh read too (kept).
        memo = layer_parts_memo(spec, tr, self.cluster)
        kinds = []
        for _, index, count in self.kind_layers:
            lc, comm, _, _ = layer_parts(spec, tr, parallel, self.cluster, index,
                                         fabric=self.fabric, groups=groups, memo=memo)
            kinds.append(KindTimes(
                index=index, count=count,
                forward_s=lc.times.forward_s + sum(comm.forward_s.values()),
                backward_s=lc.times.backward_input_s + sum(comm.backward_s.values()),
                weight_s=lc.times.backward_weight_s, compute=lc))
        return CoreTimes.of(tuple(kinds), head_compute(spec, ctx).total_s)

    def _activation_context(self, degrees: "ActivationDegrees") -> LayerActivationContext:
        return LayerActivationContext(seq_len=self.training.sequence_length,
                                      micro_batch_size=degrees.micro_batch_size,
                                      tp=degrees.tp, cp=degrees.cp, etp=degrees.etp,
                                      sequence_parallel=degrees.sequence_parallel)

    def _layer_input_bytes(self, degrees: ActivationDegrees) -> int:
        found = self._input_cache.get(degrees)
        if found is None:
            layer = layer_activation_bytes(self.spec, 0, self._activation_context(degrees))
            found = self._input_cache[degrees] = layer.stored_bytes(RecomputeMode.FULL)
        return found

    def _head_share_bytes(self, c: MeshCandidate,
                          degrees: ActivationDegrees | None = None) -> float:
        """The output head's activations (final norm and projection inputs, fp32 logits:
        `models.core.activations.head_activation_bytes`, with the projection input sharded, its
        smaller form) for as many micro-batches as the schedule keeps in flight on the
        head's chunk, over the pipeline ranks: the rank holding the head keeps them beside
        its own layers' (the ledger's `activations: embedding, head, logits, MTP` line, with
        the same in-flight count, which the schedule fixes whatever the layer split), so
        the mean over ranks of the peaks holds at least this share (the in-flight count:
        `models.core.memory_floors.head_in_flight_floor`). At a vocabulary of 202,048 (Llama 4)
        and 32k tokens the logits of one micro-batch are 26 GB; GPipe keeps every micro-batch's.
        (`degrees`: the candidate's `ActivationDegrees`, read when not given.)"""
        if degrees is None:
            degrees = ActivationDegrees.of(c)
        head = self._head_cache.get(degrees)
        if head is None:
            head = self._head_cache[degrees] = head_activation_bytes(
                self.spec, self._activation_context(degrees))
        in_flight = head_in_flight_floor(c.schedule, c.pp, c.num_micro_batches)
        return head * in_flight / c.pp

    def time_bound_s(self, c: MeshCandidate, core: CoreTimes | None = None) -> float:
        """Lower bound of the pipeline makespan with the fastest policy (`core`: the
        candidate's `core`, looked up when not given)."""
        if core is None:
            core = self.core(c)
        m = c.num_micro_batches
        layer_f, layer_b, layer_w = core.layer_f, core.layer_b, core.layer_w
        avg_busy = (layer_f + layer_b + layer_w + core.head_s) / c.pp
        bound = m * avg_busy
        if c.pp > 1:
            chunks = SCHEDULES[c.schedule].num_chunks(c.vpp)
            lightest = (self.spec.num_layers // (c.pp * chunks)) / max(1, self.spec.num_layers)
            f, b, w = layer_f * lightest, layer_b * lightest, layer_w * lightest
            bound = max(bound, _closed_form_bound(c.schedule, c.pp, m, chunks, f, b, w))
        return bound

    def wait_bound_s(self, c: MeshCandidate, core: CoreTimes | None = None) -> float:
        """Lower bound of the wait for the slowest GPU of any plan of the candidate: the share
        of its world size times each rank's mean layer compute over the step
        (`models.core.step_time.step_terms.slowest_gpu_wait_s`, which adds the heads and the
        policy's recomputation to the same mean). Added to the makespan bounds the queue
        orders by; the makespan bounds themselves stay without it (`core`: as in
        `time_bound_s`)."""
        if core is None:
            core = self.core(c)
        compute = core.layer_compute_s
        share = self._wait_shares.get(c.world_size)
        if share is None:
            share = self._wait_shares[c.world_size] = slowest_gpu_share(c.world_size)
        return share * c.num_micro_batches * compute / c.pp

    def zero3_time_bound_s(self, c: MeshCandidate) -> float:
        """Lower bound of the pipeline makespan of any ZeRO-3 plan of the candidate: every
        rank's average work per micro-batch with each layer's exposed parameter gathers and
        gradient reduce-scatters added (`models.core.step_time.zero3_exposed_s`, exposure
        measured against the layer's compute without recomputation, which recomputation
        can only lengthen), times the micro-batches."""
        core = self.core(c)
        # The exposure reads the core's layers and the ZeRO-3 groups (the mesh's degrees).
        # Built as a tuple: the generated `__new__` costs a Python call per record.
        key: Zero3Inputs = tuple.__new__(Zero3Inputs, (CoreInputs.of(c, self.training),
                                                       c.dp, c.pp))
        exposed = self._zero3_cache.get(key)
        if exposed is None:
            parallel = c.parallel(zero_stage=3)
            groups = axis_groups(parallel, gpus_per_node=self.cluster.gpus_per_node)
            exposed = 0.0
            for k in core.kinds:
                forward, backward = zero3_exposed_s(self.spec, k.index, self.training, parallel,
                                                    groups, self.fabric, k.compute)
                exposed += k.count * (forward + backward)
            self._zero3_cache[key] = exposed
        work = core.layer_f + core.layer_b + core.layer_w + core.head_s
        return c.num_micro_batches * (work + exposed) / c.pp

    def memory_bound_bytes(self, c: MeshCandidate, *, max_zero: int, max_offload: float,
                           terms: tuple[float, float] | None = None) -> int:
        """Lower bound of the peak GPU bytes under the most frugal choices allowed (`terms`:
        the candidate's `memory_terms` under `max_offload`, computed when not given, so a
        caller bounding several ZeRO stages reads them once)."""
        activations, head = self.memory_terms(c, max_offload) if terms is None else terms
        states = self._mean_states_bytes(c, max_zero)
        return int(states + activations + head) + RUNTIME_RESERVE_BYTES

    def memory_terms(self, c: MeshCandidate, max_offload: float) -> tuple[float, float]:
        """The terms of `memory_bound_bytes` that no ZeRO stage changes: the mean stored
        layer inputs under full recomputation with the offload share `max_offload`, and the
        head's share (`_head_share_bytes`)."""
        degrees = ActivationDegrees.of(c)
        layer_input = self._layer_input_bytes(degrees)
        chunks = SCHEDULES[c.schedule].num_chunks(c.vpp)
        shape = (c.schedule, c.pp, c.num_micro_batches, chunks)
        in_flight = self._in_flight.get(shape)
        if in_flight is None:
            in_flight = self._in_flight[shape] = _mean_in_flight(*shape)
        layers_per_chunk = self.spec.num_layers / (c.pp * chunks)
        activations = in_flight * layers_per_chunk * layer_input * (1.0 - max_offload)
        return activations, self._head_share_bytes(c, degrees)

    def rank_memory_bound_bytes(self, c: MeshCandidate, constraints: Constraints, *,
                                zeros: list[int], policy: Mapping[str, object],
                                memo: LedgerMemo, limit_bytes: int | None = None) -> int:
        """Lower bound of the peak GPU bytes of every plan of the candidate that the exact
        evaluation probes (`solver.candidate_eval.evaluate_candidate`: the even layer
        split, one policy on every rank, the ZeRO stages `zeros` with Pipeline ZeRO-2 where
        the request allows it, remote activation offload where it does) whose activation
        policy stores no fewer bytes than `policy` (ParallelConfig policy fields; the
        least-storing one, `solver.candidate_eval.least_stored_policy`, bounds them all):
        the smallest over those storages of `models.core.memory_floors.peak_floor_bytes` at the
        strongest ZeRO stage. It reads the head's rank's own ledger pieces, so unlike
        `memory_bound_bytes` (a mean over ranks, cheap enough for every candidate of the
        enumeration) it sees that rank's logits; it costs tens to a few hundred
        microseconds. `limit_bytes` (a capacity): the work stops once the
        bound's side of it is known, the value returned then being above it exactly when
        the whole bound is. 0 (no information) where no ZeRO stage is allowed or the ledger
        refuses the mesh: the evaluation then rejects it with the reason."""
        if not zeros:
            return 0
        fields: dict[str, object] = {**policy, "zero_stage": max(zeros)}
        if constraints.gradient_host_shards:
            fields["gradient_host_shards"] = True
        if constraints.optimizer_offload_frac:
            fields["optimizer_offload_frac"] = constraints.optimizer_offload_frac
        # Copies of the candidate's validated configuration: the fields set are well formed.
        mesh = c.parallel()
        options = [mesh.model_copy(update=fields)]
        if (not constraints.gradient_host_shards and constraints.allow_gradient_host_shards
                and 1 in zeros and c.pp > 1):
            options.append(mesh.model_copy(update={**fields, "zero_stage": 1,
                                                   "gradient_host_shards": True}))
        if (constraints.optimizer_offload_frac is None and constraints.allow_optimizer_offload
                and max(zeros) >= 1):
            # The search may move the optimizer states to host memory at any ZeRO stage
            # from 1 (`solver.candidate_eval.offload_storage`).
            options += [o.model_copy(update={"optimizer_offload_frac": 1.0}) for o in options]
        pooled = bool(constraints.allow_remote_offload) and c.pp > 1
        least = None
        try:
            for parallel in options:
                floor = peak_floor_bytes(self.spec, self.memory_training, parallel, memo=memo,
                                         pooled=pooled, limit_bytes=limit_bytes)
                least = floor if least is None else min(least, floor)
                if limit_bytes is not None and floor <= limit_bytes:
                    break  # one storage may fit: the bound is within the limit
        except InvalidSpecError:
            return 0
        return least or 0

    def policy_memory_bound_bytes(self, parallel: ParallelConfig, c: MeshCandidate, *,
                                  max_zero: int, training: TrainingSpec | None = None) -> int:
        """Lower bound of the mean over pipeline ranks of the peak GPU bytes of the
        candidate's plans with `parallel`'s activation policy (the candidate's mesh), at
        ZeRO stage `max_zero` or below: the averaged model states of `memory_bound_bytes`
        plus the ranks' mean stored layer activations under the policy
        (`models.core.memory_floors.stored_activation_floor_bytes`) and the head's share of the
        activations (`_head_share_bytes`). Above the capacity, no such plan
        fits: not on the busiest rank (at least the mean), nor with remote activation
        offload, which only moves bytes between the ranks (its verdict needs the mean
        within the capacity, `models.core.remote_activations.fits_after_remote_offload`).
        `training`: the recipe the plans run (a framework variant's); the tables' memory
        recipe when not given."""
        stored = stored_activation_floor_bytes(self.spec, training or self.memory_training,
                                               parallel)
        mean_stored = sum(stored) / len(stored) if stored else 0.0
        return int(self._mean_states_bytes(c, max_zero) + mean_stored
                   + self._head_share_bytes(c)) + RUNTIME_RESERVE_BYTES

    def _mean_states_bytes(self, c: MeshCandidate, max_zero: int) -> float:
        """The model states of the candidate at ZeRO stage `max_zero`, averaged over its
        pipeline ranks (each parameter's states sit on some rank; a schedule holding two
        copies of the weights doubles them)."""
        copies = SCHEDULES[c.schedule].weight_copies
        # Built as a tuple: the generated `__new__` costs a Python call per record.
        key: StatesDegrees = tuple.__new__(StatesDegrees, (c.tp, c.cp, c.dp, c.pp, c.ep, c.etp,
                                                           copies, max_zero))
        cached = self._states_cache.get(key)
        if cached is None:
            cached = self._states_cache[key] = self._compute_mean_states_bytes(c, max_zero,
                                                                              copies)
        return cached

    def _compute_mean_states_bytes(self, c: MeshCandidate, max_zero: int, copies: int
                                   ) -> float:
        tr = self.training
        per_param = state_bytes_per_param(tr)
        if self.host_gradients:
            per_param = dataclasses.replace(per_param, gradients=0.0)
        if self.host_optimizer and max_zero >= 1:
            per_param = dataclasses.replace(per_param, master=0.0, moments=0.0)
        # An MTP module's routed experts shard over EP like the layers' (`rank_parameters`).
        experts = self.params.routed_experts_total + self.mtp_experts
        dense_params = (self.params.total + self.params.mtp_total - experts) / c.tp
        expert_params = experts / (c.ep * c.etp)
        shard = c.dp * c.cp
        edp = max(1, c.tp * c.cp * c.dp // (c.ep * c.etp))
        states = float(sum(
            sharded_state_bytes(int(count), per_param, zero_stage=max_zero,
                                shard_degree=group).total_bytes
            for count, group in ((dense_params, shard), (expert_params, edp))))
        return states * copies / c.pp




def _mean_in_flight(schedule: PipelineSchedule, pp: int, m: int, chunks: int) -> float:
    """Average over ranks of the schedule's peak in-flight micro-batch x chunk units."""
    total = sum(rank_peaks_in_flight_chunks(schedule, num_stages=pp, num_micro_batches=m,
                                            num_chunks=chunks))
    return total / pp


def _closed_form_bound(schedule: PipelineSchedule, p: int, m: int, v: int, f: float, b: float,
                       w: float) -> float:
    """Makespan of the schedule with uniform per-chunk costs (f, b, w) and no latency, where
    its record has an exact closed form (`models.core.pipeline.closed_form_makespan`: arXiv:
    2104.04473 Sec. 2.2; arXiv:2401.10241 Table 2; ...); otherwise, or where the schedule
    refuses the parameters, m (f + b + w) v, the busy time alone."""
    work = m * v * (f + b + w)
    try:
        exact = closed_form_makespan(schedule, num_stages=p, num_micro_batches=m, num_chunks=v,
                                     forward_s=f, backward_input_s=b, backward_weight_s=w)
    except InvalidSpecError:
        return work
    return work if exact is None else max(work, exact)


__all__ = ["BoundTables", "CoreTimes"]
