"""Vision towers of multimodal checkpoints: counted apart, refused when malformed."""

import pytest

from models.catalog.presets import hf_preset_config
from models.catalog.vision import llama4_vision_params, vision_tower_params
from models.errors import InvalidSpecError


def test_unmodelled_or_absent_towers_are_not_counted() -> None:
    assert vision_tower_params(hf_preset_config("llama-3.1-8b"), text_hidden_size=4096) is None
    config = dict(hf_preset_config("llama-4-scout-17b-16e"))
    config["vision_config"] = {**config["vision_config"], "model_type": "siglip_vision_model"}
    assert vision_tower_params(config, text_hidden_size=5120) is None


def test_a_missing_shape_field_is_named() -> None:
    vision = dict(hf_preset_config("llama-4-scout-17b-16e")["vision_config"])
    del vision["patch_size"]
    with pytest.raises(InvalidSpecError, match="vision_config.patch_size"):
        llama4_vision_params(vision, text_hidden_size=5120)


def test_the_projector_follows_the_language_model_width() -> None:
    vision = hf_preset_config("llama-4-scout-17b-16e")["vision_config"]
    narrow = llama4_vision_params(vision, text_hidden_size=1000)
    wide = llama4_vision_params(vision, text_hidden_size=2000)
    assert wide.total - narrow.total == 1000 * vision["vision_output_dim"]
    # The position table has (336 / 14)^2 + 1 rows; the patch embedding 3 * 14 * 14 inputs.
    assert narrow.embeddings == 3 * 14 * 14 * 1408 + 1408 + 577 * 1408 + 4 * 1408
