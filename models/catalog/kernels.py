"""Achievable kernel throughput: GEMMs by shape, fused attention, memory-bound kernels.

Owns: the per-GPU-family kernel profiles (calibrated constants, each with its calibration
data named) and three pure time functions: `gemm_time_s`, `attention_time_s`,
`memory_bound_time_s`. Must not: know about layers or parallelism (see `models/core/compute.py`).

GEMM model (one documented function of shape):
    t(M, N, K) = t_launch + 2 M N K / (P * eta_max * occ(M, N)) + c_io * 2 (MN + MK + KN) B / BW
where P is the dense peak of the input format, occ = tiles / (waves x SMs) is the wave
quantisation of ceil(M/64) ceil(N/64) output tiles over the SMs, B the element bytes and BW
the HBM bandwidth. Source: NVIDIA "Matrix Multiplication Background User's Guide" (tile and
wave quantisation); the form and t_launch, tile size and c_io were fitted on the XLA H100 BF16
matmul table (125 shapes 256..4096) and eta_max per GPU family and format on the table named
in its profile; the data held out from each fit and the errors are in research/CALIBRATION.md
(regenerate with research/calibrate_kernels.py).

Attention model: FLOPs / (P * eta_attn * s / (s + s_half)), with eta_attn for fused (flash)
kernels or materialised softmax, calibrated on the FlashAttention-2/3 repository benchmarks.
"""

import dataclasses
import math
from dataclasses import dataclass
from typing import NamedTuple

from api_schemas.dtypes import DType
from api_schemas.hardware import GpuSpec
from api_schemas.training import AttentionKernel
from models.errors import InvalidSpecError

GEMM_LAUNCH_S = 5e-6
"""Fixed cost per GEMM kernel (launch, prologue, epilogue): fitted on the XLA H100 table."""

GEMM_TILE = 64
"""Output-tile edge used for wave quantisation: fitted on the XLA H100 table (64 beat 128/256)."""

GEMM_IO_FACTOR = 0.5
"""Share of the GEMM's operand and result bytes whose HBM traffic is not hidden: fitted."""

HBM_ACHIEVABLE_FRAC = 0.8
"""Achievable share of peak HBM bandwidth for streaming elementwise kernels (norms, residual
adds, activations). Source: STREAM-like copy kernels reach about 80-90% of HBM peak on
A100/H100 (NVIDIA and vendor microbenchmarks); the lower end is used."""


CDNA3_GEMM_TABLE_RATIO = (1159.5 / 2614.9) / (1366.3 / 1978.9)
"""Share of its dense FP8 peak an MI300X reaches on its best large GEMM over the share an H200
reaches, both measured by one harness (Azure AI benchmarking guide, `Azure_Results/`
ND_MI300X_v5_results.md and ND_H200_v5_results.md, hipBLASLt / cuBLASLt FP8, random
initialisation, 10,000 warm-up iterations: MI300X 1159.5 TFLOP/s at 6144x12288x12288, H200
1366.3 TFLOP/s at 16384^3; dense peaks 2614.9 and 1978.9 TFLOP/s from
models/data/hardware.json): 0.642."""

CDNA3_ATTENTION_TABLE_RATIO = (328.6 / 1307.4) / (329.3 / 989.4)
"""The same ratio for FlashAttention-2 (same guide: MI300X 328.6 TFLOP/s at head dim 64, H200
329.3 TFLOP/s at head dim 128, batch 2, sequence 8192, over the 16-bit dense peaks): 0.755.
The MI300X row's smaller head dimension makes it a lower bound on the ratio."""

CDNA3_MATERIALIZED_TABLE_RATIO = (145.9 / 1307.4) / (161.5 / 989.4)
"""The same ratio for unfused PyTorch attention (same guide: 145.9 vs 161.5 TFLOP/s): 0.684."""

