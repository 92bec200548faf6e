"""The memory lab: the per-stage ledger of one configuration.

Owns: `memory_report(request)`, the library entry behind POST /v1/ledger/memory.
Must not: search (see `solver/planner.py`) or time anything (see `solver/api.py`).
"""

from api_schemas.plan import MemoryReport
from api_schemas.requests import EvaluateRequest
from models.catalog.resolve import resolve_cluster, resolve_model
from models.core.memory import memory_ledger
from models.core.mesh import validate_mesh
from models.core.search_memo import within_search_memo
from solver.reports import memory_report_from_ledger


@within_search_memo
def memory_report(request: EvaluateRequest) -> MemoryReport:
    """The per-stage memory ledger of the request's configuration.

    Raises:
        InvalidSpecError: unknown presets, unreadable configs, a mesh that breaks a rule of
            `models/mesh` (the degrees must multiply to the cluster's GPUs, TP must divide
            the heads, ...), or a configuration the ledger cannot size.
    """
    spec = resolve_model(request.model).spec
    cluster = resolve_cluster(request.cluster)
    validate_mesh(request.parallel, model=spec, num_nodes=cluster.num_nodes,
                  gpus_per_node=cluster.gpus_per_node, training=request.training)
    ledger = memory_ledger(spec, request.training, request.parallel, cluster)
    return memory_report_from_ledger(ledger)


__all__ = ["memory_report"]
