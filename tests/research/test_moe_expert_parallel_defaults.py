"""Expert parallelism in the open on the flagship MoE models: on a published cluster size,
each default answer either uses EP > 1 or shows the best EP > 1 plan beside it with the
terms that separate them (`PlanResponse.expert_parallel`).

The problems: DeepSeek-V3 on 2,048 H800 and Kimi K2 on 256 H800 (the published presets of
`models.evidence.published`), Qwen3-235B-A22B on 256 H100 and GPT-OSS-120B on 64 H100 (the
cluster, batch, sequence and precision of their Megatron-Bridge 25.11 rows in
research/data/published_runs.json), and Mixtral 8x22B on 256 H100 (the Qwen3 row's cluster;
no Mixtral 8x22B run is in the dataset). Everything else is the planner's default: runtime
features, recompute, ZeRO and schedule are its choices."""

import pytest

from api_schemas import ClusterInput, ModelPreset, PlanRequest, SolverLimits, TrainingSpec
from api_schemas.dtypes import DType
from api_schemas.requests import ModelInput
from models.evidence.published import published_run
from research.validate_published import DATA, model_of
from solver import plan

LIMITS = SolverLimits(time_limit_s=120, top_k=1, num_workers=1)


def _published_preset(run_id: str) -> PlanRequest:
    run = published_run(run_id)
    return PlanRequest(model=ModelPreset(preset=run.model_preset),
                       cluster=ClusterInput(gpu=run.gpu, num_nodes=run.num_nodes,
                                            gpus_per_node=run.gpus_per_node),
                       training=run.training, solver=LIMITS)


def _bridge_row(row_id: str, model: ModelInput | None = None) -> PlanRequest:
    row = next(r for r in DATA["runs"] if r["id"] == row_id)
    spec = model if model is not None else model_of(row)
    assert spec is not None, row_id
    p = row["parallel"]
    training = TrainingSpec(global_batch_size=p["global_batch_size"],
                            sequence_length=row["model"]["seq_len"],
                            compute_dtype=DType.FP8 if "fp8" in p["precision"] else DType.BF16)
    return PlanRequest(model=spec, cluster=ClusterInput(
        gpu=row["hardware"]["gpu"], num_nodes=row["hardware"]["num_gpus"] // 8),
        training=training, solver=LIMITS)


PROBLEMS = {
    "deepseek-v3": lambda: _published_preset("deepseek-v3-2048"),
    "kimi-k2": lambda: _published_preset("kimi-k2-256"),
    "qwen3-235b-a22b": lambda: _bridge_row("bridge-25.11-dgx-h100-qwen3-235b-a22b-256gpu"),
    "gpt-oss-120b": lambda: _bridge_row("bridge-25.11-dgx-h100-gpt-oss-120b-64gpu"),
    "mixtral-8x22b": lambda: _bridge_row("bridge-25.11-dgx-h100-qwen3-235b-a22b-256gpu",
                                         ModelPreset(preset="mixtral-8x22b")),
}


@pytest.mark.slow
@pytest.mark.parametrize("model", sorted(PROBLEMS))
def test_default_moe_answer_uses_expert_parallelism_or_shows_it_beside(model: str) -> None:
    response = plan(PROBLEMS[model]())
    assert response.parallel is not None, response.explanation.summary
    if response.parallel.ep > 1:
        return
    side = response.expert_parallel
    assert side is not None and side.best_ep is not None, model
    assert side.best_ep.ep > 1 and side.summary.startswith("EP = 1 chosen")