CDNA3_GEMM_FRAC_FP8 = 0.50 * CDNA3_GEMM_TABLE_RATIO
"""CDNA3 FP8 eta_max: the Hopper step-level FP8 level (0.50, `PROFILES['hopper']`) times
`CDNA3_GEMM_TABLE_RATIO`, i.e. the step-to-kernel gap of Hopper carried over and the kernel
gap between the two GPUs measured: 0.321."""

CDNA3_GEMM_FRAC_BF16 = 0.61 * CDNA3_GEMM_TABLE_RATIO
"""CDNA3 BF16 eta_max: the Hopper step-level BF16 level (0.61) times the FP8 kernel ratio (no
same-harness BF16 table was read, the FP8 ratio is assumed): 0.392. Held out: an 8 x MI300X
Llama 3.1 8B run (research/CALIBRATION.md, CDNA3)."""

CDNA3_FLASH_ATTENTION_FRAC = 0.50 * CDNA3_ATTENTION_TABLE_RATIO
"""Fused attention on CDNA3 (Transformer Engine's ROCm backend: CK FlashAttention): the
Hopper fused level 0.50 times `CDNA3_ATTENTION_TABLE_RATIO`: 0.378."""

CDNA3_SDPA_ATTENTION_FRAC = 0.35 * CDNA3_ATTENTION_TABLE_RATIO
"""PyTorch SDPA attention on CDNA3: the Hopper FlashAttention-2 level 0.35 times
`CDNA3_ATTENTION_TABLE_RATIO` (both rows of that ratio are FlashAttention-2): 0.264."""

CDNA3_MATERIALIZED_ATTENTION_FRAC = 0.17 * CDNA3_MATERIALIZED_TABLE_RATIO
"""Unfused attention on CDNA3: the Hopper level 0.17 times `CDNA3_MATERIALIZED_TABLE_RATIO`:
0.116."""


@dataclass(frozen=True, slots=True, kw_only=True)
class KernelProfile:
    """Calibrated kernel efficiencies of one GPU family."""

    family: str
    num_sms: int
    gemm_peak_frac: dict[DType, float]
    """eta_max: share of the dense peak a large, well-shaped GEMM reaches, per input format."""
    flash_attention_frac: float
    """Fused attention forward+backward share of the 16-bit peak at long sequences, d=128."""
    materialized_attention_frac: float
    """Unfused attention (scores in HBM, separate softmax) share of the 16-bit peak."""
    attention_seq_half: int
    """Sequence length at which attention reaches half its asymptotic efficiency."""
    calibration: str
    sdpa_attention_frac: float | None = None
    """Fused attention share of the 16-bit peak when PyTorch's `scaled_dot_product_attention`
    picks the kernel (a runtime without Megatron / Transformer Engine attention): its default
    backend order puts FlashAttention-2 first and cuDNN last (`sdp_utils.cpp` default_order,
    quoted in pytorch/pytorch issue #138907, 2024-10-25). None: no FlashAttention-2
    measurement on this family, the fused level is used."""
    flash1_attention_frac: float | None = None
    """The first FlashAttention CUDA kernels' share of the 16-bit peak (the 2022 generation,
    `AttentionKernel.FLASH_ATTENTION_1`). None: no measurement on this family."""
    triton_attention_frac: float | None = None
    """The 2022 Triton FlashAttention's share of the 16-bit peak
    (`AttentionKernel.TRITON_FLASH_ATTENTION`). None: no measurement on this family."""


AMPERE_ATTENTION_SEQ_HALF = 160
"""`KernelProfile.attention_seq_half` of Ampere (fitted with its attention levels)."""

HOPPER_ATTENTION_SEQ_HALF = 220
"""`KernelProfile.attention_seq_half` of Hopper (Blackwell borrows it)."""

LEVEL_SEQ_LEN = 16384
"""Sequence length at which an attention level is read off a kernel benchmark."""


def measured_attention_frac(tflops: float, *, peak_tflops: float, seq_half: int) -> float:
    """The attention level (`KernelProfile` share of the 16-bit peak at long sequences) that
    gives `tflops` forward + backward at `LEVEL_SEQ_LEN` tokens: the measured share of the
    peak over the saturation s / (s + s_half) of `attention_time_s` there."""
    return tflops / peak_tflops / (LEVEL_SEQ_LEN / (LEVEL_SEQ_LEN + seq_half))


