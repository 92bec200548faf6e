"""Optimizer offload as a choice of the search, from the framework capability table
(`models/data/frameworks.json`): Megatron-LM's --optimizer-cpu-offload (with
--optimizer-offload-fraction) and DeepSpeed's ZeRO-Offload (offload_optimizer) keep the
optimizer states in host memory and run the Adam step on the CPU; torchtitan has neither.
Where the request allows it (`constraints.allow_optimizer_offload`), the search takes it
where it makes a plan fit (its CPU step and host copies charged to the step:
`models.core.step_time.step_terms.host_optimizer_s`), the plan says so, the export sets the flag,
and a pinned share still holds."""

from typing import Any

from api_schemas.plan import PlanResponse
from api_schemas.requests import EvaluateRequest, PlanRequest
from solver.api import evaluate, plan

CPU_STEP = "CPU optimizer (offloaded states)"


def _plan(framework: str, gpus: int = 1, **constraints: Any) -> PlanResponse:
    """Llama 3.1 8B with AdamW on one H100: 16 bytes of states per parameter (about 120 GiB
    for its 8B) cannot sit in 80 GB with nothing to shard over; with the master weights and
    moments in host memory the plan fits."""
    return plan(PlanRequest.model_validate({
        "model": {"preset": "llama-3.1-8b"},
        "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 1, "gpus_per_node": gpus},
        "training": {"global_batch_size": 16, "sequence_length": 4096},
        "constraints": {"framework": framework, "allow_optimizer_offload": True,
                        **constraints},
        "solver": {"time_limit_s": 30, "top_k": 1}}))


def test_megatron_target_chooses_optimizer_offload_and_exports_the_flags() -> None:
    response = _plan("megatron-lm")
    assert response.status in ("optimal", "feasible")
    assert response.parallel is not None and response.parallel.optimizer_offload_frac == 1.0
    assert response.parallel.zero_stage >= 1  # the distributed optimizer carries it
    assert response.memory is not None and response.memory.fits
    assert response.memory.host_peak_bytes > 0
    assert response.time is not None and response.time.overheads_s[CPU_STEP] > 0
    assert any(n.startswith("optimizer offload chosen by the search "
                            "(constraints.allow_optimizer_offload): without it no plan of "
                            "this mesh fits") for n in response.explanation.notes)
    runs = {fit.framework: fit for fit in response.runs_on}
    assert "megatron-lm" in runs and "torchtitan" not in runs
    assert "optimizer_offload" in runs["megatron-lm"].features
    args = response.exports.megatron.args
    assert "--optimizer-cpu-offload" in args
    assert args[args.index("--optimizer-offload-fraction") + 1] == "1"


def test_deepspeed_target_chooses_zero_offload_and_writes_offload_optimizer() -> None:
    response = _plan("deepspeed")
    assert response.parallel is not None and response.parallel.optimizer_offload_frac == 1.0
    assert response.time is not None and response.time.overheads_s[CPU_STEP] > 0
    zero = response.exports.deepspeed.config["zero_optimization"]
    assert zero["stage"] >= 1
    assert zero["offload_optimizer"] == {"device": "cpu", "pin_memory": True}


def test_torchtitan_has_no_optimizer_offload_and_the_answer_names_it() -> None:
    response = _plan("torchtitan")
    assert response.status == "infeasible"
    named = [r for r in response.explanation.relaxation_details if r.change == "framework"]
    assert named and named[0].to_value in ("megatron-lm", "deepspeed")
    assert "which has no optimizer offload" in named[0].text
    assert named[0].parallel is not None and named[0].parallel.optimizer_offload_frac == 1.0


def test_a_pin_fixes_it_both_ways() -> None:
    # Forbidden by the request: nothing fits on one GPU.
    assert _plan("megatron-lm", optimizer_offload_frac=0.0).status == "infeasible"
    assert _plan("megatron-lm", allow_optimizer_offload=False).status == "infeasible"
    # Where the plan fits without it the search leaves it off (it only adds the CPU step),
    # and a pinned share is kept.
    free = _plan("megatron-lm", gpus=8)
    pinned = _plan("megatron-lm", gpus=8, optimizer_offload_frac=1.0)
    assert free.parallel is not None and free.parallel.optimizer_offload_frac == 0.0
    assert pinned.parallel is not None and pinned.parallel.optimizer_offload_frac == 1.0
    assert pinned.parallel.zero_stage >= 1
    assert not any(n.startswith("optimizer offload chosen by the search")
                   for n in pinned.explanation.notes)


def test_a_partial_share_runs_only_on_megatron() -> None:
    """--optimizer-offload-fraction has no DeepSpeed counterpart (offload_optimizer moves
    the whole ZeRO shard): a plan with half the states offloaded runs on Megatron-LM only,
    and the DeepSpeed export says why it does not write it."""
    response = evaluate(EvaluateRequest.model_validate({
        "model": {"preset": "llama-3.1-8b"},
        "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 1, "gpus_per_node": 8},
        "training": {"global_batch_size": 16, "sequence_length": 4096},
        "parallel": {"dp": 8, "zero_stage": 1, "optimizer_offload_frac": 0.5}}))
    assert [fit.framework for fit in response.runs_on] == ["megatron-lm"]
    args = response.exports.megatron.args
    assert args[args.index("--optimizer-offload-fraction") + 1] == "0.5"
    assert "offload_optimizer" not in response.exports.deepspeed.config["zero_optimization"]
    assert any("moves the whole ZeRO shard" in n for n in response.exports.deepspeed.notes)


