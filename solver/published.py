"""Scoring a published run's own layout under the cost model.

Owns: `score_published_run`, which fills the one field papers rarely print (the
micro-batch size) with the best predicted value that fits, so benchmarks and calibration
compare like with like. Must not: search other layouts (that is the planner).
"""

from api_schemas.parallel import ParallelConfig
from models.catalog.presets import cluster_preset
from models.core.memory import memory_ledger
from models.core.step_time import StepEstimate, estimate_step
from models.errors import InvalidSpecError
from models.evidence.published import PublishedRun, run_model
from solver.explain import describe_policy

MICRO_BATCH_SIZES = (1, 2, 4, 8)
"""Micro-batch sizes tried when a run does not print its own."""


def score_published_run(run: PublishedRun, *, micro_batch_sizes: tuple[int, ...] | None = None
                        ) -> StepEstimate | None:
    """The fastest fitting estimate of the run's layout over the micro-batch sizes tried
    (the run's own when it prints an iteration time, which pins the batch split); None when
    none fits."""
    spec = run_model(run)
    cluster = cluster_preset(run.gpu, num_nodes=run.num_nodes, gpus_per_node=run.gpus_per_node)
    if micro_batch_sizes is None:
        micro_batch_sizes = ((run.parallel.micro_batch_size,) if run.printed_iteration_time_s
                             else MICRO_BATCH_SIZES)
    best = None
    for mbs in micro_batch_sizes:
        parallel = run.parallel.model_copy(update={"micro_batch_size": mbs})
        try:
            if not memory_ledger(spec, run.training, parallel, cluster).fits:
                continue
            estimate = estimate_step(spec, run.training, parallel, cluster)
        except InvalidSpecError:
            continue
        if best is None or estimate.step_time_s < best.step_time_s:
            best = estimate
    return best


__all__ = ["MICRO_BATCH_SIZES", "score_published_run"]


def difference_text(published: ParallelConfig, published_est: StepEstimate,
                    planned: ParallelConfig, planned_est: StepEstimate) -> str:
    """Where the planner's layout differs from the published one and which time terms
    account for the difference."""
    fields = ("tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch_size", "schedule",
              "zero_stage", "sequence_parallel")
    changes = [f"{name} {getattr(published, name)} -> {getattr(planned, name)}"
               for name in fields if getattr(published, name) != getattr(planned, name)]
    if describe_policy(published) != describe_policy(planned):
        changes.append(f"activations: {describe_policy(published)} -> {describe_policy(planned)}")
    terms = {"compute": (published_est.compute_s, planned_est.compute_s),
             "recompute": (published_est.recompute_s, planned_est.recompute_s),
             "pipeline bubble": (published_est.bubble_s, planned_est.bubble_s),
             "optimizer": (published_est.optimizer_s, planned_est.optimizer_s)}
    for axis in set(published_est.exposed_comm_s) | set(planned_est.exposed_comm_s):
        terms[f"exposed {axis.upper()} communication"] = (
            published_est.exposed_comm_s.get(axis, 0.0), planned_est.exposed_comm_s.get(axis, 0.0))
    for name in set(published_est.overheads_s) | set(planned_est.overheads_s):
        terms[name] = (published_est.overheads_s.get(name, 0.0),
                       planned_est.overheads_s.get(name, 0.0))
    moves = sorted(((after - before, name) for name, (before, after) in terms.items()),
                   key=lambda item: item[0])
    saved = [f"{name} {delta:+.2f} s" for delta, name in moves if delta < -1e-3][:3]
    delta = planned_est.step_time_s / published_est.step_time_s - 1
    if not changes:
        return "the planner keeps the published layout"
    return (f"{delta:+.1%} step time; changes: " + ", ".join(changes)
            + ("; largest savings: " + ", ".join(saved) if saved else ""))


__all__ += ["difference_text"]
