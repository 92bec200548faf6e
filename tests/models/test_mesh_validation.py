"""Mesh rules: each invalid mesh is rejected naming its rule, with a valid alternative."""

from dataclasses import dataclass, field

import pytest

from api_schemas import (
    AttentionKind,
    MLASpec,
    ModelSpec,
    MoESpec,
    ParallelConfig,
    TrainingSpec,
)
from models.core.mesh import Severity, mesh_problems, validate_mesh
from models.errors import InvalidSpecError

LLAMA70 = ModelSpec(name="llama-70b-like", num_layers=80, hidden_size=8192,
                    num_attention_heads=64, num_kv_heads=8, attention=AttentionKind.GQA,
                    ffn_hidden_size=28672, vocab_size=128256)
HEADS40 = LLAMA70.model_copy(update={"name": "heads-40", "num_attention_heads": 40,
                                     "hidden_size": 5120, "ffn_hidden_size": 13824})
KV12 = LLAMA70.model_copy(update={"name": "kv-12", "num_attention_heads": 48,
                                  "num_kv_heads": 12, "hidden_size": 6144,
                                  "ffn_hidden_size": 16384})
ODD_FFN = LLAMA70.model_copy(update={"name": "odd-ffn", "ffn_hidden_size": 5460})
TINY = LLAMA70.model_copy(update={"name": "tiny", "num_layers": 8})
MOE = ModelSpec(name="moe-like", num_layers=32, hidden_size=4096, num_attention_heads=32,
                num_kv_heads=8, attention=AttentionKind.GQA, ffn_hidden_size=11008,
                vocab_size=100000,
                moe=MoESpec(num_experts=64, top_k=6, expert_ffn_hidden_size=1000,
                            first_dense_layers=1))
MLA = ModelSpec(name="mla-like", num_layers=60, hidden_size=5120, num_attention_heads=128,
                attention=AttentionKind.MLA,
                mla=MLASpec(q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128,
                            qk_rope_head_dim=64, v_head_dim=128),
                ffn_hidden_size=12288, vocab_size=102400)
TRAIN = TrainingSpec(global_batch_size=512, sequence_length=8192)


@dataclass
class Case:
    rule: str
    parallel: dict[str, object]
    model: ModelSpec = LLAMA70
    nodes: int = 16
    training: TrainingSpec | None = TRAIN
    order: str = "tp-cp-ep-dp-pp"
    extra: dict[str, object] = field(default_factory=dict)


INVALID = [
    Case("world-size", {"tp": 8, "pp": 4, "dp": 2}),
    Case("order-names", {"tp": 8, "pp": 4, "dp": 4}, order="tp-dp-pp-xx"),
    Case("tp-divides-heads", {"tp": 16, "pp": 4, "dp": 2}, model=HEADS40),
    Case("tp-divides-kv-heads", {"tp": 8, "pp": 4, "dp": 4}, model=KV12),
    Case("tp-divides-ffn", {"tp": 8, "pp": 4, "dp": 4}, model=ODD_FFN),
    Case("ep-needs-moe", {"tp": 8, "pp": 4, "dp": 4, "ep": 2}),
    Case("ep-divides-experts", {"tp": 1, "dp": 96, "ep": 3}, model=MOE, nodes=12,
         training=TrainingSpec(global_batch_size=576, sequence_length=4096)),
    Case("expert-fold", {"tp": 2, "dp": 4, "ep": 16}, model=MOE, nodes=1),
    Case("etp-divides-expert-ffn", {"tp": 8, "dp": 16, "ep": 8, "etp": 16}, model=MOE),
    Case("expert-pp-order", {"tp": 2, "dp": 8, "pp": 2, "ep": 4, "etp": 2}, model=MOE,
         nodes=4, order="tp-pp-cp-ep-dp"),
    Case("ulysses-divides-heads", {"tp": 1, "cp": 16, "dp": 8, "cp_kind": "ulysses"},
         model=HEADS40),
    Case("ulysses-divides-kv-heads", {"tp": 1, "cp": 8, "dp": 16, "cp_kind": "ulysses"},
         model=KV12),
    Case("pp-at-most-layers", {"tp": 8, "pp": 16}, model=TINY),
    Case("layers-per-stage-sum", {"tp": 8, "pp": 4, "dp": 4,
                                  "layers_per_stage": [20, 20, 20, 19]}),
    Case("schedule-needs-pp", {"tp": 8, "dp": 16, "vpp": 2, "schedule": "interleaved_1f1b"}),
    Case("dualpipe-even-pp", {"tp": 8, "pp": 5, "dp": 1, "schedule": "dualpipe"}, nodes=5),
    Case("dualpipe-even-micro-batches", {"tp": 1, "pp": 4, "dp": 32, "schedule": "dualpipe"},
         training=TrainingSpec(global_batch_size=480, sequence_length=8192)),
    Case("batch-divisible", {"tp": 8, "pp": 4, "dp": 4, "micro_batch_size": 3}),
    Case("cp-divides-sequence", {"tp": 8, "cp": 3, "dp": 4}, nodes=12),
    Case("sequence-parallel-divides-sequence", {"tp": 8, "pp": 4, "dp": 4,
                                                "sequence_parallel": True},
         training=TrainingSpec(global_batch_size=512, sequence_length=8196)),
    Case("moe-tp-needs-sequence-parallel", {"tp": 2, "dp": 4, "ep": 8}, model=MOE, nodes=1),
]


