"""Response bodies of the planning endpoints: a plan or an evaluation of one configuration.

Owns: the JSON shape other tools rely on (`status`, `parallel`, `num_micro_batches`,
`memory`, `time`, `throughput`, `alternatives`, `explanation`, `solver`). Must not: compute
anything.
"""

from datetime import datetime
from enum import StrEnum

from pydantic import Field

from api_schemas._base import ResultModel
from api_schemas.exports import PlanExports
from api_schemas.parallel import ParallelConfig
from api_schemas.units import Bytes, Fraction, Seconds


class PlanStatus(StrEnum):
    """How good the answer is under the cost model."""

    OPTIMAL = "optimal"
    """Proven best in the search space."""
    FEASIBLE = "feasible"
    """Best found within the time limit; `solver.gap` bounds how far from optimal."""
    INFEASIBLE = "infeasible"
    """No configuration meets the request; `explanation` says what binds."""
    UNKNOWN = "unknown"
    """The time limit ended the search before it found a plan or proved that none exists;
    `solver.unexamined` counts the candidates left (raise `solver.time_limit_s`). The
    service answers this outcome with 503 solver-time-limit and does not store it."""


class MemoryComponentReport(ResultModel):
    """One named line of a rank's memory ledger."""

    name: str = Field(description="What the bytes hold.")
    kind: str = Field(description="parameters | gradients | optimizer | activations | other")
    bytes: Bytes = Field(description="Size in bytes.")
    note: str = Field(default="", description="How it was sized.")


class StageMemoryReport(ResultModel):
    """Memory of one rank of a pipeline stage."""

    stage: int = Field(description="Pipeline rank.")
    num_layers: int = Field(description="Transformer layers held (both copies under DualPipe).")
    total_bytes: Bytes = Field(description="All GPU bytes.")
    parameters_bytes: Bytes = Field(description="Weights (incl. FP8 copies).")
    gradients_bytes: Bytes = Field(description="Gradient buffers on the GPU.")
    optimizer_bytes: Bytes = Field(description="Master weights, moments, EMA on the GPU.")
    activations_bytes: Bytes = Field(description="Stored activations at the schedule's peak.")
    other_bytes: Bytes = Field(description="Buffers and reserves.")
    host_bytes: Bytes = Field(default=0, description="Host memory this rank uses.")
    in_flight_micro_batches: int = Field(default=0, description="Peak micro-batch x chunk "
                                         "activations held.")
    components: list[MemoryComponentReport] = Field(default_factory=list,
                                                    description="The itemised ledger.")
    host_components: list[MemoryComponentReport] = Field(default_factory=list,
                                                         description="Host-memory items.")


class MemoryMarginPart(ResultModel):
    """One part of the memory a plan holds in reserve."""

    name: str = Field(description="What the part covers.")
    bytes: Bytes = Field(description="Size in bytes.")
    in_peak: bool = Field(description="True: peak_bytes already counts these bytes (a ledger "
                          "line); false: they are kept free under capacity_bytes (the margin).")
    basis: str = Field(description="Where the size comes from.")


class MemoryReport(ResultModel):
    """Per-GPU memory by stage and kind, the capacity and the binding stage."""

    capacity_bytes: Bytes = Field(description="Usable GPU memory after headroom.")
    peak_bytes: Bytes = Field(description="Largest stage total.")
    fits: bool = Field(description="peak_bytes <= capacity_bytes - margin_bytes and host "
                       "memory suffices.")
    margin_bytes: Bytes = Field(default=0, description="Safety margin kept free under "
                                "capacity_bytes for the memory model's validated error "
                                "(cluster.memory_margin_frac of it).")
    margin_frac: float = Field(default=0.0, description="The margin as a share of "
                               "capacity_bytes.")
    limit_bytes: Bytes = Field(default=0, description="capacity_bytes - margin_bytes: the most "
                               "a rank's predicted peak may reach.")
    margin_parts: list[MemoryMarginPart] = Field(
        default_factory=list, description="What the reserve is made of: the margin itself "
        "and the allocator reserves the peak already counts.")
    binding_stage: int = Field(description="Stage with the largest total.")
    host_capacity_per_gpu_bytes: Bytes = Field(default=0, description="Host memory per GPU.")
    host_peak_bytes: Bytes = Field(default=0, description="Largest host use of one rank.")
    stages: list[StageMemoryReport] = Field(description="One entry per pipeline stage.")


