"""Schema and internal-consistency checks for research/data/published_runs.json.

The companion research/data/gemm_efficiency.json gets a schema check and a peak bound at
the end of this module.

The file is a transcription of published training-throughput tables. These tests do not
re-derive any published number from a cost model; they check that the transcription is
well formed and that figures printed side by side in one source agree with each other
(TFLOP/s vs MFU, aggregate vs per-GPU, tokens/s vs batch and iteration time, the mesh
product vs the GPU count, FLOPs per token implied by tokens/s and TFLOP/s vs the
architecture). A row may name a check in ``consistency_exceptions`` only when the
printed figures really disagree; the exception itself is tested so that it cannot go stale.
"""

import json
import math
import re
from pathlib import Path

import pytest

DATA_PATH = Path(__file__).resolve().parents[2] / "research" / "data" / "published_runs.json"

GPU_IDS = {
    "a100-sxm4-40gb", "a100-sxm4-80gb", "h100-sxm5-80gb", "h100-sxm5-96gb-500w",
    "h800-sxm5-80gb", "h200-sxm-141gb", "b200-sxm-180gb", "mi300x",
}
PRESETS = {
    "llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "deepseek-v3", "deepseek-v2-lite",
    "kimi-k2-instruct", "qwen3-235b-a22b", "qwen2-57b-a14b", "qwen1.5-moe-a2.7b",
    "mixtral-8x7b", "mixtral-8x22b", "olmoe-1b-7b-0924", "gpt2", "gpt2-medium", "gpt-neox-20b",
}
VERIFICATION_TAGS = {"VERIFIED", "SECONDARY"}
KNOWN_EXCEPTIONS = {"mesh_product", "aggregate_pflops"}

MODEL_KEYS = {
    "name", "preset", "num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim",
    "ffn_hidden_size", "ffn_activation", "vocab_size", "seq_len", "moe",
    "attention_window", "attention_window_pattern", "architecture_source", "notes",
}
PARALLEL_KEYS = {
    "tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch_size", "global_batch_size",
    "grad_accum_steps", "schedule", "recompute", "optimizer_sharding", "sequence_parallel",
    "precision", "elementwise_fusion", "notes",
}
MEASURED_KEYS = {
    "tflops_per_gpu", "mfu", "hfu", "tokens_per_s_per_gpu", "tokens_per_s_total",
    "samples_per_s_per_gpu", "iteration_time_s", "aggregate_pflops",
    "gpu_hours_per_trillion_tokens",
}

# Architecture of the presets used by rows that print both tokens/s and TFLOP/s.
# Llama 3: paper arXiv:2407.21783 Table 3 (vocabulary as released, 128,256).
# Qwen3-235B-A22B: NeMo Qwen3Config235B_A22B / Qwen3MoEConfig (kv_channels 128).
PRESET_DIMS = {
    "llama-3.1-8b": dict(num_layers=32, hidden_size=4096, num_heads=32, num_kv_heads=8,
                         head_dim=128, ffn_hidden_size=14336, gated=True, vocab_size=128256,
                         moe=None),
    "llama-3.1-70b": dict(num_layers=80, hidden_size=8192, num_heads=64, num_kv_heads=8,
                          head_dim=128, ffn_hidden_size=28672, gated=True, vocab_size=128256,
                          moe=None),
    "llama-3.1-405b": dict(num_layers=126, hidden_size=16384, num_heads=128, num_kv_heads=8,
                           head_dim=128, ffn_hidden_size=53248, gated=True, vocab_size=128256,
                           moe=None),
    "qwen3-235b-a22b": dict(num_layers=94, hidden_size=4096, num_heads=64, num_kv_heads=4,
                            head_dim=128, ffn_hidden_size=12288, gated=True, vocab_size=151936,
                            moe=dict(top_k=8, expert_ffn_hidden_size=1536,
                                     num_shared_experts=0)),
}

