"""torchtitan TOML-era job config: parses, round-trips the degrees and batch, maps schedules."""

import tomllib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_export_cases import CASES, case

from api_schemas.parallel import PipelineSchedule
from models.core.layout import num_virtual_stages, virtual_stage_sizes
from solver.export import (
    TORCHTITAN_KEYS,
    TORCHTITAN_SCHEDULES,
    TORCHTITAN_VERSION,
    torchtitan_notes,
    torchtitan_toml,
)
from solver.export.toml_text import Entry, render_toml
from solver.export.torchtitan import module_fqns

TORCH_SCHEDULE_KEYS = {"1F1B", "Interleaved1F1B", "GPipe", "LoopedBFS", "InterleavedZeroBubble",
                       "PipelineScheduleSingle", "PipelineScheduleMulti", "ZBVZeroBubble",
                       "DualPipeV"}
"""`get_schedule_class` keys of torch.distributed.pipelining.schedules."""


def _parsed(name: str) -> dict:
    return tomllib.loads(torchtitan_toml(*CASES[name]))


@pytest.mark.parametrize("name", sorted(CASES))
def test_toml_parses_and_round_trips_degrees_and_batch(name: str) -> None:
    spec, training, parallel = CASES[name]
    config = tomllib.loads(torchtitan_toml(spec, training, parallel))
    par, train = config["parallelism"], config["training"]
    dp = par["data_parallel_replicate_degree"] * par["data_parallel_shard_degree"]
    assert dp == parallel.dp
    assert par["tensor_parallel_degree"] == parallel.tp
    assert par["pipeline_parallel_degree"] == parallel.pp
    assert par["context_parallel_degree"] == parallel.cp
    assert par.get("expert_parallel_degree", 1) == (parallel.ep if spec.moe else 1)
    assert train["seq_len"] == training.sequence_length
    assert train["global_batch_size"] == training.global_batch_size
    if parallel.pp > 1:
        micro = par["pipeline_parallel_microbatch_size"]
        assert micro == parallel.micro_batch_size and train["local_batch_size"] % micro == 0
        assert train["local_batch_size"] * dp == training.global_batch_size
    else:
        steps, rest = divmod(training.global_batch_size, train["local_batch_size"] * dp)
        assert rest == 0 and steps >= 1


@pytest.mark.parametrize("name", sorted(CASES))
def test_module_fqns_cover_every_layer_once_in_order(name: str) -> None:
    spec, _, parallel = CASES[name]
    par = _parsed(name)["parallelism"]
    if parallel.pp == 1:
        assert "module_fqns_per_model_part" not in par
        return
    parts = par["module_fqns_per_model_part"]
    layers = [m for part in parts for m in part if m.startswith("layers.")]
    assert layers == [f"layers.{i}" for i in range(spec.num_layers)]
    assert parts[0][0] == "tok_embeddings" and parts[-1][-2:] == ["norm", "output"]
    expected_parts = (parallel.pp if parallel.schedule == "dualpipe"
                      else num_virtual_stages(parallel))
    assert len(parts) == expected_parts
    assert len(parts) % parallel.pp == 0


@pytest.mark.parametrize(("schedule", "key"), [
    ("gpipe", "GPipe"), ("1f1b", "1F1B"), ("interleaved_1f1b", "Interleaved1F1B"),
    ("zb_h1", "InterleavedZeroBubble"), ("zb_h2", "InterleavedZeroBubble"),
    ("zbv", "ZBVZeroBubble"), ("dualpipev", "DualPipeV"), ("dualpipe", "1F1B"),
])
def test_schedules_map_to_torch_pipelining_keys(schedule: str, key: str) -> None:
    vpp = 2 if schedule in ("interleaved_1f1b", "zbv", "dualpipev") else 1
    spec, training, parallel = case("llama-3.1-8b", gbs=64, pp=4, dp=2, vpp=vpp,
                                    schedule=schedule)
    text = torchtitan_toml(spec, training, parallel)
    assert tomllib.loads(text)["parallelism"]["pipeline_parallel_schedule"] == key
    assert key in TORCH_SCHEDULE_KEYS
    line = next(row for row in text.splitlines() if row.startswith("pipeline_parallel_schedule"))
    if schedule == "zb_h2":
        assert "NOT the planned ZB-H2" in line
    if schedule == "dualpipe":
        assert "no torch.distributed.pipelining class" in line
        assert any("dualpipe" in note for note in torchtitan_notes(spec, training, parallel))