class TimeBreakdown(ResultModel):
    """Where one optimizer step's time goes (a deterministic model, not a measurement).

    The terms add up: step_time_s = compute_s + recompute_s + bubble_s +
    sum(exposed_comm_s) + offload_stall_s + optimizer_s + sum(overheads_s)."""

    step_time_s: Seconds = Field(description="Predicted time of one optimizer step.")
    compute_s: Seconds = Field(description="Forward and backward compute of the busiest "
                               "stage, excluding recomputation.")
    recompute_s: Seconds = Field(default=0.0, description="Recomputation.")
    bubble_s: Seconds = Field(default=0.0, description="Pipeline idle time on the critical "
                              "stage.")
    exposed_comm_s: dict[str, float] = Field(default_factory=dict,
                                             description="Communication not hidden behind "
                                             "compute, by axis (tp, cp, ep, pp, dp).")
    offload_stall_s: Seconds = Field(default=0.0, description="Host transfers not hidden.")
    optimizer_s: Seconds = Field(default=0.0, description="Optimizer step.")
    overheads_s: dict[str, float] = Field(default_factory=dict,
                                          description="Per-step terms outside the pipeline "
                                          "and the optimizer, by name (gradient-norm and loss "
                                          "all-reduces, data loading).")
    details: dict[str, float] = Field(default_factory=dict, description="Further figures, "
                                      "not terms of the sum.")


class Throughput(ResultModel):
    """Throughput figures derived from the step time."""

    tokens_per_s: float = Field(description="Training tokens per second, whole cluster.")
    tflops_per_gpu: float = Field(description="Model TFLOP/s per GPU (no recompute).")
    hardware_tflops_per_gpu: float = Field(description="Hardware TFLOP/s per GPU (with "
                                           "recompute).")
    mfu: Fraction = Field(description="Model FLOPs utilisation in `flop_convention`.")
    hfu: float = Field(description="Hardware FLOPs utilisation.")
    flop_convention: str = Field(default="causal attention as the kernels compute it",
                                 description="How model FLOPs count attention.")
    tflops_per_gpu_full_attention: float | None = Field(
        default=None, description="Model TFLOP/s per GPU counting the full attention matrix "
        "(Megatron-LM / PaLM convention).")
    mfu_full_attention: float | None = Field(
        default=None, description="MFU counting the full attention matrix (Megatron-LM / "
        "PaLM convention).")


class RangeSource(ResultModel):
    """A publication (or calibration profile) whose runs back a predicted range."""

    id: str = Field(description="Short name: the publication's id in "
                    "research/data/published_runs.json, or 'profile <name> v<version>'.",
                    examples=["megatron2021"])
    name: str = Field(description="Title of the publication, or the profile in words.")
    rows: int = Field(description="How many of its runs the range uses.")


