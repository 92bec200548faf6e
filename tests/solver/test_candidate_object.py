"""One object per candidate: derived pieces live on the candidate, and a candidate that
differs in one field never reads another's; the count of module-level memo caches is
pinned so that it only falls."""

import ast
import dataclasses
import random
from pathlib import Path

import pytest

from api_schemas import Constraints, ParallelConfig, PipelineSchedule, TrainingSpec
from api_schemas.architecture import ModelSpec
from models.catalog.presets import cluster_preset, model_preset
from models.core import search_memo as search_memo_module
from models.core.collectives import Fabric
from models.core.layout import LAYOUT_FIELDS, _pipeline_layout, pipeline_layout
from models.core.ledger_memo import LedgerMemo
from models.core.mesh.layout import GroupKind, _placement, build_mesh
from models.core.moe import host_issue
from models.core.search_memo import current_memo, release_shared_memo, search_memo
from models.core.step_time import (
    clear_step_time_cache,
    estimate_step,
    kind_layers,
    layer_parts,
)
from models.core.step_time.exposure import LAYER_CALL_FIELDS, layer_calls
from models.core.step_time.groups import AxisGroups, axis_groups
from models.core.step_time.layer_inputs import UNREAD_FIELDS, LayerPartsInputs
from models.core.step_time.setting import step_setting
from models.core.traffic.layer import cp_calls, expert_calls, tp_block_calls
from solver.candidate import PlanCandidate
from solver.candidate_eval import Dominated, Rejection, ScoredPlan, evaluate_candidate
from solver.runtime_choice import resolved
from solver.space import MeshCandidate

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("api_schemas", "models", "solver", "service")
MEMO_DECORATORS = {"cache", "lru_cache"}
MEMO_CACHES_AT_MOST = 9
"""Module-level `functools.cache` / `lru_cache` decorators in the product code: 48 before
the candidate object, 9 since the cost model's memos moved onto the search's memo
(`models.core.search_memo`; the target is fewer than 10); lower this as caches move
onto the objects they derive from, never raise it."""


def _memo_decorators() -> list[str]:
    found = []
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    continue
                for decorator in node.decorator_list:
                    target = decorator.func if isinstance(decorator, ast.Call) else decorator
                    name = (target.attr if isinstance(target, ast.Attribute)
                            else getattr(target, "id", ""))
                    if name in MEMO_DECORATORS:
                        found.append(f"{path.relative_to(ROOT)}:{node.name}")
    return found


def test_memo_cache_count_stays_at_most_the_pinned_one() -> None:
    found = _memo_decorators()
    assert len(found) <= MEMO_CACHES_AT_MOST, "\n".join(found)
    # The counter sees the decorators it must (a memo that stays, in each spelling).
    assert "models/catalog/presets.py:model_preset" in found  # @cache
    assert "models/core/step_time/makespan.py:compiled_schedule" in found  # @lru_cache(...)
    assert "api_schemas/parallel.py:_uniform_policy" in found  # @functools.lru_cache(...)


def _base() -> MeshCandidate:
    return MeshCandidate(tp=2, pp=2, dp=2, cp=1, ep=1, etp=1, vpp=1, micro_batch_size=1,
                         num_micro_batches=16, schedule=PipelineSchedule.ONE_F_ONE_B,
                         sequence_parallel=True)


def _variants() -> dict[str, MeshCandidate]:
    """The base candidate with one field changed (the degrees kept at 8 GPUs and the
    global batch of 64 sequences)."""
    base = _base()
    return {
        "micro_batch_size": dataclasses.replace(base, micro_batch_size=2, num_micro_batches=8),
        "tp": dataclasses.replace(base, tp=4, dp=1, num_micro_batches=32),
        "sequence_parallel": dataclasses.replace(base, sequence_parallel=False),
        "schedule": dataclasses.replace(base, schedule=PipelineSchedule.INTERLEAVED_1F1B,
                                        vpp=2),
    }


def _outcome(result: ScoredPlan | Rejection | Dominated) -> tuple[object, ...]:
    assert isinstance(result, ScoredPlan), result
    return (result.parallel, result.estimate.step_time_s, result.ledger.peak_bytes)


@pytest.fixture(scope="module")
def inputs() -> tuple[object, ...]:
    spec = model_preset("llama-3.1-8b")
    cluster = cluster_preset("h100-sxm5-80gb", num_nodes=1)
    training = TrainingSpec(global_batch_size=64, sequence_length=4096)
    return spec, training, cluster, Constraints()


