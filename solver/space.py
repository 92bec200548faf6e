"""The discrete search space: which meshes, micro-batch sizes and schedules are legal.

Owns: enumerating `MeshCandidate`s for a model, a cluster size and a recipe under the
request's pins and forbidden values, in plain Python (no OR-Tools), with the rules that make
a candidate legal (heads divisible by tp, experts by ep, ep x etp folding into tp x cp x dp,
schedule shape rules, batch divisibility). Must not: evaluate costs.
"""

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from api_schemas.architecture import ModelSpec
from api_schemas.parallel import ContextParallelKind, ParallelConfig, PipelineSchedule
from api_schemas.requests import Constraints
from api_schemas.training import TrainingSpec
from models.errors import InvalidSpecError
from models.pipeline import schedule_traits, validate_schedule

logger = logging.getLogger(__name__)

S = PipelineSchedule
MAX_MICRO_BATCH_SIZE = 8
"""Largest micro-batch the search tries unless pinned (beyond it m shrinks and the GEMMs are
already saturated)."""
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
        """The `ParallelConfig` of this candidate with ZeRO / policy fields set."""
        fields: dict[str, Any] = dict(
            tp=self.tp, pp=self.pp, dp=self.dp, cp=self.cp, ep=self.ep, etp=self.etp,
            vpp=self.vpp, micro_batch_size=self.micro_batch_size, schedule=self.schedule,
            sequence_parallel=self.sequence_parallel, cp_kind=self.cp_kind,
            ulysses_degree=self.ulysses_degree)
        fields.update(overrides)
        return ParallelConfig.model_validate(fields)


def divisors(n: int) -> list[int]:
    """All positive divisors of n, ascending."""
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def permitted(name: str, value: Any, constraints: Constraints) -> bool:
    """True when `value` is allowed for `name` by the pins and the forbidden lists."""
    pin = getattr(constraints, name, None)
    if pin is not None:
        allowed = pin if isinstance(pin, list) else [pin]
        if value not in allowed and str(value) not in [str(a) for a in allowed]:
            return False
    forbidden = constraints.forbid.get(name, [])
    return value not in forbidden and str(value) not in [str(f) for f in forbidden]


def _tp_options(spec: ModelSpec, gpus_per_node: int, constraints: Constraints) -> list[int]:
    heads, kv = spec.num_attention_heads, spec.kv_heads
    out = []
    for tp in divisors(heads):
        if kv % tp and tp % kv:
            continue
        if tp > gpus_per_node and constraints.tp is None:
            continue  # a TP group crossing nodes only when the user pins it
        if permitted("tp", tp, constraints):
            out.append(tp)
    return out


def _cp_options(spec: ModelSpec, training: TrainingSpec, constraints: Constraints
                ) -> list[tuple[int, ContextParallelKind, int | None]]:
    """(cp, kind, Ulysses degree): ring for any cp; Ulysses when cp divides the heads; USP
    (Ulysses x ring) for each proper Ulysses factor that divides the heads."""
    out: list[tuple[int, ContextParallelKind, int | None]] = []
    heads = spec.num_attention_heads
    for cp in divisors(training.sequence_length):
        too_fine = cp > 64 or (training.sequence_length // cp) < 128
        if too_fine or not permitted("cp", cp, constraints):
            continue
        if cp > 1 and constraints.cp is None and training.sequence_length < MIN_SEQUENCE_FOR_CP:
            continue
        if cp == 1:
            out.append((1, ContextParallelKind.RING, None))
            continue
        options: list[tuple[ContextParallelKind, int | None]] = [(ContextParallelKind.RING, None)]
        if heads % cp == 0:
            options.append((ContextParallelKind.ULYSSES, None))
        options += [(ContextParallelKind.USP, u) for u in divisors(cp)
                    if 1 < u < cp and heads % u == 0]
        out += [(cp, kind, u) for kind, u in options if permitted("cp_kind", kind, constraints)]
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


def _expert_options(spec: ModelSpec, tp: int, cp: int, dp: int,
                    constraints: Constraints) -> list[tuple[int, int]]:
    if spec.moe is None:
        return [(1, 1)]
    folded = tp * cp * dp
    out = []
    # Expert TP is searched only when pinned: etp = 1 is Megatron's recommendation for
    # fine-grained experts and keeps every expert GEMM whole.
    etps = sorted({1, tp}) if constraints.etp is not None else [1]
    for etp in etps:
        for ep in divisors(spec.moe.num_experts):
            if folded % (ep * etp) or not permitted("ep", ep, constraints):
                continue
            if permitted("etp", etp, constraints):
                out.append((ep, etp))
    return out


def candidate_meshes(spec: ModelSpec, training: TrainingSpec, *, world_size: int,
                     gpus_per_node: int, constraints: Constraints) -> list[MeshCandidate]:
    """Every legal mesh candidate for exactly `world_size` GPUs."""
    out: list[MeshCandidate] = []
    batch = training.global_batch_size
    for tp in _tp_options(spec, gpus_per_node, constraints):
        for cp, cp_kind, ulysses in _cp_options(spec, training, constraints):
            rest = world_size // (tp * cp) if world_size % (tp * cp) == 0 else 0
            for pp in divisors(rest) if rest else []:
                dp = rest // pp
                if pp > spec.num_layers or not permitted("pp", pp, constraints):
                    continue
                if not permitted("dp", dp, constraints) or batch % dp:
                    continue
                out += list(_meshes_for(spec, training, tp=tp, cp=cp, cp_kind=cp_kind,
                                        ulysses=ulysses, pp=pp, dp=dp,
                                        constraints=constraints))
    return out


def _meshes_for(spec: ModelSpec, training: TrainingSpec, *, tp: int, cp: int,
                cp_kind: ContextParallelKind, ulysses: int | None, pp: int, dp: int,
                constraints: Constraints) -> Iterable[MeshCandidate]:
    per_replica = training.global_batch_size // dp
    # Sequence parallelism dominates plain TP (same collective volume, less activation
    # memory and elementwise work), so it is the only TP mode searched unless pinned off.
    if tp == 1:
        sp_options = [False]
    elif constraints.sequence_parallel is None:
        sp_options = [True]
    else:
        sp_options = [constraints.sequence_parallel]
    for mbs in divisors(per_replica):
        if (mbs > MAX_MICRO_BATCH_SIZE and constraints.micro_batch_size is None) or \
                not permitted("micro_batch_size", mbs, constraints):
            continue
        m = per_replica // mbs
        for schedule, vpp in _schedule_options(spec, pp, m, constraints):
            for ep, etp in _expert_options(spec, tp, cp, dp, constraints):
                for sp in sp_options:
                    if not permitted("sequence_parallel", sp, constraints):
                        continue
                    if spec.moe is not None and tp > 1 and not sp:
                        continue  # MoE with TP needs sequence parallelism (Megatron)
                    yield MeshCandidate(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, etp=etp, vpp=vpp,
                                        micro_batch_size=mbs, num_micro_batches=m,
                                        schedule=schedule, sequence_parallel=sp,
                                        cp_kind=cp_kind, ulysses_degree=ulysses)


__all__ = [
    "MAX_MICRO_BATCH_SIZE",
    "MAX_VPP",
    "MIN_SEQUENCE_FOR_CP",
    "MeshCandidate",
    "candidate_meshes",
    "divisors",
    "permitted",
]
