"""How sure the memory ledger is for one configuration, in words for the plan's notes.

Owns: naming, for the mechanisms a configuration uses, whether measured peaks back the
ledger's bytes (research/MEMORY_PEAKS.md) or only the formulas and framework defaults do.
Must not: compute bytes (see `models/core/memory.py`) or change a verdict.
"""

from api_schemas.dtypes import DType
from api_schemas.parallel import ParallelConfig
from api_schemas.training import TrainingSpec

CHECKED = ("memory ledger: dense layers, pipeline in-flight activations, replicated and "
           "ZeRO-1 states and runtime items are checked against measured peaks "
           "(research/MEMORY_PEAKS.md: Zero Bubble, materialised attention, no sharding; "
           "torchtitan, fused attention with FSDP2, TP, PP and CP)")


def ledger_evidence(training: TrainingSpec, parallel: ParallelConfig, *,
                    is_moe: bool) -> tuple[str, ...]:
    """One note per mechanism in use whose bytes no measured peak has checked yet."""
    notes = [CHECKED]
    thin: list[str] = []
    if is_moe and parallel.ep > 1:
        thin.append(f"routed-expert activations at load imbalance {training.moe_load_imbalance}")
    if parallel.zero_stage == 2 or (parallel.zero_stage == 3 and not parallel.fsdp):
        thin.append("ZeRO-2/3 buffers (framework defaults: DeepSpeed buckets)")
    if training.compute_dtype == DType.FP8 or any(
            parallel.policy_of(s).fp8_activations for s in range(parallel.pp)):
        thin.append("FP8 weights and activation tiles")
    if any(parallel.policy_of(s).offload_frac for s in range(parallel.pp)):
        thin.append("activation offload (two chunks staged on the GPU, the copy keeping up)")
    if parallel.optimizer_offload_frac or parallel.gradient_host_shards:
        thin.append("host-memory optimizer states and gradient shards")
    if parallel.remote_activation_offload:
        thin.append("remote activation offload (receivers kept within the capacity at their "
                    "own peaks)")
    if thin:
        notes.append("memory ledger, from formulas and framework defaults only (no measured "
                     "peak yet): " + "; ".join(thin))
    return tuple(notes)


__all__ = ["CHECKED", "ledger_evidence"]
