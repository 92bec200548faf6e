"""POST /v1/mesh over HTTP."""

import httpx

from api_schemas.mesh import MeshRequest
from models.core.mesh.report import mesh_report
from service.routes.mesh import MESH_EXAMPLES


def test_mesh_lists_ranks_and_groups(client: httpx.Client) -> None:
    body = MESH_EXAMPLES["moe-32-gpus"]["value"]
    response = client.post("/v1/mesh", json=body)
    assert response.status_code == 200
    mesh = response.json()
    assert mesh == mesh_report(MeshRequest.model_validate(body)).model_dump(mode="json")
    assert mesh["valid"] and mesh["world_size"] == 32 and len(mesh["ranks"]) == 32
    rank1 = mesh["ranks"][1]
    assert rank1["groups"]["tp"] == [0, 1]
    assert rank1["coords"]["tp"] == 1
    # tp varies fastest: every tp group stays inside its node.
    tp_axis = next(axis for axis in mesh["axes"] if axis["kind"] == "tp")
    assert tp_axis["all_intra_node"]


def test_mesh_names_problems_and_alternatives(client: httpx.Client) -> None:
    mesh = client.post("/v1/mesh", json=MESH_EXAMPLES["tp3-on-16-gpus"]["value"]).json()
    assert not mesh["valid"]
    problem = mesh["problems"][0]
    assert problem["severity"] == "error" and problem["alternative"] is not None


def test_mesh_bounds(client: httpx.Client) -> None:
    huge = {"cluster": {"num_nodes": 100_000, "gpus_per_node": 8},
            "parallel": {"tp": 8, "pp": 1, "dp": 100_000}}
    response = client.post("/v1/mesh", json=huge)
    assert response.status_code == 422
    assert response.json()["errors"][0]["loc"] == ["body", "cluster", "num_nodes"]
    wide = {"cluster": {"num_nodes": 8192, "gpus_per_node": 8},
            "parallel": {"tp": 8, "pp": 16, "dp": 512}, "max_ranks": 4096}
    response = client.post("/v1/mesh", json=wide)
    assert response.status_code == 422
    assert "ATLAS_MAX_MESH_MEMBERS" in response.json()["detail"]
