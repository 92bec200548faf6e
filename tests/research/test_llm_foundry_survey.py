"""The llm-foundry MPT survey (research/survey_llm_foundry.py): its data is what the
benchmark README prints, its models are MPT's to the parameter, and the cost model predicts
the runs as printed within the accuracy the survey reports."""

import statistics
from typing import Any

import pytest

from api_schemas import AttentionKernel
from models.core.params import count_parameters
from models.evidence.pairwise_band import pairwise_band
from research import survey_llm_foundry as survey

ROWS = survey.load_rows()

Errors = list[tuple[dict[str, Any], float]]


@pytest.fixture(scope="module")
def errors() -> Errors:
    """Every row with its error under the survey's recipe, computed once for the module."""
    return [(row, survey.relative_error(row)) for row in ROWS]


def test_the_data_holds_every_row_of_the_five_tables() -> None:
    tables = {row["table"] for row in ROWS}
    assert len(ROWS) == 216 and len(tables) == 5
    for row in ROWS:
        # The printed columns agree with each other (tokens/s is rounded to the token).
        assert row["global_batch_tokens"] == row["global_batch_size"] * row["seq_len"]
        assert row["tokens_per_s_per_gpu"] * row["num_gpus"] == pytest.approx(
            row["tokens_per_s"], rel=0.002, abs=row["num_gpus"])


def test_every_row_prints_the_parameter_count_of_its_mpt_model() -> None:
    """NumParams of each row (it grows with the sequence: the learned position table) is the
    count of the MPT model the survey builds, to the parameter: biases, tied embeddings and a
    position row per token included."""
    for row in ROWS:
        spec = survey.mpt_spec(row["model"], row["seq_len"])
        assert count_parameters(spec).total == row["num_params"], row


def test_every_recipe_setting_names_its_source() -> None:
    assert set(survey.RECIPE) == {"compute_dtype", "elementwise_fusion", "attention_kernel",
                                  "fused_cross_entropy", "grad_dtype", "zero_stage",
                                  "recompute", "checkpoint_early_stop"}
    for name, setting in survey.RECIPE.items():
        assert set(setting) == {"value", "source"} and len(setting["source"]) > 40, name


def test_the_rows_run_as_printed_with_the_sweeps_recipe() -> None:
    row = next(r for r in ROWS if r["model"] == "13b" and r["seq_len"] == 2048
               and r["num_gpus"] == 128 and "Large" in r["table"])
    parallel, training = survey.row_config(row)
    assert (parallel.dp, parallel.micro_batch_size, parallel.zero_stage, parallel.fsdp) == (
        128, 16, 3, True)
    assert parallel.recompute == "full"
    assert training.global_batch_size == 2048 and training.sequence_length == 2048
    assert training.attention_kernel == AttentionKernel.TRITON_FLASH_ATTENTION
    assert training.fused_cross_entropy  # MPT's default loss_fn: fused_crossentropy
    sharded_grads = next(r for r in ROWS if r["sharding_strategy"] == "SHARD_GRAD_OP")
    assert sharded_grads["grad_accum"] == 1
    assert survey.row_config(sharded_grads)[0].zero_stage == 2
    a100 = next(r for r in ROWS if r["gpu"] == "a100-sxm4-80gb")
    assert survey.row_cluster(a100).inter_node.bandwidth_bytes_per_s == 25e9


def test_the_ledger_fits_every_run_that_trained() -> None:
    """Every surveyed run trained, at the micro-batch its sweep chose: the memory ledger's
    peak stays within the GPU's capacity for all of them (a ledger that refused one would
    keep the planner from a configuration known to work)."""
    peaks = [survey.peak_fraction(r) for r in ROWS]
    assert len(peaks) == 216 and max(peaks) <= 1.0
    # The sweeps push micro-batches up: the busiest runs come near the capacity.
    assert max(peaks) > 0.9


def test_every_printed_row_is_evaluated_fp8_ones_on_fp8_gemms() -> None:
    assert all(survey.surveyed(r) is None for r in ROWS)
    # A global batch that micro-batches do not split evenly (Composer allows it) is not a
    # configuration the step time describes: none is printed, and one would be left out.
    uneven = dict(ROWS[0], global_batch_size=ROWS[0]["global_batch_size"] + 1)
    assert "uneven" in (survey.surveyed(uneven) or "")
    fp8 = [r for r in ROWS if r["precision"] == "amp_fp8"]
    assert len(fp8) == 7
    assert all(survey.row_config(r)[1].compute_dtype == "fp8" for r in fp8)
    assert survey.row_config(ROWS[0])[1].compute_dtype == "bf16"


def test_the_model_predicts_the_printed_runs_within_the_surveyed_accuracy(
        errors: Errors) -> None:
    """As printed, nothing fitted: the median |error| of tokens/s per GPU over the 216 rows
    is under 4.5%, the A100 tables' (whose Triton kernel was measured on A100) under 3.5%;
    no row is off by 40% (the largest, 70B on 64 A100 40GB at micro-batch 2, runs near its
    memory cap and is predicted 37% fast)."""
    assert len(errors) == 216
    assert statistics.median(abs(e) for _, e in errors) < 0.045
    assert max(abs(e) for _, e in errors) < 0.40
    a100 = [abs(e) for row, e in errors if row["gpu"].startswith("a100")]
    assert statistics.median(a100) < 0.035


def test_the_pairwise_band_covers_most_pairs_of_one_table(errors: Errors) -> None:
    """The robust choice calls two plans indistinguishable within the pairwise band, set to
    cover 80% of the validator's held-out pairs; on these runs, which it was not set on, it
    covers 78% of the 6,333 pairs of one table."""
    pair_errors = survey.pair_ratio_errors(errors)
    assert len(pair_errors) == 6333
    band = pairwise_band().frac
    within = sum(e <= band for e in pair_errors) / len(pair_errors)
    # 78% at this release (band 10.7%; 76% at the 9.9% band before the newest torchtitan
    # rows) against the 80% the band is set for on the validator's pairs.
    assert within >= 0.70


def test_the_recipes_kernel_and_early_stop_are_what_the_runs_need(
        errors: Errors, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each mechanism the recipe names moves the survey toward the printed runs: at
    FlashAttention-2's level the runs at 16k tokens and more are predicted far too fast, and
    without the early stop the checkpointed runs are predicted slower than with it."""
    long = [r for r in ROWS if r["seq_len"] >= 16384]
    at_fa2 = statistics.median(survey.relative_error(r, AttentionKernel.FLASH_ATTENTION_2)
                               for r in long)
    as_run = statistics.median(e for r, e in errors if r["seq_len"] >= 16384)
    assert at_fa2 > 0.3 and abs(as_run) < 0.1
    checkpointed = [r for r in ROWS if r["activation_checkpointing"]]
    with_stop = statistics.median(e for r, e in errors if r["activation_checkpointing"])
    monkeypatch.setitem(survey.RECIPE, "checkpoint_early_stop",
                        {"value": False, "source": "the whole forward again"})
    without = statistics.median(survey.relative_error(r) for r in checkpointed)
    assert without < with_stop < 0.0