# Tolerances: printed percentages are rounded to whole or tenth points, TF/s to units.
MFU_ABS_TOL = 0.011
REL_TOL_AGGREGATE = 0.015
REL_TOL_TOKENS = 0.02
FLOPS_PER_TOKEN_RATIO_RANGE = (0.8, 1.3)


def _load() -> dict:
    with DATA_PATH.open(encoding="utf-8") as fh:
        return json.load(fh)


DATA = _load()
SOURCES = {s["id"]: s for s in DATA["sources"]}
RUNS = DATA["runs"]


def _run_id(run: dict) -> str:
    return run["id"]


def _peak(run: dict) -> float | None:
    return SOURCES[run["source_id"]]["peak_tflops_per_gpu"]


def _mfu_gap(run: dict) -> float | None:
    """|TF/s / peak - MFU| for rows printing both, else None."""
    meas, peak = run["measured"], _peak(run)
    if meas["tflops_per_gpu"] is None or meas["mfu"] is None or peak is None:
        return None
    return abs(meas["tflops_per_gpu"] / peak - meas["mfu"])


def _aggregate_rel_gap(run: dict) -> float | None:
    """Relative gap between printed aggregate PF/s and per-GPU figures times GPU count."""
    meas, n = run["measured"], run["hardware"]["num_gpus"]
    if meas["aggregate_pflops"] is None or n is None:
        return None
    if meas["tflops_per_gpu"] is not None:
        per_gpu_tflops = meas["tflops_per_gpu"]
    elif meas["mfu"] is not None and _peak(run) is not None:
        per_gpu_tflops = meas["mfu"] * _peak(run)
    else:
        return None
    expected = per_gpu_tflops * n / 1000.0
    return abs(meas["aggregate_pflops"] - expected) / expected


def _mesh_product(run: dict) -> int | None:
    par = run["parallel"]
    degrees = [par["tp"], par["pp"], par["dp"], par["cp"]]
    if any(d is None for d in degrees) or run["hardware"]["num_gpus"] is None:
        return None
    return math.prod(degrees)


def _attended_context(seq_len: int, window: int | None, *, causal: bool) -> float:
    """Mean number of keys a query attends to (full or sliding-window attention)."""
    if window is None or window >= seq_len:
        return seq_len / 2 if causal else float(seq_len)
    if causal:
        return window - window * (window - 1) / (2 * seq_len)
    return float(window)


def _flops_per_token_bounds(dims: dict, seq_len: int) -> tuple[float, float]:
    """(causal, non-causal) estimates of training FLOPs per token, forward + backward.

    6 x matmul parameters per token plus 12 x layers x q_dim x attended context. Sources
    differ on causal halving, logits and MTP; the two bounds and the ratio range absorb that.
    """
    h, layers = dims["hidden_size"], dims["num_layers"]
    q_dim = dims["num_heads"] * dims["head_dim"]
    kv_dim = dims["num_kv_heads"] * dims["head_dim"]
    attn_params = h * (q_dim + 2 * kv_dim) + q_dim * h
    mats = 3 if dims["gated"] else 2
    if dims["moe"] is None:
        ffn_params = mats * h * dims["ffn_hidden_size"]
    else:
        moe = dims["moe"]
        active = moe["top_k"] + moe["num_shared_experts"]
        ffn_params = mats * h * moe["expert_ffn_hidden_size"] * active
    matmul_flops = 6.0 * (layers * (attn_params + ffn_params) + h * dims["vocab_size"])
    windowed_layers = layers // 2 if dims.get("window_pattern") == "alternating" else (
        layers if dims.get("window") else 0)
    bounds = []
    for causal in (True, False):
        context = ((layers - windowed_layers) * _attended_context(seq_len, None, causal=causal)
                   + windowed_layers * _attended_context(seq_len, dims.get("window"),
                                                         causal=causal))
        bounds.append(matmul_flops + 12 * q_dim * context)
    return bounds[0], bounds[1]


