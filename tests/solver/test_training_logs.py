"""Training logs parse into configurations and steady-state step times: recorded-format
Megatron-LM and torchtitan excerpts (tests/solver/training_logs/README.md), the warm-up
rule, and logs that lack what a run needs refused with the field and the reason."""

from pathlib import Path

import pytest

from api_schemas.calibration import TrainingLog
from api_schemas.dtypes import DType
from api_schemas.parallel import RecomputeMode
from api_schemas.requests import ModelPreset
from models.catalog.resolve import resolve_model
from solver.logs import LogRefused, parse_training_log

LOGS = Path(__file__).resolve().parent / "training_logs"
SPEC = resolve_model(ModelPreset(preset="llama-3.1-8b")).spec


def parse(name: str, framework: str, nodes: int, text: str | None = None,
          skip_steps: int | None = None, preset: str = "llama-3.1-8b"):  # type: ignore[no-untyped-def]
    log = TrainingLog(framework=framework, text=text or (LOGS / name).read_text(),
                      model={"preset": preset}, num_nodes=nodes, skip_steps=skip_steps)
    spec = resolve_model(log.model).spec
    return parse_training_log(log, spec=spec, gpus_per_node=8, where="logs.0")


def test_megatron_log_gives_its_configuration_and_median_steady_step() -> None:
    parsed = parse("megatron_llama3-8b_tp2_dp4.log", "megatron-lm", 1)
    run = parsed.run
    p, t = run.parallel, run.training
    assert (p.tp, p.pp, p.dp, p.cp, p.micro_batch_size) == (2, 1, 4, 1, 1)
    assert p.zero_stage == 1 and p.sequence_parallel and p.recompute == RecomputeMode.SELECTIVE
    assert (t.global_batch_size, t.sequence_length, t.compute_dtype) == (128, 4096, DType.BF16)
    # Iteration 5's line averages iterations 1-5 (26.8 s, with start-up): dropped as warm-up.
    assert parsed.steps_logged == [5, 10, 15, 20, 25, 30, 35, 40]
    assert parsed.warmup_skipped == [5]
    assert parsed.steps_used == [10, 15, 20, 25, 30, 35, 40]
    assert run.step_time_s == pytest.approx(7.1054)  # the median of the printed 7 lines (ms)
    assert parsed.step_time_min_s < run.step_time_s < parsed.step_time_max_s < 7.2
    assert parsed.logged_tflops_per_gpu == pytest.approx(444.8)
    # Largest 'max allocated' over the ranks that reported (51267.67 MB, MB = 2^20 bytes).
    assert run.peak_memory_bytes == int(51267.67 * 2**20)
    assert parsed.peak_memory_kind is not None and "max allocated" in parsed.peak_memory_kind


def test_older_megatron_lines_without_timestamp_parse_too() -> None:
    parsed = parse("megatron_llama3-8b_tp2_dp8_2nodes.log", "megatron-lm", 2)
    assert parsed.run.parallel.dp == 8 and parsed.run.num_nodes == 2
    assert parsed.run.step_time_s == pytest.approx(3.5973)


def test_torchtitan_02_log_gives_its_configuration_and_step_time_from_tps() -> None:
    parsed = parse("torchtitan_llama3-8b_fsdp8.log", "torchtitan", 1)
    p, t = parsed.run.parallel, parsed.run.training
    assert (p.tp, p.pp, p.dp, p.micro_batch_size, p.zero_stage) == (1, 1, 8, 2, 3)
    assert p.recompute == RecomputeMode.FULL
    assert (t.global_batch_size, t.sequence_length) == (64, 8192)
    # step 1 is its own line (compilation, allocator growth): dropped.
    assert parsed.warmup_skipped == [1] and parsed.steps_used == [10, 20, 30, 40, 50, 60]
    # step time = global tokens / (tps x world): 64 x 8192 / (tps x 8), the median over the
    # six printed tps (the file's 'tps: 7,235' ... 'tps: 7,194'; the comma is thousands).
    times = sorted(64 * 8192 / (tps * 8) for tps in (7235, 7288, 7220, 7174, 7376, 7194))
    assert parsed.run.step_time_s == pytest.approx((times[2] + times[3]) / 2)
    assert parsed.run.peak_memory_bytes == int(61.23 * 2**30)
    assert parsed.logged_tflops_per_gpu is not None


def test_later_torchtitan_json_config_and_tokens_per_step_line() -> None:
    parsed = parse("torchtitan_llama3-8b_fsdp16_2nodes.log", "torchtitan", 2)
    p, t = parsed.run.parallel, parsed.run.training
    assert (p.dp, p.zero_stage, p.micro_batch_size) == (16, 3, 2)
    assert p.recompute == RecomputeMode.FULL  # base checkpointing fields only: FullAC
    assert (t.global_batch_size, t.sequence_length) == (128, 8192)
    assert 8.9 < parsed.run.step_time_s < 9.3


