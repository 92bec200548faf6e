"""Fitting the cost model's kernel and link constants to a cluster's microbenchmarks.

Owns: the physical checks of each microbenchmark entry (no GEMM or attention kernel above
the dense peak, no collective faster than its links at their nominal rate, no host copy
above the host link's nominal rate) and the least-squares fit, with standard errors, of:
the GEMM kernel level per input format and its launch cost (the shape curve of
`models.catalog.kernels.gemm_time_s`), the GEMM efficiency scale it implies against the kernel
table each family was calibrated with, the scale-up and scale-out bandwidth scales
(`models.core.collectives.fabric_of`), the attention efficiency scale
(`models.catalog.kernels.attention_time_s`) and the host-link bandwidth. Pure: measurements and a
resolved cluster in, constants out. Must not: read files, store profiles (`service/`) or fit
step times (`models/evidence/calibration.py`).

Fits (every residual is a log ratio, so each entry weighs by its relative error):
- GEMM, per format: t = L + 2mnk / (P occ(m, n)) x (1/eta) + c_io bytes / BW is linear in
  (L, 1/eta); weighted linear least squares with weights 1/t_measured^2, covariance
  sigma^2 (X^T W X)^-1 with sigma^2 = RSS / (n - p). With fewer than 3 shapes, or a
  negative launch, L is held at `GEMM_LAUNCH_S` (0 when negative) and 1/eta fitted alone.
- Links and attention: one multiplier each, minimising sum (ln model(x) - ln measured)^2 by
  golden-section search on ln x; standard error sqrt(sigma^2 / sum J_i^2) with
  J_i = d ln model_i / d ln x (central difference) and sigma^2 = RSS / (n - 1), the
  Gauss-Newton covariance. Scale-up first (single-node groups), then scale-out with the
  scale-up value held (multi-node groups).
- Host link: the geometric mean of the copies of at least `HOST_LINK_MIN_BYTES`.
Source: weighted linear and nonlinear least squares, Seber and Wild, "Nonlinear Regression"
(Wiley 1989), Sec. 2.1-2.2; bus bandwidth as nccl-tests defines it (doc/PERFORMANCE.md).
"""

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

from api_schemas.collectives import Collective
from api_schemas.dtypes import DType
from api_schemas.hardware import ClusterSpec, KernelCalibration
from api_schemas.microbenchmarks import (
    BENCHMARKED_COLLECTIVES,
    AttentionMeasurement,
    CollectiveMeasurement,
    GemmMeasurement,
    HostLinkMeasurement,
    MicrobenchmarkConstant,
    MicrobenchmarkFit,
    Microbenchmarks,
)
from models.catalog.kernels import (
    GEMM_EFFICIENCY_FLOOR_FRAC,
    GEMM_IO_FACTOR,
    GEMM_LAUNCH_S,
    KernelProfile,
    profile_for,
    wave_occupancy,
)
from models.catalog.presets import NIC_ACHIEVABLE_FRAC, PCIE_GEN5_X16_BYTES_PER_S
from models.core.collectives import bus_factor, collective_cost, fabric_of
from models.core.collectives.fabric import Fabric
from models.errors import InvalidSpecError
from models.evidence.scale_fit import ScaleFit, fit_scale

KERNEL_TABLE_LEVEL: dict[str, dict[DType, float]] = {
    "ampere": {DType.BF16: 0.89, DType.FP16: 0.89},
    "hopper": {DType.BF16: 0.90, DType.FP16: 0.90, DType.FP8: 0.77},
    "blackwell": {DType.BF16: 0.665, DType.FP16: 0.665, DType.FP8: 0.705},
}
"""GEMM kernel level (share of the dense peak of a large, well-shaped GEMM) of the kernel
tables each family's step-level eta_max was set against. Source: research/CALIBRATION.md
Sec. 2, column "kernel-table value for comparison": MAMF best A100 shape (0.89), XLA H100
BF16 table (0.90), DeepGEMM H800 FP8 (0.77), XLA B200 BF16/FP8 tables (0.665/0.705).
A cluster whose GEMMs reach x times that level gets x times the family's eta_max
(Assumes: the framework's share of the kernel level is the family's, as published). CDNA3
has no kernel table, so its GEMM benchmarks set no level."""