def _dims_for(run: dict) -> dict | None:
    mdl = run["model"]
    if mdl["preset"] in PRESET_DIMS:
        return PRESET_DIMS[mdl["preset"]]
    needed = ["num_layers", "hidden_size", "num_heads", "num_kv_heads", "ffn_hidden_size",
              "vocab_size", "ffn_activation"]
    if mdl["preset"] is not None or any(mdl[k] is None for k in needed):
        return None
    head_dim = mdl["head_dim"] or mdl["hidden_size"] // mdl["num_heads"]
    moe = mdl["moe"]
    return dict(num_layers=mdl["num_layers"], hidden_size=mdl["hidden_size"],
                num_heads=mdl["num_heads"], num_kv_heads=mdl["num_kv_heads"], head_dim=head_dim,
                ffn_hidden_size=mdl["ffn_hidden_size"],
                gated=mdl["ffn_activation"].startswith("swiglu"), vocab_size=mdl["vocab_size"],
                window=mdl["attention_window"], window_pattern=mdl["attention_window_pattern"],
                moe=None if moe is None else dict(
                    top_k=moe["top_k"], expert_ffn_hidden_size=moe["expert_ffn_hidden_size"],
                    num_shared_experts=moe["num_shared_experts"] or 0))


def test_top_level_layout():
    assert DATA["schema_version"] == 1
    assert len(SOURCES) == len(DATA["sources"]), "duplicate source id"
    ids = [r["id"] for r in RUNS]
    assert len(ids) == len(set(ids)), "duplicate run id"
    assert len(RUNS) >= 40
    used_sources = {r["source_id"] for r in RUNS}
    assert used_sources == set(SOURCES), "every source is used and every run names a known source"


def test_coverage_spans_dense_moe_and_gpu_generations():
    gpus = {r["hardware"]["gpu"] for r in RUNS}
    assert {"a100-sxm4-80gb", "h100-sxm5-80gb", "h800-sxm5-80gb"} <= gpus
    is_moe = [r["model"]["moe"] is not None
              or r["model"]["preset"] in {"deepseek-v3", "qwen3-235b-a22b"} for r in RUNS]
    assert any(is_moe) and not all(is_moe)
    verified_sources = {r["source_id"] for r in RUNS if r["verification"] == "VERIFIED"}
    assert len(verified_sources) >= 8


@pytest.mark.parametrize("source", DATA["sources"], ids=lambda s: s["id"])
def test_source_record(source):
    for key in ("id", "title", "locator", "location", "verification", "verification_note",
                "flops_convention", "flops_convention_text"):
        assert isinstance(source[key], str) and source[key], key
    assert source["verification"] in VERIFICATION_TAGS
    assert source["peak_tflops_per_gpu"] is None or source["peak_tflops_per_gpu"] > 0


@pytest.mark.parametrize("run", RUNS, ids=_run_id)
def test_run_schema(run):
    assert run["verification"] in VERIFICATION_TAGS
    if SOURCES[run["source_id"]]["verification"] == "SECONDARY":
        assert run["verification"] == "SECONDARY", "a row cannot be stronger than its source"
    assert isinstance(run["location"], str) and run["location"]
    assert isinstance(run["measured_as_printed"], str) and run["measured_as_printed"]
    assert set(run["model"]) == MODEL_KEYS
    assert set(run["parallel"]) == PARALLEL_KEYS
    assert set(run["measured"]) == MEASURED_KEYS
    assert run["model"]["preset"] is None or run["model"]["preset"] in PRESETS
    assert run["model"]["architecture_source"], "say where the architecture comes from"
    hw = run["hardware"]
    assert hw["gpu"] in GPU_IDS
    assert isinstance(hw["gpu_exact"], bool)
    assert run["parallel"]["elementwise_fusion"] in (None, "eager", "compiled", "fused")
    assert hw["num_gpus"] is None or hw["num_gpus"] >= 1
    assert set(run["consistency_exceptions"]) <= KNOWN_EXCEPTIONS
    measured = {k: v for k, v in run["measured"].items() if v is not None}
    assert measured, "each run carries at least one measured figure"
    assert all(v > 0 for v in measured.values())
    for frac in ("mfu", "hfu"):
        assert run["measured"][frac] is None or 0 < run["measured"][frac] < 1
    for deg in ("tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch_size", "global_batch_size"):
        value = run["parallel"][deg]
        assert value is None or (isinstance(value, int) and value >= 1), deg