def test_skip_steps_moves_the_warmup() -> None:
    parsed = parse("megatron_llama3-8b_tp2_dp4.log", "megatron-lm", 1, skip_steps=20)
    assert parsed.warmup_skipped == [5, 10, 15, 20]
    assert parsed.steps_used == [25, 30, 35, 40]


def test_a_log_of_another_model_is_refused_naming_the_argument() -> None:
    with pytest.raises(LogRefused) as refused:
        parse("megatron_llama3-8b_tp2_dp4.log", "megatron-lm", 1, preset="llama-3.1-70b")
    assert refused.value.field == "logs.0.text"
    assert "num_layers is 32" in refused.value.detail


def test_a_world_size_other_than_the_cluster_is_refused() -> None:
    with pytest.raises(LogRefused) as refused:
        parse("megatron_llama3-8b_tp2_dp4.log", "megatron-lm", 2)
    assert "world_size=8" in refused.value.detail


def test_a_megatron_log_without_its_arguments_is_refused() -> None:
    text = (LOGS / "megatron_llama3-8b_tp2_dp4.log").read_text()
    body = text.split("end of arguments ---------------------\n", 1)[1]
    with pytest.raises(LogRefused) as refused:
        parse("", "megatron-lm", 1, text=body)
    assert refused.value.field == "logs.0.text" and "arguments" in refused.value.detail


def test_a_log_without_timing_lines_or_past_the_warmup_is_refused() -> None:
    text = (LOGS / "megatron_llama3-8b_tp2_dp4.log").read_text()
    head = text.split(" [2026", 1)[0]
    with pytest.raises(LogRefused, match="no per-step timing lines"):
        parse("", "megatron-lm", 1, text=head)
    first_only = "\n".join(line for line in text.splitlines()
                           if "iteration        5/" in line or "iteration" not in line)
    with pytest.raises(LogRefused, match="falls in the warm-up"):
        parse("", "megatron-lm", 1, text=first_only)


def test_a_torchtitan_log_without_its_job_configuration_is_refused() -> None:
    text = "\n".join(line for line in (LOGS / "torchtitan_llama3-8b_fsdp8.log").read_text()
                     .splitlines() if "Running with args" not in line)
    with pytest.raises(LogRefused) as refused:
        parse("", "torchtitan", 1, text=text)
    assert "--job.print_args" in refused.value.detail


def test_a_megatron_log_missing_the_batch_is_refused_naming_it() -> None:
    text = "\n".join(line for line in (LOGS / "megatron_llama3-8b_tp2_dp4.log").read_text()
                     .splitlines() if "global_batch_size ..." not in line)
    with pytest.raises(LogRefused, match="lacks global_batch_size"):
        parse("", "megatron-lm", 1, text=text)


def test_a_log_of_two_runs_is_refused() -> None:
    text = (LOGS / "megatron_llama3-8b_tp2_dp4.log").read_text()
    with pytest.raises(LogRefused, match="prints its configuration 2 times"):
        parse("", "megatron-lm", 1, text=text + text)
    titan = (LOGS / "torchtitan_llama3-8b_fsdp8.log").read_text()
    steps = "\n".join(line for line in titan.splitlines() if "step:" in line)
    with pytest.raises(LogRefused, match="logged more than once"):
        parse("", "torchtitan", 1, text=titan + steps + "\n")


def test_no_timing_lines_says_where_megatron_prints_them() -> None:
    text = (LOGS / "megatron_llama3-8b_tp2_dp4.log").read_text()
    head = text.split(" [2026", 1)[0]
    with pytest.raises(LogRefused, match="on the last rank"):
        parse("", "megatron-lm", 1, text=head)


def test_a_megatron_log_of_a_moe_model_is_refused_for_a_dense_one() -> None:
    text = (LOGS / "megatron_llama3-8b_tp2_dp4.log").read_text().replace(
        "num_experts ..................................... None",
        "num_experts ..................................... 8")
    with pytest.raises(LogRefused, match="num_experts is 8"):
        parse("", "megatron-lm", 1, text=text)


def test_a_garbled_argument_is_refused_not_crashed() -> None:
    text = (LOGS / "megatron_llama3-8b_tp2_dp4.log").read_text()
    for old, new in (("tensor_model_parallel_size ...................... 2",
                      "tensor_model_parallel_size ...................... two"),
                     ("micro_batch_size ................................ 1",
                      "micro_batch_size ................................ 0")):
        assert old in text
        with pytest.raises(LogRefused, match="not one a run can have"):
            parse("", "megatron-lm", 1, text=text.replace(old, new))
    titan = (LOGS / "torchtitan_llama3-8b_fsdp8.log").read_text().replace(
        "'tensor_parallel_degree': 1", "'tensor_parallel_degree': 'x'")
    with pytest.raises(LogRefused, match="not one a run can have"):
        parse("", "torchtitan", 1, text=titan)