def test_every_schedule_has_a_mapping() -> None:
    assert set(TORCHTITAN_SCHEDULES.values()) <= TORCH_SCHEDULE_KEYS
    assert set(TORCHTITAN_SCHEDULES) == set(PipelineSchedule)


def test_header_states_the_assumed_version() -> None:
    text = torchtitan_toml(*CASES["llama70b-1f1b-full"])
    assert text.startswith("# ")
    assert f"torchtitan {TORCHTITAN_VERSION}" in text.split("\n[", 1)[0]


def test_interleaved_stages_follow_the_plan_split() -> None:
    spec, _, parallel = CASES["llama405b-tp8-pp16-vpp2"]
    parts = _parsed("llama405b-tp8-pp16-vpp2")["parallelism"]["module_fqns_per_model_part"]
    sizes = [sum(m.startswith("layers.") for m in part) for part in parts]
    assert sizes == virtual_stage_sizes(spec, parallel)
    assert _parsed("llama405b-tp8-pp16-vpp2")["parallelism"]["pipeline_parallel_schedule"] == \
        "Interleaved1F1B"


def test_module_fqns_helper_on_a_tiny_split() -> None:
    assert module_fqns([1, 0, 2]) == [["tok_embeddings", "layers.0"], [],
                                      ["layers.1", "layers.2", "norm", "output"]]


@pytest.mark.parametrize(("zero", "replicate", "reshard"), [
    (0, True, None), (1, False, "never"), (2, False, "never"), (3, False, "always"),
])
def test_zero_stage_maps_to_ddp_or_fsdp2(zero: int, replicate: bool, reshard: str | None) -> None:
    spec, training, parallel = case("llama-3.1-8b", gbs=64, dp=8, zero_stage=zero)
    par = tomllib.loads(torchtitan_toml(spec, training, parallel))["parallelism"]
    assert par["data_parallel_replicate_degree"] == (8 if replicate else 1)
    assert par.get("fsdp_reshard_after_forward") == reshard
    if zero in (1, 2):
        assert any(f"no ZeRO-{zero}" in note for note in torchtitan_notes(spec, training,
                                                                         parallel))


@pytest.mark.parametrize(("recompute", "mode", "option"), [
    ("none", "none", None), ("full", "full", None), ("selective", "selective", "op"),
    ({"full_layers": 8}, "selective", "4"), ({"full_layers": 32}, "full", None),
])
def test_activation_checkpoint_modes(recompute: object, mode: str, option: str | None) -> None:
    spec, training, parallel = case("llama-3.1-8b", gbs=64, dp=8, recompute=recompute)
    ac = tomllib.loads(torchtitan_toml(spec, training, parallel))["activation_checkpoint"]
    assert ac["mode"] == mode
    assert ac.get("selective_ac_option") == option


def test_fp8_writes_float8_sections_and_converters() -> None:
    config = _parsed("deepseek-v3-dualpipe")
    assert config["model"]["converters"] == ["quantize.linear.float8",
                                             "quantize.grouped_mm.float8"]
    float8 = config["quantize"]["linear"]["float8"]
    # FP8 all-gather is tensorwise-only: torchtitan rejects it next to recipe_name.
    assert "recipe_name" not in float8
    assert float8["enable_fsdp_float8_all_gather"] is True
    assert "router.gate" in float8["filter_fqns"]
    assert "quantize" not in _parsed("llama70b-1f1b-full")


def test_async_tp_turns_compile_on() -> None:
    config = _parsed("llama70b-1f1b-full")
    assert config["parallelism"]["enable_async_tensor_parallel"] is True
    assert config["compile"]["enable"] is True


def test_unsupported_settings_are_notes() -> None:
    notes = torchtitan_notes(*CASES["deepseek-v3-zbv-fulllayers"])
    assert any("multi-token-prediction" in note for note in notes)
    assert any("FP8 storage" in note for note in notes)
    assert any("offload" in note for note in notes)
    ulysses = torchtitan_notes(*CASES["olmoe-dualpipev-ulysses"])
    assert any("cp_kind='ulysses'" in note for note in ulysses)
    assert any("optimizer='muon'" in note for note in ulysses)


