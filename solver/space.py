"""The discrete search space: which meshes, micro-batch sizes and schedules are legal.

Owns: enumerating `MeshCandidate`s for a model, a cluster size and a recipe under the
request's pins and forbidden values, in plain Python (no OR-Tools), with the rules that make
a candidate legal taken from `models.core.mesh.rules` (never restated here), plus the search's
own policies (TP within a node unless pinned, sequence parallelism whenever tp > 1, expert
TP only when pinned, CP only for long sequences). Must not: evaluate costs.
"""

import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

from api_schemas.architecture import ModelSpec
from api_schemas.parallel import ContextParallelKind, ParallelConfig, PipelineSchedule
from api_schemas.requests import Constraints
from api_schemas.training import TrainingSpec
from models.core.mesh.candidates import Candidate, MeshContext, divisors
from models.core.mesh.layout import DEFAULT_ORDER
from models.core.mesh.rules import (
    CP_RULES,
    EXPERT_RULES,
    PIPELINE_FIELDS,
    PIPELINE_RULES,
    SHAPE_FIELDS,
    SHAPE_RULES,
    TP_RULES,
    admits,
)
from models.core.mesh.rules_pipeline import pp_at_most_layers
from models.core.pipeline import schedule_traits, validate_schedule
from models.errors import InvalidSpecError

