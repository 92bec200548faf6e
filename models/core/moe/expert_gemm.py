"""Expert GEMM work inside one rank: what an exactly balanced rank still spends unevenly.

Owns: the tile-padded GEMM rows of the experts a rank computes, and the forward time of
their GEMMs expert by expert (gate+up and down projections of a SwiGLU expert, each at its
own padded token count), summed per rank; and one pass of the local experts' GEMMs at one
shape as the runtime issues them (`local_experts_gemm_s`: one grouped GEMM, or with
`TrainingSpec.moe_grouped_gemm` off one GEMM per expert in turn). The MoE layer waits for
its slowest rank, so its expert time is the maximum over ranks of these sums. Must not:
place experts (`solver.placement`) or schedule tiles on SM workers (`solver.placement.gemm_order`).

Why apart from rank balance: exact balance gives every rank the same S*K rows (seed ledger
Sec. 6.5, Kimi K3 arXiv:2607.24653 Sec. 5.2.1), but the experts inside a rank stay skewed:
a rank hosting more experts, or experts with partial tiles, pads more rows and launches
more GEMMs, so equal row counts do not mean equal time.
"""

from collections.abc import Sequence

from api_schemas.dtypes import DType
from api_schemas.hardware import GpuSpec
from models.catalog.kernels import KernelProfile, gemm_time_s, grouped_gemm_time_s
from models.errors import InvalidSpecError

DEFAULT_TILE_ROWS = 128
"""Rows per GEMM tile along the token dimension (MoonEP README: token_padding=128)."""


def _check(tile_rows: int, expert_tokens: Sequence[int]) -> None:
    if tile_rows < 1:
        raise InvalidSpecError(f"tile_rows={tile_rows} must be at least 1", field="tile_rows")
    if any(n < 0 for n in expert_tokens):
        raise InvalidSpecError("expert token counts must be non-negative", field="tokens")


def padded_rows(expert_tokens: Sequence[int], *, tile_rows: int) -> int:
    """GEMM rows a rank computes: each expert's tokens rounded up to whole tiles.

    rows = sum_e ceil(n_e / T) * T over experts with n_e > 0.
    Source: MoonEP README (each expert group padded to `token_padding` rows, 128 by
    default); the tile padding of `models.core.compute.moe_gemms`.
    Legend: n_e = tokens of expert e on the rank, T = tile_rows.
    """
    _check(tile_rows, expert_tokens)
    return sum(-(-int(n) // tile_rows) * tile_rows for n in expert_tokens)


def expert_forward_gemm_s(tokens: int, *, hidden_size: int, expert_ffn_hidden_size: int,
                          gpu: GpuSpec, dtype: DType, tile_rows: int) -> float:
    """Forward GEMM time of one SwiGLU expert on `tokens` rows (0 for none).

    t = gemm(m, 2f, h) + gemm(m, h, f), m = ceil(tokens / T) * T.
    Source: the GEMM model of `models.catalog.kernels.gemm_time_s` (one launch per expert, as in
    a per-expert loop; a grouped launch shares waves, `grouped_gemm_time_s`); the expert
    shapes of `models.core.compute.mlp_gemms` (gate and up fused, then down).
    Legend: h = hidden_size, f = expert_ffn_hidden_size, T = tile_rows.
    """
    if tokens <= 0:
        return 0.0
    m = padded_rows([tokens], tile_rows=tile_rows)
    h, f = hidden_size, expert_ffn_hidden_size
    return (gemm_time_s(m, 2 * f, h, gpu=gpu, dtype=dtype)
            + gemm_time_s(m, h, f, gpu=gpu, dtype=dtype))


def local_experts_gemm_s(groups: int, m: int, n: int, k: int, *, gpu: GpuSpec, dtype: DType,
                         profile: KernelProfile | None, grouped: bool) -> float:
    """One (m x k) @ (k x n) pass over `groups` local experts of equal tile-padded rows.

    grouped: t = grouped_gemm(groups, m, n, k); per-expert loop: t = groups * gemm(m, n, k).
    Source: Megatron-LM core_v0.14.0 `megatron/core/transformer/moe/experts.py`: with
    `--moe-grouped-gemm`, `TEGroupedMLP` runs each linear of every local expert as one
    Transformer Engine grouped linear (`models.catalog.kernels.grouped_gemm_time_s`: rounds
    of `GROUPED_GEMM_STREAMS` concurrent GEMMs sharing the waves); without it
    `SequentialMLP.forward` splits the rows by expert and calls each expert's MLP in turn,
    one GEMM at a time on one stream (`models.catalog.kernels.gemm_time_s` each, its fixed
    kernel cost and wave quantisation per expert). torchtitan v0.2.2 `GroupedExperts`
    (`_run_experts_grouped_mm` / `_run_experts_for_loop`) and DeepSpeed AutoEP
    (`deepspeed/moe/ep_experts.py`) make the same switch.
    Legend: groups = local experts, m = tokens per expert (tile-padded), n, k = the expert
    GEMM's output and reduction widths.
    """
    if grouped:
        return grouped_gemm_time_s(groups, m, n, k, gpu=gpu, dtype=dtype, profile=profile)
    return groups * gemm_time_s(m, n, k, gpu=gpu, dtype=dtype, profile=profile)


def rank_expert_gemm_s(expert_tokens: Sequence[int], *, hidden_size: int,
                       expert_ffn_hidden_size: int, gpu: GpuSpec, dtype: DType,
                       tile_rows: int) -> float:
    """Sum of the forward GEMM times of the experts one rank computes.

    Raises:
        InvalidSpecError: on a negative count, a non-positive width or tile size.
    """
    _check(tile_rows, expert_tokens)
    if hidden_size < 1 or expert_ffn_hidden_size < 1:
        raise InvalidSpecError("hidden_size and expert_ffn_hidden_size must be positive",
                               field="hidden_size")
    return sum(expert_forward_gemm_s(int(n), hidden_size=hidden_size,
                                     expert_ffn_hidden_size=expert_ffn_hidden_size, gpu=gpu,
                                     dtype=dtype, tile_rows=tile_rows)
               for n in expert_tokens)


__all__ = ["DEFAULT_TILE_ROWS", "expert_forward_gemm_s", "local_experts_gemm_s", "padded_rows",
           "rank_expert_gemm_s"]
