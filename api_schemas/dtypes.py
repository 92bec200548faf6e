"""Numeric formats and their storage sizes.

Owns: the closed set of element formats a recipe may name and the bytes each one takes.
Must not: decide which format a recipe uses (that is `training.py` and `models/core/precision.py`).
"""

from enum import StrEnum


class DType(StrEnum):
    """Element formats used for parameters, gradients, optimizer states and activations."""

    FP32 = "fp32"
    TF32 = "tf32"
    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"
    FP4 = "fp4"

    @property
    def num_bytes(self) -> float:
        """Storage bytes per element (fp4 packs two elements per byte)."""
        return _DTYPE_BYTES[self]


_DTYPE_BYTES: dict[DType, float] = {
    DType.FP32: 4.0,
    DType.TF32: 4.0,
    DType.BF16: 2.0,
    DType.FP16: 2.0,
    DType.FP8: 1.0,
    DType.FP4: 0.5,
}

__all__ = ["DType"]
