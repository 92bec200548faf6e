"""Calibration of the kernel-throughput constants in models/catalog/kernels.py.

Run: .venv/bin/python research/calibrate_kernels.py

1. GEMM shape model: grid-searches (launch, tile, io factor, eta_max) on the calibration set
   (XLA H100 BF16 table), prints the best and the error of the constants in the code.
2. Held-out checks: B200 BF16 and FP8 tables and the DeepGEMM H800 FP8 shapes, each with the
   code's eta_max (calibrated on one MAMF point per GPU and format, not on these tables).
3. eta_max from the MAMF points: the value that makes the model reproduce each point.
4. Attention: the code's fused/unfused efficiencies against the FlashAttention-2 figures.
"""

import json
import math
from pathlib import Path

import numpy as np

from api_schemas import DType
from models.catalog.kernels import (
    GEMM_IO_FACTOR,
    GEMM_LAUNCH_S,
    GEMM_TILE,
    PROFILES,
    attention_time_s,
    gemm_time_s,
    profile_for,
)
from models.catalog.presets import gpu_preset

DATA = json.loads((Path(__file__).parent / "data" / "gemm_efficiency.json").read_text())
POINTS = DATA["points"]
DTYPES = {"bf16": DType.BF16, "fp8_e4m3": DType.FP8, "fp8_e4m3_blockscaled": DType.FP8}


def _select(source: str, gpu: str, dtype: str, kinds: tuple[str, ...] = ("gemm",)) -> list[dict]:
    return [p for p in POINTS if p["source_id"] == source and p["gpu"] == gpu
            and p["dtype"] == dtype and p["kind"] in kinds and p["achieved_tflops"]]


def _errors(points: list[dict], gpu_id: str, dtype: DType) -> np.ndarray:
    gpu = gpu_preset(gpu_id)
    out = []
    for p in points:
        t = gemm_time_s(p["m"], p["n"], p["k"], gpu=gpu, dtype=dtype)
        predicted = 2 * p["m"] * p["n"] * p["k"] / t / 1e12
        out.append(math.log(predicted / p["achieved_tflops"]))
    return np.abs(np.array(out))


def _grid_fit(points: list[dict], peak: float, bandwidth: float, sms: int) -> tuple:
    m = np.array([p["m"] for p in points], float)
    n = np.array([p["n"] for p in points], float)
    k = np.array([p["k"] for p in points], float)
    measured = np.array([p["achieved_tflops"] for p in points]) * 1e12
    best = None
    for tile in (64, 128, 256):
        tiles = np.ceil(m / tile) * np.ceil(n / tile)
        occ = tiles / (np.ceil(tiles / sms) * sms)
        for launch in (2e-6, 3e-6, 4e-6, 5e-6, 6e-6, 8e-6):
            for io in (0.0, 0.25, 0.5, 0.75, 1.0):
                for eta in np.arange(0.60, 1.001, 0.01):
                    t = launch + 2 * m * n * k / (peak * eta * occ) + io * 2 * (
                        m * n + m * k + k * n) / bandwidth
                    err = np.abs(np.log(2 * m * n * k / t / measured))
                    if best is None or err.mean() < best[0]:
                        best = (err.mean(), np.median(err), err.max(), tile, launch, io, eta)
    return best


def _eta_from_point(point: dict, gpu_id: str, dtype: DType) -> float:
    gpu = gpu_preset(gpu_id)
    prof = profile_for(gpu)
    m, n, k = point["m"], point["n"], point["k"]
    flop = 2 * m * n * k
    tiles = math.ceil(m / GEMM_TILE) * math.ceil(n / GEMM_TILE)
    occ = tiles / (math.ceil(tiles / prof.num_sms) * prof.num_sms)
    io = GEMM_IO_FACTOR * 2 * (m * n + m * k + k * n) / gpu.hbm_bandwidth_bytes_per_s
    compute_s = flop / (point["achieved_tflops"] * 1e12) - GEMM_LAUNCH_S - io
    return flop / (gpu.peak_flop_per_s(dtype) * occ * compute_s)


def main() -> None:
    h100 = gpu_preset("h100-sxm5-80gb")
    calib = _select("xla_perf_table", "h100-sxm5-80gb", "bf16")
    fit = _grid_fit(calib, h100.peak_flop_per_s(DType.BF16), h100.hbm_bandwidth_bytes_per_s, 132)
    print("1. GEMM structural fit on XLA H100 BF16 (calibration, %d shapes)" % len(calib))
    print("   best: mean|log err| %.3f median %.3f max %.3f tile %d launch %.0e io %.2f eta %.2f"
          % fit)
    err = _errors(calib, "h100-sxm5-80gb", DType.BF16)
    print("   code constants (tile %d, launch %.0e, io %.2f, eta %.2f): median %.3f max %.3f"
          % (GEMM_TILE, GEMM_LAUNCH_S, GEMM_IO_FACTOR,
             PROFILES["hopper"].gemm_peak_frac[DType.BF16], np.median(err), err.max()))
    print("2. Held-out GEMM checks (code constants)")
    for source, gpu_id, dtype, kinds in (
            ("xla_perf_table", "b200-sxm-180gb", "bf16", ("gemm",)),
            ("xla_perf_table", "b200-sxm-180gb", "fp8_e4m3", ("gemm",)),
            ("deepgemm", "h800-sxm5-80gb", "fp8_e4m3_blockscaled",
             ("gemm", "grouped_gemm_contiguous"))):
        pts = _select(source, gpu_id, dtype, kinds)
        e = _errors(pts, gpu_id, DTYPES[dtype])
        print("   %-15s %-16s %-22s n=%3d median %.3f mean %.3f max %.3f"
              % (source, gpu_id, dtype, len(pts), np.median(e), e.mean(), e.max()))
    print("3. eta_max implied by each MAMF point (the code's gemm_peak_frac)")
    for p in (q for q in POINTS if q["source_id"] == "mamf"):
        dtype = DTYPES.get(p["dtype"], DType.BF16)
        code = profile_for(gpu_preset(p["gpu"])).gemm_peak_frac.get(dtype)
        print("   %-16s %-9s %7.1f TFLOP/s at (%d, %d, %d): implied %.3f, code %s"
              % (p["gpu"], p["dtype"], p["achieved_tflops"], p["m"], p["n"], p["k"],
                 _eta_from_point(p, p["gpu"], dtype), code))
    print("4. Attention (fused, d=128, fwd+bwd; FLOPs as the benchmark counts them)")
    for gpu_id in ("a100-sxm4-80gb", "h100-sxm5-80gb"):
        gpu = gpu_preset(gpu_id)
        for p in POINTS:
            if (p["source_id"] == "fa2_repo_figures" and p["gpu"] == gpu_id
                    and p.get("implementation") in ("flashattention2", "pytorch")
                    and p.get("head_dim") == 128 and not p.get("causal")
                    and p["achieved_tflops"]):
                flash = p["implementation"] == "flashattention2"
                tokens = 16384
                flop = 4 * p["seq_len"] ** 2 * 128 * 16 * (tokens / p["seq_len"]) * 3.5
                t = attention_time_s(flop, seq_len=p["seq_len"], gpu=gpu, flash=flash)
                print("   %-15s %-15s s=%5d measured %5.0f model %5.0f TFLOP/s"
                      % (gpu_id, p["implementation"], p["seq_len"], p["achieved_tflops"],
                         flop / t / 1e12))


if __name__ == "__main__":
    main()
