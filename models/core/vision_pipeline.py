"""A vision encoder beside a pipelined language model: its work, its memory, and where it
runs.

Owns: the encoder's forward FLOPs and time per image (from its Hugging Face
`vision_config`, parameters from `models.catalog.vision`), its stored activations per image, and the
three placements of `api_schemas.training.VisionPlacement`: on pipeline stage 0 inside every
micro-batch, Kimi K2.5's decoupled encoder process (DEP) spread over every GPU before and
after the text pipeline, and Kimi K3's DEP work placed into the pipeline's bubbles. It gives
per rank the encoder's GPU memory (`vision_memory_components`) and per step the time the
encoder adds (`vision_step_s`, from the pipeline simulator's stage durations and makespan).
Must not: simulate pipelines itself (the caller passes the makespans), search, or count the
language model.

Sources: Kimi K2.5 arXiv:2602.02276 and Kimi K3 arXiv:2607.24653 as the research ledger
summarises them (Sec. 9.3: DEP balances the global batch's images over all GPUs, drops the
encoder's intermediate activations keeping only its outputs, gathers those to PP stage 0,
runs the text pipeline, then recomputes the encoder forward and runs its backward; Sec. 9.6:
K3 runs the first encoder forwards synchronously and puts the rest, and the backwards, into
the text pipeline's bubbles); Korthikanti et al. 2022 arXiv:2205.05198 Eq. 1 (stored
activations of a transformer layer, here without the attention matrix: a flash kernel).
"""

import math
from dataclasses import dataclass
from typing import Any

from api_schemas.architecture import ModelSpec
from api_schemas.hardware import GpuSpec
from api_schemas.parallel import ParallelConfig
from api_schemas.training import TrainingSpec, VisionPlacement, VisionWorkload
from models.catalog.kernels import attention_time_s, gemm_time_s
from models.catalog.presets import hf_preset_config
from models.catalog.vision import VisionTowerParams, vision_tower_params
from models.core.ledger_items import MemoryComponent
from models.core.precision import state_bytes_per_param
from models.errors import InvalidSpecError

LAYER_ACTIVATION_BYTES_PER_TOKEN_PER_HIDDEN = 34
"""Stored activation bytes of one transformer layer per token per hidden unit with 16-bit
activations, a 4h MLP and no stored attention matrix: Korthikanti et al. 2022
arXiv:2205.05198 Eq. 1 without its 5 a s / h term (flash attention keeps no s x s
matrix)."""

