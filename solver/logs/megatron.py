"""Reading a Megatron-LM training log: its printed arguments and its iteration lines.

Owns: the three Megatron-LM line formats a calibration reads and what they mean, as
Megatron-LM's `megatron/training/arguments.py` (`_print_args`) and
`megatron/training/training.py` (`training_log`) and
`megatron/training/utils/common_utils.py` (`report_memory`) print them:
- the arguments block between `---- arguments ----` and `---- end of arguments ----`, one
  `  name ........ value` line per argument (dots pad the name to 48 characters);
- per logging interval, ` [timestamp] iteration  N/ T | consumed samples: ... | elapsed time
  per iteration (ms): X | throughput per GPU (TFLOP/s/GPU): Y | ... | global batch size: B |
  ...` (older releases print no timestamp); X averages the interval's iterations;
- `[Rank r] (after N iterations) memory (MB) | allocated: .. | max allocated: M | reserved:
  .. | max reserved: ..` with MB = 2^20 bytes.
The arguments map to the configuration as the Megatron-LM export writes them
(`solver/export/megatron.py`), read backwards. Must not: fit or score (`solver/calibration`).
"""

import ast
import re
from dataclasses import dataclass
from typing import Any, Literal

from api_schemas.dtypes import DType
from api_schemas.parallel import FullLayers, ParallelConfig, Recompute, RecomputeMode
from api_schemas.training import TrainingSpec
from solver.logs.common import LogRefused, TimedStep

ARGS_START = re.compile(r"-{8,} arguments -{8,}")
ARGS_END = re.compile(r"-{8,} end of arguments -{8,}")
ARG_LINE = re.compile(r"(\w+) \.{2,} (.*?)\s*$")
ITERATION = re.compile(r"iteration\s+(\d+)/\s*(\d+)\s*\|")
ELAPSED = re.compile(r"elapsed time per iteration \(ms\):\s*([0-9.]+)")
THROUGHPUT = re.compile(r"throughput per GPU \(TFLOP/s/GPU\):\s*([0-9.]+)")
MEMORY = re.compile(r"\(after (\d+) iterations\) memory \(MB\) \| allocated:\s*[0-9.]+ \| "
                    r"max allocated:\s*([0-9.]+)")
MEGABYTE = 2**20
"""Megatron-LM's 'MB' in its memory report (1024 x 1024 bytes)."""

ARCHITECTURE_ARGS = {"num_layers": "num_layers", "hidden_size": "hidden_size",
                     "num_attention_heads": "num_attention_heads",
                     "ffn_hidden_size": "ffn_hidden_size"}
"""Printed argument -> ModelSpec field, checked against the request's model."""

REQUIRED = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "micro_batch_size",
            "global_batch_size", "seq_length")
