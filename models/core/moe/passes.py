"""HBM passes of an MoE layer's routing beyond its GEMMs: the router's scores, the FP8 casts
of the expert GEMM inputs, and the permutation passes of each dispatcher.

Owns: the bytes-per-element and passes-per-assignment constants, each with its source.
Must not: count tokens or assignments, or time anything (`models.core.compute` turns these
into bytes per micro-batch and prices them with the memory-bound kernel model).
"""

ROUTER_BYTES_PER_SCORE = 13
"""HBM bytes per (token, expert) score of the fused router after the gating GEMM: read the
fp32 logits (4), write the fp32 probabilities (4) and the boolean routing map (1), and read
the probabilities again for the auxiliary load-balancing loss (4). Source: Megatron-Core
`--moe-router-fusion` (README "Router Fusion": projection aside, top-k, softmax and the
auxiliary loss in fewer kernels; `--moe-router-dtype fp32` keeps the scores in fp32)."""

FP8_QUANTIZE_BYTES_PER_ELEMENT = 4
"""HBM bytes per element of an expert GEMM input quantised to FP8: read the 16-bit value (2),
write the row-wise FP8 copy for the forward GEMM (1) and the column-wise (transposed) copy for
the weight-gradient GEMM (1); scales neglected. Applied to both expert GEMM inputs of every
routed assignment (h for the up projection, the expert width for the down projection); the
backward's gradient casts follow from `ELEMENTWISE_BACKWARD_RATIO`. Source: Transformer
Engine FP8 recipes (inputs of each FP8 GEMM cast before it, with a transposed copy kept for
wgrad; Megatron-Core MoE README "FP8 Training": linear-layer inputs stored in FP8). Dense
layers' casts are inside the step-calibrated eta_max; the routed experts' are explicit because
their cast bytes per FLOP are 2 h f / (h + f) times larger (fine-grained experts)."""

MOE_PERMUTE_PASSES = 2
"""Read-and-write passes over every routed assignment's hidden vector (16-bit) that each
dispatcher makes in a forward: the permutation into expert order and the un-permutation
back (Megatron-Core `moe_utils.permute` / `unpermute`; the flex dispatcher's DeepEP and
HybridEP paths make the same two, after the dispatch and before the combine)."""

ALLTOALL_LOCAL_SORT_PASSES = 2
"""Extra passes of the `alltoall` dispatcher when a rank holds more than one expert: the
tokens received from every EP rank arrive grouped by source rank and are re-sorted by local
expert after the dispatch, and sorted back before the combine. Source: Megatron-Core
`token_dispatcher.py`, `MoEAlltoAllTokenDispatcher.dispatch_postprocess` ("Permutation 2:
Sort tokens by local expert", `sort_chunks_by_idxs` when `num_local_experts > 1`) and
`combine_preprocess` ("Unpermutation 2"), commit d98e8a64."""


__all__ = ["ALLTOALL_LOCAL_SORT_PASSES", "FP8_QUANTIZE_BYTES_PER_ELEMENT", "MOE_PERMUTE_PASSES",
           "ROUTER_BYTES_PER_SCORE"]
