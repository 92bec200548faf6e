"""Exposure of DeepSpeed ZeRO-3 as its 2021 releases run it (v0.3.14 to v0.4.4; the runtime
profile `TrainingSpec.zero3_collectives: per_parameter`).

Owns: what one layer's ZeRO-3 traffic adds to its forward, recomputed forward and backward
under that runtime, and the step's re-gather of the persistent parameters. Must not: define
the calls (`models.core.traffic.layer.zero3_unit_calls`) or the runtime's facts
(`models.core.deepspeed_2021`).

Mechanism (DeepSpeed `deepspeed/runtime/zero/stage3.py`, read at v0.3.13, v0.3.14 and
v0.4.4): each module's pre-forward and pre-backward hook fetches its parameters and then
waits for every gather in flight and for the whole device (`_synchronize_communication`:
`comm_stream.synchronize()`, `torch.cuda.synchronize()`); it would then prefetch the next
parameters of the trace recorded in the first step (`prefetch_next_sub_modules`), but from
v0.3.14 to v0.4.4 that trace is one step ahead of the step counter at every module
(`models.core.deepspeed_2021.forward_step_ids`), so nothing is prefetched and nothing is
kept for a near reuse: each gather is issued at its own module's hook, waited for, and only
then does the module compute. Gradients are all-reduced on the reduction stream
(`overlap_comm` on by default for stage 3) as each bucket fills during a module's backward,
beside that module's compute; the next fetch's synchronise waits for it.
"""

from api_schemas import Zero3Collectives
from api_schemas.architecture import ModelSpec
from api_schemas.parallel import ParallelConfig
from api_schemas.training import TrainingSpec
from models.core.collectives import Collective
from models.core.compute import LayerCompute
from models.core.deepspeed_2021 import gather_issue_s, persistent_regather_s
from models.core.mesh import DeviceMesh, GroupKind
from models.core.traffic.context import group_placement
from models.core.traffic.items import Phase
from models.core.traffic.layer import LayerCall

PERSISTENT_REGATHER = "ZeRO-3 persistent-parameter re-gather (DeepSpeed 2021)"
"""Name, in `overheads_s`, of the step's synchronous re-gather of the persistent parameters
(`persistent_regather_step_s`)."""


def runtime_2021(training: TrainingSpec, parallel: ParallelConfig) -> bool:
    """Whether a ZeRO-3 plan runs DeepSpeed's 2021 runtime (no FSDP units, per-parameter
    collectives)."""
    return (parallel.zero_stage == 3 and not parallel.fsdp
            and training.zero3_collectives == Zero3Collectives.PER_PARAMETER)


def _issue_s(calls: list[LayerCall], phase: Phase) -> float:
    """Host time to issue the phase's gathers: `gather_issue_s` per gathered tensor."""
    return sum(c.count * gather_issue_s(c.placement.group_size) for c in calls
               if c.phase == phase and c.collective == Collective.ALL_GATHER)


def _wire_s(calls: list[LayerCall], phase: Phase, collective: Collective) -> float:
    return sum(c.time_s for c in calls if c.phase == phase and c.collective == collective)


def _gathers_s(calls: list[LayerCall], phase: Phase) -> float:
    """Host issue plus wire time of the phase's gathers, none of it hidden: with no prefetch
    (`forward_step_ids`) each is issued at its module's hook and waited for before the
    module computes."""
    return _issue_s(calls, phase) + _wire_s(calls, phase, Collective.ALL_GATHER)


def layer_exposed_s(calls: list[LayerCall], lc: LayerCompute) -> tuple[float, float, float]:
    """(forward, backward, recomputed forward) exposed ZeRO-3 time of one layer pass: in each
    phase its gathers whole (`_gathers_s`); in backward also what the gradient all-reduces
    take beyond the phase's compute (each runs beside the backward of the module whose
    gradients close its bucket, on the reduction stream).
    Assumes: a layer's all-reduces hide behind the layer's backward compute taken whole."""
    window_b = lc.times.backward_input_s + lc.times.backward_weight_s
    reduce_s = sum(c.time_s for c in calls
                   if c.phase == Phase.BACKWARD and c.collective != Collective.ALL_GATHER)
    return (_gathers_s(calls, Phase.FORWARD),
            _gathers_s(calls, Phase.BACKWARD) + max(0.0, reduce_s - window_b),
            _gathers_s(calls, Phase.RECOMPUTE))


def persistent_regather_step_s(spec: ModelSpec, training: TrainingSpec,
                               parallel: ParallelConfig, mesh: DeviceMesh) -> dict[str, float]:
    """The step's re-gather of the persistent parameters of the rank's layers
    (`models.core.deepspeed_2021.persistent_regather_s`) as a named per-step term; none
    outside the 2021 runtime or without data-parallel sharding. `mesh` is the
    configuration's rank layout (`AxisGroups.mesh`)."""
    if not runtime_2021(training, parallel) or parallel.dp * parallel.cp <= 1:
        return {}
    group = group_placement(mesh, GroupKind.DP_CP).group_size
    layers = -(-spec.num_layers // parallel.pp)
    return {PERSISTENT_REGATHER: persistent_regather_s(spec, layers=layers, tp=parallel.tp,
                                                       group_size=group)}


__all__ = [
    "PERSISTENT_REGATHER",
    "layer_exposed_s",
    "persistent_regather_step_s",
    "runtime_2021",
]
