"""One truth for a plan's activation policy: the top-level policy fields of a returned
`ParallelConfig` agree with its `stage_policies`.

Owns: `summarise_policies`, which collapses per-stage policies that are all equal into the
uniform top-level fields (dropping `stage_policies`), and otherwise sets the top-level
fields to the envelope of the stages (the most memory-saving setting any stage uses), so
that neither part contradicts the other and the cost model's figures are unchanged (the
cost model reads `stage_policies` whenever it is present, `ParallelConfig.policy_of`).
Must not: choose policies or size anything.
"""

from api_schemas.parallel import (
    FullLayers,
    ParallelConfig,
    Recompute,
    RecomputeMode,
    RecomputeModule,
    StagePolicy,
)


def _saving_rank(recompute: Recompute) -> tuple[int, int]:
    """Order recompute policies from least to most memory-saving."""
    if isinstance(recompute, FullLayers):
        return 2, recompute.full_layers
    return {RecomputeMode.NONE: (0, 0), RecomputeMode.SELECTIVE: (1, 0),
            RecomputeMode.FULL: (3, 0)}[recompute]


def recompute_envelope(policies: tuple[StagePolicy, ...]) -> Recompute:
    """The most memory-saving recompute policy of any stage; a `FullLayers` envelope keeps
    'selective' on its other layers when any stage recomputes selectively."""
    top = max((p.recompute for p in policies), key=_saving_rank)
    if isinstance(top, FullLayers) and top.others == "none" and any(
            p.recompute == RecomputeMode.SELECTIVE
            or (isinstance(p.recompute, FullLayers) and p.recompute.others == "selective")
            for p in policies):
        return FullLayers(full_layers=top.full_layers, others="selective")
    return top


def summarise_policies(parallel: ParallelConfig) -> ParallelConfig:
    """`parallel` with top-level policy fields that summarise `stage_policies`.

    Equal stage policies become the uniform fields (and `stage_policies` becomes null);
    differing ones keep `stage_policies` and set `recompute`, `recompute_modules`,
    `fp8_activations` and `activation_offload_frac` to their envelope (most saving
    recompute, every module any stage rebuilds, FP8 storage if any stage uses it, the
    largest offload fraction).
    """
    policies = parallel.stage_policies
    if policies is None:
        return parallel
    if all(p == policies[0] for p in policies):
        first = policies[0]
        return parallel.model_copy(update={
            "recompute": first.recompute, "recompute_modules": first.recompute_modules,
            "fp8_activations": first.fp8_activations,
            "activation_offload_frac": first.offload_frac, "stage_policies": None})
    modules: list[RecomputeModule] = []
    for policy in policies:
        modules += [m for m in policy.recompute_modules if m not in modules]
    return parallel.model_copy(update={
        "recompute": recompute_envelope(policies), "recompute_modules": tuple(modules),
        "fp8_activations": any(p.fp8_activations for p in policies),
        "activation_offload_frac": max(p.offload_frac for p in policies)})


def contradictions(parallel: ParallelConfig) -> list[str]:
    """Where the top-level policy fields disagree with `stage_policies` (empty when they
    agree, or when there are no per-stage policies)."""
    policies = parallel.stage_policies
    if policies is None:
        return []
    out = []
    if _saving_rank(parallel.recompute) != _saving_rank(recompute_envelope(policies)):
        out.append(f"recompute={parallel.recompute!r} but the stages' most saving policy is "
                   f"{recompute_envelope(policies)!r}")
    if parallel.fp8_activations != any(p.fp8_activations for p in policies):
        out.append("fp8_activations disagrees with the stages")
    if parallel.activation_offload_frac != max(p.offload_frac for p in policies):
        out.append("activation_offload_frac is not the stages' largest offload fraction")
    return out


__all__ = ["contradictions", "recompute_envelope", "summarise_policies"]
