"""The cost model beside one GPU's own measurements (`research/measure_gpu.py`).

    python research/compare_measured.py research/data/measured/h200.json

Owns: reading a measurement file and the model's prediction of each measured quantity:
GEMM times (`models.catalog.kernels.gemm_time_s`), causal fused-attention forward + backward
(`models.catalog.kernels.attention_time_s`, the Transformer Engine / cuDNN level and PyTorch SDPA's
FlashAttention-2 level), and one Llama 3.1 8B layer's stored bytes
(`models.core.activations.layer_activation_bytes`) and forward + backward time
(`models.core.compute.layer_compute`) under the eager runtime the measurement ran. Must not: fit
anything; a measured file is validation data (research/CALIBRATION.md says which).
"""

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from api_schemas.dtypes import DType
from api_schemas.training import ElementwiseFusion
from models.catalog.kernels import attention_time_s, gemm_time_s
from models.catalog.presets import gpu_preset, model_preset
from models.core.activations import LayerActivationContext, layer_activation_bytes
from models.core.compute import FLASH_BACKWARD_FLOP_RATIO, ComputeContext, layer_compute
from models.core.flops import attention_core_forward_flops

GPU_IDS = {"NVIDIA H200": "h200-sxm-141gb", "NVIDIA H100 80GB HBM3": "h100-sxm5-80gb"}
"""Catalog GPU of each `torch.cuda.get_device_name()` a measurement file may carry."""

_DTYPES = {"bf16": DType.BF16, "fp8": DType.FP8}


@dataclass(frozen=True, slots=True, kw_only=True)
class Comparison:
    """One measured quantity and the model's value of it."""

    what: str
    measured: float
    predicted: float

    @property
    def ratio(self) -> float:
        """Predicted / measured."""
        return self.predicted / self.measured


def load(path: Path) -> dict[str, Any]:
    """A measurement file (the JSON `research/measure_gpu.py` writes)."""
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def gemm_comparisons(data: dict[str, Any]) -> list[Comparison]:
    """Each measured GEMM beside `gemm_time_s` on the catalog GPU."""
    gpu = gpu_preset(GPU_IDS[data["device_name"]])
    return [Comparison(what=f"GEMM {row['name']} {row['dtype']} ({row['m']}x{row['n']}x{row['k']})",
                       measured=row["seconds"],
                       predicted=gemm_time_s(row["m"], row["n"], row["k"], gpu=gpu,
                                             dtype=_DTYPES[row["dtype"]]))
            for row in data["gemm"] if "seconds" in row]


def attention_comparisons(data: dict[str, Any]) -> list[Comparison]:
    """Each measured causal attention forward + backward beside `attention_time_s`: the
    cuDNN backend against the fused (Transformer Engine) level, FlashAttention-2 against
    the SDPA level."""
    gpu = gpu_preset(GPU_IDS[data["device_name"]])
    spec = model_preset("llama-3.1-8b")
    out = []
    for row in data["attention"]:
        if "seconds_fwd_bwd" not in row:
            continue
        forward = attention_core_forward_flops(spec, seq_len=row["seq"], causal=True)
        forward *= row["batch"]
        forward *= row["heads"] / spec.num_attention_heads
        total = forward * (1.0 + FLASH_BACKWARD_FLOP_RATIO)
        sdpa = row["backend"] == "flash"
        predicted = attention_time_s(total, seq_len=row["seq"], gpu=gpu, flash=True, sdpa=sdpa)
        out.append(Comparison(what=f"attention {row['backend']} s={row['seq']} fwd+bwd",
                              measured=row["seconds_fwd_bwd"], predicted=predicted))
    return out


def layer_comparisons(data: dict[str, Any]) -> list[Comparison]:
    """The eager Llama 3.1 8B layer's stored bytes and forward + backward time."""
    gpu = gpu_preset(GPU_IDS[data["device_name"]])
    spec = model_preset("llama-3.1-8b")
    out = []
    for row in data["layer"]:
        act = LayerActivationContext(seq_len=row["seq"], micro_batch_size=row["micro_batch"],
                                     eager_elementwise=True)
        stored = layer_activation_bytes(spec, 0, act).total_bytes
        out.append(Comparison(what=f"layer stored bytes s={row['seq']}",
                              measured=row["stored_bytes_per_layer"], predicted=stored))
        ctx = ComputeContext(gpu=gpu, seq_len=row["seq"], micro_batch_size=row["micro_batch"],
                             elementwise_fusion=ElementwiseFusion.EAGER)
        times = layer_compute(spec, 0, ctx).times
        out.append(Comparison(what=f"layer fwd+bwd time s={row['seq']}",
                              measured=row["seconds_fwd_bwd"], predicted=times.total_s))
    return out


def compiled_layer_comparisons(data: dict[str, Any]) -> list[Comparison]:
    """The `torch.compile`d layer's stored bytes beside the ledger's fused layer (a compiled
    runtime, `ElementwiseFusion.COMPILED`, stores what the hand-fused one does)."""
    spec = model_preset("llama-3.1-8b")
    out = []
    for row in data.get("compiled_layer", []):
        act = LayerActivationContext(seq_len=row["seq"], micro_batch_size=row["micro_batch"])
        out.append(Comparison(what=f"compiled layer stored bytes s={row['seq']}",
                              measured=row["stored_bytes_per_layer"],
                              predicted=layer_activation_bytes(spec, 0, act).total_bytes))
    return out


def allocator_reserve(data: dict[str, Any]) -> dict[str, float]:
    """Peak reserved / peak allocated bytes of the measured training steps, by
    PYTORCH_CUDA_ALLOC_CONF ('' for the default allocator): the caching allocator's reserve
    beyond the bytes tensors hold, once the run has reached its steady state (last step)."""
    out = {}
    for run in data.get("allocator", []):
        last = run["steps"][-1]
        out[run["alloc_conf"]] = last["max_reserved"] / last["max_allocated"]
    return out


def comparisons(data: dict[str, Any]) -> list[Comparison]:
    """Every comparison of one measurement file."""
    return (gemm_comparisons(data) + attention_comparisons(data) + layer_comparisons(data)
            + compiled_layer_comparisons(data))


def main(argv: list[str]) -> int:
    data = load(Path(argv[0]))
    print(f"{data['device_name']}, torch {data['torch']}, CUDA {data['cuda']}")
    print(f"{'quantity':<52} {'measured':>12} {'model':>12} {'model/meas':>10}")
    for row in comparisons(data):
        print(f"{row.what:<52} {row.measured:>12.6g} {row.predicted:>12.6g} {row.ratio:>10.3f}")
    for conf, ratio in allocator_reserve(data).items():
        print(f"allocator reserve ({conf or 'default'}): peak reserved / allocated {ratio:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
