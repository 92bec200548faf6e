"""The activation-policy ladder a candidate's evaluation climbs, and where a plan keeps
what its policy does not decide.

Owns: `PolicyCaps` (the policies a framework target expresses), `Storage` (ZeRO stage,
Pipeline ZeRO-2 host gradient shards, remote activation offload) and its options, the
ladder's rungs from cheapest to most memory-saving (`ladder`, `rungs`), the most frugal
policy (`frugal`, `least_stored_policy`) and `with_policy`, a candidate's configuration
under a storage and a policy. Must not: evaluate anything (`solver.candidate_eval`).
"""

import dataclasses
from dataclasses import dataclass
from typing import Literal

from api_schemas.architecture import ModelSpec
from api_schemas.parallel import FullLayers, ParallelConfig, RecomputeMode, RecomputeModule
from api_schemas.requests import Constraints
from solver.policy import ACTIVATION_OFFLOAD_SHARE, broad_selective_modules, max_offload_share
from solver.space import MeshCandidate, permitted_values

Policy = dict[str, object]
"""Activation-policy fields of a `ParallelConfig` (recompute, modules, FP8, offload)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PolicyCaps:
    """The uniform activation policies a framework target can express (None where a caller
    passes no caps: every policy the cost model knows)."""

    selective: bool = True
    """Selective recomputation of the attention core."""
    broad_modules: bool = True
    """Selective recomputation of the broad module set (norms, MLA up-projections, expert
    activations)."""
    full: bool = True
    """Full recomputation of every layer."""
    full_layers: bool = True
    """Full recomputation of the first k layers of each stage."""
    full_layers_selective: bool = True
    """... with selective recomputation on the other layers."""
    per_stage: bool = True
    """Different policies on different pipeline ranks."""
    selective_modules: tuple[RecomputeModule, ...] | None = None
    """The modules the framework's selective recomputation rebuilds, when it has one fixed
    set (torchtitan's per-op policy: `op_sac`); None = the cost model's broad set."""


ALL_POLICIES = PolicyCaps()
"""No restriction (target 'any')."""


def allowed_zero_stages(constraints: Constraints) -> list[int]:
    """ZeRO stages the request permits, ascending."""
    return permitted_values("zero_stage", (0, 1, 2, 3), constraints)


@dataclass(frozen=True, slots=True)
class Storage:
    """Where a plan keeps what its activation policy does not decide: the ZeRO stage,
    Pipeline ZeRO-2 (gradient shards in host memory) and remote activation offload (stored
    activations in other pipeline ranks' spare memory)."""

    zero: int
    host_gradients: bool = False
    remote: bool = False
    optimizer_offload: float = 0.0
    """Share of the rank's optimizer states in host memory (`optimizer_offload_frac`)."""


def storage_options(zero: int, constraints: Constraints, pp: int) -> list[Storage]:
    """The settings tried at one ZeRO stage before remote offload, cheapest first: the
    request's (Pipeline ZeRO-2 when pinned), then Pipeline ZeRO-2 where the request allows
    the search to choose it (with ZeRO-1, as Kimi K3 pairs them, and a pipeline)."""
    pinned = constraints.gradient_host_shards
    moved = constraints.optimizer_offload_frac or 0.0
    out = [Storage(zero=zero, host_gradients=pinned, optimizer_offload=moved)]
    if not pinned and constraints.allow_gradient_host_shards and zero == 1 and pp > 1:
        out.append(Storage(zero=zero, host_gradients=True, optimizer_offload=moved))
    return out


def offload_storage(storage: Storage, constraints: Constraints) -> Storage | None:
    """`storage` with the whole optimizer shard in host memory where the search may choose
    it (`constraints.allow_optimizer_offload`, not pinned, a ZeRO optimizer to offload);
    None otherwise. Tried only where `storage` has no plain fit: where the cheapest policy
    fits, moving the optimizer only adds the CPU step
    (`models.core.step_time.step_terms.host_optimizer_s`)."""
    if (constraints.optimizer_offload_frac is not None or not constraints.allow_optimizer_offload
            or storage.zero < 1 or storage.optimizer_offload > 0):
        return None
    return dataclasses.replace(storage, optimizer_offload=1.0)


def probe_options(spec: ModelSpec, constraints: Constraints, pp: int) -> int:
    """How many (storage, activation policy) settings an evaluation may probe at one ZeRO
    stage of a candidate with `pp` pipeline ranks: the ladder's rungs times the storages
    (`storage_options`), twice where remote offload may be added. A measure of what an
    evaluation costs, for callers weighing other work against it."""
    remote = 2 if constraints.allow_remote_offload and pp > 1 else 1
    return len(ladder(spec, constraints)) * len(storage_options(1, constraints, pp)) * remote


def with_policy(candidate: MeshCandidate, zero: int | Storage, policy: Policy,
                constraints: Constraints) -> ParallelConfig:
    """The candidate's configuration at a ZeRO stage (or storage) under `policy`, with what
    the request pins (host gradient shards, a recomputation policy)."""
    storage = zero if isinstance(zero, Storage) else Storage(zero=zero)
    fields: Policy = {"zero_stage": storage.zero, **policy}
    if constraints.gradient_host_shards or storage.host_gradients:
        fields["gradient_host_shards"] = True
    if storage.remote:
        fields["remote_activation_offload"] = True
    if storage.optimizer_offload:
        fields["optimizer_offload_frac"] = storage.optimizer_offload
    if constraints.pinned_recompute is not None:
        fields["recompute"] = constraints.pinned_recompute
    return candidate.parallel(**fields)


def _selective(spec: ModelSpec, caps: PolicyCaps) -> Policy:
    if caps.selective and caps.selective_modules:
        return {"recompute": RecomputeMode.SELECTIVE,
                "recompute_modules": caps.selective_modules}
    if caps.selective and caps.broad_modules:
        return {"recompute": RecomputeMode.SELECTIVE,
                "recompute_modules": broad_selective_modules(spec)}
    if caps.selective:
        return {"recompute": RecomputeMode.SELECTIVE}
    return {}


def ladder(spec: ModelSpec, constraints: Constraints,
           caps: PolicyCaps = ALL_POLICIES) -> list[Policy]:
    """Uniform policies from cheapest to most memory-saving: no recomputation; selective
    recomputation of cheap modules; plus FP8 storage; plus half offloaded (what the request
    and the caps allow)."""
    selective = _selective(spec, caps)
    out: list[Policy] = [{}]
    if selective:
        out.append(selective)
    if constraints.allow_fp8_activations:
        out.append({**selective, "fp8_activations": True})
    if constraints.allow_offload:
        out.append({**selective, "fp8_activations": bool(constraints.allow_fp8_activations),
                    "activation_offload_frac": ACTIVATION_OFFLOAD_SHARE})
    return out


def frugal(spec: ModelSpec, constraints: Constraints, full_layers: int | None,
           caps: PolicyCaps = ALL_POLICIES) -> Policy:
    """The most memory-saving policy the caps allow (`full_layers` = k: full recomputation
    of the first k layers of each stage instead of all)."""
    selective = _selective(spec, caps)
    saving: Policy = {
        "fp8_activations": bool(constraints.allow_fp8_activations),
        "activation_offload_frac": max_offload_share(constraints)}
    if full_layers is not None:
        others: Literal["none", "selective"] = (
            "selective" if caps.full_layers_selective and selective else "none")
        return {**selective, "recompute": FullLayers(full_layers=full_layers, others=others),
                **saving}
    if caps.full:
        return {**selective, "recompute": RecomputeMode.FULL, **saving}
    return {**selective, **saving}


def least_stored_policy(spec: ModelSpec, constraints: Constraints,
                        caps: PolicyCaps | None = None) -> Policy:
    """The activation policy fields of the plans under `caps` that store the fewest bytes:
    full recomputation where the caps allow it whole or for the first k layers (k as large
    as a rank's layers stores the same), or a pinned policy (full recomputation stores no
    more than any), else `frugal`'s; with FP8 storage and the largest offload share the
    request allows. A memory bound taken under it holds for every plan the evaluation
    probes under these caps."""
    caps = caps or ALL_POLICIES
    if constraints.pinned_recompute is not None or caps.full or caps.full_layers:
        return {"recompute": RecomputeMode.FULL,
                "fp8_activations": bool(constraints.allow_fp8_activations),
                "activation_offload_frac": max_offload_share(constraints)}
    return frugal(spec, constraints, None, caps)


def rungs(spec: ModelSpec, constraints: Constraints, pinned: bool,
          caps: PolicyCaps) -> list[Policy]:
    """The policies tried at one ZeRO stage, cheapest first (a pinned policy: itself)."""
    if pinned and caps.selective_modules and constraints.recompute == RecomputeMode.SELECTIVE:
        return [{"recompute_modules": caps.selective_modules}]
    return [{}] if pinned else ladder(spec, constraints, caps)


__all__ = ["ALL_POLICIES", "Policy", "PolicyCaps", "Storage", "allowed_zero_stages", "frugal",
           "ladder", "least_stored_policy", "probe_options", "rungs", "storage_options",
           "with_policy"]