@pytest.mark.parametrize("run", [r for r in RUNS if _mesh_product(r) is not None], ids=_run_id)
def test_mesh_product_matches_gpu_count(run):
    matches = _mesh_product(run) == run["hardware"]["num_gpus"]
    assert matches != ("mesh_product" in run["consistency_exceptions"])


@pytest.mark.parametrize("run", [r for r in RUNS if _mfu_gap(r) is not None], ids=_run_id)
def test_tflops_agree_with_mfu(run):
    assert _mfu_gap(run) <= MFU_ABS_TOL


@pytest.mark.parametrize("run", [r for r in RUNS if _aggregate_rel_gap(r) is not None], ids=_run_id)
def test_aggregate_agrees_with_per_gpu(run):
    consistent = _aggregate_rel_gap(run) <= REL_TOL_AGGREGATE
    assert consistent != ("aggregate_pflops" in run["consistency_exceptions"])


@pytest.mark.parametrize(
    "run",
    [r for r in RUNS
     if r["measured"]["tokens_per_s_total"] is not None
     and r["measured"]["iteration_time_s"] is not None],
    ids=_run_id,
)
def test_total_tokens_agree_with_batch_and_iteration_time(run):
    meas, par, mdl = run["measured"], run["parallel"], run["model"]
    expected = par["global_batch_size"] * mdl["seq_len"] / meas["iteration_time_s"]
    assert meas["tokens_per_s_total"] == pytest.approx(expected, rel=REL_TOL_TOKENS)


def _has_flops_pair(run: dict) -> bool:
    meas = run["measured"]
    return (meas["tokens_per_s_per_gpu"] is not None and meas["tflops_per_gpu"] is not None
            and _dims_for(run) is not None)


@pytest.mark.parametrize("run", [r for r in RUNS if _has_flops_pair(r)], ids=_run_id)
def test_implied_flops_per_token_is_plausible(run):
    meas = run["measured"]
    dims = _dims_for(run)
    implied = meas["tflops_per_gpu"] * 1e12 / meas["tokens_per_s_per_gpu"]
    causal_estimate, full_estimate = _flops_per_token_bounds(dims, run["model"]["seq_len"])
    low, high = FLOPS_PER_TOKEN_RATIO_RANGE
    assert low * causal_estimate <= implied <= high * full_estimate, (
        f"implied {implied:.3e} vs estimates {causal_estimate:.3e}..{full_estimate:.3e}")


def test_korthikanti_mfu_matches_eq7():
    """Eq. 7 of arXiv:2205.05198 with 312 TF/s reproduces the printed MFU from the time."""
    rows = [r for r in RUNS if r["source_id"] == "korthikanti2022" and r["measured"]["mfu"]]
    assert len(rows) == 5
    for run in rows:
        mdl, par, meas = run["model"], run["parallel"], run["measured"]
        b, s, h, layers, v = (par["global_batch_size"], mdl["seq_len"], mdl["hidden_size"],
                              mdl["num_layers"], mdl["vocab_size"])
        flops = 72 * b * layers * s * h**2 * (1 + s / (6 * h) + v / (12 * h * layers))
        mfu = flops / (meas["iteration_time_s"] * run["hardware"]["num_gpus"] * 312e12)
        assert mfu == pytest.approx(meas["mfu"], abs=0.003), run["id"]


def test_zero_bubble_schedules_order_as_the_paper_states():
    """Table 4 of arXiv:2401.10241: ZB-2p beats 1F1B in every setting; more microbatches
    help 1F1B."""
    by_key = {}
    for run in RUNS:
        if run["source_id"] != "zerobubble":
            continue
        key = (run["model"]["name"], run["parallel"]["grad_accum_steps"])
        by_key.setdefault(key, {})[run["parallel"]["schedule"]] = \
            run["measured"]["samples_per_s_per_gpu"]
    assert len(by_key) == 12
    for cells in by_key.values():
        assert cells["zb-2p"] >= cells["zb-1p"] >= cells["1f1b"]
    for model_name in {k[0] for k in by_key}:
        counts = sorted(k[1] for k in by_key if k[0] == model_name)
        series = [by_key[(model_name, m)]["1f1b"] for m in counts]
        assert series == sorted(series)


