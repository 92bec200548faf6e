"""The per-step work after the last micro-batch under DeepSpeed's pipeline engine that the
rows running it charge: the tied embedding gradient's all-reduce between the end stages, in
the dtype the engine holds that gradient in (deepspeed/runtime/pipe/engine.py
`_exec_reduce_tied_grads` at v0.5.0, v0.6.1, v0.6.5), and the 16-bit data-parallel gradient
reduction of DeepSpeed's fp16 ZeRO stage 1 (zero/stage2.py v0.5.0, stage_1_and_2.py v0.6.1)."""

from typing import Any

import pytest

from api_schemas import PipeEngineP2P, TrainingSpec
from api_schemas.dtypes import DType
from models.core.step_time import estimate_step
from models.core.traffic.items import TrafficItem
from models.core.traffic.pipeline import tied_grad_bytes
from models.core.traffic.step import step_traffic
from research import validate_published as vp

BLOOM = "bloom-176b-epoch1"
MTNLG = "mtnlg-530b-2240gpu"
BLOOM_TIED_GRAD = 250_880 // 4 * 14_336 * 4
"""BLOOM's tied gradient per TP rank in fp32: tr11-176B-ml.slurm's --pad-vocab-size-to
250880 over TP_SIZE=4, times NHIDDEN=14336, times 4 bytes (BF16Optimizer's `_hp_grad`)."""
JEAN_ZAY_GPU_BYTES_PER_S = 2.53e9
"""Jean Zay's scale-out link per GPU as its team measured NCCL on it: 5.07 GB/s through each
of 4 Omni-Path NICs per node of 8 A100 (as_published.json, the bloom- block)."""


def _row(row_id: str) -> dict[str, Any]:
    return next(r for r in vp.DATA["runs"] if r["id"] == row_id)


def _items(row_id: str, stage: int) -> tuple[TrafficItem, ...]:
    row = _row(row_id)
    spec, config = vp.as_published_model(row), vp.as_published_config(row)
    assert spec is not None and config is not None
    parallel, training = config
    return step_traffic(spec, training=training, parallel=parallel, cluster=vp.row_cluster(row),
                        stage=stage).items


def test_the_tied_gradient_travels_in_the_dtype_its_runtime_holds_it_in() -> None:
    """The runtime's gradient (`grad_dtype`: Megatron-LM's main gradient, DeepSpeed's
    `.grad`), except BF16Optimizer's fp32 `_hp_grad` under DeepSpeed's engine."""
    base = TrainingSpec(global_batch_size=8, sequence_length=2048)
    fp16 = base.model_copy(update={"grad_dtype": DType.FP16})
    assert tied_grad_bytes(base) == base.grad_dtype.num_bytes == 4
    assert tied_grad_bytes(fp16) == 2
    engine = {"pipe_engine_p2p": PipeEngineP2P.DEEPSPEED_PARTITIONED}
    assert tied_grad_bytes(fp16.model_copy(update=engine)) == 2
    assert tied_grad_bytes(fp16.model_copy(update={**engine, "bf16_hp_grad_update": True})) == 4
    assert tied_grad_bytes(fp16.model_copy(update={"bf16_hp_grad_update": True})) == 2


def test_bloom_all_reduces_the_fp32_tied_gradient_between_its_end_stages_only() -> None:
    """3,596,615,680 bytes per TP rank between stage 0 and stage 11, once per step, after
    the last backward: about 1.42 s on Jean Zay's 2.53 GB/s per GPU (a two-rank all-reduce
    moves the whole message once each way)."""
    for stage in (0, 11):
        tied = [i for i in _items(BLOOM, stage) if i.name == "pp.embedding_grad.all_reduce"]
        assert len(tied) == 1 and tied[0].calls_per_step == 1
        assert tied[0].message_bytes == BLOOM_TIED_GRAD == 3_596_615_680
        assert tied[0].overlap_frac == 0.0
        assert tied[0].time_per_step_s == pytest.approx(
            BLOOM_TIED_GRAD / JEAN_ZAY_GPU_BYTES_PER_S, rel=0.02)
    assert not [i for i in _items(BLOOM, 1) if "embedding" in i.name]


def test_the_bloom_step_grows_by_that_all_reduce() -> None:
    """The end stages' tail is the critical one: the step grows by the whole all-reduce
    against the same row on the untied architecture (`model_of`)."""
    row = _row(BLOOM)
    tied, spec, config = (vp.as_published_estimate(row), vp.model_of(row),
                          vp.as_published_config(row))
    assert tied is not None and spec is not None and config is not None
    assert not spec.tie_word_embeddings
    untied = estimate_step(spec, config[1], config[0], vp.row_cluster(row))
    assert tied.step_time_s - untied.step_time_s == pytest.approx(
        BLOOM_TIED_GRAD / JEAN_ZAY_GPU_BYTES_PER_S, rel=0.02)


def test_fp16_zero1_rows_reduce_sixteen_bit_gradients_and_bf16_keeps_fp32() -> None:
    """MT-NLG's and GLM-130B's fp16 ZeRO-1 reduce the 16-bit `.grad`; BLOOM's BF16Optimizer
    reduces its fp32 gradient (cast to bf16 for the all-reduce, the volume of an fp32
    reduce-scatter)."""
    settings = {r: vp.as_published_config(_row(r)) for r in (MTNLG, "glm130b-768gpu-gbs4224",
                                                              BLOOM)}
    grads = {r: c[1].grad_dtype for r, c in settings.items() if c is not None}
    assert grads == {MTNLG: DType.FP16, "glm130b-768gpu-gbs4224": DType.FP16,
                     BLOOM: DType.FP32}
    reduce = next(i for i in _items(MTNLG, 34) if i.name == "dp.grad_reduce_scatter")
    gather = next(i for i in _items(MTNLG, 34) if i.name == "dp.param_all_gather")
    assert reduce.message_bytes * reduce.calls_per_step == pytest.approx(
        gather.message_bytes * gather.calls_per_step, rel=1e-3)
