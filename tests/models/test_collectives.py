"""Alpha-beta collectives over one link: bytes per basis, algorithms, crossover, bus factor."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from api_schemas import Algorithm, Collective, CountingBasis
from models.core.collectives import (
    algorithm_shape,
    algorithm_switch_bytes,
    alpha_beta_crossover_bytes,
    bus_factor,
    flat_collective_cost,
    paper_volume_bytes,
    ring_bytes_sent_per_rank,
    wire_bytes,
)
from models.errors import InvalidSpecError

GIB = 2**30
BW = 50e9
ALPHA = 10e-6


@pytest.mark.parametrize("n", [2, 3, 4, 8, 64, 1000])
def test_ring_bytes_sent_per_rank_matches_THA05(n: int) -> None:
    """Ring reduce-scatter and all-gather send (n-1)/n * M per rank, all-reduce twice that."""
    m = 1000 * n * 7
    assert ring_bytes_sent_per_rank(Collective.REDUCE_SCATTER, num_ranks=n,
                                    message_bytes=m) == (n - 1) * m // n
    assert ring_bytes_sent_per_rank(Collective.ALL_GATHER, num_ranks=n,
                                    message_bytes=m) == (n - 1) * m // n
    assert ring_bytes_sent_per_rank(Collective.ALL_REDUCE, num_ranks=n,
                                    message_bytes=m) == 2 * (n - 1) * m // n


def test_ring_bytes_round_up_to_whole_bytes() -> None:
    assert ring_bytes_sent_per_rank(Collective.ALL_GATHER, num_ranks=3, message_bytes=10) == 7


def test_paper_volume_bytes_matches_RAJ20() -> None:
    """ZeRO Sec. 7: all-reduce 2 Psi = reduce-scatter Psi + all-gather Psi."""
    psi = 7_500_000_000 * 2
    assert paper_volume_bytes(Collective.ALL_REDUCE, psi) == 2 * psi
    assert (paper_volume_bytes(Collective.REDUCE_SCATTER, psi)
            + paper_volume_bytes(Collective.ALL_GATHER, psi)) == 2 * psi


def test_cost_names_its_basis_and_three_counts() -> None:
    n, m = 16, 16 * GIB // 16
    c = flat_collective_cost(Collective.ALL_REDUCE, num_ranks=n, message_bytes=m,
                             bandwidth_bytes_per_s=BW, latency_s=ALPHA,
                             algorithm=Algorithm.RING)
    assert c.basis == CountingBasis.BYTES_SENT_PER_RANK
    assert c.bytes_sent_per_rank == 2 * (n - 1) * m // n
    assert c.paper_volume_bytes == 2 * m
    assert c.wire_bytes == n * c.bytes_sent_per_rank
    assert c.alpha_s == pytest.approx(2 * (n - 1) * ALPHA)
    assert c.beta_s == pytest.approx(c.bytes_sent_per_rank / BW)
    assert c.time_s == pytest.approx(c.alpha_s + c.beta_s)


@pytest.mark.parametrize("collective", [Collective.ALL_REDUCE, Collective.REDUCE_SCATTER,
                                        Collective.ALL_GATHER, Collective.ALL_TO_ALL,
                                        Collective.BROADCAST])
def test_bus_bandwidth_matches_nccl_tests_convention(collective: Collective) -> None:
    """With no latency, NCCL's busbw of a bandwidth-optimal algorithm equals the link."""
    algorithm = Algorithm.PAIRWISE if collective == Collective.ALL_TO_ALL else Algorithm.RING
    c = flat_collective_cost(collective, num_ranks=8, message_bytes=GIB,
                             bandwidth_bytes_per_s=BW, latency_s=0.0, algorithm=algorithm)
    assert c.bus_bandwidth_bytes_per_s == pytest.approx(BW)
    assert bus_factor(Collective.ALL_REDUCE, 8) == pytest.approx(2 * 7 / 8)


@pytest.mark.parametrize("collective", [Collective.ALL_REDUCE, Collective.REDUCE_SCATTER,
                                        Collective.ALL_GATHER, Collective.ALL_TO_ALL,
                                        Collective.BROADCAST])
@pytest.mark.parametrize("n", [2, 8, 64])
def test_alpha_dominates_small_messages_and_beta_large(collective: Collective, n: int) -> None:
    algorithm = Algorithm.PAIRWISE if collective == Collective.ALL_TO_ALL else Algorithm.RING
    star = alpha_beta_crossover_bytes(collective, num_ranks=n, bandwidth_bytes_per_s=BW,
                                      latency_s=ALPHA, algorithm=algorithm)

    def cost(m: float):
        return flat_collective_cost(collective, num_ranks=n, message_bytes=int(m),
                                    bandwidth_bytes_per_s=BW, latency_s=ALPHA,
                                    algorithm=algorithm)

    small, at, large = cost(star / 100), cost(star), cost(star * 100)
    assert small.alpha_s > 10 * small.beta_s
    assert large.beta_s > 10 * large.alpha_s
    assert at.alpha_s == pytest.approx(at.beta_s, rel=1e-6)


def test_ring_all_reduce_crossover_is_n_alpha_bandwidth() -> None:
    """2(n-1) alpha = 2(n-1)/n * M / B  gives  M* = n * alpha * B."""
    star = alpha_beta_crossover_bytes(Collective.ALL_REDUCE, num_ranks=16,
                                      bandwidth_bytes_per_s=BW, latency_s=ALPHA)
    assert star == pytest.approx(16 * ALPHA * BW)