class PredictedRange(ResultModel):
    """The range a prediction's real value is expected in: the 10th to 90th percentile of
    the cost model's step-time error (measured / predicted - 1) on runs it was not fitted
    on, applied to the prediction, and which runs back it."""

    basis: str = Field(description="'published' (held-out published runs of the GPU family "
                       "and regime), 'profile' (the calibration profile's leave-one-out "
                       "errors), 'transferred' (a family without published runs whose "
                       "kernel levels were carried over from another: that family's range "
                       "widened by the transfer's held-out checks) or 'none' (nothing backs "
                       "a range; `text` says why).")
    low_percentile: float = Field(default=10.0, description="Percentile of the low bound.")
    high_percentile: float = Field(default=90.0, description="Percentile of the high bound.")
    step_time_error_low: float | None = Field(
        default=None, description="The low percentile of measured / predicted step time - 1.")
    step_time_error_high: float | None = Field(
        default=None, description="The high percentile of measured / predicted step time - 1.")
    step_time_s_low: Seconds | None = Field(default=None, description="Low step time.")
    step_time_s_high: Seconds | None = Field(default=None, description="High step time.")
    tokens_per_s_low: float | None = Field(default=None, description="Low tokens/s (at the "
                                           "high step time).")
    tokens_per_s_high: float | None = Field(default=None, description="High tokens/s.")
    mfu_low: float | None = Field(default=None, description="Low MFU.")
    mfu_high: float | None = Field(default=None, description="High MFU (at most 1).")
    expected_coverage: float | None = Field(
        default=None, description="Share of new runs like the backing ones expected inside "
        "the range: (90 - 10)% x (n - 1) / (n + 1) for n runs (order statistics), below 80% "
        "for few runs.")
    regime: str = Field(description="The prediction's regime: GPU kernel family, dense or "
                        "MoE, scale.", examples=["hopper dense, 9 to 256 GPUs"])
    backed_by: str = Field(description="The regime whose runs the range uses (differs from "
                           "`regime` when too few runs matched and it fell back).")
    fallback: bool = Field(default=False, description="Whether it fell back to a wider "
                           "regime.")
    num_rows: int = Field(default=0, description="Runs the range is computed from.")
    sources: list[RangeSource] = Field(default_factory=list,
                                       description="Publications or profile, with run counts.")
    row_ids: list[str] = Field(default_factory=list, description="Ids of the published rows "
                               "used (research/data/published_runs.json).")
    text: str = Field(description="The range and its backing in words.")


class Alternative(ResultModel):
    """A configuration the planner considered and ranked lower."""

    parallel: ParallelConfig = Field(description="The configuration.")
    world_size: int = Field(default=0, description="GPUs it uses (tp x pp x dp x cp).",
                            examples=[1024])
    step_time_s: Seconds | None = Field(default=None, description="Its predicted step time.")
    tokens_per_s: float | None = Field(default=None, description="Its throughput.")
    peak_bytes: Bytes | None = Field(default=None, description="Its peak memory.")
    fits: bool = Field(default=True, description="Whether it fits.")
    delta_frac: float | None = Field(default=None, description="Objective change vs the plan "
                                     "(+0.18 = 18% slower).")
    why_not: str = Field(description="Why it lost.")
    predicted_range: PredictedRange | None = Field(
        default=None, description="Range of its step time and tokens/s (as the plan's).")
    within_band: bool | None = Field(
        default=None, description="Whether its predicted range overlaps the objective "
        "optimum's, so that the cost model cannot tell the two apart (None: not a fitting "
        "plan, or no range backs the prediction).")
    experimental: list[str] = Field(
        default_factory=list, description="Its mechanisms that the frameworks treat as "
        "experimental or that no released framework runs (`frameworks.json`).")


class TiedPlan(ResultModel):
    """A plan the cost model cannot rank against the one shown (within the pairwise band)."""

    parallel: str = Field(description="The configuration in words.")
    step_time_s: Seconds = Field(description="Its predicted step time.")
    delta_frac: float = Field(description="How much worse than the objective optimum under "
                              "the objective (0 for the optimum).")
    memory_margin_bytes: Bytes = Field(description="GPU memory its fullest rank leaves "
                                       "free beyond the safety margin (the memory report's "
                                       "capacity_bytes - margin_bytes - peak_bytes).")
    mechanisms: int = Field(description="Mechanisms it uses (parallelism kinds, schedule, "
                            "sharding, recomputation, overlaps: the framework-table features).")
    frameworks: int = Field(description="Released frameworks that run it as given.")
    shown: bool = Field(default=False, description="Whether it is the plan shown.")


