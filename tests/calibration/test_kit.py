"""The microbenchmark kit without a GPU: its entries and nccl-tests reading on recorded
outputs, the JSON it writes (accepted by the calibration request and fitted), and its
refusal on a machine without PyTorch or a CUDA GPU. The measurement itself needs a GPU and
is skipped here with the reason."""

import importlib.util
import json
from pathlib import Path

import pytest

from api_schemas.calibration import CalibrationRunsRequest
from api_schemas.collectives import Collective
from api_schemas.dtypes import DType
from api_schemas.microbenchmarks import Microbenchmarks
from api_schemas.requests import ClusterInput
from calibration import results
from calibration.__main__ import REFUSED, gpu_problem, main
from models.catalog.resolve import resolve_cluster
from models.core.collectives import bus_factor
from models.evidence.microbenchmarks import fit_microbenchmarks

NCCL = Path(__file__).resolve().parent / "nccl_tests"


def test_nccl_tests_tables_become_entries_with_their_span() -> None:
    entries = results.read_nccl_tests((NCCL / "all_reduce_perf_2x8.txt").read_text())
    assert len(entries) == 6
    assert {(e.collective, e.num_ranks, e.ranks_per_node) for e in entries} == {
        (Collective.ALL_REDUCE, 16, 8)}
    last = entries[-1]
    assert last.message_bytes == 2**30
    assert last.bus_bandwidth_bytes_per_s == pytest.approx(341.7e9)  # the row's busbw, GB/s
    one_node = results.read_nccl_tests((NCCL / "all_gather_perf_1x8.txt").read_text())
    assert one_node[0].collective == Collective.ALL_GATHER
    assert (one_node[0].num_ranks, one_node[0].ranks_per_node) == (8, 8)


def test_the_bus_factor_matches_the_printed_algbw_and_busbw() -> None:
    """nccl-tests prints algbw and busbw of every row: busbw / algbw is its bus factor
    (2(n-1)/n for all-reduce), which the kit and the cost model share."""
    row = next(line for line in (NCCL / "all_reduce_perf_1x8.txt").read_text().splitlines()
               if line.strip().startswith("1073741824"))
    algbw, busbw = float(row.split()[6]), float(row.split()[7])
    assert busbw / algbw == pytest.approx(results.bus_factor(Collective.ALL_REDUCE, 8),
                                          rel=1e-3)
    for collective in (Collective.ALL_REDUCE, Collective.ALL_GATHER, Collective.ALL_TO_ALL):
        for n in (2, 8, 16):  # the kit's collectives, against the cost model's factor
            assert results.bus_factor(collective, n) == pytest.approx(bus_factor(collective, n))


def test_unreadable_nccl_tests_output_is_refused_with_the_reason() -> None:
    text = (NCCL / "all_reduce_perf_1x8.txt").read_text()
    unnamed = "\n".join(line for line in text.splitlines() if "concluded" not in line)
    with pytest.raises(results.NcclTestsFormatError, match="does not name its program"):
        results.read_nccl_tests(unnamed)
    assert results.read_nccl_tests(unnamed, collective=Collective.ALL_REDUCE)
    wrong = text.replace("       0    ", "       3    ", 1)
    with pytest.raises(results.NcclTestsFormatError, match="3 wrong elements"):
        results.read_nccl_tests(wrong)
    no_ranks = "\n".join(line for line in text.splitlines() if "Rank" not in line)
    with pytest.raises(results.NcclTestsFormatError, match="Rank"):
        results.read_nccl_tests(no_ranks)


def test_entries_from_timings() -> None:
    gemm = results.gemm_entry(8192, 8192, 8192, DType.BF16, seconds=1.6e-3)
    assert gemm.tflops == pytest.approx(2 * 8192**3 / 1.6e-3 / 1e12)
    # FlashAttention's benchmark count: 4 b h s^2 d forward, halved causal, x3.5 fwd+bwd.
    assert results.attention_flops(2, 16, 8192, 128, causal=True) == pytest.approx(
        4 * 2 * 16 * 8192**2 * 128 / 2 * 3.5)
    entry = results.collective_entry(Collective.ALL_GATHER, 2**30, 8, 8, seconds=3e-3)
    assert entry.bus_bandwidth_bytes_per_s == pytest.approx(2**30 / 3e-3 * 7 / 8)
    host = results.host_link_entry("d2h", 2**28, seconds=5.2e-3)
    assert host.direction == "d2h" and host.bandwidth_bytes_per_s == pytest.approx(
        2**28 / 5.2e-3)


