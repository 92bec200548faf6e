"""Scoring a published run's own layout under the cost model.

Owns: `score_published_run`, which fills the one field papers rarely print (the
micro-batch size) with the best predicted value that fits, so benchmarks and calibration
compare like with like. Must not: search other layouts (that is the planner).
"""

from models.catalog import cluster_preset, model_preset
from models.errors import InvalidSpecError
from models.memory import memory_ledger
from models.published import PublishedRun
from models.step_time import StepEstimate, estimate_step

MICRO_BATCH_SIZES = (1, 2, 4, 8)
"""Micro-batch sizes tried when a run does not print its own."""


def score_published_run(run: PublishedRun, *, micro_batch_sizes: tuple[int, ...] | None = None
                        ) -> StepEstimate | None:
    """The fastest fitting estimate of the run's layout over the micro-batch sizes tried
    (the run's own when it prints an iteration time, which pins the batch split); None when
    none fits."""
    spec = model_preset(run.model_preset)
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
