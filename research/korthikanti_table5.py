"""Korthikanti et al. 2022 (arXiv:2205.05198) Table 5, term by term.

Run: PYTHONPATH=. .venv/bin/python research/korthikanti_table5.py

Prints, for each Table 5 row evaluated as published (`validate_published.as_published_estimate`):
the configuration evaluated (Table 3: TP, PP, micro-batch, global batch; the chunks
`as_published.json` gives), the model's step breakdown, the per-micro-batch time of the
first, a middle and the last pipeline rank, one layer's forward and backward, and the
per-layer utilisation the printed step implies when every term of the model's step scales
with the layer. Two what-ifs, neither in the model: the 1T pipeline interleaved in two chunks
(one layer each, the only other split of two layers a stage), and the wait for the slowest
GPU taken over the ranks' own compute rather than their mean (`heterogeneous_wait_s`).
research/CALIBRATION.md ("Korthikanti et al. Table 5, term by term") quotes this output.

Owns: these printouts and `heterogeneous_wait_s`. Must not: change a setting of a row or
a constant of the model (the rows are validation-only).
"""

from statistics import NormalDist
from typing import Any

import numpy as np

from api_schemas import PipelineSchedule
from models.catalog.kernels import PROFILES
from models.core.collectives.fabric import fabric_of
from models.core.step_time import StepEstimate, estimate_step
from models.core.step_time.groups import axis_groups
from models.core.step_time.stage import _layer_terms, layer_parts
from models.core.step_time.variability import GPU_SPEED_CV
from research import validate_published as vp

PREFIX = "korthikanti2022-t5-"
A100_PEAK_FLOP_S = 312e12
"""Korthikanti et al. Sec. 6 (and arXiv:2104.04473 Sec. 5): the A100's 16-bit peak."""


def table5_rows() -> list[dict[str, Any]]:
    """The eight Table 5 rows of research/data/published_runs.json, in file order."""
    return [r for r in vp.DATA["runs"] if r["id"].startswith(PREFIX)]


def _spec_and_config(row: dict[str, Any]) -> tuple[Any, Any, Any]:
    spec = vp.model_of(row)
    config = vp.as_published_config(row)
    settings = vp.as_published_settings(row) or {}
    if spec is None or config is None:
        raise ValueError(f"{row['id']} is not evaluated as published")
    if "linear_bias" in settings:
        spec = spec.model_copy(update={"linear_bias": settings["linear_bias"][0]})
    return spec, config[0], config[1]


