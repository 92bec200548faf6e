"""The wait for the slowest GPU: per-GPU speed variability in a synchronous job.

Owns: `GPU_SPEED_CV` (the spread of sustained speed across GPUs of one SKU),
`expected_max_standard_normal` (the expected largest of n standard normal draws) and
`slowest_gpu_share` (how much longer than the median GPU the slowest of a job's GPUs takes
for the same compute). Must not: time kernels, simulate pipelines or assemble a step; the
assembly books the wait as its own breakdown term.

Mechanism: GPUs of the same model and SKU do not sustain the same clock. Under a power or
thermal limit each chip settles at the frequency its own leakage allows, so the same GEMM
runs a few percent faster on one GPU than on another (Sinha et al., "Not All GPUs Are Created
Equal: Characterizing Variability in Large-Scale, Accelerator-Rich Systems", SC'22,
arXiv:2208.11035: 8% average performance variation, up to 22%, across GPUs of one SKU in
five clusters, outliers aside). Every synchronous collective of a training step (each
FSDP gather, each tensor-parallel reduction, the gradient synchronisation at the end of the
step) waits for the slowest participant, so a step of n GPUs runs at the pace of the
slowest of n draws. For speeds spread normally with coefficient of variation cv, that GPU
needs (1 + cv * E[max of n standard normals]) times the median GPU's compute time; the
expectation grows like sqrt(2 ln n): 1.42 at 8 GPUs, 2.59 at 128, 3.97 at 16,384.
"""

import math
from statistics import NormalDist

import numpy as np

from models.core.search_memo import current_memo, kept

_Q3 = NormalDist().inv_cdf(0.75)
"""Upper quartile of a standard normal (0.6745); its interquartile range is 2 x _Q3."""

GPU_SPEED_CV = 0.08 / (2 * (_Q3 + 1.5 * 2 * _Q3))
"""Coefficient of variation of sustained per-GPU compute speed within one SKU: 1.48%.

Source: Sinha et al. SC'22 (arXiv:2208.11035), abstract: 8% average performance variation
across the GPUs of one cluster, outliers excluded. Reading: the 8% is the span of the
box-plot whiskers (Tukey's 1.5 IQR rule, outliers beyond them excluded), which for a normal
population is 2 x (z_0.75 + 1.5 x IQR) = 2 x (0.6745 + 1.5 x 1.349) = 5.40 standard
deviations; cv = 8% / 5.40. Not fitted to any published training run; the V100 and MI60
clusters of the study are the only population measured."""


_GRID = np.linspace(-12.0, 12.0, 24001)
_PDF = np.exp(-0.5 * _GRID**2) / math.sqrt(2 * math.pi)
_CDF = np.array([0.5 * math.erfc(-x / math.sqrt(2)) for x in _GRID])
"""(x, phi(x), Phi(x)) on [-12, 12] in steps of 0.001: a static table (a few ms at
import)."""


def expected_max_standard_normal(n: int) -> float:
    """E[max(Z_1..Z_n)] for n independent standard normal draws: the integral of
    x n phi(x) Phi(x)^(n-1) dx, by the trapezoid rule on [-12, 12] in steps of 0.001.

    Source: the order-statistics tables of Tippett (1925, Biometrika 17: 364-387), whose
    printed values this reproduces: 1.53875 for n = 10, 2.50759 for n = 100 (`tests/models/
    test_variability.py`). 0 for one draw.

    Raises:
        ValueError: n < 1.
    """
    if n < 1:
        raise ValueError(f"n={n} draws: at least one is needed")
    if n == 1:
        return 0.0
    memo = current_memo()
    return kept(memo.straggler_max, n,
                lambda: float(np.trapezoid(_GRID * n * _PDF * _CDF ** (n - 1), _GRID)))


def slowest_gpu_share(world_size: int, cv: float = GPU_SPEED_CV) -> float:
    """Extra compute time of the slowest of `world_size` GPUs over the median GPU, as a
    share of the median's: cv * E[max of world_size standard normals] (module docstring).

    Raises:
        ValueError: world_size < 1.
    """
    return cv * expected_max_standard_normal(world_size)
