"""A `ModelSpec` as Megatron-LM core_v0.14.0 model-shape arguments.

Owns: the transformer shape flags (layers, widths, heads, GQA, MLA, position embeddings,
vocabulary, norms, biases), the mixture-of-experts flags including the `--moe-layer-freq`
list expression for leading dense layers, and multi-token prediction. Must not: emit
parallel, batch, precision or recompute flags (that is `megatron`).

Field mapping from Hugging Face names follows Megatron-LM core_v0.14.0
`megatron/training/arguments.py` and the yanring/Megatron-MoE-ModelZoo benchmarking configs:
n_shared_experts x moe_intermediate_size -> --moe-shared-expert-intermediate-size,
first_k_dense_replace = k -> --moe-layer-freq "([0]*k+[1]*(L-k))",
qk_nope_head_dim -> --qk-head-dim, qk_rope_head_dim -> --qk-pos-emb-head-dim.
"""

from dataclasses import dataclass

from api_schemas.architecture import ModelSpec, MoESpec, RouterScoreFunction
from api_schemas.parallel import ParallelConfig
from api_schemas.training import MoeDispatcher, TrainingSpec
from models.core.layer_kinds import attention_kind, mlp_kind, norm_kind
from models.core.runtime_features import dispatcher, grouped_gemm_on, permute_fused