def _problems(case: Case, parallel: ParallelConfig, order: str):
    return mesh_problems(parallel, model=case.model, num_nodes=case.nodes, gpus_per_node=8,
                         training=case.training, order=order)


def test_at_least_fifteen_distinct_rules_are_exercised() -> None:
    assert len({c.rule for c in INVALID}) >= 15


@pytest.mark.parametrize("case", INVALID, ids=[c.rule for c in INVALID])
def test_invalid_mesh_is_rejected_with_rule_and_valid_alternative(case: Case) -> None:
    parallel = ParallelConfig.model_validate(case.parallel)
    problems = _problems(case, parallel, case.order)
    hit = [p for p in problems if p.rule == case.rule]
    assert hit, f"expected rule {case.rule}, got {[p.rule for p in problems]}"
    problem = hit[0]
    assert problem.severity == Severity.ERROR
    assert problem.values, "the rule reports the values it compared"
    alternative = problem.alternative
    assert alternative is not None and alternative.change != "no change"
    after = _problems(case, alternative.parallel, alternative.order)
    assert not [p for p in after if p.severity == Severity.ERROR], [p.detail for p in after]
    assert case.rule not in {p.rule for p in after}
    with pytest.raises(InvalidSpecError) as err:
        validate_mesh(parallel, model=case.model, num_nodes=case.nodes, gpus_per_node=8,
                      training=case.training, order=case.order)
    text = str(err.value)
    assert f"[{case.rule}]" in text and "a valid alternative:" in text
    assert err.value.code == "invalid-spec"
    assert err.value.diagnostics is not None


@pytest.mark.parametrize("case", [
    Case("pp-divides-layers", {"tp": 8, "pp": 3, "dp": 4}, nodes=12),
    Case("vpp-divides-layers", {"tp": 8, "pp": 4, "dp": 4, "vpp": 3,
                                "schedule": "interleaved_1f1b"}),
], ids=["pp-divides-layers", "vpp-divides-layers"])
def test_uneven_layer_split_is_a_warning_with_an_even_alternative(case: Case) -> None:
    # The layout gives the extra layers to middle stages, so the plan is runnable by the
    # cost model; Megatron needs an explicit uneven split, which the warning says.
    parallel = ParallelConfig.model_validate(case.parallel)
    hit = [p for p in _problems(case, parallel, case.order) if p.rule == case.rule]
    assert hit and hit[0].severity == Severity.WARNING
    assert "uneven" in hit[0].detail
    assert hit[0].alternative is not None


def test_world_size_alternative_completes_the_product_with_one_axis() -> None:
    problems = mesh_problems(ParallelConfig(tp=3, pp=4, dp=8), model=LLAMA70, num_nodes=16,
                             gpus_per_node=8, training=TRAIN)
    world = next(p for p in problems if p.rule == "world-size")
    assert world.alternative is not None
    assert world.alternative.change == "tp 3 -> 4"
    assert world.values == {"product": 96, "world_size": 128}


