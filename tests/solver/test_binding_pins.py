"""A pinned request that leaves no mesh names what binds (the framework target and each pin
whose release alone gives meshes), not divisibility, and its relaxations are those single
changes with their plans (`solver/binding_pins.py`, `solver/relax.py`)."""

import functools

import pytest

from api_schemas import (
    ClusterInput,
    Constraints,
    ModelPreset,
    PlanRequest,
    PlanResponse,
    PlanStatus,
    SolverLimits,
    TrainingSpec,
)
from models.evidence.published import published_run
from solver import plan

RUN = published_run("deepseek-v3-2048")


def _request(framework: str | None) -> PlanRequest:
    """DeepSeek-V3's published pins (arXiv:2412.19437 Sec. 3.1-3.3: PP16, EP64, no TP,
    DualPipe, ZeRO-1) on its 2,048 H800."""
    p = RUN.parallel
    return PlanRequest(model=ModelPreset(preset=RUN.model_preset),
                       cluster=ClusterInput(gpu=RUN.gpu, num_nodes=RUN.num_nodes,
                                            gpus_per_node=RUN.gpus_per_node),
                       training=RUN.training,
                       constraints=Constraints(tp=1, pp=p.pp, ep=p.ep, schedule=p.schedule,
                                               zero_stage=p.zero_stage, framework=framework),
                       solver=SolverLimits(time_limit_s=60, top_k=0, num_workers=1))


@functools.cache
def _planned(framework: str | None) -> PlanResponse:
    return plan(_request(framework))


def test_published_pins_on_megatron_lm_name_dualpipe_and_the_framework_not_divisibility(
        ) -> None:
    response = _planned("megatron-lm")
    assert response.status == PlanStatus.INFEASIBLE
    binding = response.explanation.binding_constraints
    assert not any("divisibility" in text for text in binding), binding
    assert "the framework target binds: megatron-lm" in binding[0]
    assert "has no 'schedule:dualpipe'" in binding[0]
    assert any(text.startswith("the pin schedule=dualpipe binds") for text in binding)
    assert response.explanation.summary.count("framework target binds") == 1
    details = response.explanation.relaxation_details
    framework = next(r for r in details if r.change == "framework")
    assert (framework.from_value, framework.to_value) == ("megatron-lm", "any")
    assert framework.parallel is not None and framework.parallel.schedule == "dualpipe"
    assert framework.minimal
    released = next(r for r in details if r.from_value == {"schedule": "dualpipe"})
    assert released.change == "constraints" and released.to_value == {} and released.minimal
    assert released.parallel is not None and released.parallel.schedule != "dualpipe"


def test_published_pins_with_framework_any_get_their_plan() -> None:
    response = _planned("any")
    assert response.status in (PlanStatus.OPTIMAL, PlanStatus.FEASIBLE)
    p = response.parallel
    assert p is not None
    assert (p.tp, p.pp, p.ep, p.schedule, p.zero_stage) == (1, 16, 64, "dualpipe", 1)
    assert any(e.feature == "schedule:dualpipe" for e in response.extensions)


@pytest.mark.parametrize(("pins", "nodes", "rule", "pin"), [
    ({"zero_stage": 2, "framework": "torchtitan"}, 1, "has no 'zero:2'", "zero_stage=2"),
    ({"cp": 2, "cp_kind": "ring", "framework": "deepspeed"}, 2, "has no 'cp:ring'",
     "cp_kind=ring"),
])
def test_a_framework_rule_that_binds_is_named_with_the_feature(
        pins: dict[str, object], nodes: int, rule: str, pin: str) -> None:
    """torchtitan v0.2.2 has no ZeRO-2 (FSDP2 or DDP only); DeepSpeed 0.19.8 has no ring
    context parallelism (Ulysses only): each pinned request names that rule and the pin."""
    response = plan(PlanRequest(
        model=ModelPreset(preset="llama-3.1-8b"),
        cluster=ClusterInput(gpu="h100-sxm5-80gb", num_nodes=nodes),
        training=TrainingSpec(global_batch_size=64, sequence_length=4096),
        constraints=Constraints.model_validate(pins),
        solver=SolverLimits(time_limit_s=60, top_k=0, num_workers=1)))
    assert response.status == PlanStatus.INFEASIBLE
    binding = response.explanation.binding_constraints
    assert rule in binding[0] and "the framework target binds" in binding[0]
    assert any(text.startswith(f"the pin {pin} binds") for text in binding)
    assert any(r.change == "framework" and r.parallel is not None
               for r in response.explanation.relaxation_details)


def test_a_memory_bound_pinned_request_names_each_pin_whose_release_gives_a_plan() -> None:
    """Llama 3.1 70B on 32 H100 pinned to TP8, PP1, ZeRO-0: every mesh exceeds the memory.
    Releasing PP alone or ZeRO alone gives a plan that keeps the other pins; the answer offers
    those single releases, not "drop every pin"."""
    pins = {"tp": 8, "pp": 1, "zero_stage": 0}
    response = plan(PlanRequest(
        model=ModelPreset(preset="llama-3.1-70b"),
        cluster=ClusterInput(gpu="h100-sxm5-80gb", num_nodes=4),
        training=TrainingSpec(global_batch_size=64, sequence_length=4096),
        constraints=Constraints.model_validate(pins),
        solver=SolverLimits(time_limit_s=60, top_k=0, num_workers=1)))
    assert response.status == PlanStatus.INFEASIBLE
    released = {next(iter(r.from_value)): r for r in response.explanation.relaxation_details
                if r.change == "constraints" and isinstance(r.from_value, dict)}
    assert set(released) == {"pp", "zero_stage"}
    for field, relaxation in released.items():
        assert relaxation.to_value == {} and relaxation.parallel is not None
        kept = {k: v for k, v in pins.items() if k != field}
        assert {k: getattr(relaxation.parallel, k) for k in kept} == kept, field
        assert getattr(relaxation.parallel, field) != pins[field]
    assert not any(text.startswith("drop the pins") for text in response.explanation.relaxations)
