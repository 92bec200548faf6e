"""Every default plan of the benchmark set (`benchmarks/bench_planner.py`'s requests: the
chosen plan and its runners-up) is one a user can trust with a cluster: no framework is
offered a combination it documents as unsupported (Megatron FSDP with a pipeline), the
predicted peak keeps the safety margin under the usable memory and the plan reports it, and
every export carries a launch whose torchrun line starts exactly the plan's GPUs."""

import math
import shlex

import pytest
from plan_set import BENCHMARK_REQUESTS as REQUESTS
from plan_set import benchmark_solved as _planned

from api_schemas import ModelPreset, ParallelConfig, PlanStatus
from api_schemas.requests import DEFAULT_MEMORY_MARGIN_FRAC
from models.catalog.presets import model_preset
from models.core.frameworks import runs_on
from solver import plan


def _plans(label: str) -> list[tuple[str, ParallelConfig]]:
    response = _planned(label)
    assert response.status in (PlanStatus.OPTIMAL, PlanStatus.FEASIBLE), label
    assert response.parallel is not None
    return [("plan", response.parallel)] + [
        (f"runner-up {i}", alt.parallel) for i, alt in enumerate(response.alternatives)]


@pytest.mark.parametrize("label", list(REQUESTS))
def test_no_default_plan_offers_megatron_fsdp_with_a_pipeline(label: str) -> None:
    """Megatron-LM shards gradients or weights (ZeRO-2/3) only with Megatron FSDP, which its
    standard path does not run with pipeline parallelism (Megatron-LM PR #6081): no plan or
    runner-up lists megatron-lm for ZeRO-2/3 with PP > 1."""
    request = REQUESTS[label]
    response = _planned(label)
    assert isinstance(request.model, ModelPreset)
    spec = model_preset(request.model.preset)
    assert response.runs_on, label
    for what, parallel in _plans(label):
        frameworks = {fit.framework for fit in runs_on(spec, request.training, parallel)}
        if "megatron-lm" in frameworks:
            assert not (parallel.pp > 1 and parallel.zero_stage >= 2), (label, what)
    assert response.parallel is not None
    listed = {r.framework for r in response.runs_on}
    assert listed == {f.framework for f in runs_on(spec, request.training, response.parallel)}


@pytest.mark.parametrize("label", list(REQUESTS))
def test_default_plans_keep_the_safety_margin(label: str) -> None:
    """peak <= capacity - margin for the plan and every runner-up, with the default margin
    (the ledger's worst under-prediction of a measured peak) reported with its parts."""
    response = _planned(label)
    memory = response.memory
    assert memory is not None
    assert memory.margin_frac == DEFAULT_MEMORY_MARGIN_FRAC
    assert memory.margin_bytes == math.ceil(memory.capacity_bytes * DEFAULT_MEMORY_MARGIN_FRAC)
    assert memory.limit_bytes == memory.capacity_bytes - memory.margin_bytes
    assert memory.fits and memory.peak_bytes <= memory.capacity_bytes - memory.margin_bytes
    kept_free = [p for p in memory.margin_parts if not p.in_peak]
    assert [p.bytes for p in kept_free] == [memory.margin_bytes]
    assert any(p.in_peak and p.bytes > 0 for p in memory.margin_parts)
    for alt in response.alternatives:
        if alt.fits and alt.peak_bytes is not None:
            assert alt.peak_bytes <= memory.limit_bytes, (label, alt.why_not)


@pytest.mark.parametrize("label", list(REQUESTS))
def test_every_export_has_a_launch_for_the_plans_gpus(label: str) -> None:
    """Each export's torchrun line, split as a shell would, starts nnodes x nproc-per-node =
    the plan's GPUs, with a node rank and a master; the srun form and the environment (the
    allocator setting the margin assumes) come with it."""
    response = _planned(label)
    assert response.parallel is not None
    gpus = response.parallel.world_size
    assert gpus == response.world_size
    for name in ("megatron", "torchtitan", "deepspeed"):
        export = getattr(response.exports, name)
        assert export is not None and export.launch is not None, (label, name)
        launch = export.launch
        words = shlex.split(launch.torchrun)
        assert words[0] == "torchrun"
        value = {flag: words[words.index(flag) + 1] for flag in (
            "--nnodes", "--nproc-per-node", "--node-rank", "--master-addr", "--master-port")}
        assert int(value["--nnodes"]) * int(value["--nproc-per-node"]) == gpus, (label, name)
        assert (int(value["--nnodes"]), int(value["--nproc-per-node"])) == (
            launch.nnodes, launch.nproc_per_node)
        inner = shlex.split(launch.srun)
        assert inner[:3] == ["srun", "--nodes", value["--nnodes"]]
        assert launch.env["PYTORCH_ALLOC_CONF"] == "expandable_segments:True"
        assert launch.env["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
        assert launch.checked_against
    assert response.exports.megatron is not None and response.exports.megatron.launch
    assert response.exports.megatron.launch.env.items() >= response.exports.megatron.env.items()


def test_a_margin_of_zero_plans_up_to_the_usable_memory() -> None:
    """`memory_margin_frac: 0` restores planning up to the usable memory: no margin, the
    limit is the capacity, and the GPT 1T optimum then uses memory the default margin keeps
    free (its peak lies in the last 3.84% of the usable memory)."""
    label = "GPT 1T, 3,072 A100"
    request = REQUESTS[label]
    zero = request.model_copy(update={"cluster": request.cluster.model_copy(
        update={"memory_margin_frac": 0.0})})
    response = plan(zero)
    memory = response.memory
    assert memory is not None and memory.margin_bytes == 0
    assert memory.limit_bytes == memory.capacity_bytes
    default = _planned(label).memory
    assert default is not None and default.capacity_bytes == memory.capacity_bytes
    # The objective optimum: the plan shown, or, where the robust choice's tie break shows a
    # plan with more memory free, the first alternative.
    robust = response.robust_choice
    assert robust is not None
    optimum = memory.peak_bytes if robust.picked == "optimum" else next(
        a.peak_bytes for a in response.alternatives
        if a.why_not.startswith("the objective optimum"))
    assert optimum is not None and optimum > default.limit_bytes