HOST_LINK_MIN_BYTES = 16 * 2**20
"""Smallest copy whose bandwidth counts toward the host-link constant (smaller copies are
dominated by their start-up cost)."""

HOST_LINK_NOMINAL_OVER_ACHIEVABLE = 64e9 / PCIE_GEN5_X16_BYTES_PER_S
"""Nominal over achievable host-link bandwidth (PCIe Gen5 x16: 64 GB/s nominal, 50 GB/s
achievable, `models.catalog`; Gen4 x16 is the same 32/25): a measured copy above the node's
figure times this is faster than the link's signalling rate."""

IN_NETWORK_REDUCTION_FACTOR = 2.0
"""How much faster than a ring an all-reduce may run when the switches reduce (NVLink SHARP
/ NVLS inside a node, InfiniBand SHARP across nodes): each GPU sends and receives its M bytes
once instead of 2(n-1)/n M, so bus bandwidth reaches up to twice the link's. Source: NCCL
user guide, NCCL_ALGO (NVLS, CollNet); nccl-tests doc/PERFORMANCE.md (bus bandwidth)."""

MIN_SENSITIVITY = 0.1
"""Least share of some entry's model time that must depend on a fitted multiplier
(|d ln t / d ln x|): below it every entry is bound by something else (start-up latency for
small messages) and the multiplier is refused as undetermined."""

BANDWIDTH_BOUND_SHARE = 0.5
"""Least share of a collective's model time (links at their achievable rate) that must be
the bandwidth term for the entry to count toward a bandwidth scale: smaller messages are
timed by start-up latency and the per-hop constants (`models.catalog` INTRA/INTER latency),
which a bandwidth multiplier must not absorb."""

class MicrobenchmarkRefused(InvalidSpecError):
    """A microbenchmark entry no hardware could produce, or a fit outside physical limits."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GemmLevel:
    """The fitted kernel level of one input format."""

    dtype: DType
    level: float
    level_se: float
    launch_s: float
    launch_se: float
    launch_fitted: bool
    rss: float
    num_entries: int
    uncalibrated_error: float
    fitted_error: float


@dataclass(frozen=True, slots=True, kw_only=True)
class MicrobenchmarkResult:
    """Everything the microbenchmarks set, ready for the profile and the report."""

    report: MicrobenchmarkFit
    gemm_scale: float | None
    gemm_scale_se: float


def _gemm_parts(e: GemmMeasurement, cluster: ClusterSpec, profile: KernelProfile
                ) -> tuple[float, float]:
    """(coefficient of 1/eta, fixed I/O seconds) of one GEMM's model time."""
    gpu = cluster.gpu
    peak = gpu.peak_flop_per_s(e.dtype)
    occ = wave_occupancy(e.m, e.n, num_sms=profile.num_sms)
    element = min(e.dtype.num_bytes, 2.0)
    io = GEMM_IO_FACTOR * element * (e.m * e.n + e.m * e.k + e.k * e.n) \
        / gpu.hbm_bandwidth_bytes_per_s
    return 2.0 * e.m * e.n * e.k / (peak * occ), io


def check_gemm(entries: Sequence[GemmMeasurement], cluster: ClusterSpec) -> None:
    """Refuse a GEMM above the GPU's dense peak of its format (field + reason)."""
    for i, e in enumerate(entries):
        peak = cluster.gpu.peak_flop_per_s(e.dtype)
        if e.tflops * 1e12 > peak:
            raise MicrobenchmarkRefused(
                f"microbenchmarks.gemm.{i}.tflops: {e.tflops:,.1f} TFLOP/s is physically "
                f"impossible: above the {cluster.gpu.name}'s dense {e.dtype.value} peak of "
                f"{peak / 1e12:,.1f} TFLOP/s; check the FLOP count (2 m n k per GEMM), the "
                "format and the unit (TFLOP/s)", field=f"microbenchmarks.gemm.{i}.tflops")