class RobustChoice(ResultModel):
    """How the plan shown was chosen among plans the cost model cannot tell apart: two plans
    whose objectives differ by less than the pairwise band (the error of the predicted ratio
    of two runs on one system) are indistinguishable, and the tie goes to more memory margin,
    then to more common or fewer mechanisms; a plan that uses an experimental mechanism is
    shown only when it wins by more than the model's (absolute) error band."""

    picked: str = Field(description="'optimum' (the plan shown is the objective optimum), "
                        "'robust' (an optimum with an experimental mechanism did not win by "
                        "more than the band, so the best plan without one is shown) or "
                        "'margin' (the shown plan is indistinguishable from a faster one and "
                        "has more memory margin, or as much and more common mechanisms: more "
                        "frameworks run it, or it uses a strict subset of the other's).")
    pairwise_band_frac: float | None = Field(
        default=None, description="Relative objective difference below which the model "
        "cannot rank two plans on this cluster: the 80th percentile of the error of the "
        "predicted ratio of two published runs of one table (or of two runs of the cluster's "
        "calibration profile); None when no band backs the prediction.")
    within_pairwise_band: int = Field(
        default=0, description="Other plans (distinct meshes and schedules, among those the "
        "search scored, without an experimental mechanism) within the pairwise band of the "
        "plan that anchors the tie (the optimum, or the robust choice).")
    tied: list[TiedPlan] = Field(
        default_factory=list, description="The indistinguishable plans, the shown one "
        "included, best objective first (at most 8).")
    band_frac: float | None = Field(
        default=None, description="Relative objective difference below which the optimum's "
        "predicted range overlaps another plan's: (e_high - e_low) / (1 + e_low) of its step-"
        "time error band; None when no range backs the prediction.")
    within_band: int = Field(default=0, description="Other plans (distinct meshes and "
                             "schedules, among those the search scored) within the band of "
                             "the objective optimum.")
    indistinguishable: bool = Field(default=False, description="Whether the plan shown "
                                    "cannot be told apart from another: plans within the "
                                    "pairwise band, or an experimental optimum within the "
                                    "error band of it.")
    optimum_parallel: ParallelConfig | None = Field(
        default=None, description="The objective optimum's configuration (when the plan shown "
        "is not it).")
    optimum_world_size: int = Field(default=0, description="GPUs the objective optimum uses.")
    optimum_step_time_s: Seconds | None = Field(default=None,
                                                description="The objective optimum's step time.")
    optimum_objective: float | None = Field(
        default=None, description="The objective optimum's value (step time s; GPU-seconds per "
        "token for cost; GPUs x 1e6 + step time for fewest GPUs; bytes + s for least memory).")
    delta_frac: float = Field(default=0.0, description="How much worse the plan shown is than "
                              "the optimum under the objective (0 when it is the optimum; for "
                              "fewest GPUs, on the same count: in step time).")
    experimental: list[str] = Field(default_factory=list, description="The optimum's "
                                    "experimental mechanisms.")
    text: str = Field(default="", description="The choice in words.")


RelaxedScalar = bool | int | float | str
RelaxedValue = (RelaxedScalar
                | dict[str, RelaxedScalar | list[RelaxedScalar] | dict[str, list[RelaxedScalar]]])
"""What a relaxation changes a value from or to: a number, or the request's pins."""


class Relaxation(ResultModel):
    """One change to an infeasible request that makes a plan exist, with that plan."""

    change: str = Field(description="What changes: 'num_nodes', 'sequence_length', "
                        "'global_batch_size', 'zero_stage', 'recompute', 'constraints' or "
                        "'target_tokens_per_s' (lowered to what the fastest plan reaches).")
    from_value: RelaxedValue = Field(description="The request's value (a number, or the pins "
                                     "as an object for 'constraints').")
    to_value: RelaxedValue = Field(description="The relaxed value.")
    parallel: ParallelConfig | None = Field(default=None, description="The plan it gives.")
    step_time_s: Seconds | None = Field(default=None, description="That plan's step time.")
    minimal: bool = Field(default=False, description="Proven the smallest such change under "
                          "the model (every smaller value was searched to completion and "
                          "has no plan).")
    proof: str = Field(default="", description="How minimality was shown, or why it was not.")
    text: str = Field(description="The change in words.")
