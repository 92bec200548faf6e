"""The notes a plan response carries about the cost model and the chosen plan.

Owns: the notes on the model's resolution and the kernel and calibration profile
(`cost_model_notes`), the plausibility note against published records (`plausibility`), the
CP kind of each layer type (`cp_layer_notes`), the price of a TP overlap the plan runs as
PyTorch's async TP (`async_tp_notes`) and the notes on a searched plan (`chosen_plan_notes`).
Must not: search, score or assemble the response (`solver.api`).
"""

from api_schemas.architecture import ModelSpec
from api_schemas.hardware import ClusterSpec
from api_schemas.parallel import ParallelConfig
from api_schemas.requests import Constraints, PlanRequest
from api_schemas.training import TpOverlapEngine, TrainingSpec
from models.catalog.kernels import profile_for
from models.core.layer_kinds import has_routed_experts
from models.core.linear_attention import cp_layer_note
from models.core.step_time import StepEstimate
from models.evidence.error_bands import cluster_band
from models.evidence.memory_evidence import ledger_evidence
from models.evidence.mfu_records import PlanFigures, plausibility_note
from solver import cpsat
from solver.candidate_eval import ScoredPlan
from solver.chosen_mechanisms import chosen_mechanism_notes
from solver.mechanisms import mechanism_notes


def plausibility(spec: ModelSpec, training: TrainingSpec, cluster: ClusterSpec,
                 est: StepEstimate) -> str:
    """The plan's plausibility note: its MFU and tokens/s per GPU against the closest
    published record of its GPU family, format and kind, with the upper error of the band its
    predicted range uses (`models.evidence.mfu_records.plausibility_note`)."""
    moe = has_routed_experts(spec)
    band = cluster_band(cluster, moe=moe, num_gpus=est.world_size)
    return plausibility_note(PlanFigures(
        gpu_id=cluster.gpu.id, gpu_name=cluster.gpu.name, dtype=training.compute_dtype,
        moe=moe, preset=spec.name, num_gpus=est.world_size,
        mfu_full_attention=est.mfu_full_attention,
        tokens_per_s_per_gpu=est.tokens_per_s / est.world_size, band_high=band.error_high,
        peak_flop_per_s=cluster.gpu.peak_flop_per_s(training.compute_dtype)))


def cp_layer_notes(spec: ModelSpec, parallel: ParallelConfig) -> list[str]:
    """Which CP kind each layer type of a hybrid model uses (none for other models)."""
    note = cp_layer_note(spec, cp=parallel.cp, cp_kind=parallel.cp_kind)
    return [note] if note else []


def async_tp_notes(training: TrainingSpec, parallel: ParallelConfig) -> list[str]:
    """Where the plan runs its TP overlap as PyTorch's async TP (torchtitan), that its step
    time credits the overlap nothing, and what torchtitan measured it at
    (`models.core.runtime_features.userbuffers_tp_overlap`)."""
    if not (training.overlap_tp_comm and parallel.tp > 1 and parallel.sequence_parallel
            and training.tp_overlap_engine == TpOverlapEngine.PYTORCH_ASYNC_TP):
        return []
    return ["TP overlap runs as PyTorch's async TP (torchtitan "
            "parallelism.enable_async_tensor_parallel, compiled): the step time credits it "
            "nothing; torchtitan measured +5.7% to +16.4% tokens/s per GPU with it on five "
            "pairs of its runs (Llama 3.1 8B and 70B, TP 8), so the plan may run that much "
            "faster than predicted"]


def cost_model_notes(resolved_notes: tuple[str, ...], cluster: ClusterSpec) -> list[str]:
    """The notes made while resolving the model, then the kernel efficiencies the cluster's
    GPU family uses and, with a calibration profile, what it scales."""
    notes = list(resolved_notes)
    notes.append("kernel efficiencies: " + profile_for(cluster.gpu).calibration)
    calibration = cluster.calibration
    if calibration is not None:
        version = f" version {calibration.version}" if calibration.version else ""
        source = (f"calibration profile '{calibration.profile}'{version}"
                  if calibration.profile is not None else "cluster.calibration")
        measured = [f"{label} x {value:.4g}" for label, value in (
            ("attention efficiency", calibration.attention_efficiency_scale),
            ("scale-up bandwidth", calibration.intra_node_bandwidth_scale),
            ("scale-out bandwidth", calibration.inter_node_bandwidth_scale)) if value != 1.0]
        if calibration.host_link_bandwidth_bytes_per_s is not None:
            measured.append(f"host link {calibration.host_link_bandwidth_bytes_per_s / 1e9:.4g} "
                            "GB/s per GPU")
        notes.append(f"{source}: GEMM efficiency x {calibration.gemm_efficiency_scale:.4g} "
                     f"of the values above, {calibration.step_overhead_s:.4g} s fixed "
                     "overhead per step"
                     + (f", MoE layer host issue {calibration.moe_host_issue_s * 1e3:.4g} ms"
                        if calibration.moe_host_issue_s is not None else "")
                     + (f"; from microbenchmarks: {', '.join(measured)}" if measured else ""))
    return notes


def chosen_plan_notes(request: PlanRequest, spec: ModelSpec, training: TrainingSpec,
                       cluster: ClusterSpec, best: ScoredPlan, constraints: Constraints,
                       config: cpsat.SolverConfig, deadline: float) -> list[str]:
    """The notes on the chosen plan: its plausibility against published records, the
    ledger's evidence, its CP layers, the mechanisms it uses and those the search chose."""
    notes = [plausibility(spec, training, cluster, best.estimate)]
    notes += ledger_evidence(training, best.parallel, is_moe=has_routed_experts(spec))
    notes += cp_layer_notes(spec, best.parallel)
    notes += async_tp_notes(training, best.parallel)
    notes += mechanism_notes(spec, training, best.parallel, cluster, best.estimate,
                             best.ledger)
    notes += chosen_mechanism_notes(spec, request.training, cluster, best, constraints, config,
                                    deadline=deadline)
    return notes


__all__ = ["async_tp_notes", "chosen_plan_notes", "cost_model_notes", "cp_layer_notes",
           "plausibility"]