def _weighted_linear(rows: Sequence[tuple[float, ...]], ys: Sequence[float],
                     weights: Sequence[float]) -> tuple[list[float], list[list[float]], float]:
    """Weighted least squares (coefficients, (X^T W X)^-1, weighted RSS) for 1 or 2 columns."""
    p = len(rows[0])
    xtx = [[sum(w * r[a] * r[b] for r, w in zip(rows, weights, strict=True))
            for b in range(p)] for a in range(p)]
    xty = [sum(w * r[a] * y for r, y, w in zip(rows, ys, weights, strict=True))
           for a in range(p)]
    if p == 1:
        inv = [[1.0 / xtx[0][0]]]
    else:
        det = xtx[0][0] * xtx[1][1] - xtx[0][1] * xtx[1][0]
        if det <= 1e-12 * xtx[0][0] * xtx[1][1]:
            raise ZeroDivisionError("collinear")
        inv = [[xtx[1][1] / det, -xtx[0][1] / det], [-xtx[1][0] / det, xtx[0][0] / det]]
    beta = [sum(inv[a][b] * xty[b] for b in range(p)) for a in range(p)]
    rss = sum(w * (y - sum(beta[a] * r[a] for a in range(p))) ** 2
              for r, y, w in zip(rows, ys, weights, strict=True))
    return beta, inv, rss


def fit_gemm_level(entries: Sequence[GemmMeasurement], cluster: ClusterSpec,
                   profile: KernelProfile) -> GemmLevel:
    """The kernel level (and launch cost) of GEMMs of one format (module docstring)."""
    dtype = entries[0].dtype
    times = [2.0 * e.m * e.n * e.k / (e.tflops * 1e12) for e in entries]
    parts = [_gemm_parts(e, cluster, profile) for e in entries]
    weights = [1.0 / (t * t) for t in times]
    n = len(entries)
    launch_fitted = False
    if n >= 3:
        try:
            beta, inv, rss = _weighted_linear([(1.0, c) for c, _ in parts],
                                              [t - io for t, (_, io) in zip(times, parts,
                                                                            strict=True)],
                                              weights)
            launch_fitted = beta[0] >= 0.0 and beta[1] > 0.0
        except ZeroDivisionError:
            launch_fitted = False
    if launch_fitted:
        launch, inv_eta = beta
        sigma2 = rss / (n - 2)
        launch_se = math.sqrt(sigma2 * inv[0][0])
        inv_eta_se = math.sqrt(sigma2 * inv[1][1])
    else:
        launch = GEMM_LAUNCH_S if n < 3 else 0.0
        beta, inv, rss = _weighted_linear([(c,) for c, _ in parts],
                                          [t - io - launch for t, (_, io) in
                                           zip(times, parts, strict=True)], weights)
        inv_eta = beta[0]
        launch_se = 0.0
        inv_eta_se = math.sqrt(rss / (n - 1) * inv[0][0]) if n > 1 else -1.0
    if inv_eta <= 0:
        raise MicrobenchmarkRefused(
            f"microbenchmarks.gemm: the {dtype.value} GEMMs are faster than any efficiency "
            "explains after the launch and memory terms; check their shapes and times",
            field="microbenchmarks.gemm")
    level = 1.0 / inv_eta
    level_se = inv_eta_se * level * level if inv_eta_se >= 0 else -1.0
    if level > 1.0:
        raise MicrobenchmarkRefused(
            f"microbenchmarks.gemm: the {dtype.value} GEMMs fit a kernel level of "
            f"{level:.1%} of the dense peak, above 100%: the shapes' launch and memory terms "
            "cannot be as large as the model assumes, or the times are too short",
            field="microbenchmarks.gemm")

    def model(lvl: float, launch_s: float, e_parts: tuple[float, float]) -> float:
        return launch_s + e_parts[0] / lvl + e_parts[1]

    ref = profile.gemm_peak_frac.get(dtype) or profile.gemm_peak_frac[DType.BF16]
    table = KERNEL_TABLE_LEVEL.get(profile.family, {}).get(dtype, ref)
    unc = sum(abs(model(table, GEMM_LAUNCH_S, p) / t - 1) for p, t in
              zip(parts, times, strict=True)) / n
    fitted = sum(abs(model(level, launch, p) / t - 1) for p, t in
                 zip(parts, times, strict=True)) / n
    log_rss = sum(math.log(model(level, launch, p) / t) ** 2 for p, t in
                  zip(parts, times, strict=True))
    return GemmLevel(dtype=dtype, level=level, level_se=level_se, launch_s=launch,
                     launch_se=launch_se, launch_fitted=launch_fitted, rss=log_rss,
                     num_entries=n, uncalibrated_error=unc, fitted_error=fitted)