MAKE_VOCAB_SIZE_DIVISIBLE_BY = 128
"""Megatron-LM's default `--make-vocab-size-divisible-by` (core_v0.14.0 arguments.py); the
vocabulary is padded to a multiple of this times the tensor-parallel size."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelArgs:
    """Model-shape flags and what the spec holds that Megatron cannot be told."""

    args: tuple[str, ...]
    notes: tuple[str, ...]


def model_args(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig) -> ModelArgs:
    """Shape, attention, embedding, norm, MoE and MTP flags of one model."""
    args = ["--num-layers", str(spec.num_layers), "--hidden-size", str(spec.hidden_size),
            "--ffn-hidden-size", str(spec.ffn_hidden_size),
            "--num-attention-heads", str(spec.num_attention_heads)]
    notes: list[str] = []
    args += _attention_args(spec)
    args += _embedding_args(spec, training, notes)
    if spec.vocab_size % (MAKE_VOCAB_SIZE_DIVISIBLE_BY * parallel.tp):
        multiple = MAKE_VOCAB_SIZE_DIVISIBLE_BY * parallel.tp
        padded = -(-spec.vocab_size // multiple) * multiple
        notes.append(f"Megatron-LM pads the vocabulary from {spec.vocab_size} to {padded} (a "
                     f"multiple of {MAKE_VOCAB_SIZE_DIVISIBLE_BY} x tp); the plan sized "
                     f"{spec.vocab_size} rows, so embedding and head memory run slightly higher")
    args += mlp_kind(spec).megatron_args
    norm = norm_kind(spec)
    args += ["--normalization", norm.megatron_name]
    if norm.megatron_note is not None:
        notes.append(norm.megatron_note)
    if not spec.linear_bias:
        args.append("--disable-bias-linear")
        if spec.attention_bias:
            args.append("--add-qkv-bias")
    if spec.qk_norm:
        args.append("--qk-layernorm")
    if spec.parallel_residual:
        notes.append("parallel_residual=true (attention and MLP read the same input) has no "
                     "Megatron-LM core_v0.14.0 GPT flag; it needs a custom layer spec")
    if spec.num_mtp_layers:
        args += ["--mtp-num-layers", str(spec.num_mtp_layers)]
    if spec.sliding_window is not None:
        notes.append(_window_note(spec))
    if spec.attention_chunk_size is not None:
        chunked = spec.chunked_attention_layers
        count = spec.num_layers if chunked is None else len(chunked)
        notes.append(f"chunked attention ({spec.attention_chunk_size} tokens on {count} of "
                     f"{spec.num_layers} layers, the others global) is timed in the plan but "
                     "set by none of these GPT arguments: the model's own layer definition "
                     "must apply it, or attention runs globally on every layer (slower at "
                     f"sequences above {spec.attention_chunk_size} tokens than planned)")
    if spec.linear_attention is not None:
        linear = spec.linear_attention
        notes.append(f"{len(linear.layers)} of {spec.num_layers} layers use linear attention "
                     f"({linear.kind.value}, {linear.num_heads} heads of {linear.head_dim}); "
                     "these GPT arguments describe the full-attention layers only: the "
                     "linear-attention layers and their state-passing context parallelism "
                     "need the model's own layer spec and kernels (flash-linear-attention)")
    moe = moe_args(spec, training)
    return ModelArgs(args=(*args, *moe.args), notes=(*notes, *moe.notes))


def _window_note(spec: ModelSpec) -> str:
    """Sliding-window attention has no core_v0.14.0 command-line flag (its TransformerConfig
    has `window_size` only); core_v0.15.0 `arguments.py` adds `--window-size` (a tuple) and
    `--window-attn-skip-freq` (an int N: N - 1 window layers then one full layer, or a list
    expression with 1 for a window layer). The window is passed as (w, 0), as Megatron-Bridge's
    GPT-OSS provider maps the Hugging Face `sliding_window` of 128 (`window_size=(128, 0)`,
    `window_attn_skip_freq=2`)."""
    layers = spec.sliding_window_layers
    pattern = ("every layer" if layers is None else
               "a list of layers" if set(layers) != set(range(0, spec.num_layers, 2)) else
               "every other layer, from the first")
    freq = ("" if layers is None else
            " --window-attn-skip-freq 2" if pattern.startswith("every other") else
            ' --window-attn-skip-freq "[' + ",".join(
                "1" if i in layers else "0" for i in range(spec.num_layers)) + ']"')
    return (f"sliding-window attention ({spec.sliding_window} keys, {pattern}) has no "
            f"Megatron-LM core_v0.14.0 flag; core_v0.15.0 and later take --window-size "
            f"{spec.sliding_window},0{freq}")


def _attention_args(spec: ModelSpec) -> list[str]:
    return attention_kind(spec).megatron_args(spec)


def _embedding_args(spec: ModelSpec, training: TrainingSpec, notes: list[str]) -> list[str]:
    seq = training.sequence_length
    positions = max(spec.max_position_embeddings or seq, seq)
    if spec.learned_position_embeddings:
        kind = "learned_absolute"
        if spec.learned_position_embeddings < seq:
            notes.append(f"the learned position table has {spec.learned_position_embeddings} "
                         f"rows but sequence_length={seq}; Megatron-LM needs "
                         f"--max-position-embeddings >= --seq-length, so {positions} rows are "
                         "exported")
    else:
        kind = "rope"
    args = ["--seq-length", str(seq), "--max-position-embeddings", str(positions),
            "--position-embedding-type", kind, "--vocab-size", str(spec.vocab_size)]
    if not spec.tie_word_embeddings:
        args.append("--untie-embeddings-and-output-weights")
    return args


def moe_args(spec: ModelSpec, training: TrainingSpec) -> ModelArgs:
    """Mixture-of-experts flags (none for a dense model)."""
    moe = spec.moe
    if moe is None:
        return ModelArgs(args=(), notes=())
    args = ["--num-experts", str(moe.num_experts),
            "--moe-ffn-hidden-size", str(moe.expert_ffn_hidden_size),
            "--moe-router-topk", str(moe.top_k)]
    notes: list[str] = []
    freq = moe_layer_freq(spec)
    if freq is not None:
        args += ["--moe-layer-freq", freq]
    if moe.shared_expert_ffn_hidden_size:
        args += ["--moe-shared-expert-intermediate-size", str(moe.shared_expert_ffn_hidden_size)]
    if moe.shared_expert_gate:
        notes.append("moe.shared_expert_gate=true (Qwen2-MoE sigmoid gate on the shared expert) "
                     "has no Megatron-LM core_v0.14.0 flag; it needs a custom MoE layer")
    if moe.num_expert_groups > 1:
        args += ["--moe-router-num-groups", str(moe.num_expert_groups),
                 "--moe-router-group-topk", str(moe.topk_groups)]
    args += _router_score_args(moe, notes)
    if moe.capacity_factor is not None:
        args += ["--moe-expert-capacity-factor", f"{moe.capacity_factor:g}"]
    # The grouped expert GEMM and the fused permutation as the plan chose them (the
    # runtime features moe_grouped_gemm and moe_permute_fusion; core_v0.14.0 defaults both off).
    if grouped_gemm_on(training):
        args.append("--moe-grouped-gemm")
    if permute_fused(training):
        args.append("--moe-permute-fusion")
    if dispatcher(training) == MoeDispatcher.DEEPEP:
        args += ["--moe-token-dispatcher-type", "flex", "--moe-enable-deepep"]
    else:
        args += ["--moe-token-dispatcher-type", "alltoall"]
    if training.moe_keep_expert_outputs:
        # core_v0.13.0 and later multiply the router probabilities inside the expert
        # activation (megatron/core/transformer/moe/experts.py: activation_func_with_probs,
        # weighted_bias_swiglu_impl), so the combine is unweighted and keeps no output.
        notes.append("training.moe_keep_expert_outputs=true: Megatron-LM core_v0.13.0 and "
                     "later apply the router probabilities inside the expert activation and "
                     "keep no routed-expert outputs for the combine (memory over-counted)")
    return ModelArgs(args=tuple(args), notes=tuple(notes))


def _router_score_args(moe: MoESpec, notes: list[str]) -> list[str]:
    """`--moe-router-score-function` from the spec (Megatron's default is softmax, so a
    sigmoid router such as Llama 4's top-1 or DeepSeek-V3's must say so: core_v0.14.0
    `TransformerConfig.__post_init__` also refuses top-1 softmax routing without
    `--moe-router-pre-softmax`), the softmax taken before the top-k where the model does not
    renormalise the chosen weights (`MoESpec.router_topk_renormalized`), and the expert bias,
    which core_v0.14.0 allows with sigmoid scores only."""
    args = ["--moe-router-score-function", moe.router_score_function.value]
    softmax = moe.router_score_function == RouterScoreFunction.SOFTMAX
    if softmax and not moe.router_topk_renormalized:
        # Megatron's default softmax runs over the top-k logits (weights summing to one);
        # `--moe-router-pre-softmax` takes the softmax over every expert before the top-k,
        # which is what Hugging Face's `norm_topk_prob: false` computes.
        args.append("--moe-router-pre-softmax")
    if moe.router_bias:
        if moe.router_score_function == RouterScoreFunction.SIGMOID:
            args.append("--moe-router-enable-expert-bias")
        else:
            notes.append("moe.router_bias with softmax scores: Megatron-LM core_v0.14.0 "
                         "takes --moe-router-enable-expert-bias with sigmoid scores only, so "
                         "the routing bias is left out")
    return args


def moe_layer_freq(spec: ModelSpec) -> str | None:
    """The `--moe-layer-freq` value: None when every layer is MoE (the default 1), an integer
    N when layer i is MoE exactly for i mod N == 0, else a Python list expression of 0/1 per
    layer such as "([0]*3+[1]*58)" (Megatron evaluates it).
    """
    moe = spec.moe
    assert moe is not None, "moe_layer_freq needs a mixture-of-experts model"
    pattern = [int(spec.is_moe_layer(index)) for index in range(spec.num_layers)]
    if all(pattern):
        return None
    for period in range(2, spec.num_layers + 1):
        if pattern == [int(index % period == 0) for index in range(spec.num_layers)]:
            return str(period)
    if not moe.dense_layer_indices and moe.layer_freq > 1:
        return _periodic_expression(spec.num_layers, moe.first_dense_layers, moe.layer_freq)
    return _run_length_expression(pattern)


def _periodic_expression(num_layers: int, first_dense: int, period: int) -> str:
    """Leading dense layers, then one MoE layer every `period` layers."""
    repeats, tail = divmod(num_layers - first_dense, period)
    terms = [f"[0]*{first_dense}"] if first_dense else []
    if repeats:
        terms.append(f"([1]+[0]*{period - 1})*{repeats}")
    if tail:
        terms.append("[1]" + (f"+[0]*{tail - 1}" if tail > 1 else ""))
    return "(" + "+".join(terms) + ")"


def _run_length_expression(pattern: list[int]) -> str:
    """A 0/1 list as runs, e.g. [0, 0, 0, 1, 1] -> "([0]*3+[1]*2)"."""
    terms = []
    start = 0
    for index in range(1, len(pattern) + 1):
        if index == len(pattern) or pattern[index] != pattern[start]:
            terms.append(f"[{pattern[start]}]*{index - start}")
            start = index
    return "(" + "+".join(terms) + ")"


__all__ = ["MAKE_VOCAB_SIZE_DIVISIBLE_BY", "ModelArgs", "model_args", "moe_args",
           "moe_layer_freq"]
