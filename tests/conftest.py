"""Suite-wide test selection and how the tests are shared out between processes.

Selection: the default `pytest` run (see `addopts` in pyproject.toml) deselects tests marked
`slow`; the full suite, which CI and the README's test command run, is `pytest -m "slow or not
slow"`. A test is slow when it takes more than about 2 s on a quiet 2-core machine (`pytest
--durations=60` lists them). Tests of a module that are all slow carry `pytestmark`; the
entries below mark single cases of otherwise quick modules, by node-id prefix.

Parallel runs: `addopts` runs the suite on one worker process per core (pytest-xdist, `-n
auto --dist loadgroup`); `-n 0` runs it in this process (for one test, a debugger or
`--pdb`). Each worker takes whole test modules, so what a module computes once (a
`functools.cache` of solved plans, a module- or session-scoped fixture: a server, Chromium,
the generated client) is computed once per run as in a serial run, and the modules named in
`SHARED_WORK` go to one worker together. Tests marked `xdist_group(name)` go to one worker
with the rest of that group. Modules are handed out longest first by their expected time
(`expected_s`: a quick test counts `QUICK_TEST_S`, a slow one `SLOW_TEST_S`, the few tests of
minutes `LONG_CASES`), so that no long module is left to run alone at the end.
Nothing else is shared between workers: servers listen on free ports, files go under
`tmp_path`, and each PostgreSQL test works in a schema or database of its own.
"""

from typing import Any

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
    # Over 5 s each in a full run on a loaded 2-core host (about 2 s or more when quiet).
    "tests/solver/test_bounds.py::test_the_rank_memory_bound_spares_evaluations",
    "tests/solver/test_bounds.py::test_the_plain_run_bound_spares_evaluations",
    "tests/solver/test_bounds.py::test_policy_floors_hold_where_no_plain_plan_fits[any-deepseek-v3-",
    "tests/solver/test_bounds.py::test_policy_floors_hold_where_no_plain_plan_fits[any-llama-3.1-70b-",
    "tests/solver/test_framework_targets.py::test_a_plan_runs_on_its_target[moe-mixtral-",
    "tests/solver/test_export_torchtitan_loader.py::test_loader_accepts_plans_searched_for_torchtitan"
    "[moe-mixtral]",
    "tests/solver/test_anytime_seed.py::test_wide_target_is_never_worse_than_one_framework",
    "tests/solver/test_relaxations.py::test_405b_on_16_gpus_needs_exactly_13_nodes_and_says_why",
    "tests/solver/test_k3_scale.py::test_half_that_cluster_does_not_fit_even_with_pipeline_zero2",
    "tests/solver/test_plausibility_scripts.py",
    "tests/research/test_error_bands_data.py::test_committed_table_is_current",
    "tests/service/test_service_plans_api.py::test_listing_filters_and_pages",
    "tests/service/test_service_calibration.py::test_a_fitted_moe_host_time_is_stored_and_applied",
    "tests/service/test_service_calibration.py::test_evaluate_and_plan_with_a_profile_use_its_constants",
    "tests/service/test_service_calibration.py::test_profiles_are_stored_versioned_listed_and_read",
    "tests/service/test_service_calibration.py::test_logs_and_microbenchmarks_over_http_store_every",
    "tests/service/test_service_calibration.py::test_run_level_answers_apply_a_named_profile",
    "tests/service/test_service_etags.py::test_stored_answers_round_trip_to_304[/trace]",
    "tests/service/test_service_client.py::test_every_read_endpoint",
    "tests/service/test_generated_client.py::test_picture_operations_return_the_svg_as_str"
    "[pipeline_simulate_svg]",
    "tests/service/test_pictures.py::test_plan_pictures_over_the_timeline_bound",
    "tests/service/test_jobs_queue.py",
)
"""Single slow cases, by node-id prefix (measured with --durations)."""


SHARED_WORK = {
    # They solve the problems of tests/solver/plan_set.py through its caches (`solved`,
    # `benchmark_solved`).
    "tests/solver/test_plan_roundtrip.py": "plan-set",
    "tests/solver/test_plausibility.py": "plan-set",
    "tests/solver/test_export_framework_parsers.py": "plan-set",
    "tests/solver/test_benchmark_plans.py": "plan-set",
    "tests/solver/test_runtime_features.py": "plan-set",
    "tests/solver/test_robust_choice.py": "plan-set",
    # One browser-test service (the session-scoped `base_url`) rather than one per worker.
    "tests/browser/": "browser",
    # Servers as subprocesses under fault, whose answers are bounded in seconds: one at a time,
    # so that no fault test's server competes with another's for the cores.
    "tests/faults/": "faults",
}
"""Modules that run on one worker together, by path prefix: they share a cache or a server,
or must not run at the same time as each other."""

