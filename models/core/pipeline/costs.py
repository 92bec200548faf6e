"""Inputs of a pipeline simulation: op durations and activation sizes per virtual stage.

Owns: `OpDurations` (seconds per F / B / W of one micro-batch on one virtual stage, plus
an optional overlapped F&B pair duration) and `ActivationSizes` (bytes an F allocates and
the part of it a B frees; W frees the rest). Must not: know schedules or time anything.

A value given once applies to every virtual stage; a tuple gives one value per virtual
stage in layer order (so the first and last stages can carry the embedding and the head).
"""

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from models.errors import InvalidSpecError

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True, kw_only=True)
class OpDurations:
    """Duration of each op kind of one micro-batch on each virtual stage (one chunk)."""

    forward_s: tuple[float, ...]
    """F: forward of one micro-batch through one virtual stage."""
    backward_input_s: tuple[float, ...]
    """B: gradient with respect to the stage input (frees most activations)."""
    backward_weight_s: tuple[float, ...]
    """W: gradient with respect to the weights; a fused backward BW costs B + W."""
    overlapped_pair_s: float | None = None
    """An overlapped F&B pair (DualPipe); None means no overlap gain: F + B + W."""

    @classmethod
    def uniform(cls, *, forward_s: float, backward_input_s: float, backward_weight_s: float,
                overlapped_pair_s: float | None = None) -> "OpDurations":
        """The same durations on every virtual stage."""
        return cls(forward_s=(forward_s,), backward_input_s=(backward_input_s,),
                   backward_weight_s=(backward_weight_s,), overlapped_pair_s=overlapped_pair_s)

    def per_stage(self, num_stages: int) -> tuple[FloatArray, FloatArray, FloatArray]:
        """(F, B, W) arrays of length `num_stages`, broadcasting single values.

        Raises:
            InvalidSpecError: a tuple has neither 1 nor `num_stages` entries, or a duration
                is negative or not finite.
        """
        arrays = tuple(
            _broadcast(name, values, num_stages)
            for name, values in (("forward_s", self.forward_s),
                                 ("backward_input_s", self.backward_input_s),
                                 ("backward_weight_s", self.backward_weight_s))
        )
        pair = self.overlapped_pair_s
        if pair is not None and not (np.isfinite(pair) and pair >= 0.0):
            raise InvalidSpecError(
                f"overlapped_pair_s={pair} must be a finite duration >= 0 seconds",
                field="overlapped_pair_s")
        return arrays[0], arrays[1], arrays[2]


@dataclass(frozen=True, slots=True, kw_only=True)
class ActivationSizes:
    """Bytes one micro-batch keeps for backward on each virtual stage, and what B frees.

    Source: Zero Bubble arXiv:2401.10241 Table 1 splits a layer's activation into M_B
    (freed by B) and M_W (kept until W); e.g. 32 s b h of the 34 s b h + 5 a s^2 b bytes.
    Legend: forward_bytes = M_B + M_W per stage, freed_by_input_grad_bytes = M_B.
    """

    forward_bytes: tuple[int, ...]
    """Allocated when the F starts."""
    freed_by_input_grad_bytes: tuple[int, ...]
    """Released when the B ends; the remainder is released when the W ends."""

    def per_stage(self, num_stages: int) -> tuple[IntArray, IntArray]:
        """(allocated, freed by B) arrays of length `num_stages`.

        Raises:
            InvalidSpecError: wrong length, negative sizes, or B freeing more than F holds.
        """
        held = _broadcast("forward_bytes", self.forward_bytes, num_stages).astype(np.int64)
        freed = _broadcast("freed_by_input_grad_bytes", self.freed_by_input_grad_bytes,
                           num_stages).astype(np.int64)
        if np.any(freed > held):
            raise InvalidSpecError(
                "freed_by_input_grad_bytes exceeds forward_bytes on some stage: B can free at "
                "most what F allocated", field="freed_by_input_grad_bytes")
        return held, freed


def _broadcast(name: str, values: tuple[float, ...] | tuple[int, ...],
               num_stages: int) -> FloatArray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1 or arr.shape[0] not in (1, num_stages):
        raise InvalidSpecError(
            f"{name} has {arr.size} values: give one value or one per virtual stage "
            f"({num_stages})", field=name)
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise InvalidSpecError(f"{name}={list(values)} must be finite and >= 0", field=name)
    return np.broadcast_to(arr, (num_stages,)).copy()


__all__ = ["ActivationSizes", "OpDurations"]
