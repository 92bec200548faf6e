"""The record of one pipeline rank's per-micro-batch work (`StageTime`).

Owns: the record and its copy for another rank of the same configuration. Must not: compute
any of its terms (`models.core.step_time.stage` builds it, `models.core.step_time.runtime_traits`
folds the frameworks' runtime traits into it).
"""

from dataclasses import dataclass

from models.core.compute import OpTimes


@dataclass(frozen=True, slots=True, kw_only=True)
class StageTime:
    """One pipeline rank's per-micro-batch work (over all its chunks)."""

    stage: int
    chunk_times: tuple[OpTimes, ...]
    """F, B (with recomputation and exposed collectives), W per chunk, per micro-batch."""
    compute_s: float
    recompute_s: float
    exposed_comm_s: dict[str, float]
    offload_stall_s: float
    fp8_cast_s: float = 0.0
    """Quantising stored activations to FP8 in forward and back in backward."""
    zero3_copy_s: float = 0.0
    """FSDP2's copy kernels around each ZeRO-3 unit's collectives
    (`models.core.step_time.exposure.zero3_copy_s`)."""
    grad_update_s: float = 0.0
    """DeepSpeed BF16Optimizer's fp32 gradient update after each backward
    (`models.core.step_time.deepspeed_pipe.hp_grad_update_s`)."""
    offload_round_trip_s: float = 0.0
    """ZeRO-Offload's gradient copies to and from host memory beyond the backward they
    overlap (`models.core.step_time.runtime_traits.offload_round_trip_s`)."""

    def at_rank(self, rank: int) -> "StageTime":
        """These times as rank `rank`'s (`dataclasses.replace` of the rank, every other
        field named: ranks of one `StageInputs` share them, and a search copies thousands)."""
        return StageTime(stage=rank, chunk_times=self.chunk_times, compute_s=self.compute_s,
                         recompute_s=self.recompute_s, exposed_comm_s=self.exposed_comm_s,
                         offload_stall_s=self.offload_stall_s, fp8_cast_s=self.fp8_cast_s,
                         zero3_copy_s=self.zero3_copy_s, grad_update_s=self.grad_update_s,
                         offload_round_trip_s=self.offload_round_trip_s)


__all__ = ["StageTime"]
