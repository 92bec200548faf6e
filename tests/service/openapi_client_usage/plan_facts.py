"""A small program on the generated client: plan, read the stored plan back, and take its
step time, peak memory, Megatron-LM arguments and both pictures, with no casts.

The tests generate the client (`atlas_client`) into a temporary folder, check this file
under `mypy --strict` beside it, and run `plan_facts` against the service.
"""

from dataclasses import dataclass

from atlas_client.api.plans import create_plan, plan_memory_svg, plan_timeline_svg, read_plan
from atlas_client.client import Client
from atlas_client.models import PlanRequest, PlanResponse, ProblemDetail


@dataclass(frozen=True)
class PlanFacts:
    """What a capacity spreadsheet takes from one plan."""

    plan_id: str
    step_time_s: float
    peak_bytes: int
    capacity_bytes: int
    megatron_args: list[str]
    timeline_svg: str
    memory_svg: str


def _problem(answer: ProblemDetail | None) -> str:
    return "no answer" if answer is None else f"{answer.code.value}: {answer.detail}"


def plan_facts(client: Client, request: PlanRequest) -> PlanFacts:
    """Search and store a plan, then read it back and take its figures."""
    created = create_plan.sync(client=client, body=request)
    if not isinstance(created, PlanResponse):
        raise RuntimeError(f"no plan: {_problem(created)}")
    if created.id is None:
        raise RuntimeError("the plan was answered but not stored")
    plan = read_plan.sync(created.id, client=client)
    if not isinstance(plan, PlanResponse):
        raise RuntimeError(f"cannot read plan {created.id}: {_problem(plan)}")
    if plan.time is None or plan.memory is None:
        raise RuntimeError(f"plan {created.id} is {plan.status.value}: no figures")
    timeline = plan_timeline_svg.sync(created.id, client=client)
    memory = plan_memory_svg.sync(created.id, client=client)
    if not isinstance(timeline, str) or not isinstance(memory, str):
        raise RuntimeError(f"no pictures for plan {created.id}")
    megatron = plan.exports.megatron
    return PlanFacts(plan_id=created.id, step_time_s=plan.time.step_time_s,
                     peak_bytes=plan.memory.peak_bytes,
                     capacity_bytes=plan.memory.capacity_bytes,
                     megatron_args=megatron.args if megatron is not None else [],
                     timeline_svg=timeline, memory_svg=memory)