def test_derived_tokens_per_second_from_gpu_hours():
    rows = [r for r in RUNS if r["measured"]["gpu_hours_per_trillion_tokens"] is not None]
    assert rows
    for run in rows:
        expected = 1e12 / (run["measured"]["gpu_hours_per_trillion_tokens"] * 3600)
        assert run["derived"]["tokens_per_s_per_gpu"] == pytest.approx(expected, abs=0.1)


def test_run_ids_named_in_the_notes_exist():
    """Every run id quoted in research/published_runs.md (calibration picks, table) exists."""
    notes = (DATA_PATH.parents[1] / "published_runs.md").read_text(encoding="utf-8")
    known = {r["id"] for r in RUNS}
    quoted = {m for m in re.findall(r"`([a-z0-9][a-z0-9.\-]+)`", notes) if m.count("-") >= 2}
    run_like = {q for q in quoted if q.split("-")[0] in {r["id"].split("-")[0] for r in RUNS}}
    assert run_like, "the notes quote run ids"
    assert run_like <= known, sorted(run_like - known)
    assert known <= run_like, "the notes' table lists every run"


# --------------------------------------------------------------------------------------
# research/data/gemm_efficiency.json: the companion GEMM/attention efficiency points.

GEMM_PATH = DATA_PATH.with_name("gemm_efficiency.json")
GEMM = json.loads(GEMM_PATH.read_text(encoding="utf-8"))
GEMM_KINDS = {"gemm", "batched_gemm", "grouped_gemm_contiguous", "grouped_gemm_masked",
              "mamf_best", "attention_fwd", "attention_fwd_bwd"}


def _peak_for(point: dict) -> float:
    peaks = GEMM["dense_peaks_tflops"][point["gpu"]]
    return peaks["fp8"] if point["dtype"].startswith("fp8") else peaks["bf16"]


def test_gemm_points_schema():
    sources = {s["id"] for s in GEMM["sources"]}
    ids = [p["id"] for p in GEMM["points"]]
    assert len(ids) == len(set(ids))
    assert {p["source_id"] for p in GEMM["points"]} == sources
    for p in GEMM["points"]:
        assert p["kind"] in GEMM_KINDS, p["id"]
        assert p["gpu"] in GPU_IDS and p["gpu"] in GEMM["dense_peaks_tflops"], p["id"]
        assert p["verification"] in VERIFICATION_TAGS
        if p["kind"].startswith("attention"):
            assert p["seq_len"] and p["head_dim"] and isinstance(p["causal"], bool), p["id"]
        else:
            assert all(isinstance(p[d], int) and p[d] > 0 for d in ("m", "n", "k")), p["id"]
        if p["achieved_tflops"] is None:
            assert p["notes"], f"{p['id']}: a missing value must say why"


def test_gemm_points_do_not_exceed_dense_peak():
    for p in GEMM["points"]:
        if p["achieved_tflops"] is not None:
            assert 0 < p["achieved_tflops"] < _peak_for(p), p["id"]


def test_gemm_efficiency_rises_with_size_on_the_xla_grid():
    """Cubes on the H100 grid: efficiency grows monotonically from 256^3 to 4096^3."""
    cubes = sorted((p["m"], p["achieved_tflops"]) for p in GEMM["points"]
                   if p["source_id"] == "xla_perf_table" and p["gpu"] == "h100-sxm5-80gb"
                   and p["m"] == p["n"] == p["k"])
    assert [m for m, _ in cubes] == [256, 512, 1024, 2048, 4096]
    values = [v for _, v in cubes]
    assert values == sorted(values)
