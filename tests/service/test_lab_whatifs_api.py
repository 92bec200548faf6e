"""The labs' what-ifs: POST /v1/lab/rl-seesaw with its memory-by-phase picture and the
`rl-seesaw` command; POST /v1/lab/remote-activations and the `remote-activations` command."""

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import httpx
import pytest
from service_testkit import post_answers_as

from api_schemas.remote_activations import RemoteActivationsResponse
from api_schemas.requests import EvaluateRequest
from api_schemas.rl_seesaw import RL_SEESAW_EXAMPLE, RlSeesawRequest, RlSeesawResponse
from models.labs.remote_activations_report import remote_activations_report
from models.labs.rl_seesaw_report import rl_seesaw_report
from service import cli
from service.pictures import MODEL_LABEL, seesaw_svg
from service.routes.remote_activations import REMOTE_EXAMPLES
from service.routes.rl_seesaw import SEESAW_EXAMPLES

SVG = "{http://www.w3.org/2000/svg}"
NVME = SEESAW_EXAMPLES["kimi-k2-1m-nvme"]["value"]


def test_the_lab_answers_the_cost_model(client: httpx.Client) -> None:
    body = RlSeesawResponse.model_validate(post_answers_as(
        client, "/v1/lab/rl-seesaw", RL_SEESAW_EXAMPLE, rl_seesaw_report, RlSeesawRequest))
    assert [p.name for p in body.phases] == ["rollout", "reference_forward", "train",
                                            "weight_sync"]
    assert body.assumptions and "Kimi K3" in body.source


def test_the_picture_draws_every_component_of_every_phase(client: httpx.Client) -> None:
    answer = client.post("/v1/lab/rl-seesaw?format=svg", json=NVME)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("image/svg+xml")
    report = rl_seesaw_report(RlSeesawRequest.model_validate(NVME))
    assert answer.text == seesaw_svg(report)
    root = ET.fromstring(answer.content)
    assert root.get("data-label") == MODEL_LABEL
    for phase in report.phases:
        gpu = [int(e.get("data-bytes", "-1")) for e in root.iter()
               if e.get("data-phase") == phase.name and e.get("data-tier") == "gpu"]
        host = [int(e.get("data-bytes", "-1")) for e in root.iter()
                if e.get("data-phase") == phase.name and e.get("data-tier") == "host"]
        assert gpu == [c.bytes for c in phase.components]
        assert host == [c.bytes for c in phase.host_components]
    arrows = [e for e in root.iter(f"{SVG}g") if e.get("class") == "transition"]
    assert len(arrows) == len(report.phases)
    drawn = sum(float(a.get("data-seconds", "nan")) for a in arrows)
    assert drawn == pytest.approx(report.transition_s)
    # The external pool appears in the rollout's host memory.
    assert any(e.get("data-name") == "external KV pool (write-back)" for e in root.iter())


def test_nvme_without_its_bandwidth_is_a_problem_naming_the_field(
        client: httpx.Client) -> None:
    doc = {**RL_SEESAW_EXAMPLE, "rollout": {"offload_tier": "nvme"}}
    answer = client.post("/v1/lab/rl-seesaw", json=doc)
    assert answer.status_code == 422
    assert "nvme_bandwidth_bytes_per_s" in answer.text


def test_an_instance_larger_than_the_cluster_is_refused(client: httpx.Client) -> None:
    doc = {**RL_SEESAW_EXAMPLE, "rollout": {"tp": 512}}
    answer = client.post("/v1/lab/rl-seesaw", json=doc)
    assert answer.status_code == 422
    assert answer.json()["code"] == "invalid-spec" and "rollout tp x pp = 512" in answer.text


FLAGS = ["--model", "kimi-k2-instruct", "--gpu", "h800-sxm5-80gb", "--nodes", "32",
         "--global-batch", "256", "--seq", "4096", "--pp", "16", "--dp", "16", "--ep", "16",
         "--vpp", "2", "--schedule", "interleaved_1f1b", "--zero-stage", "1",
         "--recompute", "full", "--rollout-tp", "16", "--weight-dtype", "fp8",
         "--context-length", "1048576", "--offload-tier", "nvme", "--nvme-bandwidth", "2e10",
         "--external-kv-pool", "--pipelined-update", "--optimizer", "muon", "--pipeline-zero2"]


def test_the_command_prints_phases_and_writes_the_picture(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    svg, out = tmp_path / "seesaw.svg", tmp_path / "seesaw.json"
    assert cli.main(["rl-seesaw", *FLAGS, "--svg", str(svg), "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "weight_sync" in printed and "pipelined" in printed
    result = RlSeesawResponse.model_validate(json.loads(out.read_text(encoding="utf-8")))
    assert svg.read_text(encoding="utf-8") == seesaw_svg(result)
    assert result.kv_cache.external_pool_bytes_per_gpu > 0
    assert result.reference.slot == "chunk" and result.fits
    update = next(t for t in result.transitions if t.name.startswith("checkpoint"))
    assert update.seconds == result.checkpoint_engine.pipelined_s


REMOTE = REMOTE_EXAMPLES["llama-3.1-70b-interleaved"]["value"]


def test_the_remote_activation_lab_answers_the_cost_model(client: httpx.Client) -> None:
    body = RemoteActivationsResponse.model_validate(post_answers_as(
        client, "/v1/lab/remote-activations", REMOTE, remote_activations_report,
        EvaluateRequest))
    assert body.peak_bytes_after < body.peak_bytes_before and body.assumptions


def test_the_remote_activation_command_prints_every_rank(
        capsys: pytest.CaptureFixture[str]) -> None:
    flags = ["--model", "llama-3.1-70b", "--gpu", "h100-sxm5-80gb", "--nodes", "8",
             "--global-batch", "64", "--seq", "8192", "--tp", "8", "--pp", "8", "--dp", "1",
             "--vpp", "2", "--schedule", "interleaved_1f1b", "--zero-stage", "1", "--sp",
             "--recompute", "none"]
    assert cli.main(["remote-activations", *flags]) == 0
    printed = capsys.readouterr().out
    assert "peak" in printed and "NIC across nodes" in printed
    assert len([line for line in printed.splitlines() if line.strip()[:1].isdigit()]) == 8
