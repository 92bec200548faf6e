"""Key tiles a fused attention kernel computes in a sliding-window layer.

Owns: the key tile of the fused kernels (`ATTENTION_KEY_TILE`), the mean keys per query a
windowed kernel computes (`window_kernel_keys`), its share of the causal kernel's work
(`window_work_fraction`) and its longest key-block loop (`window_loop_keys`). Must not: time
kernels (see `models/core/compute.py`).
"""

import math

ATTENTION_KEY_TILE = 128
"""Keys of a key tile of the fused attention kernel (and rows of its query tile) at head dim
64, GPT-OSS's: FlashAttention-2 `csrc/flash_attn/src/flash_fwd_launch_template.h`
(`run_mha_fwd_hdim64`: kBlockM = kBlockN = 128); FlashAttention-3 `hopper/
flash_fwd_launch_template.h` (`run_mha_fwd_hdim64`: kBlockN = 128). A sliding-window layer
computes whole key tiles: the tiles its window touches."""


def window_kernel_keys(window: int, *, seq_len: int) -> float:
    """Mean keys per query a fused kernel computes in a sliding-window layer: query tile i
    (0-based) runs its key-block loop from the first tile its window reaches to its diagonal
    tile, min(i + 1, K) tiles with K = ceil((T + w - 1) / T), so the first K - 1 query tiles
    touch fewer (the causal ramp), the rest K each. A window as long as the sequence gives
    the causal kernel's own mean, T (n + 1) / 2.

    Source: FlashAttention-2 (`flash_fwd_kernel.h`: a query tile's key-block loop runs from
    `n_block_min`, set by `window_size_left` and never below 0, to its diagonal block,
    skipping the blocks the window masks entirely; "sliding window local attention",
    flash-attn 2.3); Transformer Engine runs GPT-OSS's window (left 128, right 0) on cuDNN's
    fused kernel (`dot_product_attention/utils.py: get_attention_backend`, v2.9:
    FusedAttention keeps windows (left, 0) with a causal mask, cuDNN 9.2+; `fused_attn.cpp`).
    cuDNN's tile sizes are not published; the FlashAttention tile `ATTENTION_KEY_TILE` is
    assumed for both.
    Legend: T = ATTENTION_KEY_TILE, w = window, s = seq_len, n = ceil(s / T) query tiles.
    """
    tile = ATTENTION_KEY_TILE
    reach = math.ceil((tile + window - 1) / tile)
    tiles = math.ceil(seq_len / tile)
    ramp = min(tiles, reach)
    touched = ramp * (ramp + 1) / 2 + max(0, tiles - reach) * reach
    return tile * touched / tiles


def window_work_fraction(window: int, *, seq_len: int) -> float:
    """The share of a causal fused kernel's key tiles a sliding-window kernel computes, both
    counted in tiles (`window_kernel_keys` of the window over that of a window covering the
    sequence): 1 when the window spans the sequence."""
    return window_kernel_keys(window, seq_len=seq_len) / window_kernel_keys(seq_len,
                                                                             seq_len=seq_len)


def window_loop_keys(window: int, *, seq_len: int) -> int:
    """Keys of the longest key-block loop of a sliding-window layer, T ceil((T + w - 1) / T)
    (at most the sequence): the loop length that sets the kernel's saturation
    (`window_kernel_keys` for the sources)."""
    tile = ATTENTION_KEY_TILE
    return min(seq_len, tile * math.ceil((tile + window - 1) / tile))


__all__ = ["ATTENTION_KEY_TILE", "window_kernel_keys", "window_loop_keys",
           "window_work_fraction"]
