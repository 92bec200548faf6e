"""The catalog: GPU and node presets, model presets with parameter counts, and Hugging Face
config ingestion.

Owns: GET /v1/catalog/gpus, GET /v1/catalog/models, POST /v1/models/from-hf. Must not:
read configs itself (`models/catalog/hf_config.py` does).
"""

from functools import cache, partial
from typing import Annotated, Literal

from fastapi import APIRouter, Body

from models.catalog.assumed_presets import PRESET_ASSUMPTIONS as ASSUMPTIONS
from models.catalog.hf_config import spec_from_hf_config
from models.catalog.presets import (
    DEFAULT_NODE_FOR_GPU,
    NODE_PRESETS,
    gpu_ids,
    gpu_preset,
    hf_preset_config,
    hf_preset_ids,
    model_ids,
    model_preset,
)
from models.catalog.vision import vision_tower_params
from models.core.params import count_parameters
from service import limits
from service.core import call_core
from service.deps import SettingsDep
from service.openapi import problem_responses
from service.schemas import (
    FromHfRequest,
    FromHfResponse,
    GpuCatalog,
    ModelCatalog,
    ModelCatalogEntry,
    NodePresetInfo,
)

router = APIRouter(tags=["catalog"])

FROM_HF_EXAMPLE = {
    "config": {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
        "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
        "max_position_embeddings": 131072, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
        "attention_bias": False, "mlp_bias": False, "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    },
    "name": "llama-3.1-8b",
}
"""The Llama 3.1 8B config.json (abridged: fields that do not shape the model dropped)."""


@cache
def _gpu_catalog() -> GpuCatalog:
    nodes = [NodePresetInfo(
        id=node.id, gpu_id=node.gpu_id, gpus_per_node=node.gpus_per_node,
        intra_node_bandwidth_bytes_per_s=node.intra_node_bandwidth_bytes_per_s(),
        inter_node_bandwidth_bytes_per_s=node.inter_node_bandwidth_bytes_per_s(),
        host_memory_bytes=node.host_memory_bytes,
        host_memory_bandwidth_bytes_per_s=node.host_memory_bandwidth_bytes_per_s,
        pcie_bandwidth_bytes_per_s=node.pcie_bandwidth_bytes_per_s, description=node.description,
        sources=list(node.sources)) for node in NODE_PRESETS.values()]
    return GpuCatalog(gpus=[gpu_preset(gid) for gid in gpu_ids()], nodes=nodes,
                      default_node=dict(DEFAULT_NODE_FOR_GPU))


@cache
def _model_catalog() -> ModelCatalog:
    hf_ids = set(hf_preset_ids())
    entries = []
    for preset_id in model_ids():
        spec = model_preset(preset_id)
        counts = count_parameters(spec)
        vision = vision_tower_params(hf_preset_config(preset_id),
                                     text_hidden_size=spec.hidden_size) \
            if preset_id in hf_ids else None
        assumed = ASSUMPTIONS.get(preset_id)
        source: Literal["hf_config", "megatron_gpt", "assumed"] = (
            "hf_config" if preset_id in hf_ids
            else "assumed" if assumed is not None else "megatron_gpt")
        entries.append(ModelCatalogEntry(
            id=preset_id, source=source, assumptions=list(assumed or ()),
            spec=spec, num_parameters=counts.total, num_activated_parameters=counts.activated,
            num_mtp_parameters=counts.mtp_total,
            num_vision_parameters=vision.total if vision else 0))
    return ModelCatalog(models=entries)


@router.get("/v1/catalog/gpus", summary="GPU and node presets",
            responses=problem_responses(params=False, body=False))
def catalog_gpus() -> GpuCatalog:
    """Every GPU preset (memory, dense peak FLOP/s per format, HBM bandwidth, sources) and
    every node preset (GPUs per node, achievable link bandwidths, host memory)."""
    return _gpu_catalog()


@router.get("/v1/catalog/models", summary="Model presets with parameter counts",
            responses=problem_responses(params=False, body=False))
def catalog_models() -> ModelCatalog:
    """Every model preset: packaged Hugging Face configs and published Megatron GPT shapes,
    each with total, activated and MTP parameter counts."""
    return _model_catalog()


@router.post("/v1/models/from-hf", summary="Read a Hugging Face config.json",
             responses=problem_responses("invalid-spec"))
def model_from_hf(
    body: Annotated[FromHfRequest, Body(openapi_examples={"llama-3.1-8b": {
        "summary": "Llama 3.1 8B config.json", "value": FROM_HF_EXAMPLE}})],
    settings: SettingsDep,
) -> FromHfResponse:
    """The ModelSpec of a Hugging Face `config.json`, with parameter counts (embeddings and
    head included, MTP layers and a multimodal checkpoint's vision tower reported apart) and
    every assumption made while reading."""
    limits.check_hf_config(body.config, settings)
    ingested = call_core(partial(spec_from_hf_config, name=body.name), body.config)
    limits.check_model_spec(ingested.spec, settings)
    counts = call_core(count_parameters, ingested.spec)
    vision = call_core(partial(vision_tower_params, text_hidden_size=ingested.spec.hidden_size),
                       body.config)
    return FromHfResponse(spec=ingested.spec, model_type=ingested.model_type,
                          num_parameters=counts.total,
                          num_activated_parameters=counts.activated,
                          num_mtp_parameters=counts.mtp_total,
                          num_vision_parameters=vision.total if vision else 0,
                          notes=list(ingested.notes))


__all__ = ["router"]
