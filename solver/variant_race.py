"""One candidate's best plan over its framework variants: which variants are evaluated, in
which order, under which cutoff, and which result stands.

Owns: the variant record (`Variant`, built by `solver.targets.candidate_variants`) and the
race between a candidate's variants (`best_over_variants`). Each variant is
evaluated under the cutoff lowered by the plans found before it; the fastest plan wins and
of equally fast plans the earlier variant's (so the order of evaluation never changes which
plan wins, `_Race.cutoff_for`); a variant is skipped where its result cannot change the answer
(`cannot_matter`); and a variant whose recipe differs from a later one's only by a runtime
feature that frees memory at no time cost (`freed_memory_pairs`) is evaluated after that
later one, and only where the later one leaves it something to decide. Without a plan the
answer is the fitting variant's least bound, else the rejection nearest a plan. Must not:
build the variants (`solver.targets.candidate_variants`) or evaluate one
(`solver.candidate_eval`).
"""

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from api_schemas.architecture import ModelSpec
from api_schemas.hardware import ClusterSpec
from api_schemas.requests import Constraints
from api_schemas.training import TrainingSpec
from models.core.ledger_memo import LedgerMemo
from models.core.runtime_features import RUNTIME_FEATURES
from solver.candidate import PlanCandidate
from solver.candidate_eval import evaluate_unsettled, evaluation_floor_s
from solver.ladder import PolicyCaps
from solver.outcomes import Dominated, Rejection, ScoredPlan, Unfit
from solver.space import MeshCandidate

FREED_MEMORY_FIELDS = tuple(f.field for f in RUNTIME_FEATURES if f.tried_off_first)
"""The recipe fields of the runtime features that only free memory, at no time cost
(`models.core.runtime_features.RuntimeFeature.tried_off_first`: the memory-efficient
norm)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Variant:
    """One admitting framework's view of a candidate: its narrowed constraints and the
    activation policies it can express (None: no restriction)."""

    framework: str
    constraints: Constraints
    caps: PolicyCaps | None
    training: TrainingSpec
    """The recipe with the runtime features this variant decides (`solver.runtime_choice`)."""


def freed_memory_pairs(variants: Sequence[Variant]) -> dict[int, int]:
    """For each variant whose recipe is a later variant's with one memory-freeing feature
    (`FREED_MEMORY_FIELDS`) off, and whose framework, constraints and policies are the
    same: its index -> that later variant's index.

    The later variant dominates it: with the feature on, every configuration stores at most
    the bytes it stores with the feature off (the norm's saved output replaces its input,
    `models.core.activations`) and takes no longer (its op times do not read the feature;
    an activation offload or remote offload moves at most as many bytes), so every plan that
    fits with it off fits with it on, no faster with it off."""
    pairs: dict[int, int] = {}
    for j, on in enumerate(variants):
        for name in FREED_MEMORY_FIELDS:
            if getattr(on.training, name) is not True:
                continue
            wanted = {**on.training.__dict__, name: False}
            for i in range(j):
                off = variants[i]
                if (i not in pairs and off.framework == on.framework and off.caps == on.caps
                        and off.training.__dict__ == wanted
                        and (off.constraints is on.constraints
                             or off.constraints == on.constraints)):
                    pairs[i] = j
                    break
    return pairs


def cannot_matter(cand: PlanCandidate, held: Dominated | None, *, step_cutoff_s: float,
                  zero3_bound_s: float, zero_floors_s: Mapping[int, float] | None) -> bool:
    """Whether a variant's evaluation cannot change the race's answer, given the best plan
    so far (`held` None) or, without one, the fitting variant of the least bound so far
    (`held`): its `evaluation_floor_s` reaches the cutoff, so it gives no plan, and `held`'s
    bound, so no `Dominated` of a lower bound (a rejection is outranked by either)."""
    floor_s = evaluation_floor_s(cand, step_cutoff_s=step_cutoff_s,
                                 zero3_bound_s=zero3_bound_s, zero_floors_s=zero_floors_s)
    return floor_s >= step_cutoff_s and (held is None or held.bound_s <= floor_s)


def closest_rejection(rejected: list[tuple[int, Rejection | Unfit]]) -> Rejection:
    """Of the variants' rejections (each with its variant's index), the one nearest a plan
    (least GPU or host excess; a rejection by a rule ranks after every one by memory), the
    earlier variant's on ties."""
    found = [(r.rejection() if isinstance(r, Unfit) else r, index) for index, r in rejected]
    return min(found, key=lambda x: (x[0].stage is None, x[0].excess_bytes, x[1]))[0]