S = PipelineSchedule
MAX_PIPELINED_MICRO_BATCHES = 8_192
"""Most micro-batches per step the search tries on a pipeline (pp > 1): each candidate's
schedule is generated and simulated op by op (pp x vpp x m x 2-3 ops), so an unbounded m
(a global batch of 2**20 sequences on one data-parallel replica) grew one candidate's
program past gigabytes. 8,192 is the service's default bound on the micro-batches of a
configuration it scores (ATLAS_MAX_MICRO_BATCHES), and 4x the 2,048 sequences of Llama 3's
largest global batch (arXiv:2407.21783, Table 4: 16M tokens of 8,192)."""
MIN_SEQUENCE_FOR_CP = 16384
"""Context parallelism is searched only for sequences this long or longer (or when pinned):
below it a 4K-8K sequence fits without splitting and splitting only adds communication."""
MAX_VPP = 8
"""Most virtual chunks per rank the search tries for interleaved 1F1B."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MeshCandidate:
    """A point of the mesh-level space (policies and ZeRO are chosen per candidate)."""

    tp: int
    pp: int
    dp: int
    cp: int
    ep: int
    etp: int
    vpp: int
    micro_batch_size: int
    num_micro_batches: int
    schedule: PipelineSchedule
    sequence_parallel: bool
    cp_kind: ContextParallelKind = ContextParallelKind.RING
    ulysses_degree: int | None = None
    """USP only: the Ulysses axis (the ring axis is cp / this)."""
    _configs: dict[tuple[tuple[str, Any], ...], ParallelConfig] = field(
        default_factory=dict, init=False, compare=False, repr=False)
    """The validated configurations of this candidate by their overrides (`parallel`): held
    by the candidate itself, so a candidate differing in any field (a new object, also
    under `dataclasses.replace`) starts with none."""

    @classmethod
    def of(cls, parallel: ParallelConfig, num_micro_batches: int) -> "MeshCandidate":
        """The mesh point of a given configuration (evaluate scores one without a search)."""
        return cls(tp=parallel.tp, pp=parallel.pp, dp=parallel.dp, cp=parallel.cp,
                   ep=parallel.ep, etp=parallel.etp, vpp=parallel.vpp,
                   micro_batch_size=parallel.micro_batch_size,
                   num_micro_batches=num_micro_batches, schedule=parallel.schedule,
                   sequence_parallel=parallel.sequence_parallel, cp_kind=parallel.cp_kind,
                   ulysses_degree=parallel.ulysses_degree)

    @property
    def world_size(self) -> int:
        """GPUs used."""
        return self.tp * self.pp * self.dp * self.cp

    @property
    def key(self) -> str:
        """A readable identity, used in variable names and logs."""
        return (f"tp{self.tp}-pp{self.pp}-dp{self.dp}-cp{self.cp}-ep{self.ep}-etp{self.etp}"
                f"-v{self.vpp}-mbs{self.micro_batch_size}-{self.schedule}")

    def parallel(self, **overrides: Any) -> ParallelConfig:
        """The `ParallelConfig` of this candidate with ZeRO / policy fields set (validated
        once per candidate and hashable overrides, and shared: configurations are
        immutable, and the search asks for the same few of each candidate many times)."""
        try:
            key = tuple(sorted(overrides.items()))
            found = self._configs.get(key)
        except TypeError:  # an unhashable override (a dict or a list): validate afresh
            return ParallelConfig.model_validate(self._fields(overrides))
        if found is None:
            found = self._configs[key] = ParallelConfig.model_validate(self._fields(overrides))
        return found

    def mesh(self) -> Candidate:
        """This candidate as the mesh rules see it (default rank order). Built without
        re-validating: the enumeration only makes well-formed configurations, and the
        validated `parallel()` of every candidate is checked by the tests."""
        return Candidate(parallel=_DEFAULT_PARALLEL.model_copy(update=self._fields({})),
                         order=DEFAULT_ORDER)

    def _fields(self, overrides: dict[str, Any]) -> dict[str, Any]:
        fields: dict[str, Any] = {name: getattr(self, name) for name in MESH_FIELDS}
        fields.update(overrides)
        return fields


MESH_FIELDS = ("tp", "pp", "dp", "cp", "ep", "etp", "vpp", "micro_batch_size", "schedule",
               "sequence_parallel", "cp_kind", "ulysses_degree")
"""The `ParallelConfig` fields a candidate sets (`MeshCandidate.parallel`, `mesh`)."""


_DEFAULT_PARALLEL = ParallelConfig()
"""Every field at its default; candidates for the rules are copies of it with their degrees."""


def permitted(name: str, value: Any, constraints: Constraints) -> bool:
    """True when `value` is allowed for `name` by the pins and the forbidden lists."""
    pin = getattr(constraints, name, None)
    if pin is not None:
        allowed = pin if isinstance(pin, list) else [pin]
        if value not in allowed and str(value) not in [str(a) for a in allowed]:
            return False
    forbidden = constraints.forbid.get(name, [])
    return value not in forbidden and str(value) not in [str(f) for f in forbidden]


def permitted_values(name: str, values: Iterable[Any], constraints: Constraints) -> list[Any]:
    """The `values` (in their order) that `permitted` allows for `name`, the pins and the
    forbidden lists read once for all."""
    pin = getattr(constraints, name, None)
    allowed = None if pin is None else (pin if isinstance(pin, list) else [pin])
    allowed_text = [] if allowed is None else [str(a) for a in allowed]
    forbidden = constraints.forbid.get(name, [])
    forbidden_text = [str(f) for f in forbidden]
    return [value for value in values
            if (allowed is None or value in allowed or str(value) in allowed_text)
            and value not in forbidden and str(value) not in forbidden_text]


def mesh_context(spec: ModelSpec, training: TrainingSpec, *, world_size: int,
                 gpus_per_node: int) -> MeshContext:
    """The context the mesh rules check candidates of `world_size` GPUs against (a world
    smaller than a node, or not a whole number of nodes, is one partial node)."""
    whole = world_size % gpus_per_node == 0
    return MeshContext(model=spec, training=training,
                       num_nodes=world_size // gpus_per_node if whole else 1,
                       gpus_per_node=gpus_per_node if whole else world_size)


def _tp_options(ctx: MeshContext, constraints: Constraints) -> list[int]:
    out = []
    for tp in divisors(ctx.world_size):
        if tp > ctx.gpus_per_node and constraints.tp is None:
            continue  # a TP group crossing nodes only when the user pins it
        if permitted("tp", tp, constraints) and admits(ctx, TP_RULES, tp=tp):
            out.append(tp)
    return out


def _cp_options(ctx: MeshContext, tp: int, constraints: Constraints
                ) -> list[tuple[int, ContextParallelKind, int | None]]:
    """(cp, kind, Ulysses degree): ring for any cp; Ulysses and USP (Ulysses x ring, for
    each proper Ulysses factor) where the mesh rules admit them with this TP degree."""
    out: list[tuple[int, ContextParallelKind, int | None]] = []
    seq = ctx.training.sequence_length if ctx.training is not None else 1
    for cp in divisors(seq):
        too_fine = cp > 64 or (seq // cp) < 128
        if too_fine or not permitted("cp", cp, constraints):
            continue
        if cp > 1 and constraints.cp is None and seq < MIN_SEQUENCE_FOR_CP:
            continue
        if cp == 1:
            out.append((1, ContextParallelKind.RING, None))
            continue
        options: list[tuple[ContextParallelKind, int | None]] = [
            (ContextParallelKind.RING, None), (ContextParallelKind.ULYSSES, None)]
        options += [(ContextParallelKind.USP, u) for u in divisors(cp) if 1 < u < cp]
        if constraints.cp_kind is not None:
            # All-gather CP is searched only when asked for: its exposed gathers rarely win.
            options.append((ContextParallelKind.ALL_GATHER, None))
        out += [(cp, kind, u) for kind, u in options
                if permitted("cp_kind", kind, constraints)
                and admits(ctx, CP_RULES, tp=tp, cp=cp, cp_kind=kind, ulysses_degree=u)]
    return out


def _schedule_options(spec: ModelSpec, pp: int, m: int, constraints: Constraints
                      ) -> Iterator[tuple[PipelineSchedule, int]]:
    if pp == 1:
        if permitted("schedule", S.ONE_F_ONE_B, constraints) and permitted("vpp", 1, constraints):
            yield S.ONE_F_ONE_B, 1
        return
    for schedule in S:
        if not permitted("schedule", schedule, constraints):
            continue
        # Looped chunks may differ by one layer (Megatron's uneven first/last-stage options,
        # as Llama 3's 126 layers on 16 stages); every chunk holds at least one layer.
        traits = schedule_traits(schedule)
        fixed = traits.fixed_chunks
        vpps = [v for v in ([fixed] if fixed is not None else range(2, MAX_VPP + 1))
                if spec.num_layers >= traits.num_virtual_stages(pp, v)]
        for vpp in vpps:
            if not permitted("vpp", vpp, constraints):
                continue
            try:
                validate_schedule(schedule, num_stages=pp, num_micro_batches=m, num_chunks=vpp)
            except InvalidSpecError:
                continue
            yield schedule, vpp


def _expert_options(ctx: MeshContext, tp: int, cp: int, dp: int,
                    constraints: Constraints) -> list[tuple[int, int]]:
    moe = ctx.model.moe if ctx.model is not None else None
    if moe is None:
        return [(1, 1)]
    out = []
    # Expert TP is searched only when pinned: etp = 1 is Megatron's recommendation for
    # fine-grained experts and keeps every expert GEMM whole.
    etps = sorted({1, tp}) if constraints.etp is not None else [1]
    for etp in etps:
        for ep in divisors(moe.num_experts):
            if permitted("ep", ep, constraints) and permitted("etp", etp, constraints) and \
                    admits(ctx, EXPERT_RULES, tp=tp, cp=cp, dp=dp, ep=ep, etp=etp):
                out.append((ep, etp))
    return out


_MESHES: OrderedDict[tuple[object, ...], tuple[MeshCandidate, ...]] = OrderedDict()
MESH_LISTS_KEPT = 16
"""Complete candidate lists kept (the most recently used): a later search of the same model,
recipe, cluster size and constraints lists the same candidates."""


def candidate_meshes(spec: ModelSpec, training: TrainingSpec, *, world_size: int,
                     gpus_per_node: int, constraints: Constraints,
                     deadline: float | None = None) -> list[MeshCandidate]:
    """Every legal mesh candidate for exactly `world_size` GPUs.

    Each axis is pruned with the `models.core.mesh` rules about it (`admits`), and every whole
    candidate is kept only when `models.core.mesh.rules.errors` finds no error (checked as its
    two rule groups, `SHAPE_RULES` and `PIPELINE_RULES`, each once per distinct value of the
    fields it reads, which is the same verdict): the search, the
    evaluation of one configuration and the mesh lab share one rule set. Past `deadline`
    (a `time.perf_counter()` value) the list so far is returned: the caller, which set the
    deadline, knows it is partial. Complete lists are kept for `MESH_LISTS_KEPT` inputs.
    """
    key = (spec, training, world_size, gpus_per_node, constraints.model_dump_json())
    with _MESHES_LOCK:
        kept = _MESHES.get(key)
        if kept is not None:
            _MESHES.move_to_end(key)
            return list(kept)
    complete, out = _candidate_meshes(spec, training, world_size=world_size,
                                      gpus_per_node=gpus_per_node, constraints=constraints,
                                      deadline=deadline)
    if complete:
        with _MESHES_LOCK:
            _MESHES[key] = tuple(out)
            while len(_MESHES) > MESH_LISTS_KEPT:
                _MESHES.popitem(last=False)
    return out


_MESHES_LOCK = threading.Lock()


def _candidate_meshes(spec: ModelSpec, training: TrainingSpec, *, world_size: int,
                      gpus_per_node: int, constraints: Constraints,
                      deadline: float | None) -> tuple[bool, list[MeshCandidate]]:
    """`candidate_meshes` uncached, and whether the list is complete (not cut by
    `deadline`)."""
    ctx = mesh_context(spec, training, world_size=world_size, gpus_per_node=gpus_per_node)
    out: list[MeshCandidate] = []
    verdicts: dict[tuple[object, ...], bool] = {}
    # Each rule group with the fields of it a candidate sets (those it leaves unset, such as
    # `layers_per_stage`, stay unset) and their getter (several names: it returns a tuple).
    groups = []
    for rules, names in ((SHAPE_RULES, SHAPE_FIELDS), (PIPELINE_RULES, PIPELINE_FIELDS)):
        present = tuple([name for name in names if name in MESH_FIELDS])
        assert len(present) > 1, "a group's getter returns a tuple for two names or more"
        groups.append((rules, present, attrgetter(*present)))

    def legal(c: MeshCandidate) -> bool:
        """Whether both rule groups pass the candidate's fields, each checked once per
        distinct value of them."""
        for rules, names, values_of in groups:
            values = values_of(c)
            key = (rules is PIPELINE_RULES, *values)
            verdict = verdicts.get(key)
            if verdict is None:
                verdict = verdicts[key] = admits(ctx, rules, **dict(zip(names, values,
                                                                        strict=True)))
            if not verdict:
                return False
        return True

    for tp in _tp_options(ctx, constraints):
        for cp, cp_kind, ulysses in _cp_options(ctx, tp, constraints):
            rest = world_size // (tp * cp) if world_size % (tp * cp) == 0 else 0
            for pp in divisors(rest) if rest else []:
                if deadline is not None and time.perf_counter() >= deadline:
                    return False, out
                dp = rest // pp
                if not permitted("pp", pp, constraints) or not permitted("dp", dp, constraints):
                    continue
                if not admits(ctx, (pp_at_most_layers,), pp=pp):
                    continue
                out += [c for c in _meshes_for(ctx, tp=tp, cp=cp, cp_kind=cp_kind,
                                               ulysses=ulysses, pp=pp, dp=dp,
                                               constraints=constraints) if legal(c)]
    return True, out


def _meshes_for(ctx: MeshContext, *, tp: int, cp: int, cp_kind: ContextParallelKind,
                ulysses: int | None, pp: int, dp: int,
                constraints: Constraints) -> Iterable[MeshCandidate]:
    spec, training = ctx.arch, ctx.training
    assert training is not None
    if training.global_batch_size % dp:
        return
    per_replica = training.global_batch_size // dp
    # Sequence parallelism dominates plain TP (same collective volume, less activation
    # memory and elementwise work), so it is the only TP mode searched unless pinned off.
    if tp == 1:
        sp_options = [False]
    elif constraints.sequence_parallel is None:
        sp_options = [True]
    else:
        sp_options = [constraints.sequence_parallel]
    sp_options = permitted_values("sequence_parallel", sp_options, constraints)
    experts = _expert_options(ctx, tp, cp, dp, constraints)
    for mbs in divisors(per_replica):
        # Every divisor: the planner prunes a mesh's larger micro-batches once its memory
        # bound exceeds the capacity (the bound never falls as the micro-batch grows).
        if not permitted("micro_batch_size", mbs, constraints):
            continue
        m = per_replica // mbs
        if pp > 1 and m > MAX_PIPELINED_MICRO_BATCHES:
            continue
        for schedule, vpp in _schedule_options(spec, pp, m, constraints):
            for ep, etp in experts:
                for sp in sp_options:
                    yield MeshCandidate(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, etp=etp, vpp=vpp,
                                        micro_batch_size=mbs, num_micro_batches=m,
                                        schedule=schedule, sequence_parallel=sp,
                                        cp_kind=cp_kind, ulysses_degree=ulysses)


__all__ = [
    "MAX_PIPELINED_MICRO_BATCHES",
    "MAX_VPP",
    "MESH_FIELDS",
    "MESH_LISTS_KEPT",
    "MIN_SEQUENCE_FOR_CP",
    "MeshCandidate",
    "candidate_meshes",
    "mesh_context",
    "permitted",
    "permitted_values",
]
