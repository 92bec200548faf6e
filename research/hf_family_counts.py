"""Print each packaged Hugging Face config's parameter count (read through
`models/catalog/hf_config.py` and counted by `models/core/params.py`, plus `vision.py` for a
multimodal checkpoint's vision tower) next to its published count.

Usage: python research/hf_family_counts.py. The published numbers and their sources are
listed in research/hf_configs.md; `tests/models/test_params.py` checks the same numbers.
"""

import sys

from models.catalog.presets import hf_preset_config, model_preset
from models.catalog.vision import vision_tower_params
from models.core.params import count_parameters

PUBLISHED: dict[str, tuple[float, str]] = {
    "gemma-7b": (8_537_680_896, "keras-hub gemma_7b_en"),
    "gemma-2-9b": (9_241_705_984, "keras-hub gemma2_9b_en"),
    "gemma-3-27b-it": (27_009_002_240, "keras-hub gemma3_27b_text"),
    "llama-4-scout-17b-16e": (109e9, "model card; checkpoint total incl. vision tower"),
    "llama-4-maverick-17b-128e": (400e9, "model card; checkpoint total incl. vision tower"),
    "phi-4": (14_659_507_200, "checkpoint parameter_count (GGUF metadata)"),
    "granite-3.3-8b-instruct": (8_170_864_640, "Hub safetensors total"),
    "phi-3-mini-4k-instruct": (3_821_079_552, "keras-hub phi3_mini_4k_instruct_en"),
    "mistral-7b-v0.3": (7_248_023_552, "keras-hub mistral_0.3_7b_en"),
    "qwen2.5-3b": (3_085_938_688, "keras-hub qwen2.5_3b_en"),
    "qwen3-1.7b": (1_720_574_976, "keras-hub qwen3_1.7b_en"),
    "qwen3-30b-a3b": (30_532_122_624, "keras-hub qwen3_moe_30b_a3b_en"),
    "deepseek-v2": (236e9, "arXiv:2405.04434"),
    "gpt-oss-20b": (20_914_757_184, "keras-hub gpt_oss_20b_en"),
    "olmo-2-1124-13b": (13_716_198_400, "checkpoint index total_size / 4"),
    "command-r-v01": (35e9, "transformers Cohere docs"),
    "mixtral-8x7b": (46.7e9, "Mistral AI announcement"),
    "mixtral-8x22b": (141e9, "Mistral AI announcement"),
    "deepseek-v3": (671e9, "arXiv:2412.19437"),
    "qwen3-235b-a22b": (235e9, "arXiv:2505.09388"),
    "olmoe-1b-7b-0924": (6.9e9, "arXiv:2409.02060 Table 1"),
    "olmo-1b-hf": (1_176_764_416, "OLMo-1B released model parameter count"),
}


def main() -> None:
    """Write the markdown table to stdout."""
    out = sys.stdout
    out.write("| config | counted | published | error | source |\n|---|---:|---:|---:|---|\n")
    for preset, (published, source) in PUBLISHED.items():
        spec = model_preset(preset)
        vision = vision_tower_params(hf_preset_config(preset), text_hidden_size=spec.hidden_size)
        # A multimodal checkpoint's published total includes its vision tower.
        total = count_parameters(spec).total + (vision.total if vision else 0)
        out.write(f"| {preset} | {total:,} | {published:,.0f} | "
                  f"{total / published - 1:+.2%} | {source} |\n")


if __name__ == "__main__":
    main()