def test_crossover_needs_two_ranks() -> None:
    with pytest.raises(InvalidSpecError, match="num_ranks"):
        alpha_beta_crossover_bytes(Collective.ALL_REDUCE, num_ranks=1,
                                   bandwidth_bytes_per_s=BW, latency_s=ALPHA)


def test_recursive_doubling_matches_THA05() -> None:
    """lg(p) alpha + lg(p) * M * beta for p = 16."""
    c = flat_collective_cost(Collective.ALL_REDUCE, num_ranks=16, message_bytes=4096,
                             bandwidth_bytes_per_s=BW, latency_s=ALPHA,
                             algorithm=Algorithm.RECURSIVE_DOUBLING)
    assert c.alpha_s == pytest.approx(4 * ALPHA)
    assert c.beta_s == pytest.approx(4 * 4096 / BW)
    assert algorithm_shape(Collective.ALL_REDUCE, Algorithm.RECURSIVE_DOUBLING, 12).rounds == 4


def test_all_reduce_choice_switches_at_computed_size() -> None:
    """Like NCCL's tuner, the model picks the faster algorithm and reports which."""
    n = 32
    switch = algorithm_switch_bytes(Collective.ALL_REDUCE, num_ranks=n,
                                    bandwidth_bytes_per_s=BW, latency_s=ALPHA,
                                    small=Algorithm.RECURSIVE_DOUBLING, large=Algorithm.RING)
    # r_rd = 5, f_rd = 5; r_ring = 62, f_ring = 62/32: M = 57 alpha B / (5 - 62/32)
    assert switch == pytest.approx(57 * ALPHA * BW / (5 - 62 / 32))

    def chosen(m: float) -> Algorithm:
        return flat_collective_cost(Collective.ALL_REDUCE, num_ranks=n, message_bytes=int(m),
                                    bandwidth_bytes_per_s=BW, latency_s=ALPHA).algorithm

    assert chosen(switch * 0.9) == Algorithm.RECURSIVE_DOUBLING
    assert chosen(switch * 1.1) == Algorithm.RING


def test_broadcast_binomial_for_small_chain_for_large() -> None:
    small = flat_collective_cost(Collective.BROADCAST, num_ranks=64, message_bytes=64,
                                 bandwidth_bytes_per_s=BW, latency_s=ALPHA)
    large = flat_collective_cost(Collective.BROADCAST, num_ranks=64, message_bytes=GIB,
                                 bandwidth_bytes_per_s=BW, latency_s=ALPHA)
    assert small.algorithm == Algorithm.BINOMIAL_TREE
    assert small.time_s == pytest.approx(6 * (ALPHA + 64 / BW))
    assert large.algorithm == Algorithm.RING
    assert large.time_s == pytest.approx(63 * ALPHA + GIB / BW)
    assert wire_bytes(Collective.BROADCAST, Algorithm.RING, num_ranks=64,
                      message_bytes=GIB) == 63 * GIB


def test_p2p_is_one_message() -> None:
    c = flat_collective_cost(Collective.P2P, num_ranks=2, message_bytes=GIB,
                             bandwidth_bytes_per_s=BW, latency_s=ALPHA)
    assert c.algorithm == Algorithm.DIRECT
    assert c.time_s == pytest.approx(ALPHA + GIB / BW)
    assert c.bytes_sent_per_rank == c.wire_bytes == GIB


@pytest.mark.parametrize("kwargs, match", [
    ({"collective": Collective.P2P, "num_ranks": 4}, "p2p involves exactly 2"),
    ({"collective": Collective.ALL_REDUCE, "bandwidth_bytes_per_s": 0.0}, "bandwidth"),
    ({"collective": Collective.ALL_REDUCE, "latency_s": -1.0}, "latency_s"),
    ({"collective": Collective.ALL_GATHER, "algorithm": Algorithm.RECURSIVE_DOUBLING},
     "does not implement"),
])
def test_bad_inputs_raise_invalid_spec(kwargs: dict[str, object], match: str) -> None:
    args: dict[str, object] = {"num_ranks": 8, "message_bytes": 1024,
                               "bandwidth_bytes_per_s": BW, "latency_s": ALPHA}
    args.update(kwargs)
    collective = args.pop("collective")
    with pytest.raises(InvalidSpecError, match=match):
        flat_collective_cost(collective, **args)  # type: ignore[arg-type]


def test_single_rank_costs_nothing() -> None:
    c = flat_collective_cost(Collective.ALL_REDUCE, num_ranks=1, message_bytes=GIB,
                             bandwidth_bytes_per_s=BW, latency_s=ALPHA)
    assert c.time_s == 0.0 and c.bytes_sent_per_rank == 0


@settings(max_examples=200, deadline=None)
@given(collective=st.sampled_from([Collective.ALL_REDUCE, Collective.REDUCE_SCATTER,
                                   Collective.ALL_GATHER, Collective.ALL_TO_ALL,
                                   Collective.BROADCAST]),
       n=st.integers(2, 512), m=st.integers(0, 2**34), extra=st.integers(1, 2**30))
def test_time_grows_with_message_and_ring_bytes_stay_under_paper_volume(
        collective: Collective, n: int, m: int, extra: int) -> None:
    def cost(size: int):
        return flat_collective_cost(collective, num_ranks=n, message_bytes=size,
                                    bandwidth_bytes_per_s=BW, latency_s=ALPHA)

    assert cost(m + extra).time_s >= cost(m).time_s
    ring = ring_bytes_sent_per_rank(collective, num_ranks=n, message_bytes=m)
    assert ring <= paper_volume_bytes(collective, m)
    assert math.isclose(cost(m).time_s, cost(m).alpha_s + cost(m).beta_s)