def _collective_time(e: CollectiveMeasurement, fabric: Fabric) -> float:
    return collective_cost(e.collective, num_ranks=e.num_ranks, message_bytes=e.message_bytes,
                           fabric=fabric, ranks_per_node=e.ranks_per_node).time_s


def _measured_time(e: CollectiveMeasurement) -> float:
    return e.message_bytes * bus_factor(e.collective, e.num_ranks) / e.bus_bandwidth_bytes_per_s


def link_limits(cluster: ClusterSpec) -> tuple[float, float]:
    """Largest physical multipliers of the achievable (scale-up, scale-out) bandwidths: the
    GPU's marketed bidirectional scale-up aggregate (a GPU cannot send faster than it can
    send and receive together) and the NIC line rate (`NIC_ACHIEVABLE_FRAC`)."""
    gpu = cluster.gpu
    intra = cluster.intra_node.bandwidth_bytes_per_s
    marketed = gpu.scale_up_bandwidth_bytes_per_s or 2.0 * intra
    return max(1.0, marketed / intra), 1.0 / NIC_ACHIEVABLE_FRAC


def _scaled(fabric: Fabric, *, intra: float = 1.0, inter: float = 1.0,
            latency: bool = True) -> Fabric:
    return dataclasses.replace(
        fabric, intra_bandwidth_bytes_per_s=fabric.intra_bandwidth_bytes_per_s * intra,
        inter_bandwidth_bytes_per_s=fabric.inter_bandwidth_bytes_per_s * inter,
        intra_latency_s=fabric.intra_latency_s if latency else 0.0,
        inter_latency_s=fabric.inter_latency_s if latency else 0.0)


def check_collectives(entries: Sequence[CollectiveMeasurement], cluster: ClusterSpec) -> None:
    """Refuse entries the fabric cannot carry: a placement the nodes do not have, or a bus
    bandwidth above what the group reaches with its links at their physical limits
    (`link_limits`), no start-up latency, and for all-reduce in-network reduction."""
    fabric = fabric_of(cluster.model_copy(update={"calibration": None}))
    intra_max, inter_max = link_limits(cluster)
    best = _scaled(fabric, intra=intra_max, inter=inter_max, latency=False)
    for i, e in enumerate(entries):
        where = f"microbenchmarks.collectives.{i}"
        if e.collective not in BENCHMARKED_COLLECTIVES:
            raise MicrobenchmarkRefused(
                f"{where}.collective: '{e.collective.value}' is not fitted; give all_reduce, "
                "all_gather or all_to_all results", field=f"{where}.collective")
        if e.ranks_per_node > cluster.gpus_per_node or e.num_ranks % e.ranks_per_node:
            raise MicrobenchmarkRefused(
                f"{where}.ranks_per_node: {e.ranks_per_node} GPUs per node must divide "
                f"num_ranks={e.num_ranks} and be at most the node's {cluster.gpus_per_node}",
                field=f"{where}.ranks_per_node")
        fastest = _collective_time(e, best)
        if e.collective == Collective.ALL_REDUCE:
            fastest /= IN_NETWORK_REDUCTION_FACTOR
        if _measured_time(e) < fastest * (1 - 1e-9):
            limit = e.message_bytes * bus_factor(e.collective, e.num_ranks) / fastest
            raise MicrobenchmarkRefused(
                f"{where}.bus_bandwidth_bytes_per_s: {e.bus_bandwidth_bytes_per_s / 1e9:,.1f} "
                f"GB/s is physically impossible for a {e.num_ranks}-GPU {e.collective.value} "
                f"({e.ranks_per_node} per node) of {e.message_bytes:,} bytes: even with the "
                "links at their nominal rate and no latency it reaches "
                f"{limit / 1e9:,.1f} GB/s; check the unit (bytes/s), the bus factor and "
                "the group's span", field=f"{where}.bus_bandwidth_bytes_per_s")


