"""Documented upper bounds on request sizes, and the time-limit clamp.

Owns: refusing inputs that would make one request unreasonably expensive (world size,
layers, experts, sequence length, batch, pipeline stages and micro-batches, listed mesh
ranks, timeline and token-matrix sizes) with `invalid-request` naming the field, the value,
the bound and its setting; refusing to answer with non-finite figures; and clamping search
time limits to the configured cap. Must not:
check domain rules (the cost model does that) or do I/O.
"""

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from pydantic import BaseModel

from api_schemas._base import first_non_finite
from api_schemas.architecture import ModelSpec
from api_schemas.parallel import ParallelConfig
from api_schemas.requests import ClusterInput, EvaluateRequest, ModelFromHf, ModelInput
from api_schemas.rl_seesaw import RlSeesawRequest
from api_schemas.training import TrainingSpec
from models.catalog.presets import DEFAULT_NODE_FOR_GPU, NODE_PRESETS
from models.catalog.resolve import resolve_model
from models.core.mesh.layout import expert_data_parallel_size
from models.core.runtime_memory import CUDA_CONTEXT_BYTES
from models.errors import InvalidSpecError
from service.core import call_core
from service.problems import LimitExceededError
from service.settings import Settings


@dataclass(frozen=True, slots=True, kw_only=True)
class Bound:
    """One documented bound: its value and the environment variable that sets it."""

    value: int
    setting: str


def check_bound(value: int, bound: Bound, *, field: str, what: str) -> None:
    """Raise `LimitExceededError` naming `field` when `value` exceeds `bound`."""
    if value > bound.value:
        raise LimitExceededError(
            f"{field}: {what} is {value}, over this service's bound of {bound.value} "
            f"({bound.setting}); reduce it, or raise {bound.setting} on the server",
            field=field)


BOUNDED = ("world_size", "layers", "experts", "sequence_length", "global_batch_size",
           "pipeline_stages", "micro_batches", "pipeline_ops", "optimize_ops", "timeline_ops",
           "exact_placement_cells", "token_count", "mesh_ranks", "mesh_members",
           "placement_cells", "answer_bytes")
"""The bounded sizes by name: each is the setting `max_<name>` (`ATLAS_MAX_<NAME>`)."""


def bounds(settings: Settings) -> dict[str, Bound]:
    """The bounds of a configured service by name (also listed in docs/configuration.md)."""
    return {name: Bound(value=getattr(settings, f"max_{name}"),
                        setting=f"ATLAS_MAX_{name.upper()}") for name in BOUNDED}


def cluster_world_size(cluster: ClusterInput) -> int:
    """GPUs in a cluster input (GPUs per node from the node preset when not given)."""
    per_node = cluster.gpus_per_node
    if per_node is None:
        gpu_id = cluster.gpu if isinstance(cluster.gpu, str) else cluster.gpu.id
        node_id = cluster.node or DEFAULT_NODE_FOR_GPU.get(gpu_id)
        node = NODE_PRESETS.get(node_id) if node_id is not None else None
        per_node = node.gpus_per_node if node is not None else 1
    return cluster.num_nodes * per_node


def check_cluster(cluster: ClusterInput, settings: Settings) -> None:
    """World size of the cluster within bounds, and GPU memory above its physical floor."""
    check_bound(cluster_world_size(cluster), bounds(settings)["world_size"],
                field="cluster.num_nodes", what="the cluster's GPU count (nodes x GPUs/node)")
    check_gpu_memory(cluster)


def check_gpu_memory(cluster: ClusterInput) -> None:
    """Refuse a GPU whose plannable memory (memory x (1 - headroom)) does not exceed the CUDA
    context every rank holds before any model state (`models.core.runtime_memory.
    CUDA_CONTEXT_BYTES`, 512 MiB): no plan can fit such a GPU, and the searches that look
    for the cluster a plan would need divide the model states by that capacity.

    Raises:
        InvalidSpecError: naming the memory field and the floor.
    """
    if cluster.gpu_memory_bytes is not None:
        memory, field = cluster.gpu_memory_bytes, "cluster.gpu_memory_bytes"
    elif not isinstance(cluster.gpu, str):
        memory, field = cluster.gpu.memory_bytes, "cluster.gpu.memory_bytes"
    else:
        return  # a preset's memory (tens of GB) is far above the floor
    capacity = int(memory * (1.0 - cluster.memory_headroom_frac))
    if capacity <= CUDA_CONTEXT_BYTES:
        raise InvalidSpecError(
            f"{field}: {memory} bytes with memory_headroom_frac "
            f"{cluster.memory_headroom_frac} leaves {capacity} bytes per GPU, not more than "
            f"the {CUDA_CONTEXT_BYTES} bytes (512 MiB) of the CUDA context every rank holds "
            "before any model state; give the GPU's real memory in bytes (e.g. 85899345920 "
            "for 80 GiB)", field=field)


def check_training(training: TrainingSpec, settings: Settings) -> None:
    """Sequence length and global batch within bounds."""
    named = bounds(settings)
    check_bound(training.sequence_length, named["sequence_length"],
                field="training.sequence_length", what="the sequence length")
    check_bound(training.global_batch_size, named["global_batch_size"],
                field="training.global_batch_size", what="the global batch")


