"""Reading a torchtitan training log: its printed job configuration and its step lines.

Owns: the torchtitan line formats a calibration reads and what they mean, as torchtitan
prints them (`torchtitan/train.py` and `torchtitan/trainer.py`, `components/metrics.py`):
- the job configuration, printed when asked (`--job.print_args` in 0.2.x: `Running with
  args: {...}`, a Python dict on one line; later releases `--debug.print_config`: `Running
  with configs: {...}`, indented JSON);
- `Trainer is initialized with local batch size L, global batch size G, gradient
  accumulation steps A, sequence length S, total steps N (warmup W)` (0.2.x; later
  releases print `T tokens per train step` and `maximum context length S` instead);
- per logged step `step: N  loss: ..  grad_norm: ..  memory: M GiB(P%)  tps: X  tflops: Y
  mfu: Z%`, coloured; `tps` is tokens per second per device, the tokens of one
  data-parallel rank over the time since the last line, divided by cp x tp x pp (so
  tps x world size is the global tokens per second) and `memory` the peak reserved GiB.
The step time is the global tokens of a step over tps x world size. The job configuration
maps to the configuration as the torchtitan export writes it (`solver/export/torchtitan.py`),
read backwards. Must not: fit or score (`solver/calibration`).
"""

import ast
import json
import re
from dataclasses import dataclass
from typing import Any

from api_schemas.dtypes import DType
from api_schemas.parallel import ParallelConfig, RecomputeMode
from api_schemas.training import TrainingSpec
from solver.logs.common import ANSI_ESCAPE, LogRefused, TimedStep

ARGS_MARKERS = ("Running with args: ", "Running with configs: ")
CONFIG_START = re.compile(r"Running with (?:args|configs): ")
STEP = re.compile(r"(?<!validate )step:\s*(\d+)\s+loss:.*?memory:\s*([0-9.]+)GiB.*?"
                  r"tps:\s*([0-9,]+)\s+tflops:\s*([0-9,.]+)")
INIT_LOCAL = re.compile(r"Trainer is initialized with local batch size (\d+), global batch "
                        r"size (\d+), gradient accumulation steps (\d+), sequence length (\d+)")
INIT_TOKENS = re.compile(r"Trainer is initialized with (\d+) tokens per DP rank, (\d+) tokens "
                         r"per train step, gradient accumulation steps (\d+), maximum context "
                         r"length (\d+)")
GIB = 2**30


@dataclass(frozen=True, slots=True, kw_only=True)
class TorchtitanLog:
    """What a torchtitan log printed."""

    config: dict[str, Any]
    global_batch_size: int | None
    sequence_length: int | None
    tokens_per_step: int | None
    data_parallel: int | None
    """Data-parallel degree implied by the start-up line (global over per-rank batch)."""
    steps_raw: list[tuple[int, int, float, int]]
    """(step, tps, tflops, peak reserved bytes) of each step line."""


def _config(text: str, start: int, marker: str) -> dict[str, Any] | None:
    body = text[start + len(marker):]
    try:
        value, _ = json.JSONDecoder().raw_decode(body)
    except json.JSONDecodeError:
        line = body.splitlines()[0] if body else ""
        try:
            value = ast.literal_eval(line.strip())
        except (ValueError, SyntaxError):
            return None
    return value if isinstance(value, dict) else None


def read_torchtitan_log(text: str, *, where: str) -> TorchtitanLog:
    """The job configuration, batch line and step lines of a torchtitan log.

    Raises:
        LogRefused: no job configuration printed, or one that cannot be read.
    """
    clean = ANSI_ESCAPE.sub("", text)
    config: dict[str, Any] | None = None
    for marker in ARGS_MARKERS:
        start = clean.find(marker)
        if start >= 0:
            config = _config(clean, start, marker)
            if config is None:
                raise LogRefused(f"{where}: the job configuration after '{marker.strip()}' "
                                 "cannot be read (truncated?)", field=where)
            break
    if config is None:
        raise LogRefused(
            f"{where}: the log prints no job configuration, so its parallelism is unknown: "
            "run torchtitan with --job.print_args (0.2.x) or --debug.print_config, which log "
            "'Running with args: ...' at start-up", field=where)
    gbs = seq = tokens = dp = None
    match = INIT_LOCAL.search(clean)
    if match:
        gbs, seq = int(match.group(2)), int(match.group(4))
        per_rank = int(match.group(1)) * int(match.group(3))
        dp = gbs // per_rank if per_rank and gbs % per_rank == 0 else None
    match = INIT_TOKENS.search(clean)
    if match:
        tokens, seq = int(match.group(2)), int(match.group(4))
        per_rank = int(match.group(1))
        dp = tokens // per_rank if per_rank and tokens % per_rank == 0 else None
    steps = [(int(m.group(1)), int(m.group(3).replace(",", "")),
              float(m.group(4).replace(",", "")), int(float(m.group(2)) * GIB))
             for m in STEP.finditer(clean)]
    return TorchtitanLog(config=config, global_batch_size=gbs, sequence_length=seq,
                         tokens_per_step=tokens, data_parallel=dp, steps_raw=steps)


def _section(config: dict[str, Any], name: str) -> dict[str, Any]:
    value = config.get(name)
    return value if isinstance(value, dict) else {}


def _degree(section: dict[str, Any], name: str) -> int:
    value = section.get(name)
    return 1 if value is None else int(value)


