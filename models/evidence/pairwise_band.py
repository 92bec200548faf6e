"""How far apart two plans on the same cluster must be predicted before the model can rank
them: the error of the predicted ratio of two published runs of one table.

Owns: the pairwise band, `PAIRWISE_PERCENTILE`, and the pairs behind it. A plan's absolute
band (`models.evidence.error_bands`, the 10th to 90th percentile of e = measured / predicted
- 1) holds every error a prediction can have, most of them shared by every plan of one model
on one cluster: the kernel efficiency of the GPU, the software stack, how the source timed
a step. Ranking two plans needs only the error of their ratio. For two published rows a and
b with predicted step times p_a, p_b and measured m_a = p_a (1 + e_a), m_b = p_b (1 + e_b),
the predicted ratio is off by

    (p_a / p_b) / (m_a / m_b) = (1 + e_b) / (1 + e_a),

and the pair's error is max(r, 1 / r) - 1 of that ratio r (the same for either order). Pairs
are every two held-out rows of one source, one GPU and one table of that source
(`ErrorRow.table`: the rows of one table ran on one system and software stack, so the
shared errors cancel as they do between two plans of one answer; rows of different
releases of a performance page are not paired). Rows a constant was fitted on are left out
(`held_out` only), as for the absolute bands. The band is the `PAIRWISE_PERCENTILE`-th
percentile of the pair errors, Hyndman and Fan's definition 7 (`error_bands.percentile`);
a cluster with a calibration profile pairs the profile's own leave-one-out errors instead.
Reads the packaged table once; otherwise pure. Must not: evaluate configurations.
"""

import itertools
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from api_schemas.hardware import ClusterSpec
from models.evidence.error_bands import ErrorRow, cluster_band, percentile, published_rows

PAIRWISE_PERCENTILE = 80.0
"""The share of pairs whose ratio error the band covers: 80%, the coverage of the absolute
band (its 10th to 90th percentile, `error_bands.BAND_PERCENTILES`), so that a plan called
distinguishable from another is so with the confidence a predicted range states. The pair
error is already symmetric (max(r, 1 / r) - 1), so one percentile bounds it on both sides."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PairwiseBand:
    """The band and what backs it."""

    frac: float
    """Relative difference of two predictions below which the model cannot rank them."""
    num_pairs: int
    num_tables: int
    sources: tuple[tuple[str, int], ...]
    """(source short name, pairs) of each publication used, most pairs first."""


def ratio_error(error_a: float, error_b: float) -> float:
    """How far the predicted ratio of two step times is from the measured one, given each
    prediction's error e = measured / predicted - 1: max(r, 1 / r) - 1 with
    r = (1 + e_b) / (1 + e_a) (the module docstring)."""
    ratio = (1.0 + error_b) / (1.0 + error_a)
    return max(ratio, 1.0 / ratio) - 1.0


def pair_error(a: ErrorRow, b: ErrorRow) -> float:
    """`ratio_error` of two published rows."""
    return ratio_error(a.error, b.error)


def same_table(a: ErrorRow, b: ErrorRow) -> bool:
    """Whether two rows were printed in one table of one source for one GPU."""
    return (a.source_id, a.gpu, a.table) == (b.source_id, b.gpu, b.table)


def pairs(rows: Sequence[ErrorRow]) -> list[tuple[ErrorRow, ErrorRow]]:
    """Every two held-out rows of one table (each unordered pair once)."""
    held = [r for r in rows if r.held_out]
    return [(a, b) for a, b in itertools.combinations(held, 2) if same_table(a, b)]


def pairwise_band_of(rows: Sequence[ErrorRow]) -> PairwiseBand:
    """The band of `rows` (see the module docstring).

    Raises:
        ValueError: no two held-out rows share a table.
    """
    found = pairs(rows)
    errors = [pair_error(a, b) for a, b in found]
    counts = Counter(a.source_id for a, _ in found)
    return PairwiseBand(
        frac=percentile(errors, PAIRWISE_PERCENTILE), num_pairs=len(found),
        num_tables=len({(a.source_id, a.gpu, a.table) for a, _ in found}),
        sources=tuple(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))))


_PACKAGED_BAND = pairwise_band_of(published_rows())
"""The band of the packaged table's rows, computed once at import (as the rows are read)."""


def pairwise_band() -> PairwiseBand:
    """The band of the packaged table's rows (`_PACKAGED_BAND`)."""
    return _PACKAGED_BAND


def cluster_pairwise_frac(cluster: ClusterSpec, *, moe: bool, num_gpus: int) -> float | None:
    """The pairwise band of plans on `cluster`: none where no absolute band backs the
    prediction (`error_bands.cluster_band`: nothing measured the model on this GPU, or a
    profile gives constants without their errors); from a calibration profile's
    leave-one-out errors, which all ran on the cluster, every two of them paired; else the
    published pairs' band. Never wider than the absolute band's own overlap width
    (e_high - e_low) / (1 + e_low): two predictions whose errors both lie in [e_low, e_high]
    have a ratio off by at most that, so where a regime's rows are tighter than the pooled
    pairs (A100 dense at 9 to 256 GPUs) the regime's width is the bound."""
    band = cluster_band(cluster, moe=moe, num_gpus=num_gpus)
    if band.basis == "none" or band.error_low is None or band.error_high is None:
        return None
    width = (band.error_high - band.error_low) / (1.0 + band.error_low)
    calibration = cluster.calibration
    if band.basis == "profile" and calibration is not None \
            and calibration.leave_one_out_errors is not None:
        errors = calibration.leave_one_out_errors
        return min(width, percentile(
            [ratio_error(a, b) for a, b in itertools.combinations(errors, 2)],
            PAIRWISE_PERCENTILE))
    return min(width, pairwise_band().frac)


__all__ = ["PAIRWISE_PERCENTILE", "PairwiseBand", "cluster_pairwise_frac", "pair_error",
           "pairs", "pairwise_band", "pairwise_band_of", "ratio_error", "same_table"]