def _intra_model(e: CollectiveMeasurement, fabric: Fabric, x: float) -> float:
    return _collective_time(e, _scaled(fabric, intra=x))


def _inter_model(e: CollectiveMeasurement, fabric: Fabric, intra: float, x: float) -> float:
    return _collective_time(e, _scaled(fabric, intra=intra, inter=x))


def fit_links(entries: Sequence[CollectiveMeasurement], cluster: ClusterSpec
              ) -> tuple[ScaleFit | None, ScaleFit | None]:
    """(scale-up fit from single-node groups, scale-out fit from multi-node groups), each on
    the entries whose model time is at least `BANDWIDTH_BOUND_SHARE` bandwidth (None when a
    tier has no such entry)."""
    fabric = fabric_of(cluster.model_copy(update={"calibration": None}))
    intra_max, _ = link_limits(cluster)
    no_latency = _scaled(fabric, latency=False)
    bound = [e for e in entries if _collective_time(e, no_latency)
             >= BANDWIDTH_BOUND_SHARE * _collective_time(e, fabric)]
    intra = [e for e in bound if e.num_ranks == e.ranks_per_node]
    inter = [e for e in bound if e.num_ranks > e.ranks_per_node]
    intra_fit = None
    if intra:
        intra_fit = fit_scale(
            [partial(_intra_model, e, fabric) for e in intra],
            [_measured_time(e) for e in intra], upper=intra_max)
    held = intra_fit.value if intra_fit is not None else 1.0
    inter_fit = None
    if inter:
        inter_fit = fit_scale(
            [partial(_inter_model, e, fabric, held) for e in inter],
            [_measured_time(e) for e in inter],
            upper=IN_NETWORK_REDUCTION_FACTOR / NIC_ACHIEVABLE_FRAC)
    return intra_fit, inter_fit


def _attention_tflops(e: AttentionMeasurement, cluster: ClusterSpec, profile: KernelProfile,
                      scale: float) -> float:
    frac = profile.flash_attention_frac if e.fused else profile.materialized_attention_frac
    saturation = e.seq_len / (e.seq_len + profile.attention_seq_half)
    return cluster.gpu.peak_flop_per_s(DType.BF16) * frac * scale * saturation / 1e12


def _attention_time(e: AttentionMeasurement, cluster: ClusterSpec, profile: KernelProfile,
                    x: float) -> float:
    """Seconds per TFLOP of the attention model at scale x (a time, for `fit_scale`)."""
    return 1.0 / _attention_tflops(e, cluster, profile, x)


