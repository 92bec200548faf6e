"""Bytes of persistent model states per parameter, by precision recipe and ZeRO stage.

Owns: how many bytes each parameter costs as weights, FP8 weight copies, gradients, master
weights and optimizer moments under a `TrainingSpec`, and how ZeRO-1/2/3 divide them over the
data-parallel sharding group. Must not: decide which parameters a rank holds (see
`models/core/memory.py`) or how large the sharding group is (see `models/core/mesh/layout.py`).

Source: [RAJ20] Rajbhandari et al., ZeRO, arXiv:1910.02054, Sec. 3.1 (mixed-precision Adam:
2 + 2 + K bytes per parameter with K = 12: fp32 master, momentum and variance) and Sec. 5
(P_os: 4 + K/N_d; P_os+g: 2 + 14/N_d; P_os+g+p: 16/N_d). The recipe is a parameter here, not
a constant: bf16 weights + fp32 gradient buffers (Megatron main_grad), FP8 weight copies,
BF16 optimizer moments (DeepSeek-V3), SGD and Muon state shapes.
"""

from dataclasses import dataclass

from api_schemas.dtypes import DType
from api_schemas.training import Fp8WeightStorage, OptimizerKind, TrainingSpec
from models.core.search_memo import current_memo, kept

FP8_WEIGHT_COPY_BYTES = 2.0
"""Bytes per GEMM weight of the FP8 copies Transformer Engine caches beside high-precision
weights: the FP8 weight and its FP8 transpose (Hopper FP8 GEMMs take one layout).
Source: NVIDIA/TransformerEngine issues #257, #1261, #1764 (FP8 training using more memory
than BF16 until fp8_model_init / --fp8-param-gather)."""

FP8_ONLY_WEIGHT_BYTES = 1.0
"""Bytes per GEMM weight when only FP8 compute weights are kept (Megatron
--fp8-param-gather; the high-precision copy is the optimizer's master)."""

OPTIMIZER_MOMENTS: dict[OptimizerKind, int] = {
    OptimizerKind.ADAM: 2,
    OptimizerKind.ADAMW: 2,
    OptimizerKind.SGD: 0,
    OptimizerKind.SGD_MOMENTUM: 1,
    OptimizerKind.MUON: 1,
}
"""Moment tensors per parameter. Adam: m and v ([RAJ20] Sec. 3.1); Muon: one momentum for
matrix weights (Jordan et al. 2024; Kimi K2 arXiv:2507.20534 Sec. 2.1), non-matrix weights
(embeddings, head, norms) stay on AdamW (see `moments_per_param`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StateBytesPerParam:
    """Bytes per parameter of each persistent state before sharding."""

    weights: float
    fp8_copy: float
    gradients: float
    master: float
    moments: float

    @property
    def optimizer(self) -> float:
        """Master weights plus moments: what ZeRO-1 shards ([RAJ20] K)."""
        return self.master + self.moments

    @property
    def total(self) -> float:
        """All states ([RAJ20]: 16 for fp16/fp32 mixed-precision Adam)."""
        return self.weights + self.fp8_copy + self.gradients + self.optimizer


def moments_per_param(optimizer: OptimizerKind, *, is_matrix: bool) -> int:
    """Moment tensors of one parameter; Muon keeps AdamW on non-matrix weights."""
    if optimizer == OptimizerKind.MUON and not is_matrix:
        return OPTIMIZER_MOMENTS[OptimizerKind.ADAMW]
    return OPTIMIZER_MOMENTS[optimizer]


def state_bytes_per_param(training: TrainingSpec, *, is_gemm_weight: bool = True,
                          is_matrix: bool = True) -> StateBytesPerParam:
    """`_state_bytes_per_param`, kept on the search's memo."""
    memo = current_memo()
    key = (training, is_gemm_weight, is_matrix)
    return kept(memo.state_bytes, key,
                lambda: _state_bytes_per_param(training, is_gemm_weight, is_matrix))