A100_FLASH1_ATTENTION_FRAC = measured_attention_frac(83, peak_tflops=312,
                                                     seq_half=AMPERE_ATTENTION_SEQ_HALF)
"""FlashAttention (2022) on A100 SXM4 80GB: 83 TFLOP/s forward + backward at 16k tokens, head
dim 128, no causal mask, over the 312 TFLOP/s 16-bit peak and the 16k saturation: 0.269.
Source: bar labels of `assets/flash2_a100_fwd_bwd_benchmark.png` in Dao-AILab/flash-attention
(research/data/gemm_efficiency.json, source `fa2_repo_figures`), a kernel benchmark: nothing
fitted on a training step."""

A100_TRITON_ATTENTION_FRAC = measured_attention_frac(95, peak_tflops=312,
                                                     seq_half=AMPERE_ATTENTION_SEQ_HALF)
"""The Triton FlashAttention on A100 SXM4 80GB: 95 TFLOP/s forward + backward in the same
figure and setting as `A100_FLASH1_ATTENTION_FRAC`: 0.307."""

H100_FLASH1_ATTENTION_FRAC = measured_attention_frac(139, peak_tflops=989,
                                                     seq_half=HOPPER_ATTENTION_SEQ_HALF)
"""FlashAttention (2022) on H100 SXM5: 139 TFLOP/s forward + backward at 16k tokens, head dim
128, no causal mask (`assets/flash2_h100_fwd_bwd_benchmark.png`, same repository and data
file), over the 989 TFLOP/s 16-bit peak and the 16k saturation: 0.142. It also stands for the
2022 Triton kernel on Hopper: that figure has no Triton bars and no H100 measurement of it
was read; both kernels predate Hopper's instructions, and on A100 they measure within 15% of
each other (95 and 83 TFLOP/s without the causal mask, 80 and 83 with it)."""


