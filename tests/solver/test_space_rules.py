"""The search space, evaluate and the mesh lab share one set of mesh rules (`models.core.mesh`)."""

import pytest

from api_schemas import (
    ClusterInput,
    Constraints,
    EvaluateRequest,
    ModelPreset,
    ParallelConfig,
    PlanRequest,
    SolverLimits,
    TrainingSpec,
)
from api_schemas.mesh import ClusterShape, MeshRequest
from models.catalog.presets import model_ids, model_preset
from models.core.mesh import mesh_problems, validate_mesh
from models.core.mesh import rules as mesh_rules
from models.core.mesh.report import mesh_report
from models.core.mesh.rules_shape import etp_divides_expert_ffn, tp_divides_ffn
from models.errors import InvalidSpecError
from solver import evaluate, plan, space
from solver.space import candidate_meshes

TRAIN = TrainingSpec(global_batch_size=64, sequence_length=4096)


def test_llama_70b_on_two_h100_nodes_plans_what_evaluate_accepts() -> None:
    # Up to the usable memory: with the default safety margin 70B on two nodes has no plan.
    request = PlanRequest(model=ModelPreset(preset="llama-3.1-70b"),
                          cluster=ClusterInput(gpu="h100-sxm5-80gb", num_nodes=2,
                                               memory_margin_frac=0),
                          training=TRAIN,
                          solver=SolverLimits(time_limit_s=60, top_k=2, num_workers=1))
    planned = plan(request)
    assert planned.parallel is not None
    spec = model_preset("llama-3.1-70b")
    validate_mesh(planned.parallel, model=spec, num_nodes=2, gpus_per_node=8, training=TRAIN)
    scored = evaluate(EvaluateRequest(model=request.model, cluster=request.cluster,
                                      training=TRAIN, parallel=planned.parallel))
    assert scored.parallel == planned.parallel
    for alt in planned.alternatives:
        validate_mesh(alt.parallel, model=spec, num_nodes=2, gpus_per_node=8, training=TRAIN)


@pytest.mark.slow
@pytest.mark.parametrize("model_id", model_ids())
def test_every_candidate_of_every_preset_passes_the_mesh_rules(model_id: str) -> None:
    spec = model_preset(model_id)
    pinned = Constraints(micro_batch_size=1, vpp=[1, 2])
    for nodes, training in ((1, TRAIN), (4, TRAIN),
                            (2, TrainingSpec(global_batch_size=32, sequence_length=32768))):
        candidates = candidate_meshes(spec, training, world_size=8 * nodes, gpus_per_node=8,
                                      constraints=pinned)
        assert candidates, (model_id, nodes)
        for c in candidates:
            errors = [p for p in mesh_problems(c.parallel(), model=spec, num_nodes=nodes,
                                               gpus_per_node=8, training=training)
                      if p.severity == "error"]
            assert not errors, (model_id, c.key, [p.rule for p in errors])



def test_space_evaluate_and_mesh_lab_apply_the_same_ffn_rule() -> None:
    # 28676 = 4 x 7169: TP4 splits the MLP evenly, TP8 cannot.
    spec = model_preset("llama-3.1-70b").model_copy(update={"ffn_hidden_size": 28676})
    assert tp_divides_ffn in mesh_rules.TP_RULES and tp_divides_ffn in mesh_rules.RULES
    # The search checks the registry's error rules, in two groups that together are all.
    assert space.admits is mesh_rules.admits
    assert (space.SHAPE_RULES, space.PIPELINE_RULES) == (mesh_rules.SHAPE_RULES,
                                                         mesh_rules.PIPELINE_RULES)
    assert set(mesh_rules.SHAPE_RULES) | set(mesh_rules.PIPELINE_RULES) == (
        set(mesh_rules.RULES) - mesh_rules.WARNING_ONLY_RULES)
    tps = {c.tp for c in candidate_meshes(spec, TRAIN, world_size=16, gpus_per_node=8,
                                          constraints=Constraints())}
    assert 4 in tps and 8 not in tps
    tp8 = ParallelConfig(tp=8, pp=2, dp=1, sequence_parallel=True)
    with pytest.raises(InvalidSpecError, match=r"\[tp-divides-ffn\]"):
        evaluate(EvaluateRequest(model=spec, cluster=ClusterInput(gpu="h100-sxm5-80gb",
                                                                   num_nodes=2),
                                 training=TRAIN, parallel=tp8))
    lab = mesh_report(MeshRequest(cluster=ClusterShape(num_nodes=2, gpus_per_node=8),
                                  parallel=tp8, model=spec, training=TRAIN))
    assert "tp-divides-ffn" in [p.rule for p in lab.problems]
    assert not lab.valid


def test_expert_tp_must_divide_the_expert_ffn_width_in_the_search() -> None:
    base = model_preset("mixtral-8x7b")
    assert base.moe is not None
    spec = base.model_copy(update={"moe": base.moe.model_copy(
        update={"expert_ffn_hidden_size": 14337})})  # odd: no expert TP degree > 1 divides it
    assert etp_divides_expert_ffn in mesh_rules.EXPERT_RULES
    candidates = candidate_meshes(spec, TRAIN, world_size=8, gpus_per_node=8,
                                  constraints=Constraints(etp=[1, 2, 4, 8], pp=1))
    assert candidates and {c.etp for c in candidates} == {1}
    original = candidate_meshes(base, TRAIN, world_size=8, gpus_per_node=8,
                                constraints=Constraints(etp=[1, 2, 4, 8], pp=1))
    assert {c.etp for c in original} > {1}