class CostEstimate(ResultModel):
    """What the plan costs at the request's GPU-hour price."""

    gpu_hour_price: float = Field(description="Price of one GPU-hour (the request's "
                                  "constraints.gpu_hour_price).", examples=[2.5])
    cost_per_token: float = Field(description="Price of training on one token: price x GPUs "
                                  "/ 3600 / tokens_per_s.", examples=[1.2e-7])
    cost_per_million_tokens: float = Field(description="cost_per_token x 10^6.",
                                           examples=[0.12])
    cost_per_step: float = Field(description="Price of one optimizer step.", examples=[5.0])


class Explanation(ResultModel):
    """Plain-language reasons."""

    summary: str = Field(description="What was chosen and why.")
    binding_constraints: list[str] = Field(default_factory=list, description="What binds: "
                                           "stage and bytes over or under.")
    notes: list[str] = Field(default_factory=list, description="Assumptions and caveats.")
    relaxations: list[str] = Field(default_factory=list, description="Smallest changes that "
                                   "make an infeasible request feasible or a slow plan faster.")
    relaxation_details: list[Relaxation] = Field(
        default_factory=list, description="The relaxations of an infeasible request, "
        "structured: what changes, from and to, the plan it gives, and whether it is proven "
        "minimal.")


class SearchLimit(ResultModel):
    """One range of the search space and how much of it was searched."""

    name: str = Field(description="The dimension, e.g. 'micro_batch_size'.")
    searched: str = Field(description="What was searched.")
    complete: bool = Field(description="Whether every legal value was searched; when false, "
                           "'optimal' is optimal over the stated range only.")


class RunsOn(ResultModel):
    """A released framework that runs the plan as exported."""

    framework: str = Field(description="'megatron-lm', 'torchtitan' or 'deepspeed'.")
    name: str = Field(description="Display name.")
    version: str = Field(description="The release that adds the last feature the plan needs.")
    features: dict[str, str] = Field(default_factory=dict, description="Each feature the "
                                     "plan uses -> the release that provides it.")


class RuntimeFeatureUse(ResultModel):
    """A runtime feature of the plan (an overlap or the MoE dispatcher): on or off, who
    decided it, and the flag that sets it in each framework that runs the plan."""

    feature: str = Field(description="'overlap_grad_reduce', 'overlap_tp_comm', "
                         "'tp_dgrad_overlap', 'moe_dispatcher:deepep', 'overlap_ep_comm', "
                         "'memory_efficient_norm', 'moe_grouped_gemm', 'moe_permute_fusion' "
                         "or 'optimizer_offload' (the optimizer states in host memory, "
                         "updated on the CPU).")
    on: bool = Field(description="Whether the plan uses it.")
    decided_by: str = Field(description="'request' (the recipe or, for optimizer_offload, "
                            "the constraints or the given configuration fixed it) or "
                            "'planner'.")
    flags: dict[str, str] = Field(default_factory=dict, description="Framework id -> the "
                                  "argument or key that sets it, for the frameworks in "
                                  "runs_on that offer it.")
    why_not: str = Field(default="", description="When off: why (its prerequisites, the "
                         "frameworks that lack it, or the plan it gives).")
    source: str = Field(default="", description="Where the feature and its prerequisites "
                        "are stated.")