def configuration(row: dict[str, Any]) -> dict[str, int]:
    """The layout the row is evaluated in: TP, PP, chunks per rank, micro-batch, micro-batches
    per step and transformer layers per rank (Table 3 plus `as_published.json`)."""
    spec, parallel, _ = _spec_and_config(row)
    batch = row["parallel"]["global_batch_size"]
    return {"tp": parallel.tp, "pp": parallel.pp, "vpp": parallel.vpp,
            "micro_batch": parallel.micro_batch_size,
            "micro_batches": batch // (parallel.micro_batch_size * parallel.dp),
            "layers_per_rank": spec.num_layers // parallel.pp}


def layer_ms(row: dict[str, Any]) -> tuple[float, float]:
    """(forward, backward) of one transformer layer and micro-batch in ms, recomputation and
    exposed TP communication included (the quantity of Korthikanti et al. Table 4)."""
    spec, parallel, training = _spec_and_config(row)
    cluster = vp.row_cluster(row)
    groups = axis_groups(parallel, gpus_per_node=cluster.gpus_per_node)
    parts = layer_parts(spec, training, parallel, cluster, 0, fabric=fabric_of(cluster),
                        groups=groups)
    op = _layer_terms(*parts, mode=parallel.recompute, cast=0.0,
                      modules=parallel.recompute_modules).op
    return 1e3 * op.forward_s, 1e3 * (op.backward_input_s + op.backward_weight_s)


def estimate(row: dict[str, Any], vpp: int | None = None) -> StepEstimate:
    """The model's step for the row as published, or with `vpp` interleaved chunks."""
    spec, parallel, training = _spec_and_config(row)
    if vpp is not None:
        parallel = parallel.model_copy(update={
            "vpp": vpp, "schedule": (PipelineSchedule.INTERLEAVED_1F1B if vpp > 1
                                     else PipelineSchedule.ONE_F_ONE_B)})
    return estimate_step(spec, training, parallel, vp.row_cluster(row))


def rank_ms(est: StepEstimate) -> list[float]:
    """Per micro-batch busy time of each pipeline rank in ms: compute, recomputation and
    exposed per-micro-batch communication."""
    return [1e3 * (st.compute_s + st.recompute_s + sum(st.exposed_comm_s.values()))
            for st in est.stages]


def heterogeneous_wait_s(compute_s: list[float], gpus_per_rank: int, micro_batches: int,
                         cv: float = GPU_SPEED_CV) -> float:
    """What-if, not the model's term: the wait for the slowest GPU when a pipeline advances at
    the pace of its slowest rank and each rank at the pace of the slowest of its own GPUs.

    Each rank r of per-micro-batch compute c_r runs at c_r (1 + cv Z_max) with Z_max the
    largest of `gpus_per_rank` standard normal draws (the mechanism and cv of
    `models.core.step_time.variability`, Sinha et al. SC'22); the pipeline's period is the
    largest over ranks, so the wait per micro-batch is E[max_r c_r (1 + cv Z_max,r)] - max_r c_r,
    integrated on a grid of 0.001 standard deviations. With equal ranks it is the model's own
    term, cv E[max of ranks x gpus_per_rank] c (Tippett 1925; `test_korthikanti_table5.py`).
    """
    c = np.asarray(compute_s, dtype=float)
    top = float(c.max())
    x = top * (1.0 + cv * np.linspace(-12.0, 12.0, 24001))
    cdf = np.ones_like(x)
    normal = np.vectorize(NormalDist().cdf)
    for value in np.unique(c):
        count = int(np.sum(c == value))
        cdf *= normal((x / value - 1.0) / cv) ** (gpus_per_rank * count)
    expected_max = float(x[0] + np.trapezoid(1.0 - cdf, x))
    return micro_batches * (expected_max - top)


def implied_layer_utilisation(row: dict[str, Any]) -> tuple[float, float]:
    """(model, implied) share of the 16-bit peak one layer runs at: the layer's hardware FLOPs
    per GPU (with selective recomputation Korthikanti et al. Eq. 8 per layer, 72 b s h^2
    (1 + s/(3h)) / t; with full recomputation arXiv:2104.04473 Eq. 3 per layer, 96 b s h^2
    (1 + s/(6h)) / t) over the model's layer time, and over
    that time scaled by printed / predicted step (every term of the step taken to scale
    with the layer)."""
    spec, parallel, training = _spec_and_config(row)
    b, s, h, t = parallel.micro_batch_size, training.sequence_length, spec.hidden_size, parallel.tp
    full = parallel.recompute.value == "full"
    flop = (96 * b * s * h * h * (1 + s / (6 * h)) if full
            else 72 * b * s * h * h * (1 + s / (3 * h))) / t
    forward, backward = layer_ms(row)
    model_s = (forward + backward) / 1e3
    scale = row["measured"]["iteration_time_s"] / estimate(row).step_time_s
    peak = A100_PEAK_FLOP_S
    return flop / model_s / peak, flop / (model_s * scale) / peak


def _print_row(row: dict[str, Any]) -> None:
    est = estimate(row)
    printed = row["measured"]["iteration_time_s"]
    print(f"{row['id']}: printed {printed:.2f} s, predicted {est.step_time_s:.2f} s "
          f"({100 * (printed / est.step_time_s - 1):+.1f}%), configuration {configuration(row)}")
    for name, value in est.breakdown_s.items():
        if value > 0.0005:
            print(f"    {name:28s} {value:8.3f} s {100 * value / est.step_time_s:5.1f}%")
    ranks = rank_ms(est)
    forward, backward = layer_ms(row)
    model, implied = implied_layer_utilisation(row)
    print(f"    per micro-batch: first rank {ranks[0]:.1f} ms, middle {ranks[len(ranks) // 2]:.1f}"
          f", last {ranks[-1]:.1f}; one layer {forward:.2f} + {backward:.2f} ms; layer at "
          f"{100 * model:.1f}% of peak, {100 * implied:.1f}% implied by the printed step")
    if est.num_micro_batches > 1 and len(est.stages) > 1:
        compute = [st.compute_s + st.recompute_s for st in est.stages]
        gpus = est.world_size // len(compute)
        wait = heterogeneous_wait_s(compute, gpus, est.num_micro_batches)
        booked = est.overheads_s.get("wait for the slowest GPU", 0.0)
        print(f"    wait for the slowest GPU {booked:.2f} s; over each rank's own compute "
              f"{wait:.2f} s (step {est.step_time_s - booked + wait:.2f} s, "
              f"{100 * (printed / (est.step_time_s - booked + wait) - 1):+.1f}%)")


def main() -> None:
    print(f"A100 GEMM level (eta_max) {PROFILES['ampere'].gemm_peak_frac}")
    for row in table5_rows():
        _print_row(row)
    for row in table5_rows():
        if row["id"].startswith(PREFIX + "1t-"):
            est = estimate(row, vpp=2)
            printed = row["measured"]["iteration_time_s"]
            print(f"what-if {row['id']} in two chunks a rank: {est.step_time_s:.2f} s "
                  f"({100 * (printed / est.step_time_s - 1):+.1f}%), bubble "
                  f"{est.bubble_s:.2f} s")


if __name__ == "__main__":
    main()