def check_parallel(parallel: ParallelConfig, training: TrainingSpec, settings: Settings) -> None:
    """World size, pipeline depth and micro-batch count of a configuration within bounds."""
    named = bounds(settings)
    check_bound(parallel.world_size, named["world_size"], field="parallel",
                what="tp x cp x dp x pp")
    check_bound(parallel.pp * parallel.vpp, named["pipeline_stages"], field="parallel.pp",
                what="pp x vpp (pipeline stages)")
    micro_batches = parallel.num_micro_batches or max(
        1, training.global_batch_size // (parallel.micro_batch_size * parallel.dp))
    check_bound(micro_batches, named["micro_batches"], field="parallel.num_micro_batches",
                what="the micro-batches per step")


GivenConfiguration = EvaluateRequest | RlSeesawRequest
"""A request that scores one configuration it carries (evaluate, the memory lab, remote
activations, the RL seesaw)."""


def check_configuration(request: GivenConfiguration, settings: Settings) -> None:
    """The bounds of a given configuration: its cluster, training, parallel layout and model."""
    check_cluster(request.cluster, settings)
    check_training(request.training, settings)
    check_parallel(request.parallel, request.training, settings)
    check_model_input(request.model, settings)


def listed_group_members(parallel: ParallelConfig, *, listed_ranks: int) -> int:
    """Rank ids a mesh answer lists: each listed rank names the members of its tp, cp, pp,
    dp, dp x cp, ep, etp and expert-data-parallel groups (an upper estimate)."""
    p = parallel
    try:
        expert_dp = expert_data_parallel_size(p)
    except InvalidSpecError:
        expert_dp = 1  # the mesh rules refuse it later, with the reason
    per_rank = p.tp + p.cp + p.pp + p.dp + p.dp * p.cp + p.ep + p.etp + expert_dp
    return listed_ranks * per_rank


def check_model_spec(spec: ModelSpec, settings: Settings) -> None:
    """Layers and experts of an architecture within bounds."""
    named = bounds(settings)
    check_bound(spec.num_layers, named["layers"], field="model.num_layers",
                what="the layer count")
    if spec.moe is not None:
        check_bound(spec.moe.num_experts, named["experts"], field="model.moe.num_experts",
                    what="the routed expert count")


def check_model_input(model: ModelInput, settings: Settings) -> ModelSpec:
    """Resolve a model input (preset, Hugging Face config or fields) and check its bounds.

    Raises:
        InvalidSpecError: unknown preset or unreadable config.
        LimitExceededError: too many layers or experts.
    """
    if isinstance(model, ModelFromHf):
        check_hf_config(model.hf_config, settings, field="model.hf_config")
    spec = call_core(resolve_model, model).spec
    check_model_spec(spec, settings)
    return spec


_HF_LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers")
_HF_EXPERT_KEYS = ("n_routed_experts", "num_experts", "num_local_experts")


def check_hf_config(config: dict[str, object], settings: Settings, *,
                    field: str = "config") -> None:
    """Bounds of a raw Hugging Face config, checked before it is read (reading walks layers).

    Args:
        config: the parsed config.json; only its layer and expert counts are looked at.
        settings: the configured bounds.
        field: where the config sits in the request body.
    """
    named = bounds(settings)
    for keys, bound, what in ((_HF_LAYER_KEYS, named["layers"], "the layer count"),
                              (_HF_EXPERT_KEYS, named["experts"], "the routed expert count")):
        for key in keys:
            count = _count_of(config.get(key))
            if count is not None:
                check_bound(count, bound, field=f"{field}.{key}", what=what)
    nested = config.get("text_config")
    if isinstance(nested, dict):  # multimodal checkpoints keep the decoder here
        check_hf_config(nested, settings, field=f"{field}.text_config")


def _count_of(value: object) -> int | None:
    """A count as the schema would coerce it (int, integral float, numeric string)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    try:
        number = float(value) if isinstance(value, float | str) else None
    except ValueError:
        return None
    return int(number) if number is not None and math.isfinite(number) else None


def require_finite(result: BaseModel) -> None:
    """Refuse to answer with infinite or NaN figures (JSON cannot carry them).

    Raises:
        InvalidSpecError: naming the first non-finite field of the result.
    """
    found = first_non_finite(result.model_dump(), "result")
    if found is not None:
        where, number = found
        raise InvalidSpecError(
            f"the inputs are too extreme for a finite answer ({where} is {number}); use "
            "realistic magnitudes (bandwidths of at least bytes per second, durations well above "
            "1e-300 s, sizes below 2**60)")


RequestT = TypeVar("RequestT")
ResultT = TypeVar("ResultT", bound=BaseModel)


def finite_answer(fn: Callable[[RequestT], ResultT], request: RequestT) -> ResultT:
    """`call_core(fn, request)`, refused as `require_finite` refuses when a figure of the
    result is infinite or NaN."""
    result = call_core(fn, request)
    require_finite(result)
    return result


def clamp_time_limit(requested_s: float | None, settings: Settings) -> float:
    """The search time limit to use: the default when none is given, never above the cap."""
    if requested_s is None:
        return settings.default_time_limit_s
    return min(requested_s, settings.max_time_limit_s)


__all__ = [
    "Bound",
    "GivenConfiguration",
    "bounds",
    "check_bound",
    "check_cluster",
    "check_configuration",
    "check_gpu_memory",
    "check_hf_config",
    "check_model_input",
    "check_model_spec",
    "check_parallel",
    "check_training",
    "clamp_time_limit",
    "cluster_world_size",
    "finite_answer",
    "listed_group_members",
    "require_finite",
]
