"""Suite-wide test selection: which tests the quick default run leaves out.

The default `pytest` run (see `addopts` in pyproject.toml) deselects tests marked `slow`;
the full suite, which CI and the README's test command run, is `pytest -m "slow or not slow"`.
A test is slow when it takes more than about 2 s on a quiet 2-core machine (`pytest
--durations=60` lists them). Tests of a module that are all slow carry `pytestmark`; the
entries below mark single cases of otherwise quick modules, by node-id prefix.
"""

import pytest

SLOW_DIRECTORIES = ("tests/browser/", "tests/e2e/", "tests/faults/")
"""Whole directories that start a server or a browser."""

SLOW_CASES = (
    # Planner against brute force: the quick default keeps p2, p3, p10 and p17 onward
    # except the framework-target problems that enumerate every candidate twice and the
    # throughput-target problems on MoE and on Llama 3.1 8B, and the first problem with
    # remote activation offload allowed.
    *(f"tests/solver/test_planner_parity.py::test_planner_optimum_equals_brute_force[p{i}]"
      for i in (0, 1, 4, 5, 6, 7, 8, 9, 11, 12, 13, 14, 15, 16, 18, 19, 21, 23, 24, 27, 28)),
    "tests/solver/test_k3_scale.py::test_with_both_allowed_the_search_takes_the_faster",
    "tests/solver/test_request_limits.py::test_relaxations_of_an_infeasible_request_keep",
    "tests/solver/test_request_limits.py::test_out_of_time_before_any_plan_is_not_called",
    "tests/solver/test_target_search.py::test_fewest_gpus_reaching_half_of_512_h100s",
    "tests/solver/test_target_search.py::test_an_unreachable_target_is_proven_so",
    "tests/solver/test_schedule_optimizer.py::test_optimizer_is_never_worse_than_a_handcrafted"
    "_schedule_within_the_limit[interleaved_1f1b",
    "tests/solver/test_schedule_optimizer.py::test_optimizer_proves_optimality_for_every_p_le_4",
    "tests/solver/test_schedule_optimizer.py::test_optimizer_reports_a_gap_at_the_time_limit",
    "tests/solver/test_plan_roundtrip.py::test_evaluate_reproduces_every_plan_of_the_set"
    "[published-kimi-k2]",
    "tests/solver/test_plan_roundtrip.py::test_evaluate_reproduces_every_plan_of_the_set"
    "[fewest-70b-of-16nodes]",
    "tests/solver/test_plan_roundtrip.py::test_evaluate_reproduces_every_plan_of_the_set"
    "[dense-70b-8nodes]",
    "tests/solver/test_plan_api.py::test_planner_is_at_least_as_good_as_the_published_configuration",
    "tests/solver/test_framework_targets.py::test_a_plan_runs_on_its_target[dense-70b-",
    "tests/solver/test_throughput_bound.py::test_no_plan_beats_the_peak_bound[llama-3.1-70b-",
    "tests/solver/test_bounds.py::test_forced_zero3_and_chain_bounds_never_exceed_the_evaluated"
    "_values[llama-3.1-70b-",
    "tests/service/test_generated_client.py::test_generated_client_passes_mypy_strict",
    "tests/solver/test_export_torchtitan.py::test_toml_writer_round_trips_any_value",
)
"""Single slow cases, by node-id prefix (measured with --durations)."""


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the slow directories and cases `slow`."""
    for item in items:
        if item.nodeid.startswith(SLOW_DIRECTORIES) or item.nodeid.startswith(SLOW_CASES):
            item.add_marker(pytest.mark.slow)