def _state_bytes_per_param(training: TrainingSpec, is_gemm_weight: bool,
                           is_matrix: bool) -> StateBytesPerParam:
    """Bytes per parameter of every persistent state under a recipe.

    Args:
        training: the precision recipe.
        is_gemm_weight: the parameter feeds a GEMM (FP8 copies apply; norms and embeddings
            stay in `param_dtype`).
        is_matrix: the parameter is a hidden matrix (Muon applies).
    """
    weights = training.param_dtype.num_bytes
    fp8_copy = 0.0
    if training.compute_dtype == DType.FP8 and is_gemm_weight:
        if training.fp8_weight_storage == Fp8WeightStorage.FP8_ONLY:
            weights = FP8_ONLY_WEIGHT_BYTES
        elif training.fp8_weight_storage == Fp8WeightStorage.ON_THE_FLY:
            fp8_copy = 0.0  # quantised per GEMM: a transient of one module (memory.py)
        else:
            fp8_copy = FP8_WEIGHT_COPY_BYTES
    master = training.master_dtype.num_bytes if training.master_dtype is not None else 0.0
    moments = (moments_per_param(training.optimizer, is_matrix=is_matrix)
               * training.optimizer_state_dtype.num_bytes)
    return StateBytesPerParam(weights=weights, fp8_copy=fp8_copy,
                              gradients=training.grad_dtype.num_bytes, master=master,
                              moments=moments)


@dataclass(frozen=True, slots=True, kw_only=True)
class ShardedStateBytes:
    """Model-state bytes of a parameter set on one rank after ZeRO sharding."""

    weights_bytes: int
    gradients_bytes: int
    optimizer_bytes: int

    @property
    def total_bytes(self) -> int:
        """Weights + gradients + optimizer states."""
        return self.weights_bytes + self.gradients_bytes + self.optimizer_bytes


def sharded_state_bytes(num_params: int, per_param: StateBytesPerParam, *, zero_stage: int,
                        shard_degree: int) -> ShardedStateBytes:
    """Bytes on one rank of `num_params` parameters under a ZeRO stage.

    Source: [RAJ20] arXiv:1910.02054 Sec. 5.1-5.3 and Table 1: stage 1 divides the optimizer
    states (K) by N_d, stage 2 also the gradients, stage 3 also the weights.
    Legend: Psi=num_params, N_d=shard_degree, K=per_param.optimizer.
    """
    if zero_stage not in (0, 1, 2, 3):
        raise ValueError(f"zero_stage must be 0..3, got {zero_stage}")
    n = max(1, shard_degree)
    weights = num_params * (per_param.weights + per_param.fp8_copy)
    gradients = num_params * per_param.gradients
    optimizer = num_params * per_param.optimizer
    if zero_stage >= 1:
        optimizer /= n
    if zero_stage >= 2:
        gradients /= n
    if zero_stage >= 3:
        weights /= n
    return ShardedStateBytes(weights_bytes=_ceil(weights), gradients_bytes=_ceil(gradients),
                             optimizer_bytes=_ceil(optimizer))


def fp8_weight_quantisation_bytes(num_gemm_params: int, *, param_bytes: float) -> int:
    """HBM bytes one on-the-fly FP8 quantisation of `num_gemm_params` GEMM weights moves:
    read each weight in its stored format, write its FP8 copy and its FP8 transpose (with
    one fp32 scale per 128 x 128 block). What `Fp8WeightStorage.ON_THE_FLY` pays per pass
    (forward, and again in backward) instead of holding `FP8_WEIGHT_COPY_BYTES` per weight.

    Source: DeepSeek-V3 arXiv:2412.19437 Sec. 3.3.2 (online 128x128 block-wise weight
    quantisation, fp32 scaling factors).
    Legend: N = num_gemm_params; bytes = N (param_bytes + 2 x 1 + 2 x 4 / 128^2).
    """
    return _ceil(num_gemm_params * (param_bytes + 2.0 + 2.0 * 4.0 / 128**2))


def _ceil(value: float) -> int:
    whole = int(value)
    return whole if whole == value else whole + 1


__all__ = [
    "FP8_ONLY_WEIGHT_BYTES",
    "FP8_WEIGHT_COPY_BYTES",
    "OPTIMIZER_MOMENTS",
    "ShardedStateBytes",
    "StateBytesPerParam",
    "fp8_weight_quantisation_bytes",
    "moments_per_param",
    "sharded_state_bytes",
    "state_bytes_per_param",
]