@dataclass(slots=True, kw_only=True)
class _Race:
    """One candidate's race: what every evaluation shares, and the standings."""

    spec: ModelSpec
    cluster: ClusterSpec
    candidate: MeshCandidate
    variants: Sequence[Variant]
    memo: LedgerMemo | None
    step_cutoff_s: float
    zero3_bound_s: float
    zero_floors_s: Mapping[int, float] | None
    best: ScoredPlan | None = None
    best_index: int = -1
    other: Rejection | Dominated | Unfit | None = None
    unfit: list[tuple[int, Rejection | Unfit]] = field(default_factory=list)

    def cutoff_for(self, index: int) -> float:
        """The cutoff of variant `index`: the caller's, lowered to the best step so far,
        just above it for a variant listed before the best one's (whose equally fast plan
        would win)."""
        if self.best is None:
            return self.step_cutoff_s
        step = self.best.estimate.step_time_s
        if index < self.best_index:
            step = math.nextafter(step, math.inf)
        return min(self.step_cutoff_s, step)

    def run(self, index: int, *, at: int | None = None
            ) -> ScoredPlan | Rejection | Dominated | Unfit | None:
        """Evaluate variant `index` under the cutoff of position `at` (default its own) and
        enter its result; None where it cannot matter."""
        variant = self.variants[index]
        recipe = variant.training
        cand = PlanCandidate.of(self.spec, recipe, self.cluster, self.candidate,
                                variant.constraints, variant.caps,
                                None if self.memo is None
                                else self.memo.for_recipe(self.spec, recipe))
        cutoff = self.cutoff_for(index if at is None else at)
        held = self.other if self.best is None and isinstance(self.other, Dominated) else None
        if (self.best is not None or held is not None) and cannot_matter(
                cand, held, step_cutoff_s=cutoff, zero3_bound_s=self.zero3_bound_s,
                zero_floors_s=self.zero_floors_s):
            return None
        result = evaluate_unsettled(cand, step_cutoff_s=cutoff,
                                    zero3_bound_s=self.zero3_bound_s,
                                    zero_floors_s=self.zero_floors_s)
        self._enter(index, result, recipe)
        return result

    def _enter(self, index: int, result: ScoredPlan | Rejection | Dominated | Unfit,
               recipe: TrainingSpec) -> None:
        if isinstance(result, ScoredPlan):
            result = dataclasses.replace(result, training=recipe)
            key = (result.estimate.step_time_s, index)
            if self.best is None or key < (self.best.estimate.step_time_s, self.best_index):
                self.best, self.best_index = result, index
        elif self.other is None or (isinstance(result, Dominated) and (
                not isinstance(self.other, Dominated) or result.bound_s < self.other.bound_s)):
            # A fitting variant (Dominated) outranks a rejection; of two, the lower bound
            # holds for both.
            self.other = result
        if isinstance(result, Rejection | Unfit):
            self.unfit.append((index, result))


def best_over_variants(spec: ModelSpec, cluster: ClusterSpec, candidate: MeshCandidate,
                       variants: Sequence[Variant], *, step_cutoff_s: float,
                       zero3_bound_s: float, zero_floors_s: Mapping[int, float] | None,
                       memo: LedgerMemo | None) -> ScoredPlan | Rejection | Dominated:
    """The candidate's fastest plan over `variants` (non-empty), the earlier variant's of
    equally fast ones; without one, the least bound of a fitting variant (`Dominated`) or
    the rejection nearest a plan.

    A variant paired with a later one (`freed_memory_pairs`) is taken at its own position
    after the later one is evaluated under that position's cutoff. Where the later one is
    `Dominated` (no plan below the cutoff), so is the earlier one, whose plans are no faster
    and fit no more: it is not evaluated, the later one's bound holding for both. Otherwise
    it is evaluated (a plan of it as fast as the later one's wins, as an earlier variant's)."""
    race = _Race(spec=spec, cluster=cluster, candidate=candidate, variants=variants,
                 memo=memo, step_cutoff_s=step_cutoff_s, zero3_bound_s=zero3_bound_s,
                 zero_floors_s=zero_floors_s)
    pairs = freed_memory_pairs(variants)
    taken = set(pairs.values())
    for index in range(len(variants)):
        if index in taken:
            continue
        later = pairs.get(index)
        if later is not None and isinstance(race.run(later, at=index), Dominated):
            continue
        race.run(index)
    if race.best is not None:
        return race.best
    assert race.other is not None
    if isinstance(race.other, Dominated):
        return race.other
    return closest_rejection(race.unfit)


__all__ = [
    "FREED_MEMORY_FIELDS",
    "Variant",
    "best_over_variants",
    "cannot_matter",
    "closest_rejection",
    "freed_memory_pairs",
]