BACKWARD_OVER_FORWARD = 2.0
"""Backward time over forward time of the encoder's GEMMs and attention (input and weight
gradients, each the forward's FLOPs: Narayanan et al. 2021 arXiv:2104.04473 Sec. 5.1)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class VisionEncoder:
    """The shape of a vision encoder as timing and memory read it."""

    params: VisionTowerParams
    hidden: int
    intermediate: int
    layers: int
    tokens_per_image: int
    """Patches plus the class token."""
    output_tokens_per_image: int
    """Tokens handed to the language model (after pixel shuffle)."""
    patch_inputs: int
    """Channels x patch x patch."""

    def forward_flop_per_image(self) -> float:
        """Forward FLOPs of one image: 2 x tokens x weights of every linear layer, plus the
        bidirectional attention core 4 n^2 d per layer (scores and values), plus the
        adapter and projector over the shuffled tokens.
        Legend: n = tokens per image, d = hidden, f = intermediate, L = layers, n_o = output
        tokens. FLOPs = L [2 n (4 d^2 + 2 d f) + 4 n^2 d] + 2 (n - 1) C p^2 d
        + 2 n_o (adapter + projector weights)."""
        n, d, f = self.tokens_per_image, self.hidden, self.intermediate
        layers = self.layers * (2 * n * (4 * d * d + 2 * d * f) + 4 * n * n * d)
        patch = 2 * (n - 1) * self.patch_inputs * d
        out = 2 * self.output_tokens_per_image * (self.params.adapter + self.params.projector)
        return float(layers + patch + out)

    def activation_bytes_per_image(self) -> int:
        """Stored activations of one image's forward: 34 n d bytes per layer (16-bit,
        `LAYER_ACTIVATION_BYTES_PER_TOKEN_PER_HIDDEN`)."""
        return (LAYER_ACTIVATION_BYTES_PER_TOKEN_PER_HIDDEN * self.layers
                * self.tokens_per_image * self.hidden)


def _int(vision: dict[str, Any], name: str) -> int:
    value = vision.get(name)
    if not isinstance(value, int) or value < 1:
        raise InvalidSpecError(f"'vision_config.{name}' must be a positive integer",
                               field="training.vision.encoder_preset")
    return value


def vision_encoder(workload: VisionWorkload, spec: ModelSpec) -> VisionEncoder:
    """The encoder named by `workload.encoder_preset` (its `vision_config`).

    Raises:
        InvalidSpecError: the preset has no vision tower whose shapes are modelled.
    """
    config = hf_preset_config(workload.encoder_preset)
    params = vision_tower_params(config, text_hidden_size=spec.hidden_size)
    if params is None:
        raise InvalidSpecError(
            f"preset '{workload.encoder_preset}' has no vision tower whose shapes are "
            "modelled; name one with a Llama 4 vision_config, e.g. 'llama-4-scout-17b-16e'",
            field="training.vision.encoder_preset")
    vision = config["vision_config"]
    patch, image = _int(vision, "patch_size"), _int(vision, "image_size")
    patches = (image // patch) ** 2
    ratio = float(vision.get("pixel_shuffle_ratio") or 1.0)
    return VisionEncoder(params=params, hidden=_int(vision, "hidden_size"),
                         intermediate=_int(vision, "intermediate_size"),
                         layers=_int(vision, "num_hidden_layers"),
                         tokens_per_image=patches + 1,
                         output_tokens_per_image=max(1, round(patches * ratio * ratio)),
                         patch_inputs=_int(vision, "num_channels") * patch * patch)


def encoder_forward_s(encoder: VisionEncoder, images: float, *, gpu: GpuSpec,
                      training: TrainingSpec) -> float:
    """Forward time of `images` images on one GPU: every linear layer as a GEMM of
    ceil(images x n) rows (`models.catalog.kernels.gemm_time_s`), the attention core with flash
    attention at sequence length n (`attention_time_s`)."""
    if images <= 0:
        return 0.0
    n, d, f = encoder.tokens_per_image, encoder.hidden, encoder.intermediate
    rows = math.ceil(images * n)
    dtype = training.compute_dtype
    layer = (gemm_time_s(rows, 3 * d, d, gpu=gpu, dtype=dtype)
             + gemm_time_s(rows, d, d, gpu=gpu, dtype=dtype)
             + gemm_time_s(rows, f, d, gpu=gpu, dtype=dtype)
             + gemm_time_s(rows, d, f, gpu=gpu, dtype=dtype)
             + attention_time_s(images * 4.0 * n * n * d, seq_len=n, gpu=gpu, flash=True))
    patch = gemm_time_s(math.ceil(images * (n - 1)), d, encoder.patch_inputs, gpu=gpu,
                        dtype=dtype)
    out_rows = math.ceil(images * encoder.output_tokens_per_image)
    adapter = 2.0 * out_rows * (encoder.params.adapter + encoder.params.projector)
    adapter_s = adapter / (gpu.peak_flop_per_s(dtype) or 1.0)
    return encoder.layers * layer + patch + adapter_s


def images_per_micro_batch(training: TrainingSpec, parallel: ParallelConfig) -> float:
    """Images of one micro-batch of one pipeline."""
    workload = training.vision
    return 0.0 if workload is None else parallel.micro_batch_size * workload.images_per_sequence


def stage0_vision_times(encoder: VisionEncoder, training: TrainingSpec,
                        parallel: ParallelConfig, gpu: GpuSpec) -> tuple[float, float]:
    """(forward, backward) encoder time added to each micro-batch of pipeline stage 0 when
    the encoder runs there, its images split over the stage's TP x CP ranks.
    Assumes: the encoder is replicated in the TP x CP group, which splits the micro-batch's
    images (no tensor parallelism inside the encoder)."""
    share = images_per_micro_batch(training, parallel) / (parallel.tp * parallel.cp)
    forward = encoder_forward_s(encoder, share, gpu=gpu, training=training)
    return forward, BACKWARD_OVER_FORWARD * forward


def decoupled_work_s(encoder: VisionEncoder, training: TrainingSpec, parallel: ParallelConfig,
                     gpu: GpuSpec) -> tuple[float, float]:
    """(whole, first micro-batch's forward) encoder time per GPU under DEP: the step's images
    spread evenly over every GPU; the forward, then after the text pipeline the forward again
    (recomputation) and the backward: (2 + BACKWARD_OVER_FORWARD) forwards in all. The
    second figure is the forward of the first micro-batch of every pipeline over all GPUs,
    the part Kimi K3 still runs before the pipeline starts."""
    workload = training.vision
    if workload is None:
        return 0.0, 0.0
    world = parallel.world_size
    share = training.global_batch_size * workload.images_per_sequence / world
    forward = encoder_forward_s(encoder, share, gpu=gpu, training=training)
    first = images_per_micro_batch(training, parallel) * parallel.dp / world
    return ((2.0 + BACKWARD_OVER_FORWARD) * forward,
            encoder_forward_s(encoder, first, gpu=gpu, training=training))


@dataclass(frozen=True, slots=True, kw_only=True)
class VisionStepCost:
    """The encoder's share of one step (a model, not a measurement)."""

    placement: VisionPlacement
    flop_per_image: float
    images_per_step: float
    encoder_work_s: float
    """Encoder time per GPU that carries it: stage 0's over the step (`stage0`), or each
    GPU's even share (`dep`, `bubbles`)."""
    bubble_capacity_s: float
    """Least idle time of any pipeline rank over the step (`bubbles` only; else 0)."""
    exposed_s: float
    """Step time the encoder adds."""


def vision_step_cost(encoder: VisionEncoder, training: TrainingSpec, parallel: ParallelConfig,
                     gpu: GpuSpec, *, num_micro_batches: int, makespan_s: float,
                     makespan_with_stage0_s: float, rank_idle_s: tuple[float, ...]
                     ) -> VisionStepCost:
    """Step time the encoder adds under its placement.

    stage0: the simulated makespan with stage 0's forwards and backwards lengthened by
    `stage0_vision_times` less the makespan without (the caller simulates both).
    dep: every GPU's share, `decoupled_work_s`, before and after the pipeline, in full.
    bubbles: the first micro-batch's forward up front, the rest hidden up to the least idle
    time of any rank (`rank_idle_s`: makespan less the rank's own work); what does not fit
    is exposed. Assumes: bubble time anywhere in the step can take encoder work (the order
    of forwards before their micro-batch's stage-0 forward and backwards after its stage-0
    backward is not checked), which makes this an upper bound of the hiding.
    Source: module docstring (Kimi K2.5 / K3 as the research ledger summarises them).
    """
    workload = training.vision
    assert workload is not None
    images = training.global_batch_size * workload.images_per_sequence
    flop = encoder.forward_flop_per_image()
    if workload.placement == VisionPlacement.STAGE0:
        forward, backward = stage0_vision_times(encoder, training, parallel, gpu)
        return VisionStepCost(placement=workload.placement, flop_per_image=flop,
                              images_per_step=images,
                              encoder_work_s=num_micro_batches * (forward + backward),
                              bubble_capacity_s=0.0,
                              exposed_s=max(0.0, makespan_with_stage0_s - makespan_s))
    work, first = decoupled_work_s(encoder, training, parallel, gpu)
    if workload.placement == VisionPlacement.DEP:
        return VisionStepCost(placement=workload.placement, flop_per_image=flop,
                              images_per_step=images, encoder_work_s=work,
                              bubble_capacity_s=0.0, exposed_s=work)
    capacity = min(rank_idle_s, default=0.0)
    return VisionStepCost(placement=workload.placement, flop_per_image=flop,
                          images_per_step=images, encoder_work_s=work,
                          bubble_capacity_s=capacity,
                          exposed_s=first + max(0.0, work - first - capacity))


def vision_memory_components(spec: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
                             *, stage: int, in_flight: int, num_micro_batches: int
                             ) -> list[MemoryComponent]:
    """GPU bytes the encoder puts on one rank of pipeline stage `stage`.

    stage0: stage 0 holds the encoder's weights and gradients, its optimizer states sharded
    like the dense ones (ZeRO over DP x CP), and the activations of `in_flight` micro-batches'
    images (their share on this TP x CP rank). dep / bubbles: every rank holds the weights
    and gradients and an optimizer shard over all GPUs, and one image's activations while it
    works (images one at a time); stage 0 also keeps the encoder outputs of the step's
    micro-batches and their gradients, in 16 bits, split over TP x CP, until the encoder's
    backward after the pipeline (Sec. 9.3: outputs gathered to stage 0).
    Assumes: the encoder's states follow the recipe's per-parameter bytes; visual tokens
    reach the language model at its hidden size.
    """
    workload = training.vision
    if workload is None:
        return []
    encoder = vision_encoder(workload, spec)
    per = state_bytes_per_param(training)
    count = encoder.params.total
    decoupled = workload.placement != VisionPlacement.STAGE0
    if not decoupled and stage != 0:
        return []
    shard = (parallel.world_size if decoupled else parallel.dp * parallel.cp) \
        if parallel.zero_stage >= 1 else 1
    name = "vision encoder"
    out = [MemoryComponent(name=f"{name}: weights and gradients", kind="parameters",
                           bytes=math.ceil(count * (per.weights + per.gradients)),
                           note=f"{count} params ({workload.placement.value})"),
           MemoryComponent(name=f"{name}: optimizer", kind="optimizer",
                           bytes=math.ceil(count * per.optimizer / shard),
                           note=f"/{shard}")]
    split = parallel.tp * parallel.cp
    images = images_per_micro_batch(training, parallel)
    if not decoupled:
        acts = math.ceil(in_flight * images / split * encoder.activation_bytes_per_image())
        out.append(MemoryComponent(name=f"{name}: activations", kind="activations",
                                   bytes=acts, note=f"{in_flight} micro-batches in flight"))
        return out
    out.append(MemoryComponent(name=f"{name}: activations (one image)", kind="activations",
                               bytes=encoder.activation_bytes_per_image()))
    if stage == 0:
        tokens = num_micro_batches * images * encoder.output_tokens_per_image / split
        out.append(MemoryComponent(
            name=f"{name}: outputs and their gradients on stage 0", kind="activations",
            bytes=math.ceil(2 * 2 * tokens * spec.hidden_size),
            note="kept from the encoder forward to its backward after the pipeline"))
    return out


__all__ = ["BACKWARD_OVER_FORWARD", "LAYER_ACTIVATION_BYTES_PER_TOKEN_PER_HIDDEN",
           "VisionEncoder", "VisionStepCost", "decoupled_work_s", "encoder_forward_s",
           "images_per_micro_batch", "stage0_vision_times", "vision_encoder",
           "vision_memory_components", "vision_step_cost"]
