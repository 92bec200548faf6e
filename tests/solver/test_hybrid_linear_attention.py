"""A hybrid KDA + MLA model (Kimi Linear) through `evaluate` and the planner's CP choices."""

from api_schemas import ParallelConfig, TrainingSpec
from api_schemas.requests import EvaluateRequest, PlanRequest
from models.catalog.presets import hf_preset_config, model_preset
from solver.api import evaluate, plan
from solver.export.megatron_model import model_args

KIMI_LINEAR = "kimi-linear-48b-a3b-instruct"


def _evaluate(model: dict[str, object], seq: int, cp: int) -> dict[str, object]:
    body = {"model": model,
            "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 4, "gpus_per_node": 8},
            "training": {"global_batch_size": 32, "sequence_length": seq},
            "parallel": {"tp": 1, "pp": 1, "dp": 32 // cp, "cp": cp, "ep": 8,
                         "micro_batch_size": 1, "zero_stage": 1, "recompute": "full"}}
    return evaluate(EvaluateRequest.model_validate(body)).model_dump(mode="json")


def test_evaluate_reads_the_hf_config_and_books_state_passing_memory() -> None:
    response = _evaluate({"hf_config": hf_preset_config(KIMI_LINEAR)}, 32_768, 4)
    assert response["status"] == "feasible"
    items = [item for stage in response["memory"]["stages"] for item in stage["components"]
             if item["name"] == "CP gathered state fragments"]
    assert items and items[0]["bytes"] == 4 * 32 * 128 * 256 * 4


def test_kda_layers_expose_less_cp_time_than_the_same_model_all_mla() -> None:
    """With CP across two nodes, only the 7 MLA layers of 27 exchange K/V blocks; the 20 KDA
    layers pass fixed-size states, so the hybrid exposes far less CP time than an all-MLA
    copy of the model."""
    spec = model_preset(KIMI_LINEAR)
    all_mla = spec.model_copy(update={"linear_attention": None}).model_dump(mode="json")
    hybrid = _evaluate({"preset": KIMI_LINEAR}, 32_768, 16)
    full = _evaluate(all_mla, 32_768, 16)
    hybrid_cp = hybrid["time"]["exposed_comm_s"]["cp"]
    assert 0.0 < hybrid_cp < 0.5 * full["time"]["exposed_comm_s"]["cp"]
    assert hybrid["time"]["step_time_s"] < full["time"]["step_time_s"]


def test_state_passing_exposure_does_not_grow_with_the_sequence() -> None:
    """Inside one node the MLA layers' ring hides behind their attention, so what CP
    exposes is the KDA layers' state all-gathers: the same at 32K and 128K tokens."""
    short = _evaluate({"preset": KIMI_LINEAR}, 32_768, 8)["time"]["exposed_comm_s"]["cp"]
    long = _evaluate({"preset": KIMI_LINEAR}, 131_072, 8)["time"]["exposed_comm_s"]["cp"]
    assert short > 0.0 and long == short


def test_the_planner_picks_a_cp_degree_for_the_hybrid_model_at_long_context() -> None:
    body = {"model": {"preset": KIMI_LINEAR},
            "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 4, "gpus_per_node": 8},
            "training": {"global_batch_size": 32, "sequence_length": 32_768},
            "constraints": {"tp": 1, "pp": 1, "ep": 8, "zero_stage": 1, "micro_batch_size": 1,
                            "cp_kind": "ring", "allow_offload": False},
            "solver": {"time_limit_s": 60}}
    response = plan(PlanRequest.model_validate(body)).model_dump(mode="json")
    assert response["status"] == "optimal"
    chosen = response["parallel"]["cp"]
    assert chosen > 1
    assert {alt["parallel"]["cp"] for alt in response["alternatives"]} - {chosen}


def test_the_megatron_export_says_it_does_not_express_the_kda_layers() -> None:
    notes = model_args(model_preset(KIMI_LINEAR),
                       TrainingSpec(global_batch_size=32, sequence_length=32_768),
                       ParallelConfig(tp=1, pp=1, dp=8, ep=8)).notes
    assert any("20 of 27 layers use linear attention" in note for note in notes)


def test_the_explanation_names_the_cp_kind_of_each_layer_type() -> None:
    notes = _evaluate({"preset": KIMI_LINEAR}, 32_768, 4)["explanation"]["notes"]
    assert any("the 20 linear-attention layers pass recurrent state" in note
               and "the 7 full-attention layers use ring" in note for note in notes)
