"""Step time of one configuration: per-stage F/B/W with exposed communication, the pipeline
makespan, data-parallel synchronisation and the optimizer step.

Owns, by module: `groups` (the mesh's groups as timing sees them), `exposure` (which share
of the traffic defined once in `models.core.traffic` stays exposed), `stage` (one rank's
per-micro-batch work: compute from `models.core.compute`, recomputation, exposure, stalls),
`layer_inputs` (the record a layer's parts are kept under),
`makespan` (the simulated pipeline), `setting` (a configuration with its fabric, groups and
micro-batch count), `step_terms` (each rank's tail and the step's overheads), `assembly`
(the step, its breakdown and FLOP conventions), `bounds` and `policy_bound` (the lower
bounds the search prunes with, beside the exact model they bound). Must not: search, size
memory or define traffic.
"""

from models.core.step_time.assembly import (
    FLOP_CONVENTION,
    PipelineInputs,
    StepEstimate,
    estimate_step,
    pipeline_inputs,
    rank_work_s,
)
from models.core.step_time.bounds import (
    pipeline_makespan_bound,
    simulated_makespan_bound,
    simulation_units,
    step_time_bound,
    step_time_floors_s,
)
from models.core.step_time.exposure import (
    LayerComm,
    expert_all_to_all_s,
    layer_comm,
    zero3_exposed_s,
)
from models.core.step_time.groups import AxisGroup, AxisGroups, axis_groups
from models.core.step_time.makespan import compiled_schedule, pipeline_makespan
from models.core.step_time.policy_bound import WorkTable, policy_work_bound_s, work_table
from models.core.step_time.stage import (
    StageTime,
    TimingKind,
    clear_step_time_cache,
    compute_context,
    kind_layers,
    layer_parts,
    layer_parts_memo,
    stage_time,
    timing_kind,
)

__all__ = [
    "FLOP_CONVENTION",
    "AxisGroup",
    "AxisGroups",
    "LayerComm",
    "PipelineInputs",
    "StageTime",
    "StepEstimate",
    "TimingKind",
    "WorkTable",
    "axis_groups",
    "clear_step_time_cache",
    "compiled_schedule",
    "compute_context",
    "estimate_step",
    "expert_all_to_all_s",
    "kind_layers",
    "layer_comm",
    "layer_parts",
    "layer_parts_memo",
    "pipeline_inputs",
    "pipeline_makespan",
    "pipeline_makespan_bound",
    "simulated_makespan_bound",
    "simulation_units",
    "policy_work_bound_s",
    "rank_work_s",
    "stage_time",
    "step_time_bound",
    "step_time_floors_s",
    "timing_kind",
    "work_table",
    "zero3_exposed_s",
]
