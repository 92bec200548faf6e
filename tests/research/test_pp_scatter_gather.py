"""Megatron-LM's scatter/gather of stage-boundary tensors (Narayanan et al. 2021,
arXiv:2104.04473, Sec. 4.1) as a stated setting of the Megatron-LM rows of 2021-2022:
each of the t TP ranks sends b*s*h/t over its own InfiniBand card and the receivers
all-gather the pieces over NVLink; with sequence parallelism the boundary is already
sharded (Korthikanti et al. 2022, arXiv:2205.05198) and Megatron-LM 80389ef6e2 skips it."""

from typing import Any

import pytest

from models.core.collectives import Collective
from models.core.step_time import estimate_step
from models.core.step_time.setting import p2p_latency_s, step_setting
from models.core.traffic import TrafficAxis, step_traffic
from models.core.traffic.context import StepContext
from models.core.traffic.pipeline import boundary_latency_s
from research import validate_published as vp

FULL = "korthikanti2022-t5-1t-full-recompute"
SELECTIVE = "korthikanti2022-t5-1t-sp-selective"


def _row(row_id: str) -> dict[str, Any]:
    return next(r for r in vp.DATA["runs"] if r["id"] == row_id)


def _context(row_id: str, scatter_gather: bool) -> StepContext:
    row = _row(row_id)
    spec, config = vp.model_of(row), vp.as_published_config(row)
    assert spec is not None and config is not None
    parallel, training = config
    training = training.model_copy(update={"pp_scatter_gather": scatter_gather})
    cluster = vp.row_cluster(row)
    off = training.model_copy(update={"pp_scatter_gather": None})
    stated, unstated = (step_setting(spec, recipe, parallel, cluster)
                        for recipe in (training, off))
    assert p2p_latency_s(stated) == pytest.approx(boundary_latency_s(_context(FULL, True)))
    assert p2p_latency_s(stated) < p2p_latency_s(unstated)
    assert (estimate_step(spec, training, parallel, cluster).step_time_s
            < estimate_step(spec, off, parallel, cluster).step_time_s)


def test_the_traffic_report_reads_the_setting_as_the_step_time_does() -> None:
    """`step_traffic` of the 1T full-recompute row under its as-published recipe: the
    boundary sends carry b*s*h/t and each receive is followed by the TP all-gather."""
    row = _row(FULL)
    spec, config = vp.model_of(row), vp.as_published_config(row)
    assert spec is not None and config is not None
    parallel, training = config
    traffic = step_traffic(spec, training=training, parallel=parallel,
                           cluster=vp.row_cluster(row), stage=1)
    sends = [i for i in traffic.of_axis(TrafficAxis.PP) if i.collective == Collective.P2P]
    assert {i.message_bytes for i in sends} == {13_107_200}
    assert [i.name for i in traffic.items if i.name == "pp.scatter_gather.all_gather"] == [
        "pp.scatter_gather.all_gather"]
