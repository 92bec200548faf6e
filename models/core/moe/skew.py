"""Synthetic router outputs: per-(source rank, expert) token counts under a chosen skew.

Owns: the expert-popularity vectors of the skews used by tests and benchmarks (uniform,
Zipf, lognormal, one hot expert, one hot rank), top-k sampling without replacement from
them, and the tight construction of the MoonEP redundancy bound. Everything is
deterministic given a seed (numpy `Generator`). Must not: plan placements or price
traffic; it only produces count matrices `[R, E]` (row r = tokens of source rank r routed
to each expert; E/R contiguous home experts per rank).
"""

import math
from dataclasses import dataclass
from enum import StrEnum

import numpy as np
import numpy.typing as npt

from models.errors import InvalidSpecError

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

SAMPLING_CHUNK_TOKENS = 4096
"""Tokens sampled per vectorised chunk (bounds the [tokens, E] key matrix in memory)."""


class SkewKind(StrEnum):
    """Shapes of expert popularity."""

    UNIFORM = "uniform"
    """Every expert equally likely."""
    ZIPF = "zipf"
    """Weight 1/rank^s over a random permutation of the experts."""
    LOGNORMAL = "lognormal"
    """Weight exp(N(0, sigma)) per expert (MoonEP's benchmark generator)."""
    HOT_EXPERT = "hot_expert"
    """One random expert weighs `hot_factor` times the others."""
    HOT_RANK = "hot_rank"
    """The E/R home experts of one random rank weigh `hot_factor` times the others."""
    TIGHT = "tight"
    """The deterministic worst case of the E/R redundancy bound (no sampling)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RoutingSkew:
    """A routing skew and its parameter (only the one its kind uses matters)."""

    kind: SkewKind
    sigma: float = 1.0
    """Log-standard deviation of the lognormal expert weights."""
    zipf_exponent: float = 1.0
    """Exponent s of the Zipf weights."""
    hot_factor: float = 32.0
    """Weight of a hot expert (or of each expert of the hot rank) relative to the others."""

    @property
    def label(self) -> str:
        """Short human-readable name, e.g. 'lognormal(sigma=2)'."""
        if self.kind == SkewKind.LOGNORMAL:
            return f"lognormal(sigma={self.sigma:g})"
        if self.kind == SkewKind.ZIPF:
            return f"zipf(s={self.zipf_exponent:g})"
        if self.kind in (SkewKind.HOT_EXPERT, SkewKind.HOT_RANK):
            return f"{self.kind.value}(x{self.hot_factor:g})"
        return self.kind.value


def _check_shape(*, num_experts: int, num_ranks: int, top_k: int, tokens_per_rank: int) -> None:
    if num_ranks < 1:
        raise InvalidSpecError(f"num_ranks={num_ranks} must be at least 1", field="num_ranks")
    if num_experts < 1 or num_experts % num_ranks:
        raise InvalidSpecError(
            f"num_experts={num_experts} must be a positive multiple of num_ranks={num_ranks} "
            "(E/R contiguous home experts per rank): pick E divisible by R",
            field="num_experts",
        )
    if not 1 <= top_k <= num_experts:
        raise InvalidSpecError(
            f"top_k={top_k} must lie in [1, num_experts={num_experts}]", field="top_k"
        )
    if tokens_per_rank < 1:
        raise InvalidSpecError(
            f"tokens_per_rank={tokens_per_rank} must be at least 1", field="tokens_per_rank"
        )


def expert_popularity(
    skew: RoutingSkew, *, num_experts: int, num_ranks: int, seed: int
) -> FloatArray:
    """Relative expert weights of a skew (positive, summing to 1), fixed by `seed`.

    Source: MoonEP test routing generator (lognormal weights exp(N(0, sigma)), sigma 1
    "typical dropless-MoE skew", 2 heavy), as summarised in our placement reference.
    Legend: E=num_experts, R=num_ranks, sigma=skew.sigma.
    Assumes: the same `seed` means the same "layer" (popularity); batches drawn from it
    differ by the `batch` of `sample_routing`.

    Raises:
        InvalidSpecError: on a non-positive parameter or the TIGHT kind (not a popularity).
    """
    _check_shape(num_experts=num_experts, num_ranks=num_ranks, top_k=1, tokens_per_rank=1)
    rng = np.random.default_rng([seed, 0x5EED])
    e, m = num_experts, num_experts // num_ranks
    if skew.kind == SkewKind.UNIFORM:
        weights = np.ones(e)
    elif skew.kind == SkewKind.ZIPF:
        if skew.zipf_exponent <= 0:
            raise InvalidSpecError(
                f"zipf_exponent={skew.zipf_exponent} must be positive", field="zipf_exponent"
            )
        ranks = rng.permutation(e) + 1.0
        weights = np.asarray(ranks ** (-skew.zipf_exponent), dtype=np.float64)
    elif skew.kind == SkewKind.LOGNORMAL:
        if skew.sigma < 0:
            raise InvalidSpecError(f"sigma={skew.sigma} must be >= 0", field="sigma")
        weights = np.exp(rng.normal(0.0, skew.sigma, size=e))
    elif skew.kind in (SkewKind.HOT_EXPERT, SkewKind.HOT_RANK):
        if skew.hot_factor <= 0:
            raise InvalidSpecError(
                f"hot_factor={skew.hot_factor} must be positive", field="hot_factor"
            )
        weights = np.ones(e)
        if skew.kind == SkewKind.HOT_EXPERT:
            weights[int(rng.integers(e))] = skew.hot_factor
        else:
            hot = int(rng.integers(num_ranks))
            weights[hot * m:(hot + 1) * m] = skew.hot_factor
    else:
        raise InvalidSpecError(
            "the tight construction is a fixed count matrix, not a popularity: "
            "call tight_routing_counts()",
            field="kind",
        )
    return np.asarray(weights / weights.sum(), dtype=np.float64)


def sample_routing(
    popularity: FloatArray, *, num_ranks: int, tokens_per_rank: int, top_k: int, seed: int,
    batch: int = 0,
) -> IntArray:
    """Count matrix [R, E] of S tokens per rank, each picking K distinct experts.

    Each token draws its K experts without replacement with probability proportional to
    `popularity` (successive sampling, done exactly with Gumbel top-k keys).
    Legend: R=num_ranks, S=tokens_per_rank, K=top_k, E=len(popularity).

    Raises:
        InvalidSpecError: on a bad shape or fewer positive weights than K.
    """
    e = int(popularity.shape[0])
    _check_shape(num_experts=e, num_ranks=num_ranks, top_k=top_k, tokens_per_rank=tokens_per_rank)
    if int(np.count_nonzero(popularity > 0)) < top_k:
        raise InvalidSpecError(
            f"only {int(np.count_nonzero(popularity > 0))} experts have positive weight but "
            f"top_k={top_k} distinct experts are drawn per token: lower top_k",
            field="top_k",
        )
    rng = np.random.default_rng([seed, batch, 0xD1CE])
    with np.errstate(divide="ignore"):
        log_weights = np.log(popularity)
    total_tokens = num_ranks * tokens_per_rank
    flat = np.zeros(num_ranks * e, dtype=np.int64)
    for start in range(0, total_tokens, SAMPLING_CHUNK_TOKENS):
        rows = min(SAMPLING_CHUNK_TOKENS, total_tokens - start)
        keys = log_weights + rng.gumbel(size=(rows, e))
        chosen = np.argpartition(-keys, top_k - 1, axis=1)[:, :top_k]
        source = (start + np.arange(rows)) // tokens_per_rank
        flat += np.bincount((source[:, None] * e + chosen).ravel(), minlength=num_ranks * e)
    return flat.reshape(num_ranks, e)


def tight_redundancy_bound(*, num_experts: int, num_ranks: int) -> int:
    """ceil(E(R-1)/R^2): redundant experts the tight construction forces onto one rank.

    Source: Kimi K3, arXiv:2607.24653, Appendix E (the bound E/R is nearly tight).
    Legend: E=num_experts, R=num_ranks.
    """
    e, r = num_experts, num_ranks
    return -(-e * (r - 1) // (r * r))


def tight_tokens_per_rank(
    *, num_experts: int, num_ranks: int, top_k: int, at_least: int = 1
) -> int:
    """Smallest S >= `at_least` for which the tight construction has integer counts.

    The construction needs S*K divisible by (R-1)*E/R (see `tight_routing_counts`).
    """
    _check_shape(num_experts=num_experts, num_ranks=num_ranks, top_k=top_k, tokens_per_rank=1)
    if num_ranks < 2:
        raise InvalidSpecError("the tight construction needs num_ranks >= 2", field="num_ranks")
    hot_experts = (num_ranks - 1) * (num_experts // num_ranks)
    step = hot_experts // math.gcd(top_k, hot_experts)
    return -(-max(1, at_least) // step) * step


def tight_routing_counts(
    *, num_experts: int, num_ranks: int, top_k: int, tokens_per_rank: int
) -> IntArray:
    """The routing that needs ceil(E(R-1)/R^2) redundant experts on rank 0.

    Rank 0's home experts receive nothing; every other expert receives the same total
    t = S*K*R / ((R-1)*E/R), and every source sends S*K/((R-1)*E/R) tokens to each of them
    (token i of a rank picks experts i*K .. i*K+K-1 modulo the (R-1)*E/R hot ones, so K
    distinct experts per token). Rank 0 must take S*K tokens from foreign experts holding
    at most t each, hence at least ceil(S*K/t) = ceil(E(R-1)/R^2) of them.

    Source: Kimi K3, arXiv:2607.24653, Appendix E (tightness of the E/R bound); the explicit
    counts here are our construction of that extreme routing.
    Legend: E=num_experts, R=num_ranks, K=top_k, S=tokens_per_rank, t=per-expert total.

    Raises:
        InvalidSpecError: when K exceeds the (R-1)E/R hot experts or S*K is not a multiple
            of them (use `tight_tokens_per_rank`).
    """
    _check_shape(num_experts=num_experts, num_ranks=num_ranks, top_k=top_k,
                 tokens_per_rank=tokens_per_rank)
    if num_ranks < 2:
        raise InvalidSpecError("the tight construction needs num_ranks >= 2", field="num_ranks")
    m = num_experts // num_ranks
    hot_experts = (num_ranks - 1) * m
    if top_k > hot_experts:
        raise InvalidSpecError(
            f"top_k={top_k} exceeds the {hot_experts} experts outside rank 0: lower top_k",
            field="top_k",
        )
    if (tokens_per_rank * top_k) % hot_experts:
        fix = tight_tokens_per_rank(num_experts=num_experts, num_ranks=num_ranks, top_k=top_k,
                                    at_least=tokens_per_rank)
        raise InvalidSpecError(
            f"tokens_per_rank={tokens_per_rank} x top_k={top_k} is not a multiple of the "
            f"{hot_experts} hot experts: use tokens_per_rank={fix}",
            field="tokens_per_rank",
        )
    per_source = tokens_per_rank * top_k // hot_experts
    counts = np.zeros((num_ranks, num_experts), dtype=np.int64)
    counts[:, m:] = per_source
    return counts


def routing_counts(
    skew: RoutingSkew, *, num_experts: int, num_ranks: int, top_k: int, tokens_per_rank: int,
    seed: int, batch: int = 0,
) -> IntArray:
    """Count matrix [R, E] of one batch under `skew` (popularity from `seed`).

    Raises:
        InvalidSpecError: on a bad shape or parameter (see the two functions it calls).
    """
    if skew.kind == SkewKind.TIGHT:
        return tight_routing_counts(num_experts=num_experts, num_ranks=num_ranks, top_k=top_k,
                                    tokens_per_rank=tokens_per_rank)
    popularity = expert_popularity(skew, num_experts=num_experts, num_ranks=num_ranks, seed=seed)
    return sample_routing(popularity, num_ranks=num_ranks, tokens_per_rank=tokens_per_rank,
                          top_k=top_k, seed=seed, batch=batch)


__all__ = [
    "RoutingSkew",
    "SkewKind",
    "expert_popularity",
    "routing_counts",
    "sample_routing",
    "tight_redundancy_bound",
    "tight_routing_counts",
    "tight_tokens_per_rank",
]
