"""The MoE token permutation without Megatron-LM's permute fusion: the HBM bytes the unfused
PyTorch path moves beyond the fused Transformer Engine kernels.

Owns: the extra forward bytes per micro-batch of an MoE layer whose permutation and
un-permutation run unfused (`unfused_permute_extra_bytes`, `TrainingSpec.moe_permute_fusion`
false). Must not: time anything (`models.core.compute` prices these bytes with the
memory-bound kernel model, as it prices the fused passes `MOE_PERMUTE_PASSES`) or decide
whether the fusion is on (`models.core.runtime_features`).

Mechanism (Megatron-LM core_v0.14.0 `megatron/core/transformer/moe/moe_utils.py`, called by
`token_dispatcher.py` with `fused=config.moe_permute_fusion`):
- `permute`, unfused: the routing map is transposed and the token indices and probabilities
  are picked with `masked_select`, then `tokens.index_select` reads each token once per
  routed assignment and writes one row per assignment: the same hidden-sized bytes as the
  fused `moe_permute_with_probs` (Transformer Engine >= 2.1, which also builds a row map over
  every token-expert score, so the routing-sized bytes of the two paths are alike and
  neither is counted).
- `sort_chunks_by_idxs`, unfused (several local experts): `torch.split` and `torch.cat` read
  and write each row once, as the fused chunk sort does (its `.tolist()` host copies are not
  priced here).
- `unpermute`, unfused: a zero-filled output of the layer's tokens (`torch.zeros`), then
  `scatter_add_` reads each assignment's row and reads and writes the output row it adds
  into; the fused `moe_unpermute` reads each row once and writes the sum (the model's fused
  un-permutation pass, one read and one write per assignment). The extra is the zero fill
  and one more read-and-write per assignment's row, less the fused pass's write.
"""

UNFUSED_UNPERMUTE_EXTRA_ROW_PASSES = 1
"""Extra hidden-sized passes per routed assignment of the unfused un-permutation: the
`scatter_add_` read-modify-write of the output row (a read and a write of 2h bytes) against
the fused kernel's one write, with the read of the assignment's own row common to both
(Megatron-LM core_v0.14.0 `moe_utils.py: unpermute`, `output_tokens.scatter_add_`)."""

UNFUSED_UNPERMUTE_ZERO_FILL_PASSES = 1
"""Writes of the layer's output rows before the scatter (`torch.zeros(restore_shape)` in the
same function): one 2h-byte write per token."""


def unfused_permute_extra_bytes(*, assignments: float, top_k: int, hidden_size: int) -> float:
    """Forward HBM bytes per micro-batch that the unfused permutation and un-permutation of
    one MoE layer move beyond the fused kernels.

    extra = A * 2h * (P_row + P_zero / k).
    Source: Megatron-LM core_v0.14.0 `megatron/core/transformer/moe/moe_utils.py`
    (`permute`, `unpermute`, `sort_chunks_by_idxs` with `fused=False`) against Transformer
    Engine's fused `moe_permute_with_probs` / `moe_unpermute` (module docstring).
    Legend: A = routed assignments the rank handles (tokens x top-k on its shard), 2h = one
    16-bit hidden row, k = top-k (the un-permuted tokens are A / k), P_row =
    `UNFUSED_UNPERMUTE_EXTRA_ROW_PASSES`, P_zero = `UNFUSED_UNPERMUTE_ZERO_FILL_PASSES`.
    """
    row = 2.0 * hidden_size
    return assignments * row * (UNFUSED_UNPERMUTE_EXTRA_ROW_PASSES
                                + UNFUSED_UNPERMUTE_ZERO_FILL_PASSES / max(1, top_k))


__all__ = [
    "UNFUSED_UNPERMUTE_EXTRA_ROW_PASSES",
    "UNFUSED_UNPERMUTE_ZERO_FILL_PASSES",
    "unfused_permute_extra_bytes",
]