QUICK_TEST_S = 0.2
SLOW_TEST_S = 5.0
"""A quick and a slow test's expected seconds, for the order in which modules are handed out."""

LONG_CASES = {
    "tests/service/test_service_schemathesis_live.py::test_live_server_conforms_to_its_schema":
        160.0,
    "tests/service/test_jobs_queue.py": 25.0,
    "tests/solver/test_bounds.py::test_the_rank_memory_bound_spares_evaluations": 25.0,
}
"""Tests of much more than `SLOW_TEST_S`, by node-id prefix, with their seconds on a quiet
2-core host (measured with --durations): handed out first, they do not finish the run alone."""


def is_slow(nodeid: str) -> bool:
    """Whether `pytest_collection_modifyitems` marks this test `slow` by its node id (tests
    marked in their module count as quick here: only the order of hand-out depends on it)."""
    return nodeid.startswith(SLOW_DIRECTORIES) or nodeid.startswith(SLOW_CASES)


def expected_s(nodeid: str) -> float:
    """A test's expected seconds, for the order of hand-out only."""
    for prefix, seconds in LONG_CASES.items():
        if nodeid.startswith(prefix):
            return seconds
    return SLOW_TEST_S if is_slow(nodeid) else QUICK_TEST_S


SPLIT_BY_PARAMETER = ("tests/service/test_service_schemathesis_live.py",
                      "tests/solver/test_plausibility_scripts.py")
"""Modules whose tests go out by their parameter instead of whole: each backend's live
schemathesis run is a few minutes of work with a server of its own, so the two backends are
better on two workers than one after the other; the benchmark scripts' plans (up to 10 s of
search each, about 3 minutes in all) share nothing, so they fill whichever worker is free."""


def work_unit(nodeid: str) -> str:
    """Which tests go to one worker together: an `xdist_group` mark's group (pytest-xdist
    appends `@group` to the node id), else the module's entry of `SHARED_WORK`, else the
    module (with the test's parameter for the modules of `SPLIT_BY_PARAMETER`)."""
    if nodeid.rfind("@") > nodeid.rfind("]"):
        return nodeid.rsplit("@", 1)[1]
    module = nodeid.split("::", 1)[0]
    for prefix, group in SHARED_WORK.items():
        if module.startswith(prefix):
            return group
    if module in SPLIT_BY_PARAMETER and nodeid.endswith("]"):
        return module + nodeid[nodeid.rfind("["):]
    return module


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist's `--dist loadgroup` (the default, see pyproject.toml), hand out
    whole modules (see the module's docstring); other `--dist` modes are left as they are."""
    if config.pluginmanager.hasplugin("xdist") and config.getoption("dist", None) == "loadgroup":
        config.pluginmanager.register(_ModuleScheduler(), "atlas-module-scheduler")


class _ModuleScheduler:
    """The `pytest_xdist_make_scheduler` hook, registered only where pytest-xdist is."""

    @staticmethod
    def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
        from xdist.scheduler import LoadGroupScheduling

        class ByModule(LoadGroupScheduling):  # type: ignore[misc]
            def _split_scope(self, nodeid: str) -> str:
                return work_unit(nodeid)

            weights: dict[str, float] = {}

            def _assign_work_unit(self, node: Any) -> None:
                # Longest remaining unit first (the queue is otherwise in collection order).
                for unit, nodeids in self.workqueue.items():
                    if unit not in self.weights:
                        self.weights[unit] = sum(map(expected_s, nodeids))
                largest = max(self.workqueue, key=self.weights.__getitem__)
                self.workqueue.move_to_end(largest, last=False)
                super()._assign_work_unit(node)

        return ByModule(config, log)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the slow directories and cases `slow`."""
    for item in items:
        if item.nodeid.startswith(SLOW_DIRECTORIES) or item.nodeid.startswith(SLOW_CASES):
            item.add_marker(pytest.mark.slow)