def test_tp_crossing_nodes_is_a_warning_not_an_error() -> None:
    wide = LLAMA70.model_copy(update={"num_kv_heads": 16})
    warnings = validate_mesh(ParallelConfig(tp=16, pp=4, dp=2), model=wide, num_nodes=16,
                             gpus_per_node=8, training=TRAIN)
    assert [w.rule for w in warnings] == ["tp-crosses-nodes"]
    assert warnings[0].severity == Severity.WARNING
    assert warnings[0].alternative is not None
    assert warnings[0].alternative.parallel.tp == 8


def test_kv_heads_replicate_when_tp_is_a_multiple() -> None:
    problems = mesh_problems(ParallelConfig(tp=16, pp=4, dp=2), model=LLAMA70, num_nodes=16,
                             gpus_per_node=8, training=TRAIN)
    kv = next(p for p in problems if p.rule == "kv-heads-replicated")
    assert kv.severity == Severity.WARNING
    assert kv.values["replicas"] == 2
    assert "replicated on tp/kv = 2 ranks" in kv.message


@pytest.mark.parametrize("parallel, training, rule", [
    ({"tp": 1, "pp": 4, "dp": 32, "sequence_parallel": True}, TRAIN,
     "sequence-parallel-needs-tp"),
    ({"tp": 8, "pp": 4, "dp": 1, "cp": 4}, TrainingSpec(global_batch_size=64,
                                                        sequence_length=8196),
     "cp-load-balance"),
    ({"tp": 8, "pp": 16, "dp": 1, "micro_batch_size": 4},
     TrainingSpec(global_batch_size=32, sequence_length=8192), "few-micro-batches"),
    ({"tp": 8, "pp": 4, "dp": 4, "vpp": 2, "schedule": "interleaved_1f1b"},
     TrainingSpec(global_batch_size=40, sequence_length=8192), "interleaved-micro-batches"),
    ({"tp": 4, "cp": 4, "dp": 8, "cp_kind": "ulysses"}, TRAIN, "ulysses-kv-replicated"),
])
def test_warnings_come_with_an_alternative(parallel: dict[str, object],
                                           training: TrainingSpec, rule: str) -> None:
    nodes = 16
    p = ParallelConfig.model_validate(parallel)
    problems = mesh_problems(p, model=LLAMA70, num_nodes=nodes, gpus_per_node=8,
                             training=training)
    hit = next(x for x in problems if x.rule == rule)
    assert hit.severity == Severity.WARNING
    assert hit.alternative is not None
    again = mesh_problems(hit.alternative.parallel, model=LLAMA70, num_nodes=nodes,
                          gpus_per_node=8, training=training, order=hit.alternative.order)
    assert rule not in {x.rule for x in again}
    assert not [x for x in again if x.severity == Severity.ERROR]


def test_valid_mesh_has_no_problems() -> None:
    assert mesh_problems(ParallelConfig(tp=8, pp=4, dp=4, sequence_parallel=True),
                         model=LLAMA70, num_nodes=16, gpus_per_node=8, training=TRAIN) == ()
    assert mesh_problems(ParallelConfig(tp=1, pp=1, dp=16, ep=16, zero_stage=1), model=MOE,
                         num_nodes=2, gpus_per_node=8, training=TRAIN) == ()
    assert mesh_problems(ParallelConfig(tp=8, pp=4, dp=4, cp=1), model=MLA, num_nodes=16,
                         gpus_per_node=8, training=TRAIN) == ()


def test_no_alternative_is_reported_as_none_when_none_exists() -> None:
    """8 sequences on 128 GPUs with tp <= 8: m >= pp would need tp * pp * dp <= 8 * tp."""
    problems = mesh_problems(ParallelConfig(tp=8, pp=16, dp=1), model=LLAMA70, num_nodes=16,
                             gpus_per_node=8,
                             training=TrainingSpec(global_batch_size=8, sequence_length=8192))
    few = next(p for p in problems if p.rule == "few-micro-batches")
    assert few.alternative is None
    assert "no configuration" in few.detail


def test_without_model_only_model_free_rules_run() -> None:
    problems = mesh_problems(ParallelConfig(tp=3, pp=4, dp=8), model=None, num_nodes=16,
                             gpus_per_node=8)
    assert [p.rule for p in problems] == ["world-size"]


