"""The small real plan request the service, browser, end-to-end and fault tests send: Llama
3.1 8B on one node of 8 H100s, 4K tokens per sequence, one CP-SAT worker. Its search proves
the optimum in well under a second on an idle host. The tests folder is on the import path
through its conftest."""

from typing import Any


def small_plan(*, time_limit_s: float = 20, top_k: int = 1,
               global_batch_size: int = 64) -> dict[str, Any]:
    """The request body, with the search's time limit, runners-up and the global batch
    (sequences per step) as given."""
    return {"model": {"preset": "llama-3.1-8b"},
            "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 1, "gpus_per_node": 8},
            "training": {"global_batch_size": global_batch_size, "sequence_length": 4096},
            "solver": {"time_limit_s": time_limit_s, "top_k": top_k, "num_workers": 1}}