def check_attention(entries: Sequence[AttentionMeasurement], cluster: ClusterSpec) -> None:
    """Refuse an attention kernel above the GPU's dense 16-bit peak."""
    peak = cluster.gpu.peak_flop_per_s(DType.BF16)
    for i, e in enumerate(entries):
        if e.tflops * 1e12 > peak:
            raise MicrobenchmarkRefused(
                f"microbenchmarks.attention.{i}.tflops: {e.tflops:,.1f} TFLOP/s is physically "
                f"impossible: above the {cluster.gpu.name}'s dense 16-bit peak of "
                f"{peak / 1e12:,.1f} TFLOP/s; count FLOPs as the FlashAttention benchmarks "
                "do (forward 4 b h s^2 d, halved when causal; backward 2.5x forward)",
                field=f"microbenchmarks.attention.{i}.tflops")


def check_host_link(entries: Sequence[HostLinkMeasurement], cluster: ClusterSpec) -> None:
    """Refuse a copy faster than the host link's nominal rate."""
    limit = cluster.pcie_bandwidth_bytes_per_s * HOST_LINK_NOMINAL_OVER_ACHIEVABLE
    for i, e in enumerate(entries):
        if e.bandwidth_bytes_per_s > limit:
            raise MicrobenchmarkRefused(
                f"microbenchmarks.host_link.{i}.bandwidth_bytes_per_s: "
                f"{e.bandwidth_bytes_per_s / 1e9:,.1f} GB/s is physically impossible: above "
                f"the node's host link at its nominal rate ({limit / 1e9:,.1f} GB/s per GPU "
                "per direction); check the unit (bytes/s) and that one GPU's copy was timed",
                field=f"microbenchmarks.host_link.{i}.bandwidth_bytes_per_s")


def _constant(name: str, fit: ScaleFit) -> MicrobenchmarkConstant:
    return MicrobenchmarkConstant(
        name=name, value=fit.value,
        standard_error=fit.standard_error if math.isfinite(fit.standard_error) else -1.0,
        num_entries=fit.num_entries, log_residual_rms=math.sqrt(fit.rss / fit.num_entries),
        uncalibrated_relative_error=fit.uncalibrated_error,
        fitted_relative_error=fit.fitted_error)


def _refuse_unbounded(fit: ScaleFit, name: str, field: str, limit_reason: str) -> None:
    if not math.isfinite(fit.standard_error) or fit.sensitivity < MIN_SENSITIVITY:
        raise MicrobenchmarkRefused(
            f"{field}: the entries cannot determine {name}: their model times do not depend "
            "on it (messages too small, latency-bound); add entries of 64 MiB and more",
            field=field)
    if fit.at_upper_limit:
        raise MicrobenchmarkRefused(
            f"{field}: the fit puts {name} at its physical limit ({limit_reason}): the "
            "measurements are faster than the model allows there", field=field)


@dataclass(slots=True)
class _Fitted:
    """What `fit_microbenchmarks` gathers, one kind of microbenchmark after another."""

    constants: list[MicrobenchmarkConstant] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    levels: dict[str, float] = dataclasses.field(default_factory=dict)
    applied: dict[str, float | None] = dataclasses.field(default_factory=dict)


def _gemm_level_constants(dtype: DType, lvl: GemmLevel) -> list[MicrobenchmarkConstant]:
    """The kernel level of one format and, where fitted, its launch cost."""
    named = [(f"GEMM kernel level ({dtype.value})", lvl.level, lvl.level_se)]
    if lvl.launch_fitted:
        named.append((f"GEMM launch cost ({dtype.value}), s", lvl.launch_s, lvl.launch_se))
    return [MicrobenchmarkConstant(
        name=name, value=value, standard_error=se, num_entries=lvl.num_entries,
        log_residual_rms=math.sqrt(lvl.rss / lvl.num_entries),
        uncalibrated_relative_error=lvl.uncalibrated_error,
        fitted_relative_error=lvl.fitted_error) for name, value, se in named]