PROFILES: dict[str, KernelProfile] = {
    "ampere": KernelProfile(
        family="ampere", num_sms=108,
        gemm_peak_frac={DType.BF16: 0.74, DType.FP16: 0.74, DType.TF32: 0.65},
        flash_attention_frac=0.66, materialized_attention_frac=0.28,
        attention_seq_half=AMPERE_ATTENTION_SEQ_HALF,
        calibration="eta_max: step-level fit on three Megatron-LM 2021 Table 1 rows (1.7B, "
                    "145.6B, 1008B, with the wait for the slowest GPU booked; "
                    "research/calibrate_step.py; the kernel tables alone give "
                    "0.89 from MAMF's best A100 shape); "
                    "attention from FlashAttention-2 A100 fwd+bwd d=128 (203 TFLOP/s at 16k; "
                    "PyTorch unfused 86 TFLOP/s at 8k; PyTorch SDPA runs the same "
                    "FlashAttention-2 kernels)",
        sdpa_attention_frac=0.66, flash1_attention_frac=A100_FLASH1_ATTENTION_FRAC,
        triton_attention_frac=A100_TRITON_ATTENTION_FRAC),
    "hopper": KernelProfile(
        family="hopper", num_sms=132,
        gemm_peak_frac={DType.BF16: 0.61, DType.FP16: 0.61, DType.FP8: 0.50, DType.TF32: 0.6},
        flash_attention_frac=0.50, materialized_attention_frac=0.17,
        attention_seq_half=HOPPER_ATTENTION_SEQ_HALF,
        calibration="eta_max: step-level fit on fewer than three rows per dtype: BF16 on "
                    "two predicted H100 rows, FP8 on none (the named FP8 row, NeMo 24.07 "
                    "GPT-3 175B on 512 GPUs, prints no vocabulary and is not predicted, so "
                    "the grid's first FP8 point wins the tie), so Hopper bands are widened "
                    "(error_bands.py THIN_FITS); rows named: Megatron-LM README 314B, "
                    "Llama 3 405B on 16K GPUs, NeMo 24.07 GPT-3 175B FP8 on 512 GPUs; the "
                    "README row with its stated TP overlap passed and the wait for the slowest "
                    "GPU booked; research/validate_published.py --calibrate-h100); the kernel "
                    "tables alone "
                    "give 0.90 BF16 (XLA H100) and 0.77 FP8 (DeepGEMM H800); attention: "
                    "cuDNN/FlashAttention-3 forward "
                    "648 TFLOP/s at d=128 (0.65) with backward assumed at 0.75x forward "
                    "throughput (FlashAttention-2 alone measures 0.34 fwd+bwd); PyTorch SDPA "
                    "attention: FlashAttention-2 repository H100 fwd+bwd d=128, 338 TFLOP/s at "
                    "16k over the 16k saturation 0.987 = 0.35",
        sdpa_attention_frac=0.35, flash1_attention_frac=H100_FLASH1_ATTENTION_FRAC,
        triton_attention_frac=H100_FLASH1_ATTENTION_FRAC),
    "blackwell": KernelProfile(
        family="blackwell", num_sms=148,
        gemm_peak_frac={DType.BF16: 0.453, DType.FP16: 0.453, DType.FP8: 0.48, DType.TF32: 0.45},
        flash_attention_frac=0.45, materialized_attention_frac=0.12,
        attention_seq_half=HOPPER_ATTENTION_SEQ_HALF,
        calibration="eta_max: step-level fit on two (fewer than three) Megatron-Bridge "
                    "25.11 B200 FP8 rows, so B200 bands are widened (error_bands.py "
                    "THIN_FITS): "
                    "(Llama 3 8B on 8 GPUs, Llama 3.1 405B on 128 GPUs, with the recipes' "
                    "BF16 gradient buffers, TP communication overlap and the wait for the "
                    "slowest GPU; "
                    "research/validate_published.py --calibrate-b200), "
                    "BF16 kept at the XLA "
                    "B200 tables' BF16/FP8 ratio (0.665/0.705); attention assumed as Hopper "
                    "scaled down (no public B200 attention benchmark read)"),
    "cdna3": KernelProfile(
        family="cdna3", num_sms=304,
        gemm_peak_frac={DType.BF16: CDNA3_GEMM_FRAC_BF16, DType.FP16: CDNA3_GEMM_FRAC_BF16,
                        DType.FP8: CDNA3_GEMM_FRAC_FP8, DType.TF32: CDNA3_GEMM_FRAC_BF16},
        flash_attention_frac=CDNA3_FLASH_ATTENTION_FRAC,
        materialized_attention_frac=CDNA3_MATERIALIZED_ATTENTION_FRAC, attention_seq_half=256,
        calibration="transferred from the Hopper step-level fit by same-harness kernel tables "
                    "(Azure AI benchmarking guide, ND MI300X v5 vs ND H200 v5: hipBLASLt / "
                    "cuBLASLt FP8 GEMM best large shape 1159.5 of 2614.9 vs 1366.3 of 1978.9 "
                    "TFLOP/s, ratio 0.642; FlashAttention-2 328.6 of 1307.4 vs 329.3 of 989.4, "
                    "ratio 0.755): eta_max FP8 0.32, BF16 0.39 (the FP8 ratio assumed for "
                    "BF16: no BF16 table read); nothing fitted on an MI300X training step: "
                    "the predicted range is Hopper's widened by the held-out MI300X checks "
                    "(research/CALIBRATION.md, CDNA3)",
        sdpa_attention_frac=CDNA3_SDPA_ATTENTION_FRAC),
}
PROFILES["cdna4"] = dataclasses.replace(
    PROFILES["cdna3"], family="cdna4", num_sms=256,
    calibration="no CDNA 4 (MI355X) GEMM, attention or training measurement was read: the "
                "CDNA 3 levels on its own 256 compute units (models/data/hardware.json), which "
                "are themselves " + PROFILES["cdna3"].calibration)