"""Arguments without which a log cannot become a run."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MegatronLog:
    """What a Megatron-LM log printed."""

    args: dict[str, Any]
    steps: list[TimedStep]


def _value(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def read_megatron_log(text: str, *, where: str) -> MegatronLog:
    """The arguments and timing lines of a Megatron-LM log (memory joined to its iteration).

    Raises:
        LogRefused: no arguments block.
    """
    args: dict[str, Any] = {}
    inside = False
    found = False
    steps: dict[int, TimedStep] = {}
    memory: dict[int, int] = {}
    for line in text.splitlines():
        if ARGS_START.search(line):
            inside, found = True, True
            continue
        if inside:
            if ARGS_END.search(line):
                inside = False
                continue
            match = ARG_LINE.search(line)
            if match:
                args[match.group(1)] = _value(match.group(2))
            continue
        it = ITERATION.search(line)
        elapsed = ELAPSED.search(line)
        if it and elapsed:
            tflops = THROUGHPUT.search(line)
            iteration = int(it.group(1))
            steps[iteration] = TimedStep(
                iteration=iteration, step_time_s=float(elapsed.group(1)) / 1000.0,
                tflops_per_gpu=float(tflops.group(1)) if tflops else None)
            continue
        mem = MEMORY.search(line)
        if mem:
            iteration = int(mem.group(1))
            peak = int(float(mem.group(2)) * MEGABYTE)
            memory[iteration] = max(peak, memory.get(iteration, 0))
    if not found:
        raise LogRefused(
            f"{where}: no '------ arguments ------' block: Megatron-LM prints it at start-up "
            "on rank 0; give the log from the start of the run", field=where)
    timed = [TimedStep(iteration=s.iteration, step_time_s=s.step_time_s,
                       tflops_per_gpu=s.tflops_per_gpu, peak_memory_bytes=memory.get(i))
             for i, s in sorted(steps.items())]
    return MegatronLog(args=args, steps=timed)


def _int(args: dict[str, Any], name: str, default: int) -> int:
    value = args.get(name)
    return default if value is None else int(value)


def _recompute(args: dict[str, Any]) -> Recompute:
    granularity = args.get("recompute_granularity")
    if granularity in (None, "None"):
        return RecomputeMode.NONE
    if granularity == "selective":
        return RecomputeMode.SELECTIVE
    if args.get("recompute_method") == "block":
        return FullLayers(full_layers=_int(args, "recompute_num_layers", 0))
    return RecomputeMode.FULL


def _zero_stage(args: dict[str, Any]) -> Literal[0, 1, 2, 3]:
    if args.get("use_megatron_fsdp") is True:
        strategy = args.get("data_parallel_sharding_strategy")
        if strategy == "optim_grads_params":
            return 3
        return 2 if strategy == "optim_grads" else 1
    return 1 if args.get("use_distributed_optimizer") is True else 0


def megatron_configuration(log: MegatronLog, *, world_size: int, where: str
                           ) -> tuple[TrainingSpec, ParallelConfig]:
    """The training recipe and parallel configuration the printed arguments describe.

    Raises:
        LogRefused: a required argument missing, or degrees that do not fill the GPUs.
    """
    args = log.args
    missing = [name for name in REQUIRED if args.get(name) is None]
    if missing:
        raise LogRefused(f"{where}: the arguments block lacks {', '.join(missing)}, which a "
                         "run's configuration needs", field=where)
    tp = _int(args, "tensor_model_parallel_size", 1)
    pp = _int(args, "pipeline_model_parallel_size", 1)
    cp = _int(args, "context_parallel_size", 1)
    printed_world = args.get("world_size")
    if printed_world is not None and int(printed_world) != world_size:
        raise LogRefused(
            f"{where}: the log ran on world_size={printed_world} GPUs but the request's "
            f"cluster has {world_size} (num_nodes x gpus_per_node); give the nodes it ran on",
            field=where)
    if world_size % (tp * pp * cp):
        raise LogRefused(f"{where}: tp {tp} x pp {pp} x cp {cp} does not divide the "
                         f"{world_size} GPUs", field=where)
    dp = _int(args, "data_parallel_size", world_size // (tp * pp * cp))
    ep = _int(args, "expert_model_parallel_size", 1)
    etp = _int(args, "expert_tensor_parallel_size", tp) if args.get("num_experts") else 1
    vpp = _int(args, "virtual_pipeline_model_parallel_size", 1)
    fp8 = args.get("fp8") not in (None, False, "None")
    half = DType.FP16 if args.get("fp16") is True else DType.BF16
    training = TrainingSpec(
        global_batch_size=_int(args, "global_batch_size", 1),
        sequence_length=_int(args, "seq_length", 1),
        param_dtype=half, compute_dtype=DType.FP8 if fp8 else half,
        overlap_grad_reduce=args.get("overlap_grad_reduce") is True)
    parallel = ParallelConfig(
        tp=tp, pp=pp, dp=dp, cp=cp, ep=ep if args.get("num_experts") else 1, etp=etp,
        vpp=vpp, micro_batch_size=_int(args, "micro_batch_size", 1),
        zero_stage=_zero_stage(args),
        sequence_parallel=args.get("sequence_parallel") is True and tp > 1,
        recompute=_recompute(args))
    return training, parallel


def megatron_architecture(log: MegatronLog) -> dict[str, int | None]:
    """ModelSpec field -> printed value of the arguments the request's model is checked on."""
    out: dict[str, int | None] = {}
    for arg, field in ARCHITECTURE_ARGS.items():
        value = log.args.get(arg)
        out[field] = int(value) if isinstance(value, int) else None
    return out


__all__ = ["ARGS_START", "MegatronLog", "megatron_architecture", "megatron_configuration",
           "read_megatron_log"]