def test_written_keys_stay_in_the_vocabulary() -> None:
    for name in CASES:
        text = torchtitan_toml(*CASES[name])
        for table, rows in _tables(tomllib.loads(text)):
            for key in rows:
                assert f"{table}.{key}" in TORCHTITAN_KEYS


def _tables(config: dict, prefix: str = "") -> list[tuple[str, dict]]:
    out = []
    leaves = {k: v for k, v in config.items() if not isinstance(v, dict)}
    if leaves:
        out.append((prefix.rstrip("."), leaves))
    for key, value in config.items():
        if isinstance(value, dict):
            out += _tables(value, f"{prefix}{key}.")
    return out


@settings(max_examples=60, deadline=None)
@given(text=st.text(max_size=40), items=st.lists(st.text(max_size=10), max_size=4),
       number=st.integers(-(2**40), 2**40), flag=st.booleans())
def test_toml_writer_round_trips_any_value(text: str, items: list[str], number: int,
                                           flag: bool) -> None:
    entries = [Entry(key="text", value=text, comment="a comment"),
               Entry(key="items", value=items), Entry(key="nested", value=[items, [text]]),
               Entry(key="number", value=number), Entry(key="flag", value=flag),
               Entry(key="ratio", value=0.5)]
    parsed = tomllib.loads(render_toml(header=["header"], sections={"a.b": entries}))
    assert parsed == {"a": {"b": {"text": text, "items": items, "nested": [items, [text]],
                                  "number": number, "flag": flag, "ratio": 0.5}}}


def test_notes_name_torchtitans_unfused_loss_and_deferred_fsdp_sync() -> None:
    # torchtitan's loss is F.cross_entropy on fp32 logits, and torch pipelining defers an
    # FSDP2 stage's reduce-scatter to the last micro-batch: a plan that assumes otherwise
    # is told so; a plan that already counts both is not.
    spec, training, parallel = case("llama-3.1-8b", gbs=64, pp=4, dp=2, zero_stage=3,
                                    fsdp=True, schedule="1f1b")
    notes = torchtitan_notes(spec, training, parallel)
    assert any("fused_cross_entropy=false" in n for n in notes)
    assert any("fsdp_defer_grad_sync=true" in n for n in notes)
    faithful = torchtitan_notes(
        spec, training.model_copy(update={"fused_cross_entropy": False}),
        parallel.model_copy(update={"fsdp_defer_grad_sync": True}))
    assert not any("fused_cross_entropy" in n or "fsdp_defer_grad_sync" in n for n in faithful)


def test_notes_name_torchtitans_gathered_sequence_parallel_inputs() -> None:
    spec, training, parallel = case("llama-3.1-8b", gbs=64, tp=4, dp=2,
                                    sequence_parallel=True)
    assert any("sequence_parallel_saves_gathered=true" in n
               for n in torchtitan_notes(spec, training, parallel))
    faithful = parallel.model_copy(update={"sequence_parallel_saves_gathered": True})
    assert not any("sequence_parallel_saves_gathered" in n
                   for n in torchtitan_notes(spec, training, faithful))


def test_every_export_names_a_planned_memory_efficient_norm() -> None:
    # No framework's config enables a norm that keeps its output: each export says so.
    from solver.export import export_all

    spec, training, parallel = case("llama-3.1-8b", gbs=64, tp=4, dp=2,
                                    sequence_parallel=True)
    lean = parallel.model_copy(update={"norm_saves_output": True})
    for name, exported in export_all(spec, training, lean).items():
        assert any("norm_saves_output=true" in n for n in exported["notes"]), name
    for name, exported in export_all(spec, training, parallel).items():
        assert not any("norm_saves_output" in n for n in exported["notes"]), name


def test_the_router_score_function_is_a_note_for_the_flavor() -> None:
    """torchtitan takes the score function from the model flavor, not the TOML."""
    llama4 = torchtitan_notes(*case("llama-4-scout-17b-16e", gbs=64, dp=8))
    assert any("scores experts by sigmoid" in note for note in llama4)
    mixtral = torchtitan_notes(*case("mixtral-8x7b", gbs=64, dp=8))
    assert any("scores experts by softmax" in note for note in mixtral)
    assert not any("scores experts" in note
                   for note in torchtitan_notes(*case("llama-3.1-8b", gbs=64, dp=8)))