def _default(gpus: int, **constraints: Any) -> PlanResponse:
    """The same Llama 3.1 8B request with no word on optimizer offload."""
    return plan(PlanRequest.model_validate({
        "model": {"preset": "llama-3.1-8b"},
        "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 1, "gpus_per_node": gpus},
        "training": {"global_batch_size": 16, "sequence_length": 4096},
        "constraints": constraints, "solver": {"time_limit_s": 30, "top_k": 1}}))


def _offload_use(response: PlanResponse) -> Any:
    (use,) = [u for u in response.runtime_features if u.feature == "optimizer_offload"]
    return use


def test_by_default_the_search_offloads_where_nothing_else_fits() -> None:
    """One H100 holds Llama 3.1 8B only with its optimizer states in host memory: a request
    that says nothing about it gets that plan, states it among its runtime features (on,
    decided by the planner, each framework's flag) and exports the flags."""
    response = _default(1)
    assert response.parallel is not None and response.parallel.optimizer_offload_frac == 1.0
    assert response.memory is not None and response.memory.fits
    use = _offload_use(response)
    assert use.on and use.decided_by == "planner" and not use.why_not
    assert set(use.flags) == {"megatron-lm", "deepspeed"}
    assert "--optimizer-cpu-offload" in use.flags["megatron-lm"]
    assert "--optimizer-cpu-offload" in response.exports.megatron.args
    zero = response.exports.deepspeed.config["zero_optimization"]
    assert zero["offload_optimizer"] == {"device": "cpu", "pin_memory": True}


def test_by_default_the_search_leaves_it_off_where_it_is_slower() -> None:
    """On eight H100s the states fit on the GPUs: with them in host memory the CPU step
    makes the mesh's best plan slower, so the default search leaves offload off and its
    runtime feature says why with both step times; forbidding it is the request's call."""
    response = _default(8)
    assert response.parallel is not None and response.parallel.optimizer_offload_frac == 0.0
    assert response.time is not None
    use = _offload_use(response)
    assert not use.on and use.decided_by == "planner"
    assert use.why_not.startswith("with it this mesh's best plan takes ")
    with_it = float(use.why_not.split("takes ")[1].split(" s")[0])
    assert with_it > response.time.step_time_s
    assert "its CPU optimizer step adds" in use.why_not
    forbidden = _offload_use(_default(8, allow_optimizer_offload=False))
    assert not forbidden.on and forbidden.decided_by == "request"
    assert forbidden.why_not == "fixed off by the request (constraints.allow_optimizer_offload)"


def _deepspeed_70b(host_memory_bytes: int) -> PlanResponse:
    """Llama 3.1 70B on one node of 8 H100 for DeepSpeed: its plan keeps the optimizer
    states in host memory at ZeRO-3, where DeepSpeed also holds two copies of the gradient
    partition (`models.core.sharded_states.cpu_optimizer_gradient_bytes`)."""
    return plan(PlanRequest.model_validate({
        "model": {"preset": "llama-3.1-70b"},
        "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 1,
                    "host_memory_bytes": host_memory_bytes},
        "training": {"global_batch_size": 64, "sequence_length": 8192},
        "constraints": {"framework": "deepspeed"},
        "solver": {"time_limit_s": 30, "top_k": 1}}))


def test_the_cpu_optimizers_gradients_count_against_host_memory() -> None:
    """With 2 TiB of host memory a node (256 GiB a GPU) the plan offloads at ZeRO-3 and its
    host ledger holds 16 bytes a parameter of the 70B / 8 shard (master and moments 12, fp32
    gradients 4 + 4 = 8: about 164 GiB a GPU); with 1 TiB (128 GiB a GPU) that plan no
    longer fits, and the answer says host memory is what binds."""
    roomy = _deepspeed_70b(2 * 2**40)
    assert roomy.parallel is not None and roomy.parallel.zero_stage == 3
    assert roomy.parallel.optimizer_offload_frac == 1.0
    assert roomy.memory is not None
    host = roomy.memory.host_peak_bytes / 2**30
    assert 160 < host < 168, host
    tight = _deepspeed_70b(2**40)
    assert tight.status == "infeasible"
    assert "host memory stays" in tight.explanation.summary


def test_deepspeeds_offloaded_plan_holds_its_per_parameter_gradient_buffers() -> None:
    """The same offloaded ZeRO-1 plan of Llama 3.1 8B on one H100 needs 2 bytes a parameter
    more host memory on DeepSpeed than on Megatron-LM: ZeRO-Offload's per-parameter 16-bit
    gradient buffers (`TrainingSpec.offload_grad_buffers`, from DeepSpeed's table entry)."""
    deepspeed, megatron = _plan("deepspeed"), _plan("megatron-lm")
    assert deepspeed.parallel is not None and megatron.parallel is not None
    assert deepspeed.parallel.zero_stage == megatron.parallel.zero_stage == 1
    assert deepspeed.memory is not None and megatron.memory is not None
    extra = deepspeed.memory.host_peak_bytes - megatron.memory.host_peak_bytes
    assert abs(extra - 2 * 8.03e9) < 0.01 * 2 * 8.03e9, extra
    (line,) = [c for c in deepspeed.memory.stages[0].host_components
               if c.name == "per-parameter gradient buffers"]
    assert line.bytes == extra
    assert all(c.name != line.name for c in megatron.memory.stages[0].host_components)
    assert any(n.startswith("gradients through DeepSpeed's ZeRO-Offload buffers")
               for n in deepspeed.explanation.notes)
    assert not any("ZeRO-Offload buffers" in n for n in megatron.explanation.notes)