def test_a_candidate_with_one_changed_field_gets_its_own_value(
        inputs: tuple[object, ...]) -> None:
    """Evaluated one after another with one shared ledger memo, in both orders, each
    candidate's plan, step time and peak are the same, and each variant's step time differs
    from the base candidate's: no piece derived for one served the other."""
    spec, training, cluster, constraints = inputs
    candidates = {"base": _base(), **_variants()}

    def run(order: list[str]) -> dict[str, tuple[object, ...]]:
        memo = LedgerMemo(spec=spec, training=training)  # type: ignore[arg-type]
        return {name: _outcome(evaluate_candidate(
            spec, training, cluster, candidates[name], constraints,  # type: ignore[arg-type]
            memo=memo)) for name in order}

    forward = run(list(candidates))
    backward = run(list(reversed(candidates)))
    assert forward == backward
    for name in _variants():
        assert forward[name][1] != forward["base"][1], name


def test_one_search_memo_gives_each_model_and_recipe_what_a_memo_of_its_own_gives(
        inputs: tuple[object, ...]) -> None:
    """Two models of as many layers (Llama 3.1 8B, Mistral 7B) under two recipes, evaluated
    one after another through one search memo, take the plan, step time and peak each
    takes under a memo of its own, in either order: no table kept for one model or recipe
    served the other. The memo keeps one table object per model. (The searches of a process
    share one memo: it is released before each search here, so "alone" is alone.)"""
    spec, training, cluster, constraints = inputs
    other = model_preset("mistral-7b-v0.3")
    shorter = TrainingSpec(global_batch_size=64, sequence_length=2048)
    cases = [(spec, training), (other, training), (spec, shorter), (other, shorter)]
    assert other.num_layers == spec.num_layers  # type: ignore[attr-defined]

    def outcome(case: tuple[object, object]) -> tuple[object, ...]:
        return _outcome(evaluate_candidate(case[0], case[1], cluster, _base(),  # type: ignore[arg-type]
                                           constraints))  # type: ignore[arg-type]

    alone = []
    for case in cases:
        release_shared_memo()
        with search_memo():
            alone.append(outcome(case))
    assert len({result[1] for result in alone}) == len(cases)
    for order in (cases, cases[::-1]):
        release_shared_memo()
        with search_memo() as memo:
            shared = [outcome(case) for case in order]
            assert {tables.spec for tables in memo.models.values()} == {spec, other}
            assert memo.tables(other).spec is other and memo.tables(spec).spec is spec
            kept = kind_layers(spec)  # type: ignore[arg-type]
            assert memo.tables(spec).kind_layers is kept
            assert memo.tables(other).kind_layers is None
        assert shared == [alone[cases.index(case)] for case in order]


def test_a_decided_recipe_is_kept_per_recipe_object_and_dies_with_its_memo() -> None:
    """In a memo, one object per (recipe object, features on), never served to an equal
    recipe of another identity (no key is an object id); a dropped memo takes it along."""
    training = TrainingSpec(global_batch_size=64, sequence_length=4096)
    twin = training.model_copy()
    on = frozenset({"overlap_ep_comm"})
    with search_memo():
        one = resolved(training, on)
        assert one is not training and resolved(training, on) is one
        other = resolved(twin, on)
        assert other == one and other is not one
        assert resolved(twin, on) is other
        assert resolved(training, frozenset()) is not one
    release_shared_memo()
    with search_memo():
        assert resolved(twin, on) == one and resolved(twin, on) is not other


