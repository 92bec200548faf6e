"""Per layer type, the context-parallel kind a plan uses and what it moves per layer and step.

Owns: reading the CP items of `models.core.traffic.step.step_traffic` for the plan's fullest stage
and splitting them by layer type: the state-passing calls of the linear-attention layers
(`models.core.traffic.layer.state_passing_calls`, named `cp.state.*`) and the K/V exchange of
the full-attention layers (`models.core.traffic.layer.cp_calls` under the plan's `cp_kind`).
Must not: size or time a call (the traffic rules do), or decide which kind a layer takes
(`models.core.linear_attention.cp_kinds_for_layer`).

Source: seed ledger Sec. 7.5 (K3 runs KCP on its KDA layers, one all-gather of fixed-size
fragments, and keeps other CP mechanisms for the MLA layers of the same model);
flash-linear-attention `fla/ops/cp` (the fragment buffer).
"""

from api_schemas.architecture import ModelSpec
from api_schemas.hardware import ClusterSpec
from api_schemas.parallel import ParallelConfig
from api_schemas.plan import ContextParallelLayers
from api_schemas.training import TrainingSpec
from models.core.frameworks import effective_cp_kind
from models.core.linear_attention import STATE_PASSING
from models.core.traffic.items import TrafficAxis
from models.core.traffic.step import step_traffic
from models.core.traffic.weights import stage_weights
from models.errors import InvalidSpecError

STATE_ITEM_PREFIX = "cp.state."
"""Name prefix of the linear-attention layers' CP items (`models.core.traffic.layer`)."""


def context_parallel_layers(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                            cluster: ClusterSpec) -> list[ContextParallelLayers]:
    """For a plan with cp > 1, one entry per layer type present on its fullest stage: the
    layer type, the model's count of such layers, the CP kind, and the bytes one rank sends
    and the exposed time per layer of that type over one step. Empty with cp = 1."""
    if parallel.cp <= 1:
        return []
    try:
        traffic = step_traffic(spec, training=training, parallel=parallel, cluster=cluster)
    except InvalidSpecError:  # a mesh the evaluation refuses has no traffic to report
        return []
    stage = stage_weights(spec, parallel)[traffic.stage]
    linear_here = stage.num_linear_attention_layers
    counts = {"linear_attention": sum(spec.is_linear_attention_layer(i)
                                      for i in range(spec.num_layers))}
    counts["full_attention"] = spec.num_layers - counts["linear_attention"]
    on_stage = {"linear_attention": linear_here,
                "full_attention": stage.num_layers - linear_here}
    kinds = {"linear_attention": STATE_PASSING,
             "full_attention": effective_cp_kind(parallel.cp, parallel.cp_kind,
                                                 parallel.ulysses_degree).value}
    sent = dict.fromkeys(kinds, 0)
    exposed = dict.fromkeys(kinds, 0.0)
    for item in traffic.items:
        if item.axis != TrafficAxis.CP:
            continue
        kind = ("linear_attention" if item.name.startswith(STATE_ITEM_PREFIX)
                else "full_attention")
        sent[kind] += item.bytes_sent_per_rank_per_step
        exposed[kind] += item.exposed_time_per_step_s
    return [ContextParallelLayers(layer_type=kind, layers=counts[kind], cp_kind=kinds[kind],
                                  bytes_per_layer_per_step=sent[kind] // on_stage[kind],
                                  exposed_s_per_layer=exposed[kind] / on_stage[kind],
                                  stage=traffic.stage)
            for kind in ("linear_attention", "full_attention") if on_stage[kind]]


__all__ = ["STATE_ITEM_PREFIX", "context_parallel_layers"]