"""CDNA 4 borrows the CDNA 3 efficiencies (shares of its own, doubled peaks) with its own
compute-unit count for wave quantisation; nothing measured on it backs them."""


FAMILY_PREFIXES: dict[str, tuple[str, ...]] = {
    "ampere": ("a100",), "hopper": ("h100", "h800", "h200", "gh200"),
    "blackwell": ("b200", "gb200", "b300"), "cdna3": ("mi300", "mi325"), "cdna4": ("mi35",),
}
"""GPU id prefixes of each kernel family. CDNA 3 (MI300X, MI325X: one compute die) and
CDNA 4 (MI350X, MI355X) are kept apart so that a plan names its own family, even though
CDNA 4 borrows the CDNA 3 levels."""


def profile_for(gpu: GpuSpec) -> KernelProfile:
    """The kernel profile of a GPU by its catalog id prefix.

    Raises:
        InvalidSpecError: the id matches no family (never a silent Hopper profile): the
            message names the field to give and the prefixes known.
    """
    gid = gpu.id.lower()
    for family, prefixes in FAMILY_PREFIXES.items():
        if gid.startswith(prefixes):
            return PROFILES[family]
    known = ", ".join(p for prefixes in FAMILY_PREFIXES.values() for p in prefixes)
    raise InvalidSpecError(
        f"GPU '{gpu.id}' belongs to no kernel family with calibrated efficiencies: give "
        f"cluster.gpu.id starting with the prefix of its architecture ({known}), or use a "
        "catalog GPU preset", field="cluster.gpu.id")


GEMM_EFFICIENCY_FLOOR_FRAC = 0.10
"""Lowest calibrated eta_max accepted (share of the dense tensor-core peak). Below it the
GEMMs would run at about the CUDA-core FP32 rate (A100 19.5 of 312 TFLOP/s = 6.3%, H100 SXM
67 of 989 = 6.8%: NVIDIA A100 and H100 datasheets), i.e. tensor cores idle: a measured step
that slow is limited by something the GEMM constant does not model (throttling, host stalls,
a wrong configuration), and fitting it into eta_max would mislead every other plan."""


def calibrated_profile(profile: KernelProfile, gemm_efficiency_scale: float, *,
                       label: str = "", attention_efficiency_scale: float = 1.0
                       ) -> KernelProfile:
    """`profile` with every format's eta_max multiplied by `gemm_efficiency_scale` and the
    attention efficiencies (fused, materialised, PyTorch SDPA) by
    `attention_efficiency_scale`.

    The GEMM multiplier is the GEMM efficiency level of a calibration profile (fitted on
    measured step times, `models.evidence.calibration`, or on GEMM microbenchmarks,
    `models.evidence.microbenchmarks`); the attention multiplier is fitted on attention-kernel
    microbenchmarks. The shape model (wave quantisation, launch and I/O terms) and the
    attention saturation length are unchanged. Source: the GEMM and attention models of this
    module, whose levels are themselves fits (research/CALIBRATION.md); a cluster-specific
    refit of those levels is Sec. "Cluster calibration" there.

    Raises:
        InvalidSpecError: a scaled eta_max above 1 (faster than the dense peak) or below
            `GEMM_EFFICIENCY_FLOOR_FRAC`, or a scaled attention efficiency above 1.
    """
    if gemm_efficiency_scale == 1.0 and attention_efficiency_scale == 1.0:
        return profile
    scaled = {dtype: frac * gemm_efficiency_scale
              for dtype, frac in profile.gemm_peak_frac.items()}
    for dtype, frac in scaled.items():
        if frac > 1.0 or frac < GEMM_EFFICIENCY_FLOOR_FRAC:
            raise InvalidSpecError(
                f"GEMM efficiency scale {gemm_efficiency_scale:g} puts {profile.family} "
                f"{dtype.value} GEMMs at {frac:.1%} of the dense peak, outside "
                f"[{GEMM_EFFICIENCY_FLOOR_FRAC:.0%}, 100%]; give a scale between "
                f"{GEMM_EFFICIENCY_FLOOR_FRAC / min(profile.gemm_peak_frac.values()):.3g} and "
                f"{1.0 / max(profile.gemm_peak_frac.values()):.3g}",
                field="cluster.calibration.gemm_efficiency_scale")
    flash = profile.flash_attention_frac * attention_efficiency_scale
    if flash > 1.0:
        raise InvalidSpecError(
            f"attention efficiency scale {attention_efficiency_scale:g} puts {profile.family} "
            f"fused attention at {flash:.1%} of the dense 16-bit peak, above 100%; give a "
            f"scale at most {1.0 / profile.flash_attention_frac:.3g}",
            field="cluster.calibration.attention_efficiency_scale")
    note = label or (f"GEMM efficiency x {gemm_efficiency_scale:.4g}"
                     + (f", attention x {attention_efficiency_scale:.4g}"
                        if attention_efficiency_scale != 1.0 else ""))
    return dataclasses.replace(
        profile, gemm_peak_frac=scaled, flash_attention_frac=flash,
        materialized_attention_frac=profile.materialized_attention_frac
        * attention_efficiency_scale,
        sdpa_attention_frac=_scaled_level(profile.sdpa_attention_frac,
                                          attention_efficiency_scale),
        flash1_attention_frac=_scaled_level(profile.flash1_attention_frac,
                                            attention_efficiency_scale),
        triton_attention_frac=_scaled_level(profile.triton_attention_frac,
                                            attention_efficiency_scale),
        calibration=f"{note} over: {profile.calibration}")


