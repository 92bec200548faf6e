"""Measured runs held out from the calibration, as the requests that score them: shared by
the error-band test (the transfer check's error is the current model's) and the
plausibility test (the prediction lands near the measurement). The tests folder is on the
import path through its conftest."""

from api_schemas import ClusterInput, EvaluateRequest, ModelPreset, ParallelConfig
from api_schemas.training import TrainingSpec

PRIMUS_STEP_S = 15.22
"""Measured seconds per step of `PRIMUS_LLAMA_8B_MI300X` (TensorPrimat
PEAK_THROUGHPUT_SUMMARY.md: 68,875 tokens/s on 8 GPUs)."""

PRIMUS_LLAMA_8B_MI300X = EvaluateRequest(
    model=ModelPreset(preset="llama-3.1-8b"), cluster=ClusterInput(gpu="mi300x", num_nodes=1),
    training=TrainingSpec(global_batch_size=128, sequence_length=8192),
    parallel=ParallelConfig(tp=1, pp=1, dp=8, micro_batch_size=2))
"""Primus (rocm/megatron-lm) Llama 3.1 8B on 8 MI300X, its default recipe: TP1 PP1, micro
batch 2, global batch 128, 8192 tokens. Not used to set the CDNA3 levels."""