class ExpertParallelFigures(ResultModel):
    """The expert-side figures of one plan (`models.core.expert_terms`)."""

    ep: int = Field(description="Expert-parallel degree.")
    step_time_s: float = Field(description="Predicted step time.")
    tokens_per_s: float = Field(description="Predicted tokens per second (whole job).")
    peak_bytes: int = Field(description="Peak GPU memory of the plan's busiest stage.")
    local_experts: int = Field(description="Routed experts each rank holds.")
    tokens_per_expert: float = Field(description="Token-expert assignments each local "
                                     "expert computes per micro-batch.")
    grouped_gemm_efficiency: float = Field(description="Achieved share of the GPU's peak in "
                                           "the experts' up projection at that token count.")
    zero3_expert_gather_bytes_per_pass: int = Field(
        description="Routed-expert weight bytes one rank receives to gather one MoE layer for "
        "one pass under ZeRO-3 / FSDP (0 without ZeRO-3).")
    zero3_expert_gather_bytes_per_step: int = Field(
        description="The same over the step (forward and backward of every micro-batch on "
        "every MoE layer of the rank).")
    exposed_expert_all_to_all_s: float = Field(description="Exposed dispatch and combine "
                                               "time per step ('ep' communication).")
    exposed_expert_gradient_s: float = Field(description="Exposed expert-DP time per step "
                                             "(ZeRO-3 gathers, gradient reductions: 'edp').")


class ExpertParallelComparison(ResultModel):
    """For an MoE plan with EP = 1: the best plan with EP > 1 beside it, and the terms that
    separate them."""

    chosen: ExpertParallelFigures = Field(description="The plan's own figures.")
    best_ep: ExpertParallelFigures | None = Field(
        default=None, description="The best plan with EP > 1 (none when none fits or the "
        "time limit ended first).")
    best_ep_parallel: ParallelConfig | None = Field(default=None, description="Its "
                                                    "configuration.")
    summary: str = Field(description="Why the chosen plan's expert parallelism wins, in words.")


class ContextParallelLayers(ResultModel):
    """How one layer type of the plan runs context parallelism, and what it moves."""

    layer_type: str = Field(description="'linear_attention' (KDA, gated delta rule) or "
                            "'full_attention' (softmax attention, MLA included).")
    layers: int = Field(description="Layers of this type in the model.")
    cp_kind: str = Field(description="'state_passing' (fixed-size state fragments, one "
                         "all-gather per pass) for linear-attention layers; the plan's "
                         "cp_kind (ring, ulysses, usp, all_gather) for full-attention layers.")
    bytes_per_layer_per_step: int = Field(description="Bytes one rank of the reported stage "
                                          "sends for one layer of this type over a step "
                                          "(forward, recomputation and backward of every "
                                          "micro-batch).")
    exposed_s_per_layer: float = Field(description="Time per step of that traffic on the "
                                       "critical path after the overlap it allows, per layer.")
    stage: int = Field(description="The pipeline stage reported (the one with most layers).")


class ExtensionUse(ResultModel):
    """A feature of the plan that no released framework provides."""

    feature: str = Field(description="Feature id, e.g. 'schedule:dualpipe'.")
    origin: str = Field(description="The paper or system it comes from.")


class SolverStats(ResultModel):
    """How the answer was found."""

    wall_time_s: Seconds = Field(description="Search wall time.")
    candidates: int = Field(default=0, description="Configurations in the space.")
    pruned: int = Field(default=0, description="Removed by bounds before evaluation.")
    evaluated: int = Field(default=0, description="Scored with the full cost model.")
    gap: float | None = Field(default=None, description="Relative gap to the proven bound.")
    best_bound: float | None = Field(default=None, description="Proven bound on the objective.")
    incumbent: float | None = Field(default=None, description="The objective value of the "
                                    "search's best plan (the objective optimum when proven).")
    seed_framework: str | None = Field(
        default=None, description="For a wide target (released or 'any'): the framework "
        "whose restricted space was searched first, its best plan seeding the search as "
        "incumbent, so the answer is never worse than that narrower search's.")
    seed_objective: float | None = Field(default=None, description="The seed's objective "
                                         "value (None: no seed, or it found no plan).")
    incumbent_from_seed: bool = Field(default=False, description="Whether the search's best "
                                      "plan is the seed (nothing in the wider space beat it).")
    status: str = Field(default="", description="Search status.")
    unexamined: int = Field(default=0, description="Candidates left unexamined because the "
                            "time limit ran out before any plan was found; when above 0 the "
                            "answer's status is 'unknown', not a proof of infeasibility "
                            "(raise solver.time_limit_s).")
    space: list[SearchLimit] = Field(default_factory=list, description="The ranges searched: "
                                     "'optimal' means optimal over this space.")


