"""An upper bound on the training throughput any plan can reach, checked before a search.

Owns: `peak_tokens_per_s`, the tokens per second of a cluster whose every GPU runs at its
highest dense peak FLOP/s and does nothing but the model's own forward and backward FLOPs
(causal attention, no recomputation, no communication, no bubble). Every plan the cost
model scores needs at least that work at no more than that rate, so a throughput target
above the bound cannot be met and is refused at once. Must not: search, or estimate any
real step time (the cost model does).
"""

from api_schemas.architecture import ModelSpec
from api_schemas.hardware import ClusterSpec
from models.core.flops import model_forward_flops

BACKWARD_TO_FORWARD = 2.0
"""A backward pass costs two forwards (input and weight gradients), as in the cost model."""


def peak_tokens_per_s(spec: ModelSpec, cluster: ClusterSpec, *, sequence_length: int,
                      gpus: int) -> float:
    """Tokens per second no plan on `gpus` GPUs of `cluster` can exceed.

    Args:
        spec: the model.
        cluster: the hardware; its highest dense peak over all formats is used.
        sequence_length: tokens per training sequence.
        gpus: GPUs the plan may use.
    """
    forward = model_forward_flops(spec, seq_len=sequence_length, causal=True)
    flop_per_token = (1.0 + BACKWARD_TO_FORWARD) * forward / sequence_length
    peak = max(cluster.gpu.dense_peak_flop_per_s.values())
    return gpus * peak / flop_per_token


__all__ = ["BACKWARD_TO_FORWARD", "peak_tokens_per_s"]
