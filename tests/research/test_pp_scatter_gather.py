"""Megatron-LM's scatter/gather of stage-boundary tensors (Narayanan et al. 2021,
arXiv:2104.04473, Sec. 4.1) as a stated setting of the Megatron-LM rows of 2021-2022:
each of the t TP ranks sends b*s*h/t over its own InfiniBand card and the receivers
all-gather the pieces over NVLink; with sequence parallelism the boundary is already
sharded (Korthikanti et al. 2022, arXiv:2205.05198) and Megatron-LM 80389ef6e2 skips it."""

from typing import Any

import pytest

from models.core.collectives import Collective
from models.core.collectives.fabric import fabric_of
from models.core.memory import micro_batch_count
from models.core.mesh import GroupKind
from models.core.step_time import estimate_step
from models.core.step_time.assembly import p2p_latency_s
from models.core.step_time.groups import axis_groups
from models.core.traffic import TrafficAxis, step_traffic
from models.core.traffic.context import StepContext, group_placement
from models.core.traffic.items import call_cost
from models.core.traffic.pipeline import boundary_latency_s, pp_message_bytes
from models.core.traffic.weights import stage_weights
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
    groups = axis_groups(parallel, gpus_per_node=cluster.gpus_per_node)
    return StepContext(model=spec, training=training, parallel=parallel,
                       fabric=fabric_of(cluster), mesh=groups.mesh,
                       stage=stage_weights(spec, parallel)[1],
                       num_micro_batches=micro_batch_count(training, parallel),
                       pp_scatter_gather=training.pp_scatter_gather is True)


@pytest.mark.parametrize("row_id", ["megatron2021-t1-145.6b", "megatron2021-t1-1008.0b", FULL,
                                    SELECTIVE])
def test_the_megatron_lm_rows_state_the_default_scatter_gather(row_id: str) -> None:
    """`--no-scatter-gather-tensors-in-pipeline` is a store_false switch in megatron/arguments.py
    at 6985e58938 and 80389ef6e2: on unless a script turns it off, and none of these does."""
    config = vp.as_published_config(_row(row_id))
    assert config is not None and config[1].pp_scatter_gather is True
    assert "arguments.py" in vp.as_published_settings(_row(row_id))["pp_scatter_gather"][1]


def test_boundary_bytes_per_tp_rank_are_bsh_over_t() -> None:
    """Sec. 4.1: with the optimisation each TP rank sends b*s*h/t between consecutive stages,
    t = 8 in the paper's runs: for the 1T model (h = 25,600, s = 2,048, b = 1, 16-bit
    activations) 104,857,600 bytes whole, 13,107,200 bytes per TP rank."""
    whole, split = _context(FULL, False), _context(FULL, True)
    assert pp_message_bytes(whole) == 1 * 2048 * 25600 * 2 == 104_857_600
    assert pp_message_bytes(split) == 104_857_600 // 8 == 13_107_200


def test_the_receiver_all_gathers_after_the_send() -> None:
    """The implementation waits for the sends, then all-gathers the t pieces over the TP group
    (`_communicate`: `torch.cuda.synchronize()`, `mpu.gather_split_1d_tensor`): the boundary
    latency is the sum, and it is shorter than sending the whole tensor over InfiniBand."""
    whole, split = _context(FULL, False), _context(FULL, True)
    send = call_cost(Collective.P2P, group_placement(split.mesh, GroupKind.PP), 13_107_200,
                     split.fabric).time_s
    gather = call_cost(Collective.ALL_GATHER, group_placement(split.mesh, GroupKind.TP),
                       104_857_600, split.fabric).time_s
    assert boundary_latency_s(split) == pytest.approx(send + gather)
    assert gather > 0 and boundary_latency_s(split) < boundary_latency_s(whole)


def test_sequence_parallelism_leaves_nothing_to_scatter() -> None:
    """Megatron-LM 80389ef6e2 splits only `if scatter_gather_tensors_in_pipeline and not
    sequence_parallel`: the selective row's boundary is b*s*h/t either way, with no gather."""
    on, off = _context(SELECTIVE, True), _context(SELECTIVE, False)
    assert pp_message_bytes(on) == pp_message_bytes(off) == 13_107_200
    assert boundary_latency_s(on) == boundary_latency_s(off)


def test_the_step_time_reads_the_setting() -> None:
    """The setting reaches the pipeline simulator's boundary latency and shortens the 1T
    full-recompute step (its boundaries were priced whole before)."""
    row = _row(FULL)
    spec, config = vp.model_of(row), vp.as_published_config(row)
    assert spec is not None and config is not None
    parallel, training = config
    cluster = vp.row_cluster(row)
    groups = axis_groups(parallel, gpus_per_node=cluster.gpus_per_node)
    m = micro_batch_count(training, parallel)
    off = training.model_copy(update={"pp_scatter_gather": None})
    fabric = fabric_of(cluster)
    assert p2p_latency_s(spec, training, parallel, groups, fabric, m) == pytest.approx(
        boundary_latency_s(_context(FULL, True)))
    assert (p2p_latency_s(spec, training, parallel, groups, fabric, m)
            < p2p_latency_s(spec, off, parallel, groups, fabric, m))
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