class PlanResponse(ResultModel):
    """A plan (POST /v1/plans) or an evaluation (POST /v1/evaluate)."""

    id: str | None = Field(default=None, description="Stored plan id.")
    status: PlanStatus = Field(description="optimal | feasible | infeasible | unknown (out "
                               "of time before any plan or proof).")
    model_name: str = Field(default="", description="The LLM planned for.")
    gpu: str = Field(default="", description="GPU id.")
    world_size: int = Field(default=0, description="GPUs used.")
    parallel: ParallelConfig | None = Field(default=None, description="The configuration.")
    num_micro_batches: int = Field(default=0, description="Micro-batches per step per pipeline.")
    memory: MemoryReport | None = Field(default=None, description="Per-stage memory ledger.")
    time: TimeBreakdown | None = Field(default=None, description="Step-time breakdown.")
    throughput: Throughput | None = Field(default=None, description="Throughput figures.")
    predicted_range: PredictedRange | None = Field(
        default=None, description="Range of the step time, tokens/s and MFU from the cost "
        "model's held-out errors for this GPU family and regime (or the calibration "
        "profile's leave-one-out errors), with the runs that back it.")
    alternatives: list[Alternative] = Field(default_factory=list, description="Ranked "
                                            "alternatives with why_not.")
    explanation: Explanation = Field(description="Why.")
    solver: SolverStats | None = Field(default=None, description="Search statistics.")
    bottleneck: str | None = Field(default=None, description="Largest time term (evaluate).")
    framework_target: str = Field(default="released", description="The framework the plan "
                                  "was searched for ('released': any of megatron-lm, "
                                  "torchtitan, deepspeed).")
    runs_on: list[RunsOn] = Field(default_factory=list, description="Released frameworks that "
                                  "run the configuration as given, each from the release that "
                                  "adds the last feature it needs.")
    expert_parallel: ExpertParallelComparison | None = Field(
        default=None, description="MoE plans with EP = 1: the best plan with EP > 1 beside it "
        "with the terms that separate them.")
    runtime_features: list[RuntimeFeatureUse] = Field(
        default_factory=list, description="The runtime features (overlaps, MoE dispatcher) "
        "the plan turns on or leaves off, each with its flag and why it is off.")
    context_parallel: list[ContextParallelLayers] = Field(
        default_factory=list, description="With CP > 1: per layer type, the CP kind it uses "
        "and its CP traffic per layer per step (a hybrid model's linear-attention layers pass "
        "fixed-size states whatever cp_kind says).")
    extensions: list[ExtensionUse] = Field(default_factory=list, description="Features no "
                                           "released framework provides, with their origin.")
    cost: CostEstimate | None = Field(default=None, description="Cost per token and per step "
                                      "when the request gives constraints.gpu_hour_price.")
    robust_choice: RobustChoice | None = Field(
        default=None, description="Plans within the model's error band of the objective "
        "optimum and which was shown (searched plans only).")
    exports: PlanExports = Field(default_factory=PlanExports, description="Megatron-LM "
                                 "arguments, torchtitan TOML, DeepSpeed JSON.")
    created_at: datetime | None = Field(default=None, description="When it was stored.")


__all__ = [
    "Alternative",
    "ContextParallelLayers",
    "CostEstimate",
    "ExpertParallelComparison",
    "ExpertParallelFigures",
    "Explanation",
    "ExtensionUse",
    "MemoryComponentReport",
    "MemoryMarginPart",
    "MemoryReport",
    "PlanResponse",
    "PlanStatus",
    "PredictedRange",
    "RangeSource",
    "Relaxation",
    "RobustChoice",
    "RunsOn",
    "RuntimeFeatureUse",
    "SearchLimit",
    "SolverStats",
    "StageMemoryReport",
    "Throughput",
    "TiedPlan",
    "TimeBreakdown",
]