def test_mla_skips_kv_head_rules() -> None:
    problems = mesh_problems(ParallelConfig(tp=8, cp=2, dp=8, cp_kind="ulysses"), model=MLA,
                             num_nodes=16, gpus_per_node=8, training=TRAIN)
    assert problems == ()


def test_each_rule_group_reads_only_its_declared_fields() -> None:
    """The search checks `PIPELINE_RULES` and `SHAPE_RULES` once per distinct value of the
    fields each group declares (`solver.space`), which equals `errors` on the whole
    candidate only if every rule's verdict is a function of its group's fields. Over random
    configurations (in the default order, the way the search builds them, right and wrong
    world sizes alike) on several models and recipes, each rule's verdict on the whole
    configuration equals its verdict on the configuration cut to its group's fields, the
    rest at their defaults; and every rule of both groups finds an error somewhere."""
    import random

    from api_schemas import ContextParallelKind, PipelineSchedule
    from models.core.mesh.candidates import Candidate, MeshContext
    from models.core.mesh.layout import DEFAULT_ORDER
    from models.core.mesh.rules import (
        PIPELINE_FIELDS,
        PIPELINE_RULES,
        SHAPE_FIELDS,
        SHAPE_RULES,
    )

    rng = random.Random(7)
    default = ParallelConfig()
    contexts = [MeshContext(model=model, training=training, num_nodes=nodes, gpus_per_node=8)
                for model in (LLAMA70, KV12, ODD_FFN, TINY, MOE, MLA)
                for training in (TRAIN, TrainingSpec(global_batch_size=96,
                                                     sequence_length=12288))
                for nodes in (1, 4)]
    flagged: set[str] = set()
    for _ in range(6000):
        ctx = rng.choice(contexts)
        degrees = {axis: rng.choice((1, 2, 3, 4, 8)) for axis in ("tp", "cp")}
        degrees["pp"] = rng.choice((1, 2, 3, 4, 8, 16))
        inner = degrees["tp"] * degrees["cp"] * degrees["pp"]
        dp = ctx.world_size // inner if ctx.world_size % inner == 0 and rng.random() < 0.8 \
            else rng.choice((1, 2, 3, 6))
        kind = rng.choice(list(ContextParallelKind))
        pp = degrees["pp"]
        fields: dict[str, object] = {**degrees, "dp": dp, "cp_kind": kind,
                  "ulysses_degree": rng.choice((2, 4)) if kind == ContextParallelKind.USP
                  else None,
                  "ep": rng.choice((1, 2, 4, 8, 3)), "etp": rng.choice((1, 1, 2, 3)),
                  "sequence_parallel": rng.random() < 0.5,
                  "vpp": rng.choice((1, 2, 3, 5)), "schedule": rng.choice(list(PipelineSchedule)),
                  "micro_batch_size": rng.choice((1, 2, 3, 4, 8))}
        if rng.random() < 0.2:  # an explicit split, adding up or not
            share = ctx.arch.num_layers // pp + rng.choice((0, 0, 1))
            fields["layers_per_stage"] = [share] * pp
        whole = Candidate(parallel=default.model_copy(update=fields), order=DEFAULT_ORDER)
        for rules, names in ((SHAPE_RULES, SHAPE_FIELDS), (PIPELINE_RULES, PIPELINE_FIELDS)):
            cut = Candidate(parallel=default.model_copy(
                update={k: v for k, v in fields.items() if k in names}), order=DEFAULT_ORDER)
            for rule in rules:
                found = rule(ctx, whole)
                error = found is not None and found.severity == Severity.ERROR
                cut_found = rule(ctx, cut)
                assert error == (cut_found is not None
                                 and cut_found.severity == Severity.ERROR), (rule, fields)
                if error:
                    flagged.add(rule.__name__)
    rule_names = {rule.__name__ for rule in SHAPE_RULES + PIPELINE_RULES}
    assert not set(PIPELINE_RULES) & set(SHAPE_RULES)
    # Only an order other than the default (which the search never builds) breaks these two.
    assert flagged == rule_names - {"order_names", "expert_pp_order"}, rule_names - flagged
