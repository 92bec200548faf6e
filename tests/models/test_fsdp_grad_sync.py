"""FSDP's two implementation settings change its per-step traffic as their sources print:
one all-gather per unit and step (no backward or later forward re-gather) without
resharding after forward, and one gradient reduce-scatter per step (not per micro-batch)
when the gradient sync is deferred to the last backward."""

import pytest

from api_schemas import ClusterSpec, DType, ModelSpec, ParallelConfig, TrainingSpec
from models.catalog.presets import cluster_preset
from models.core.collectives import Collective
from models.core.compute import OpTimes
from models.core.step_time.exposure import DEFERRED_REDUCE, sync_exposed_s
from models.core.traffic import TrafficAxis, stage_weights, step_traffic


def _model_7b_fp16() -> tuple[ModelSpec, TrainingSpec]:
    # 7.5B, the ZeRO paper's running example size (arXiv:1910.02054 Sec. 7).
    model = ModelSpec(num_layers=36, hidden_size=4096, num_attention_heads=32,
                      ffn_hidden_size=4 * 4096, vocab_size=51200, mlp="gelu")
    training = TrainingSpec(global_batch_size=256, sequence_length=2048,
                            param_dtype=DType.FP16, grad_dtype=DType.FP16,
                            compute_dtype=DType.FP16)
    return model, training


def _cluster() -> ClusterSpec:
    return cluster_preset("a100-sxm4-80gb", num_nodes=8)


def _dp_volume(parallel: ParallelConfig) -> tuple[float, int]:
    model, training = _model_7b_fp16()
    traffic = step_traffic(model, training=training, parallel=parallel, cluster=_cluster())
    psi = stage_weights(model, parallel)[0].dense_params
    volume = sum(i.paper_volume_bytes_per_step for i in traffic.of_axis(TrafficAxis.DP))
    return volume / (2 * psi), traffic.num_micro_batches


def test_zero3_without_reshard_gathers_each_unit_once_per_step() -> None:
    """ZeRO Sec. 7.2.2 prints 3 Psi per step for P_os+g+p, 1.5x data parallelism's 2 Psi,
    once per micro-batch pass: a forward gather, a backward re-gather and a reduce-scatter.
    A unit kept gathered from its first forward to the end of the step (Llama 3 Sec. 3.3.2;
    FSDP2 under torch.distributed.pipelining, `set_reshard_after_backward(False)`) needs
    neither re-gather: over m micro-batches it moves m reduce-scatters and one gather."""
    resharded, m = _dp_volume(ParallelConfig(dp=64, zero_stage=3, fsdp=True))
    kept_parallel = ParallelConfig(dp=64, zero_stage=3, fsdp=True,
                                   fsdp_reshard_after_forward=False)
    kept, _ = _dp_volume(kept_parallel)
    assert m == 4
    assert resharded == pytest.approx(3 * m, rel=1e-6)
    assert kept == pytest.approx(m + 1, rel=1e-6)
    model, training = _model_7b_fp16()
    traffic = step_traffic(model, training=training, parallel=kept_parallel,
                           cluster=_cluster())
    gathers = [i for i in traffic.of_axis(TrafficAxis.DP)
               if i.collective == Collective.ALL_GATHER]
    # 36 layers, the embedding and the head: one gather of each unit per step.
    assert len(gathers) == 1 and gathers[0].calls_per_step == 36 + 2


def test_deferred_gradient_sync_reduce_scatters_once_per_step() -> None:
    """With the sync deferred, each unit's gradients are reduce-scattered once after the
    last micro-batch: Psi per step instead of m x Psi, one call per unit."""
    model, training = _model_7b_fp16()
    p = ParallelConfig(dp=64, zero_stage=3, fsdp=True, fsdp_reshard_after_forward=False,
                       fsdp_defer_grad_sync=True)
    traffic = step_traffic(model, training=training, parallel=p, cluster=_cluster())
    m = traffic.num_micro_batches
    psi = stage_weights(model, p)[0].dense_params
    reduce = [i for i in traffic.of_axis(TrafficAxis.DP)
              if i.collective == Collective.REDUCE_SCATTER]
    assert len(reduce) == 1 and reduce[0].calls_per_step == 36 + 2
    assert reduce[0].paper_volume_bytes_per_step == pytest.approx(2 * psi, rel=1e-3)
    volume, _ = _dp_volume(p)
    assert m > 1
    assert volume == pytest.approx(2, rel=1e-3)  # one gather and one reduce-scatter per step


def test_deferred_reduce_scatter_is_exposed_where_the_last_backward_cannot_cover_it() -> None:
    """The deferred reduce-scatters run during the last micro-batch's backward, one unit
    behind it: the step pays at least the last unit's call, and all of what exceeds that
    backward (the per-step reduction rule of `sync_exposed_s`). Before this rule the
    deferred call was booked nowhere and cost nothing."""
    model, training = _model_7b_fp16()
    p = ParallelConfig(dp=64, zero_stage=3, fsdp=True, fsdp_defer_grad_sync=True)
    traffic = step_traffic(model, training=training, parallel=p, cluster=_cluster())
    items = tuple(traffic.of_axis(TrafficAxis.DP))
    (deferred,) = [i for i in items if i.name.endswith(DEFERRED_REDUCE)]
    per_unit = deferred.time_per_step_s / deferred.calls_per_step
    others = sum(sync_exposed_s((i,), overlap=True, num_micro_batches=traffic.num_micro_batches,
                                chunk_times=(OpTimes(),)) for i in items if i is not deferred)
    assert others > 0.0  # the first unit's gather before the step's first forward

    def exposed(backward_s: float) -> float:
        return sync_exposed_s(items, overlap=True, num_micro_batches=traffic.num_micro_batches,
                              chunk_times=(OpTimes(forward_s=1.0, backward_input_s=backward_s),))

    assert exposed(10.0) - others == pytest.approx(per_unit, rel=1e-9)
    short = deferred.time_per_step_s / 2
    assert exposed(short) - others == pytest.approx(deferred.time_per_step_s - short,
                                                    rel=1e-9)