def _fit_gemm(entries: Sequence[GemmMeasurement], cluster: ClusterSpec,
              profile: KernelProfile, out: _Fitted) -> tuple[float | None, float]:
    """Kernel levels per format and the efficiency scale they imply (scale, its error)."""
    by_dtype: dict[DType, list[GemmMeasurement]] = {}
    for e in entries:
        by_dtype.setdefault(e.dtype, []).append(e)
    implied: list[tuple[float, float]] = []
    for dtype, group in sorted(by_dtype.items()):
        lvl = fit_gemm_level(group, cluster, profile)
        out.levels[dtype.value] = lvl.level
        out.constants.extend(_gemm_level_constants(dtype, lvl))
        table = KERNEL_TABLE_LEVEL.get(profile.family, {}).get(dtype)
        if table is None:
            out.notes.append(f"{dtype.value} GEMMs: the {profile.family} family has no kernel "
                             "table to compare with, so they set no GEMM efficiency level")
        elif lvl.level_se > 0:
            implied.append((lvl.level / table, lvl.level_se / table))
    if not implied:
        return None, -1.0
    weights = [1.0 / (se * se) for _, se in implied]
    gemm_scale = sum(w * s for (s, _), w in zip(implied, weights, strict=True)) / sum(
        weights)
    gemm_scale_se = math.sqrt(1.0 / sum(weights))
    lo = GEMM_EFFICIENCY_FLOOR_FRAC / min(profile.gemm_peak_frac.values())
    hi = 1.0 / max(profile.gemm_peak_frac.values())
    if not lo <= gemm_scale <= hi:
        raise MicrobenchmarkRefused(
            f"microbenchmarks.gemm: the GEMMs imply an efficiency scale {gemm_scale:.4g} "
            f"of the {profile.family} eta_max, outside its physical range [{lo:.3g}, "
            f"{hi:.3g}] ({GEMM_EFFICIENCY_FLOOR_FRAC:.0%} to 100% of the dense peak)",
            field="microbenchmarks.gemm")
    out.applied["gemm_efficiency_scale"] = gemm_scale
    out.notes.append(f"GEMM efficiency scale {gemm_scale:.4g} +- {gemm_scale_se:.2g}: the "
                     "fitted kernel level over the kernel table the family's eta_max was set "
                     "against (inverse-variance mean over formats); the launch cost is "
                     "reported, the model keeps its own")
    return gemm_scale, gemm_scale_se


def _fit_collectives(entries: Sequence[CollectiveMeasurement], cluster: ClusterSpec,
                     out: _Fitted) -> None:
    """The scale-up and scale-out bandwidth scales."""
    intra_max, _ = link_limits(cluster)
    intra_fit, inter_fit = fit_links(entries, cluster)
    fitted = sum(f.num_entries for f in (intra_fit, inter_fit) if f is not None)
    if fitted < len(entries):
        out.notes.append(f"collectives: {len(entries) - fitted} of "
                         f"{len(entries)} entries are latency-bound (bandwidth under "
                         f"{BANDWIDTH_BOUND_SHARE:.0%} of their model time) and set no link "
                         "scale")
    if intra_fit is None and inter_fit is None:
        raise MicrobenchmarkRefused(
            "microbenchmarks.collectives: every entry is latency-bound, so none can set "
            "a link bandwidth; add messages of 64 MiB and more",
            field="microbenchmarks.collectives")
    if intra_fit is not None:
        _refuse_unbounded(intra_fit, "the scale-up bandwidth scale",
                          "microbenchmarks.collectives",
                          f"{intra_max:.3g} x achievable, the GPU's marketed bidirectional "
                          "scale-up bandwidth")
        out.constants.append(_constant("intra_node_bandwidth_scale", intra_fit))
        out.applied["intra_node_bandwidth_scale"] = intra_fit.value
    if inter_fit is not None:
        _refuse_unbounded(inter_fit, "the scale-out bandwidth scale",
                          "microbenchmarks.collectives",
                          "twice the NIC line rate, in-network reduction included")
        out.constants.append(_constant("inter_node_bandwidth_scale", inter_fit))
        out.applied["inter_node_bandwidth_scale"] = inter_fit.value