def test_the_written_json_is_what_the_endpoint_takes_and_fits(tmp_path: Path) -> None:
    parts = [Microbenchmarks(collectives=results.read_nccl_tests(p.read_text()))
             for p in sorted(NCCL.glob("*.txt"))]
    parts.append(Microbenchmarks(
        gemm=[results.gemm_entry(m, 8192, 8192, DType.BF16, seconds=2 * m * 8192**2 / 700e12)
              for m in (2048, 4096, 8192, 16384)],
        attention=[results.attention_entry(2, 16, s, 128, causal=True, fused=True,
                                           seconds=results.attention_flops(
                                               2, 16, s, 128, causal=True) / 480e12)
                   for s in (2048, 4096, 8192)],
        host_link=[results.host_link_entry("h2d", 2**28, 2**28 / 51e9)],
        device_name="NVIDIA H100 80GB HBM3"))
    out = tmp_path / "bench.json"
    results.write_results(out, results.merge(parts))
    written = json.loads(out.read_text())
    assert len(written["collectives"]) == 24 and written["device_name"].startswith("NVIDIA")
    request = CalibrationRunsRequest.model_validate({
        "profile": "kit", "gpu": "h100-sxm5-80gb", "microbenchmarks": written,
        "runs": [], "logs": [{"framework": "torchtitan", "text": "x",
                              "model": {"preset": "llama-3.1-8b"}, "num_nodes": 1}] * 4})
    assert request.microbenchmarks is not None
    fit = fit_microbenchmarks(request.microbenchmarks,
                              resolve_cluster(ClusterInput(gpu="h100-sxm5-80gb", num_nodes=2)))
    names = {c.name for c in fit.report.constants}
    assert {"intra_node_bandwidth_scale", "inter_node_bandwidth_scale",
            "attention_efficiency_scale", "host_link_bandwidth_bytes_per_s",
            "GEMM kernel level (bf16)"} <= names
    assert results.read_results([out]) == Microbenchmarks.model_validate(written)


def test_the_command_line_reads_nccl_tests_files(tmp_path: Path) -> None:
    out = tmp_path / "nccl.json"
    files = [str(p) for p in sorted(NCCL.glob("*.txt"))]
    assert main(["nccl-tests", *files, "--out", str(out)]) == 0
    assert len(json.loads(out.read_text())["collectives"]) == 24
    bad = tmp_path / "bad.txt"
    bad.write_text("nothing\n")
    assert main(["nccl-tests", str(bad), "--out", str(tmp_path / "x.json")]) == REFUSED
    assert not (tmp_path / "x.json").exists()


@pytest.mark.skipif(gpu_problem() is None, reason="a CUDA GPU is visible here: the refusal "
                    "applies to machines without one")
def test_without_a_gpu_the_kit_refuses_and_writes_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bench.json"
    assert main(["run", "--out", str(out)]) == REFUSED
    message = capsys.readouterr().err
    assert "nothing was measured" in message
    assert ("PyTorch is not installed" in message) or ("no CUDA GPU is visible" in message)
    assert not out.exists()


@pytest.mark.skipif(importlib.util.find_spec("torch") is None or gpu_problem() is not None,
                    reason="needs PyTorch and a CUDA GPU (the measurement itself)")
def test_the_kit_measures_on_a_gpu(tmp_path: Path) -> None:  # pragma: no cover - GPU only
    from calibration import bench

    plan = bench.Plan(gemm_sizes=(2048,), gemm_shapes=((4096, 4096),), attention_seq=(2048,),
                      attention_tokens=4096, host_bytes=(2**24,), warmup=2, iterations=3)
    measured = bench.run(plan)
    assert measured is not None and measured.gemm and measured.attention
    results.write_results(tmp_path / "bench.json", measured)