def _scaled_level(level: float | None, scale: float) -> float | None:
    """An optional attention level times a calibration's attention scale, at most 1."""
    return None if level is None else min(1.0, level * scale)


def _gemm_frac(profile: KernelProfile, dtype: DType) -> float:
    return profile.gemm_peak_frac.get(dtype) or profile.gemm_peak_frac[DType.BF16]


def wave_occupancy(m: int, n: int, *, num_sms: int) -> float:
    """tiles / (waves x SMs) for ceil(m/64) x ceil(n/64) output tiles (1.0 = no wave loss)."""
    tiles = math.ceil(m / GEMM_TILE) * math.ceil(n / GEMM_TILE)
    waves = math.ceil(tiles / num_sms)
    return tiles / (waves * num_sms)


class GemmRates(NamedTuple):
    """What `gemm_time_s` reads of a GPU, an input format and a kernel profile, taken once
    for the many shapes of one layer (`gemm_rates`)."""

    peak_frac: float
    """The format's dense peak times the profile's GEMM efficiency (P x eta_max)."""
    num_sms: int
    element_bytes: float
    """Bytes per operand element, at most 2 (B)."""
    bandwidth: float
    """HBM bandwidth in bytes per second (BW)."""


def gemm_rates(gpu: GpuSpec, dtype: DType, profile: KernelProfile | None = None) -> GemmRates:
    """The `GemmRates` of a GPU, a format and a profile (the GPU's own when not given)."""
    prof = profile or profile_for(gpu)
    return GemmRates(peak_frac=gpu.peak_flop_per_s(dtype) * _gemm_frac(prof, dtype),
                     num_sms=prof.num_sms, element_bytes=min(dtype.num_bytes, 2.0),
                     bandwidth=gpu.hbm_bandwidth_bytes_per_s)


def gemm_time_s(m: int, n: int, k: int, *, gpu: GpuSpec, dtype: DType,
                profile: KernelProfile | None = None) -> float:
    """Time of one (m x k) @ (k x n) GEMM (see the module docstring for the formula).

    Legend: M=m, N=n, K=k, P=gpu.peak_flop_per_s(dtype), BW=gpu.hbm_bandwidth_bytes_per_s.
    """
    if m <= 0 or n <= 0 or k <= 0:
        return 0.0
    return gemm_time_at(m, n, k, gemm_rates(gpu, dtype, profile))