def test_searches_share_one_memo_until_it_is_released_or_full(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Every key holds every input of its piece, so searches and direct calls share one memo
    (those close together find what they share); past `SHARED_MEMO_ENTRIES` a search
    starting empties it, and the service's idle release does too."""
    spec = model_preset("llama-3.1-8b")
    parallel = ParallelConfig(tp=2, pp=2, dp=2, micro_batch_size=1)
    layouts = pipeline_layout(spec, parallel)
    with search_memo() as first:
        assert pipeline_layout(spec, parallel) is layouts
    with search_memo() as second:
        assert second is first is current_memo() and first.entries() >= 1
    monkeypatch.setattr(search_memo_module, "SHARED_MEMO_ENTRIES", 0)
    with search_memo() as third:
        assert third is first and third.entries() == 0
        assert pipeline_layout(spec, parallel) == layouts
        assert pipeline_layout(spec, parallel) is not layouts
    assert release_shared_memo() >= 1
    assert first.entries() == 0


def test_a_changed_constant_is_seen_once_the_memos_are_forgotten(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A key holds a piece's inputs, not the module constants it reads: the calibration
    scripts forget the memos (`clear_step_time_cache`) after changing one, and the next
    estimate, in a search or not, reads the new value."""
    spec = model_preset("mixtral-8x7b")
    training = TrainingSpec(global_batch_size=64, sequence_length=4096)
    parallel = ParallelConfig(tp=1, dp=8, ep=8, micro_batch_size=1)
    cluster = cluster_preset("h100-sxm5-80gb", num_nodes=1)
    with search_memo():
        before = estimate_step(spec, training, parallel, cluster).step_time_s
    monkeypatch.setattr(host_issue, "MOE_HOST_ISSUE_S", 20e-3)
    try:
        with search_memo():
            assert estimate_step(spec, training, parallel, cluster).step_time_s == before
        clear_step_time_cache()
        with search_memo():
            after = estimate_step(spec, training, parallel, cluster).step_time_s
        assert after > before
    finally:
        monkeypatch.undo()
        clear_step_time_cache()


def test_every_configuration_field_is_in_the_layer_parts_record_or_named_unread() -> None:
    """A configuration field the layer parts read but their record left out would let one
    configuration's parts serve another: each field is in exactly one of the two."""
    read = set(LayerPartsInputs._fields) - {"kind", "ep_overlapped"}
    assert read.isdisjoint(UNREAD_FIELDS)
    assert read | UNREAD_FIELDS == set(ParallelConfig.model_fields)


def test_the_fields_left_out_of_the_layer_parts_record_leave_the_parts_alike(
        inputs: tuple[object, ...]) -> None:
    """Computed afresh (no memo), a layer's parts are the same under configurations that
    differ only in fields `UNREAD_FIELDS` names, and differ under one that changes a field
    the record holds."""
    spec, training, cluster, _ = inputs
    base = _base().parallel()

    def parts(parallel: ParallelConfig) -> tuple[object, ...]:
        setting = step_setting(spec, training, parallel, cluster)  # type: ignore[arg-type]
        return layer_parts(spec, training, parallel, cluster, 0,  # type: ignore[arg-type]
                           fabric=setting.fabric, groups=setting.groups)

    first = parts(base)
    for update in ({"recompute": "full"}, {"fp8_activations": True},
                   {"activation_offload_frac": 0.5},
                   {"schedule": PipelineSchedule.INTERLEAVED_1F1B, "vpp": 2}):
        assert parts(ParallelConfig(**{**base.model_dump(), **update})) == first, update
    assert parts(base.model_copy(update={"zero_stage": 3})) != first


def test_plan_candidate_keys_by_identity_and_replace_starts_empty(
        inputs: tuple[object, ...]) -> None:
    spec, training, cluster, constraints = inputs
    one = PlanCandidate.of(spec, training, cluster, _base(), constraints)  # type: ignore[arg-type]
    same = PlanCandidate.of(spec, training, cluster, _base(), constraints)  # type: ignore[arg-type]
    assert one != same and len({one, same}) == 2
    assert one.rung(1, 0) is one.rung(1, 0)  # derived once, kept on the object
    table = one.work_table(1)
    assert one.work_table(0) is table and one.work_table(3) is not table
    wider = dataclasses.replace(one, mesh=_variants()["micro_batch_size"])
    assert wider.rung(1, 0).micro_batch_size == 2 and one.rung(1, 0).micro_batch_size == 1
    assert wider.work_table(1) is not table


def test_mesh_candidate_configurations_follow_its_fields() -> None:
    base = _base()
    assert base.parallel(zero_stage=1) is base.parallel(zero_stage=1)
    changed = dataclasses.replace(base, micro_batch_size=2, num_micro_batches=8)
    assert changed == dataclasses.replace(changed)  # the kept configurations do not compare
    assert changed.parallel(zero_stage=1).micro_batch_size == 2
    assert base.parallel(zero_stage=1).micro_batch_size == 1


def test_a_mesh_keeps_the_placements_a_fresh_computation_gives() -> None:
    parallel = _base().parallel()
    mesh = build_mesh(parallel.model_copy(update={"dp": 16}), num_nodes=8, gpus_per_node=8)
    for kind in (GroupKind.TP, GroupKind.DP, GroupKind.PP):
        kept = mesh.placement(kind)
        assert mesh.placement(kind) is kept
        assert kept == _placement(kind, mesh._members[kind], mesh._spans[kind],
                                  mesh._per_node[kind])
    inner, outer = mesh.split_placement(GroupKind.DP, 4)
    assert mesh.split_placement(GroupKind.DP, 4) == (inner, outer)
    assert mesh.split_placement(GroupKind.DP, 2) != (inner, outer)


@pytest.mark.parametrize("model, nodes", [("deepseek-v3", 16), ("llama-3.1-70b", 8)])
def test_the_core_record_holds_every_field_the_core_times_read(
        model: str, nodes: int) -> None:
    """Candidates that share a core record (`CoreInputs`: `BoundTables` shares core times by
    it) get the same core times computed each on its own: a field the times read but the
    record left out (pp, dp, the schedule's shape) would give one of them another's
    times."""
    from solver.bounds import BoundTables, CoreInputs
    from solver.space import candidate_meshes

    spec = model_preset(model)
    cluster = cluster_preset("h800-sxm5-80gb" if model == "deepseek-v3" else
                             "h100-sxm5-80gb", num_nodes=nodes)
    training = TrainingSpec(global_batch_size=1024, sequence_length=4096)
    tables = BoundTables(spec, training, cluster)
    groups: dict[tuple[object, ...], list[MeshCandidate]] = {}
    for c in candidate_meshes(spec, training, world_size=cluster.world_size,
                              gpus_per_node=cluster.gpus_per_node,
                              constraints=Constraints()):
        groups.setdefault(CoreInputs.of(c, training), []).append(c)
    shared = [members for members in groups.values()
              if len({(c.pp, c.dp, c.schedule, c.vpp) for c in members}) > 1]
    assert len(shared) >= 3
    rng = random.Random(38)
    for members in rng.sample(shared, min(6, len(shared))):
        first, other = members[0], rng.choice(members[1:])
        one, two = tables._compute_core(first), tables._compute_core(other)
        assert (one.head_s, one.layer_f, one.layer_b, one.layer_w) == (
            two.head_s, two.layer_f, two.layer_b, two.layer_w), (first.key, other.key)


class _Reads:
    """A configuration that records the name of every field read through it."""

    def __init__(self, parallel: ParallelConfig) -> None:
        self._parallel = parallel
        self.read: set[str] = set()

    def __getattr__(self, name: str) -> object:
        self.read.add(name)
        return getattr(self._parallel, name)


@pytest.mark.parametrize("config", [
    dict(pp=4),
    dict(pp=4, vpp=2, schedule=PipelineSchedule.INTERLEAVED_1F1B),
    dict(pp=4, vpp=2, schedule=PipelineSchedule.INTERLEAVED_1F1B, microbatch_group_size=4),
    dict(pp=4, vpp=2, schedule=PipelineSchedule.DUALPIPEV),
    dict(pp=4, schedule=PipelineSchedule.DUALPIPE),
    dict(pp=2, layers_per_stage=(10, 22)),
    dict(pp=2, vpp=2, schedule=PipelineSchedule.INTERLEAVED_1F1B,
         layers_per_virtual_stage=(6, 10, 10, 6)),
], ids=["1f1b", "interleaved", "grouped", "dualpipe-v", "dualpipe", "explicit", "explicit-virtual"])
def test_a_pipeline_layout_reads_only_the_fields_that_key_it(config: dict[str, object]) -> None:
    """The layout is kept under `LAYOUT_FIELDS` alone: a field it read beyond them would let
    two configurations differing there share one layout."""
    spec = model_preset("llama-3.1-8b")
    parallel = ParallelConfig(tp=1, dp=1, micro_batch_size=1, **config)  # type: ignore[arg-type]
    reads = _Reads(parallel)
    layouts = _pipeline_layout(spec, reads)  # type: ignore[arg-type]
    assert reads.read <= set(LAYOUT_FIELDS), reads.read - set(LAYOUT_FIELDS)
    assert reads.read, "the recorder saw no read"
    with search_memo():
        assert pipeline_layout(spec, parallel) == layouts


def _layer_setting(name: str, config: dict[str, object]
                   ) -> tuple[ModelSpec, TrainingSpec, ParallelConfig, AxisGroups, Fabric]:
    """A model preset, a recipe of 8K tokens and `config` on one H100 node: the inputs of a
    layer's calls."""
    spec = model_preset(name)
    training = TrainingSpec(global_batch_size=64, sequence_length=8192)
    parallel = ParallelConfig(micro_batch_size=1, **config)  # type: ignore[arg-type]
    cluster = cluster_preset("h100-sxm5-80gb", num_nodes=1)
    groups = axis_groups(parallel, gpus_per_node=cluster.gpus_per_node)
    return spec, training, parallel, groups, step_setting(spec, training, parallel, cluster).fabric


@pytest.mark.parametrize(("name", "config"), [
    ("llama-3.1-8b", dict(tp=4, dp=2, sequence_parallel=True)),
    ("llama-3.1-8b", dict(tp=2, cp=4, cp_kind="ring")),
    ("llama-3.1-8b", dict(tp=1, cp=8, cp_kind="ulysses")),
    ("llama-3.1-8b", dict(tp=1, cp=8, cp_kind="usp", ulysses_degree=2)),
    ("mixtral-8x7b", dict(tp=2, dp=4, ep=4, etp=1, sequence_parallel=True)),
], ids=["tp-sp", "ring", "ulysses", "usp", "moe"])
def test_a_layers_calls_read_only_the_fields_that_key_them(
        name: str, config: dict[str, object]) -> None:
    """A layer's calls are kept under `LAYER_CALL_FIELDS` (with the recipe, mesh and fabric):
    a configuration field they read beyond them would let two configurations differing there
    share one layer's calls."""
    spec, training, parallel, groups, fabric = _layer_setting(name, config)
    reads = _Reads(parallel)
    layer = next(i for i in range(spec.num_layers) if spec.is_moe_layer(i)) if spec.moe else 0
    with search_memo():
        recorded = layer_calls(spec, layer, training=training, parallel=reads,  # type: ignore[arg-type]
                               groups=groups, fabric=fabric)
    assert reads.read <= set(LAYER_CALL_FIELDS), reads.read - set(LAYER_CALL_FIELDS)
    assert recorded, "the layer has no calls to check"
    with search_memo():
        assert layer_calls(spec, layer, training=training, parallel=parallel, groups=groups,
                           fabric=fabric) == recorded


FAMILY_FIELDS = {
    # Each family's key on the model's tables (`models.core.step_time.exposure.layer_calls`):
    # its degrees and placement, and the tokens per rank, b * s / cp, in place of the
    # micro-batch and CP degree.
    "tp": {"tp", "sequence_parallel", "micro_batch_size", "cp"},
    "cp": {"tp", "cp", "cp_kind", "ulysses_degree", "micro_batch_size"},
    "ep": {"tp", "ep", "etp", "micro_batch_size", "cp"},
}


@pytest.mark.parametrize(("name", "config"), [
    ("llama-3.1-8b", dict(tp=4, dp=2, sequence_parallel=True)),
    ("llama-3.1-8b", dict(tp=2, cp=4, cp_kind="usp", ulysses_degree=2)),
    ("mixtral-8x7b", dict(tp=2, dp=4, ep=4, etp=1, sequence_parallel=True)),
], ids=["tp-sp", "usp", "moe"])
def test_each_call_family_reads_only_the_fields_of_its_own_key(
        name: str, config: dict[str, object]) -> None:
    """The TP, CP and expert families are shared by configurations alike in their own key
    only (configurations differing in the expert degree share the TP calls): each family's
    rule must read no other configuration field."""
    spec, training, parallel, groups, fabric = _layer_setting(name, config)
    rules = {"tp": lambda ctx: [*tp_block_calls(ctx, "attention"), *tp_block_calls(ctx, "mlp")],
             "cp": lambda ctx: cp_calls(ctx, False) if parallel.cp > 1 else [],
             "ep": lambda ctx: expert_calls(ctx) if spec.moe else []}
    for family, rule in rules.items():
        reads = _Reads(parallel)
        with search_memo():
            rule(groups.layer_context(spec, training, reads, fabric))  # type: ignore[arg-type]
        assert reads.read <= FAMILY_FIELDS[family], (family, reads.read - FAMILY_FIELDS[family])
