"""Vision towers that multimodal checkpoints ship beside their language model.

Owns: the parameter count of the image encoder, its adapter and the projector into the
language model's width, read from a Hugging Face config's `vision_config`, for the tower
kinds whose layer shapes are modelled (Llama 4's `llama4_vision_model`). The plan covers the
language model only; these counts say what else the published checkpoint holds, so a total
compared with a model card's figure is the whole checkpoint's. Must not: plan, shard or time
the tower, or guess the shapes of an unmodelled tower kind (it is reported as not counted).

Source (Llama 4): Hugging Face transformers `models/llama4/modeling_llama4.py`:
`Llama4VisionModel` holds a patch embedding (`Llama4UnfoldConvolution`, a bias-free linear
from C*p*p to d), a class embedding (d), a learned position table ((image/p)^2 + 1 rows of
d), LayerNorms before and after the encoder (2d each); `Llama4VisionEncoderLayer` holds q, k,
v, o projections with biases (4(d^2 + d)), a two-matrix GELU MLP with biases
(2 d f + f + d) and two LayerNorms (4d); `Llama4VisionPixelShuffleMLP` folds 1/r^2 patches
into one (`Llama4VisionMLP2`: bias-free fc1 from f to the projector input width, fc2 from the
projector output width to itself); `Llama4MultiModalProjector` is one bias-free linear from
`vision_output_dim` to the language model's hidden size.
"""

from dataclasses import dataclass
from typing import Any

from models.errors import InvalidSpecError

COUNTED_TOWERS = frozenset({"llama4_vision_model"})
"""`vision_config.model_type` values whose shapes this module counts."""


@dataclass(frozen=True, slots=True, kw_only=True)
class VisionTowerParams:
    """Weights of a multimodal checkpoint's vision side by part."""

    model_type: str
    embeddings: int
    """Patch embedding, class embedding, position table and the encoder's outer norms."""
    encoder_layers: int
    """All encoder layers (attention, MLP and norms)."""
    adapter: int
    """The pixel-shuffle MLP that turns patch features into projector inputs."""
    projector: int
    """The linear map into the language model's hidden size."""

    @property
    def total(self) -> int:
        """Every vision-side weight."""
        return self.embeddings + self.encoder_layers + self.adapter + self.projector


def _field(vision: dict[str, Any], name: str) -> int:
    value = vision.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidSpecError(
            f"'vision_config.{name}' must be a positive integer to count the vision tower, "
            f"got {value!r}", field="config")
    return value


def llama4_vision_params(vision: dict[str, Any], *, text_hidden_size: int) -> VisionTowerParams:
    """Weights of Llama 4's vision encoder, pixel-shuffle adapter and projector.

    Legend: d = hidden_size, f = intermediate_size, L = num_hidden_layers, C = num_channels,
    p = patch_size, P = (image_size // p)^2 + 1 position rows, a_in / a_out =
    projector_input_dim / projector_output_dim, v = vision_output_dim, h = the language
    model's hidden size.
        embeddings = C p^2 d + d + P d + 2 * 2d
        layer      = 4 (d^2 + d) + (2 d f + f + d) + 2 * 2d
        adapter    = f a_in + a_out^2
        projector  = v h
    Source: module docstring (transformers `modeling_llama4.py`).

    Raises:
        InvalidSpecError: when a shape field is missing or not a positive integer.
    """
    d, f = _field(vision, "hidden_size"), _field(vision, "intermediate_size")
    layers, channels = _field(vision, "num_hidden_layers"), _field(vision, "num_channels")
    patch, image = _field(vision, "patch_size"), _field(vision, "image_size")
    a_in, a_out = _field(vision, "projector_input_dim"), _field(vision, "projector_output_dim")
    v = _field(vision, "vision_output_dim")
    positions = (image // patch) ** 2 + 1
    embeddings = channels * patch * patch * d + d + positions * d + 2 * (2 * d)
    layer = 4 * (d * d + d) + (2 * d * f + f + d) + 2 * (2 * d)
    return VisionTowerParams(model_type="llama4_vision_model", embeddings=embeddings,
                             encoder_layers=layers * layer, adapter=f * a_in + a_out * a_out,
                             projector=v * text_hidden_size)


def vision_tower_params(config: dict[str, Any], *,
                        text_hidden_size: int) -> VisionTowerParams | None:
    """The vision side of a multimodal config, or None when it has none or its kind is not
    modelled (the caller's notes say it is not counted).

    Raises:
        InvalidSpecError: when a modelled tower's shape fields are missing or invalid.
    """
    vision = config.get("vision_config") if isinstance(config, dict) else None
    if not isinstance(vision, dict):
        return None
    if str(vision.get("model_type") or "") not in COUNTED_TOWERS:
        return None
    return llama4_vision_params(vision, text_hidden_size=text_hidden_size)


__all__ = ["COUNTED_TOWERS", "VisionTowerParams", "llama4_vision_params",
           "vision_tower_params"]