def gemm_time_at(m: int, n: int, k: int, rates: GemmRates) -> float:
    """`gemm_time_s` of one shape under rates taken once (`gemm_rates`).

    Legend: as `gemm_time_s`; P x eta_max = rates.peak_frac.
    """
    if m <= 0 or n <= 0 or k <= 0:
        return 0.0
    compute = 2.0 * m * n * k / (rates.peak_frac
                                 * wave_occupancy(m, n, num_sms=rates.num_sms))
    io = GEMM_IO_FACTOR * rates.element_bytes * (m * n + m * k + k * n) / rates.bandwidth
    return GEMM_LAUNCH_S + compute + io


GROUPED_GEMM_STREAMS = 4
"""Compute streams over which Transformer Engine spreads the per-expert GEMMs of one grouped
linear. Source: Transformer Engine `transformer_engine/common/util/multi_stream.cpp`
(`num_compute_streams = 4`) and `gemm/cublaslt_gemm.cu` (`nvte_multi_tensor_gemm` runs one
cuBLAS GEMM per group, group i on stream i mod 4; the CUTLASS grouped kernel is used only on
Hopper, BF16, with NVTE_USE_CUTLASS_GROUPED_GEMM set)."""


def grouped_gemm_time_s(groups: int, m: int, n: int, k: int, *, gpu: GpuSpec, dtype: DType,
                        profile: KernelProfile | None = None,
                        streams: int = GROUPED_GEMM_STREAMS) -> float:
    """Time of one grouped GEMM: `groups` independent (m x k) @ (k x n) problems, as MoE
    layers run their local experts.

    Transformer Engine's grouped linear (Megatron-Core `--moe-grouped-gemm` with TE) issues
    one GEMM per expert, `streams` at a time (`GROUPED_GEMM_STREAMS`): the experts run in
    ceil(groups / streams) rounds; each round pays one fixed kernel cost (the launches of
    a round overlap) and its concurrent problems share the waves (occupancy of the round's
    tiles together), so with few tokens per expert a round's tiles leave SMs idle (wave
    quantisation per expert). Each group streams its own operands: with few tokens per
    expert the k x n weights of every expert dominate the bytes (bandwidth-bound).
    Source: the GEMM model of this module applied per group; Transformer Engine
    `nvte_multi_tensor_gemm` (see `GROUPED_GEMM_STREAMS`); MegaBlocks (Gale et al. 2022,
    arXiv:2211.15841, Sec. 5: expert GEMM efficiency falls with the tokens per expert).
    Legend: groups = local experts, m = tokens per expert (tile-padded), n, k = the expert
    GEMM's output and reduction widths, streams = problems that run concurrently.
    """
    if groups <= 0 or m <= 0 or n <= 0 or k <= 0:
        return 0.0
    prof = profile or profile_for(gpu)
    peak = gpu.peak_flop_per_s(dtype) * _gemm_frac(prof, dtype)
    per_problem_tiles = math.ceil(m / GEMM_TILE) * math.ceil(n / GEMM_TILE)
    lanes = max(1, streams)
    total = 0.0
    remaining = groups
    while remaining > 0:
        concurrent = min(lanes, remaining)
        tiles = concurrent * per_problem_tiles
        occupancy = tiles / (math.ceil(tiles / prof.num_sms) * prof.num_sms)
        total += GEMM_LAUNCH_S + 2.0 * concurrent * m * n * k / (peak * occupancy)
        remaining -= concurrent
    element_bytes = min(dtype.num_bytes, 2.0)
    io = (GEMM_IO_FACTOR * element_bytes * groups * (m * n + m * k + k * n)
          / gpu.hbm_bandwidth_bytes_per_s)
    return total + io