def _fit_attention(entries: Sequence[AttentionMeasurement], cluster: ClusterSpec,
                   profile: KernelProfile, out: _Fitted) -> None:
    fit = fit_scale(
        [partial(_attention_time, e, cluster, profile) for e in entries],
        [1.0 / e.tflops for e in entries],
        upper=1.0 / profile.flash_attention_frac)
    _refuse_unbounded(fit, "the attention efficiency scale", "microbenchmarks.attention",
                      "fused attention at 100% of the dense 16-bit peak")
    out.constants.append(_constant("attention_efficiency_scale", fit))
    out.applied["attention_efficiency_scale"] = fit.value


def _fit_host_link(entries: Sequence[HostLinkMeasurement], cluster: ClusterSpec,
                   out: _Fitted) -> None:
    """The geometric mean of the large copies (of all copies when none is large)."""
    big = [e for e in entries if e.message_bytes >= HOST_LINK_MIN_BYTES]
    used = big or list(entries)
    if not big:
        out.notes.append("host link: no copy of 16 MiB or more; the smaller copies' "
                         "bandwidth (start-up included) is used")
    logs = [math.log(e.bandwidth_bytes_per_s) for e in used]
    mean = sum(logs) / len(logs)
    rss = sum((x - mean) ** 2 for x in logs)
    value = math.exp(mean)
    se = value * math.sqrt(rss / (len(logs) - 1) / len(logs)) if len(logs) > 1 else -1.0
    base = cluster.pcie_bandwidth_bytes_per_s
    out.constants.append(MicrobenchmarkConstant(
        name="host_link_bandwidth_bytes_per_s", value=value, standard_error=se,
        num_entries=len(used), log_residual_rms=math.sqrt(rss / len(logs)),
        uncalibrated_relative_error=sum(abs(base / e.bandwidth_bytes_per_s - 1)
                                        for e in used) / len(used),
        fitted_relative_error=sum(abs(value / e.bandwidth_bytes_per_s - 1)
                                  for e in used) / len(used)))
    out.applied["host_link_bandwidth_bytes_per_s"] = value


def fit_microbenchmarks(bench: Microbenchmarks, cluster: ClusterSpec) -> MicrobenchmarkResult:
    """Check every entry, then fit each constant that has entries (module docstring).

    Raises:
        InvalidSpecError: an impossible entry or a fit at a physical limit (field + reason).
    """
    profile = profile_for(cluster.gpu)
    check_gemm(bench.gemm, cluster)
    check_collectives(bench.collectives, cluster)
    check_attention(bench.attention, cluster)
    check_host_link(bench.host_link, cluster)
    out = _Fitted()
    gemm_scale, gemm_scale_se = _fit_gemm(bench.gemm, cluster, profile, out)
    if bench.collectives:
        _fit_collectives(bench.collectives, cluster, out)
    if bench.attention:
        _fit_attention(bench.attention, cluster, profile, out)
    if bench.host_link:
        _fit_host_link(bench.host_link, cluster, out)
    report = MicrobenchmarkFit(constants=out.constants, gemm_kernel_level=out.levels,
                               applied=KernelCalibration.model_validate(out.applied),
                               gemm_sets_level=gemm_scale is not None, notes=out.notes)
    return MicrobenchmarkResult(report=report, gemm_scale=gemm_scale,
                                gemm_scale_se=gemm_scale_se)


__all__ = [
    "HOST_LINK_MIN_BYTES",
    "HOST_LINK_NOMINAL_OVER_ACHIEVABLE",
    "BANDWIDTH_BOUND_SHARE",
    "IN_NETWORK_REDUCTION_FACTOR",
    "KERNEL_TABLE_LEVEL",
    "MIN_SENSITIVITY",
    "GemmLevel",
    "MicrobenchmarkRefused",
    "MicrobenchmarkResult",
    "ScaleFit",
    "check_attention",
    "check_collectives",
    "check_gemm",
    "check_host_link",
    "fit_gemm_level",
    "fit_links",
    "fit_microbenchmarks",
    "fit_scale",
    "link_limits",
]
