"""Communication of one training step, per mesh axis, with frequency, time and overlap.

Owns: what moves, how often, over which group and link: TP (all-reduce, or all-gather +
reduce-scatter with sequence parallelism), CP (ring K/V P2P, Ulysses all-to-all, USP), EP
(dispatch/combine), PP (stage-boundary activations) and DP (gradients, ZeRO gathers, expert
gradients over expert-DP), per layer pass (`layer.py`, read by `models.core.step_time`) and per
step (`step_traffic`), timed with `models.core.collectives` over the groups of `models.core.mesh`;
gradient sizes from `models.core.params` counts placed by `models.core.layout`.
Must not: decide what is exposed (the step-time model) or count parameters.
"""

from models.core.traffic.context import activation_element_bytes, head_dims
from models.core.traffic.data import bucket_params
from models.core.traffic.items import Frequency, Phase, StepTraffic, TrafficAxis, TrafficItem
from models.core.traffic.pipeline import pp_message_bytes, sends_per_step
from models.core.traffic.step import AxisCollective, axis_collectives, step_traffic
from models.core.traffic.weights import (
    LayerWeights,
    StageWeights,
    layer_weights,
    stage_layers,
    stage_weights,
    total_params,
)

__all__ = [
    "AxisCollective",
    "Frequency",
    "LayerWeights",
    "Phase",
    "StageWeights",
    "StepTraffic",
    "TrafficAxis",
    "TrafficItem",
    "activation_element_bytes",
    "axis_collectives",
    "bucket_params",
    "head_dims",
    "layer_weights",
    "pp_message_bytes",
    "sends_per_step",
    "stage_layers",
    "stage_weights",
    "step_traffic",
    "total_params",
]