def _recompute(config: dict[str, Any]) -> RecomputeMode:
    """The activation-checkpointing mode: 0.2.x names it (`mode`: none, selective, full,
    memory_budget); later releases print the chosen class's fields, where only selective
    (`force_recompute_mm_shapes_by_fqns`) and memory-budget (`memory_budget`) checkpointing
    add fields to the base ones (torchtitan/distributed/activation_checkpoint.py)."""
    if "activation_checkpoint" in config and config["activation_checkpoint"] is None:
        return RecomputeMode.NONE
    section = _section(config, "activation_checkpoint")
    if not section:
        return RecomputeMode.NONE
    mode = section.get("mode")
    if mode is not None:
        return {"full": RecomputeMode.FULL, "none": RecomputeMode.NONE}.get(
            str(mode), RecomputeMode.SELECTIVE)
    if "force_recompute_mm_shapes_by_fqns" in section or "memory_budget" in section:
        return RecomputeMode.SELECTIVE
    return RecomputeMode.FULL


def _degrees(log: TorchtitanLog, par: dict[str, Any], *, world_size: int,
             where: str) -> tuple[int, int, int, int, int]:
    """(tp, pp, cp, dp, dp_shard) of the log, checked against the request's GPUs."""
    tp, pp = _degree(par, "tensor_parallel_degree"), _degree(par, "pipeline_parallel_degree")
    cp = _degree(par, "context_parallel_degree")
    replicate = _degree(par, "data_parallel_replicate_degree")
    shard = int(par.get("data_parallel_shard_degree", -1))
    rest = tp * pp * cp * replicate
    if world_size % rest:
        raise LogRefused(f"{where}: tp {tp} x pp {pp} x cp {cp} x replicate {replicate} does "
                         f"not divide the {world_size} GPUs", field=where)
    if shard == -1:
        shard = world_size // rest
    if replicate * shard * tp * pp * cp != world_size:
        raise LogRefused(
            f"{where}: the log's degrees (dp_replicate {replicate} x dp_shard {shard} x tp "
            f"{tp} x pp {pp} x cp {cp}) do not fill the request's {world_size} GPUs; give the "
            "nodes it ran on", field=where)
    dp = replicate * shard
    if log.data_parallel is not None and log.data_parallel != dp:
        raise LogRefused(
            f"{where}: the log's start-up line implies {log.data_parallel} data-parallel ranks "
            f"({log.data_parallel * tp * pp * cp} GPUs with tp {tp} x pp {pp} x cp {cp}), but "
            f"the request's cluster has {world_size} GPUs; give the nodes it ran on",
            field=where)
    return tp, pp, cp, dp, shard


def _batch(log: TorchtitanLog, train: dict[str, Any], *, dp: int,
           where: str) -> tuple[Any, Any, Any]:
    """(sequence length, global batch size, local batch size) as the log gives them."""
    seq = log.sequence_length or train.get("seq_len") or train.get("max_context_length")
    local = train.get("local_batch_size")
    gbs = log.global_batch_size
    if gbs is None and log.tokens_per_step is not None and seq:
        gbs = log.tokens_per_step // int(seq)
    if gbs is None and train.get("global_batch_size", -1) not in (-1, None):
        gbs = int(train["global_batch_size"])
    if gbs is None and local is not None:
        gbs = int(local) * dp
    if not seq or not gbs:
        raise LogRefused(f"{where}: neither the job configuration nor the trainer's start-up "
                         "line gives the batch size and sequence length", field=where)
    return seq, gbs, local


def torchtitan_configuration(log: TorchtitanLog, *, world_size: int, where: str
                             ) -> tuple[TrainingSpec, ParallelConfig, list[TimedStep]]:
    """The training recipe, parallel configuration and timed steps of a torchtitan log.

    Raises:
        LogRefused: degrees that do not fill the GPUs, or no batch size or sequence length.
    """
    par = _section(log.config, "parallelism")
    train = _section(log.config, "training")
    tp, pp, cp, dp, shard = _degrees(log, par, world_size=world_size, where=where)
    seq, gbs, local = _batch(log, train, dp=dp, where=where)
    converters = _section(log.config, "model").get("converters") or []
    fp8 = any("float8" in str(c) for c in converters)
    recompute = _recompute(log.config)
    per_micro = train.get("num_tokens_per_microbatch_per_dp_rank")
    if per_micro is not None:
        local = max(1, int(per_micro) // int(seq))
    micro = (int(par.get("pipeline_parallel_microbatch_size", 1)) if pp > 1
             else int(local) if local is not None else max(1, int(gbs) // dp))
    ep = _degree(par, "expert_parallel_degree")
    training = TrainingSpec(global_batch_size=int(gbs), sequence_length=int(seq),
                            compute_dtype=DType.FP8 if fp8 else DType.BF16)
    parallel = ParallelConfig(tp=tp, pp=pp, cp=cp, dp=dp, ep=ep,
                              etp=_degree(par, "expert_tensor_parallel_degree"),
                              micro_batch_size=micro, zero_stage=3 if shard > 1 else 0,
                              sequence_parallel=tp > 1, recompute=recompute)
    tokens = int(gbs) * int(seq)
    steps = [TimedStep(iteration=step, step_time_s=tokens / (tps * world_size),
                       tflops_per_gpu=tflops, peak_memory_bytes=peak)
             for step, tps, tflops, peak in log.steps_raw if tps > 0]
    return training, parallel, steps


def torchtitan_architecture(log: TorchtitanLog) -> dict[str, int | None]:
    """torchtitan names models by flavor; its job configuration prints no architecture to
    check, so nothing is compared."""
    return {}


__all__ = ["CONFIG_START", "TorchtitanLog", "read_torchtitan_log", "torchtitan_architecture",
           "torchtitan_configuration"]
