"""torchtitan's per-op selective checkpointing (`op_sac`): what it keeps and what it redoes
(torchtitan parallelize_llama.py at 9dec370: save every mm output except every second one,
and the attention output; recompute every other op)."""

import pytest

from api_schemas import ElementwiseFusion, RecomputeMode
from api_schemas.parallel import RecomputeModule
from models.catalog.kernels import memory_bound_time_s
from models.catalog.presets import gpu_preset, model_preset
from models.core.activations import LayerActivationContext, layer_activation_bytes
from models.core.compute import (
    ComputeContext,
    _runtime_elementwise_bytes,
    _shape_time,
    layer_compute,
    op_sac_gemms,
)


def test_op_sac_redoes_k_output_and_up_projections_of_llama() -> None:
    # Call order wq, wk, wv, wo, w1, w3, w2: the 2nd, 4th and 6th are recomputed.
    spec = model_preset("llama-3.1-8b")
    ctx = ComputeContext(gpu=gpu_preset("h100-sxm5-80gb"), seq_len=8192, micro_batch_size=1)
    shapes = [(g.m, g.n, g.k) for g in op_sac_gemms(spec, ctx, moe_layer=False)]
    assert shapes == [(8192, 1024, 4096), (8192, 4096, 4096), (8192, 14336, 4096)]


def test_op_sac_recompute_is_those_gemms_and_every_memory_bound_op() -> None:
    spec = model_preset("llama-3.1-8b")
    ctx = ComputeContext(gpu=gpu_preset("h100-sxm5-80gb"), seq_len=8192, micro_batch_size=2,
                         elementwise_fusion=ElementwiseFusion.EAGER)
    lc = layer_compute(spec, 0, ctx)
    gemms = sum(_shape_time(g, g.m, g.n, g.k, ctx)
                for g in op_sac_gemms(spec, ctx, moe_layer=False))
    elementwise = sum(memory_bound_time_s(p.forward, gpu=ctx.gpu)
                      for p in _runtime_elementwise_bytes(spec, ctx).values())
    assert lc.recompute_s((RecomputeModule.OP_SAC,)) == pytest.approx(gemms + elementwise)
    # the attention core is saved by the policy, so it is not redone
    assert lc.recompute_s((RecomputeModule.OP_SAC,)) < lc.recompute_full_s - \
        lc.recompute_module_s[RecomputeModule.CORE_ATTN] + 1e-12


def test_op_sac_keeps_the_input_q_v_attention_output_gate_and_down_output() -> None:
    spec = model_preset("llama-3.1-8b")
    ctx = LayerActivationContext(seq_len=8192, micro_batch_size=1)
    stored = layer_activation_bytes(spec, 0, ctx).stored_bytes(
        RecomputeMode.SELECTIVE, (RecomputeModule.OP_SAC,))
    h, q, kv, f, heads = 4096, 4096, 1024, 14336, 32
    # The layer input, Q and V, the attention output and its statistics, the SwiGLU gate
    # (w1) and the down projection's output (w2): the odd matmuls of wq wk wv wo w1 w3 w2.
    per_token = 2 * h + 2 * (q + kv) + 2 * q + 4 * heads + 2 * f + 2 * h
    assert stored == pytest.approx(8192 * per_token, abs=8)
    plain = layer_activation_bytes(spec, 0, ctx)
    assert plain.total_bytes == plain.stored_bytes(RecomputeMode.NONE)
    assert all("down projection" not in t.name or t.kept_only_by for t in plain.tensors)