def attention_time_s(flop: float, *, seq_len: int, gpu: GpuSpec, flash: bool,
                     profile: KernelProfile | None = None, sdpa: bool = False,
                     kernel: AttentionKernel | None = None) -> float:
    """Time of `flop` attention-core FLOPs (forward or backward) at sequence length `seq_len`.

    Source: FlashAttention-2 arXiv:2307.08691 Sec. 4.1 and the FlashAttention-2/3 repository
    benchmarks (efficiency rises with sequence length and saturates); materialised attention
    (separate softmax kernels over an s x s matrix in HBM) reaches far less. `sdpa`: the
    fused kernel is the one PyTorch's `scaled_dot_product_attention` picks
    (FlashAttention-2), else Transformer Engine's. `kernel`: the fused kernel the runtime
    names, which takes precedence over `sdpa`; each kernel's level is
    `fused_attention_frac`'s.

    Raises:
        InvalidSpecError: `kernel` has no measured level on the GPU's family.
    """
    if flop <= 0:
        return 0.0
    prof = profile or profile_for(gpu)
    if kernel is None:
        kernel = AttentionKernel.FLASH_ATTENTION_2 if sdpa else AttentionKernel.TRANSFORMER_ENGINE
    frac = fused_attention_frac(prof, kernel) if flash else prof.materialized_attention_frac
    saturation = seq_len / (seq_len + prof.attention_seq_half)
    return flop / (gpu.peak_flop_per_s(DType.BF16) * frac * saturation)


def fused_attention_frac(profile: KernelProfile, kernel: AttentionKernel) -> float:
    """The share of the 16-bit peak `kernel` reaches on `profile`'s family at long sequences:
    Transformer Engine's the profile's fused level, FlashAttention-2's its SDPA level (the
    fused level where the family has no FlashAttention-2 measurement), the 2022 kernels
    their own measured levels.

    Raises:
        InvalidSpecError: a 2022 kernel on a family where none was measured.
    """
    if kernel == AttentionKernel.TRANSFORMER_ENGINE:
        return profile.flash_attention_frac
    if kernel == AttentionKernel.FLASH_ATTENTION_2:
        return (profile.flash_attention_frac if profile.sdpa_attention_frac is None
                else profile.sdpa_attention_frac)
    level = (profile.flash1_attention_frac if kernel == AttentionKernel.FLASH_ATTENTION_1
             else profile.triton_attention_frac)
    if level is None:
        raise InvalidSpecError(
            f"attention_kernel '{kernel.value}' has no measured level on {profile.family} "
            "GPUs (measured on A100 and H100 only); leave training.attention_kernel unset or "
            "name 'flash_attention_2' or 'transformer_engine'",
            field="training.attention_kernel")
    return level


def memory_bound_time_s(num_bytes: float, *, gpu: GpuSpec) -> float:
    """Time to stream `num_bytes` through HBM at the achievable bandwidth."""
    return max(0.0, num_bytes) / (gpu.hbm_bandwidth_bytes_per_s * HBM_ACHIEVABLE_FRAC)


__all__ = [
    "A100_FLASH1_ATTENTION_FRAC",
    "A100_TRITON_ATTENTION_FRAC",
    "AMPERE_ATTENTION_SEQ_HALF",
    "GEMM_IO_FACTOR",
    "GEMM_EFFICIENCY_FLOOR_FRAC",
    "GEMM_LAUNCH_S",
    "GEMM_TILE",
    "GROUPED_GEMM_STREAMS",
    "CDNA3_ATTENTION_TABLE_RATIO",
    "CDNA3_GEMM_FRAC_BF16",
    "CDNA3_GEMM_FRAC_FP8",
    "CDNA3_GEMM_TABLE_RATIO",
    "H100_FLASH1_ATTENTION_FRAC",
    "HOPPER_ATTENTION_SEQ_HALF",
    "LEVEL_SEQ_LEN",
    "HBM_ACHIEVABLE_FRAC",
    "PROFILES",
    "GemmRates",
    "KernelProfile",
    "attention_time_s",
    "calibrated_profile",
    "fused_attention_frac",
    "gemm_rates",
    "gemm_time_at",
    "gemm_time_s",
    "grouped_gemm_time_s",
    "measured_attention_frac",
    "memory_bound_time_s",
    "profile_for",
    "wave_occupancy",
]
