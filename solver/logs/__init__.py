"""Training logs in, measured runs out: Megatron-LM and torchtitan logs parsed into the
configuration that ran and its steady-state step time.

Owns: `parse_training_log`, the one entry point (framework dispatch, cluster size, warm-up
rule, median step time, the architecture check and the `ParsedLog` report). Must not: score
or fit runs (`solver/calibration.py`) or read files (the CLI reads them).
"""

from dataclasses import dataclass

from api_schemas.architecture import ModelSpec
from api_schemas.calibration import LogFramework, MeasuredRun, ParsedLog, TrainingLog
from api_schemas.parallel import ParallelConfig
from api_schemas.training import TrainingSpec
from models.errors import PlannerError
from solver.logs.common import (
    LogRefused,
    TimedStep,
    check_architecture,
    median_step_time,
    single_run,
    steady_steps,
)
from solver.logs.megatron import (
    ARGS_START,
    megatron_architecture,
    megatron_configuration,
    read_megatron_log,
)
from solver.logs.torchtitan import CONFIG_START, read_torchtitan_log, torchtitan_configuration


def _unreadable(where: str, error: Exception) -> LogRefused:
    first = str(error).splitlines()[0] if str(error) else type(error).__name__
    return LogRefused(f"{where}: the printed configuration is not one a run can have "
                      f"({first}); check that the log is complete and unedited", field=where)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Read:
    """What a framework's log says: the configuration, the timed steps and how it reports
    memory and step lines."""

    training: TrainingSpec
    parallel: ParallelConfig
    steps: list[TimedStep]
    memory_kind: str
    hint: str


def _megatron(log: TrainingLog, spec: ModelSpec, world: int, text_field: str) -> _Read:
    single_run(log.text, ARGS_START, where=text_field)
    mlog = read_megatron_log(log.text, where=text_field)
    check_architecture(spec, megatron_architecture(mlog), where=text_field)
    experts = mlog.args.get("num_experts")
    expected = spec.moe.num_experts if spec.moe is not None else None
    if experts != expected:
        raise LogRefused(
            f"{text_field}: the log's num_experts is {experts} but the model "
            f"'{spec.name}' has {expected}: the log is of another model; give the model "
            "that ran", field=text_field)
    try:
        training, parallel = megatron_configuration(mlog, world_size=world,
                                                    where=text_field)
    except (ValueError, TypeError) as error:
        if isinstance(error, PlannerError):
            raise
        raise _unreadable(text_field, error) from error
    return _Read(training=training, parallel=parallel, steps=mlog.steps,
                 memory_kind="max allocated (Megatron-LM memory report)",
                 hint=(" ('iteration N/ T | ... elapsed time per iteration (ms)'): Megatron-LM "
                       "prints them on the last rank, which with pipeline parallelism is not "
                       "rank 0; give that rank's output"))


def _torchtitan(log: TrainingLog, world: int, text_field: str) -> _Read:
    single_run(log.text, CONFIG_START, where=text_field)
    tlog = read_torchtitan_log(log.text, where=text_field)
    try:
        training, parallel, steps = torchtitan_configuration(tlog, world_size=world,
                                                             where=text_field)
    except (ValueError, TypeError) as error:
        if isinstance(error, PlannerError):
            raise
        raise _unreadable(text_field, error) from error
    return _Read(training=training, parallel=parallel, steps=steps,
                 memory_kind="max reserved (torchtitan step line)",
                 hint=" ('step: N  loss: ...  tps: ...  tflops: ...')")


def parse_training_log(log: TrainingLog, *, spec: ModelSpec, gpus_per_node: int,
                       where: str) -> ParsedLog:
    """The run a training log describes (configuration + median steady step time).

    Args:
        spec: the request's model, resolved (the log's printed architecture is checked
            against it).
        gpus_per_node: GPUs per node of the calibration's cluster (the log's own or the
            node preset's).
        where: the field path of the log in the request ("logs.2").

    Raises:
        LogRefused: the log lacks the configuration or timing lines, its degrees do not fill
            the cluster, or it is of another model (the message says which field and why).
    """
    text_field = f"{where}.text"
    world = log.num_nodes * gpus_per_node
    read = (_megatron(log, spec, world, text_field)
            if log.framework == LogFramework.MEGATRON_LM else
            _torchtitan(log, world, text_field))
    training, parallel, steps = read.training, read.parallel, read.steps
    memory_kind, hint = read.memory_kind, read.hint
    used, dropped = steady_steps(steps, skip_steps=log.skip_steps, where=text_field, hint=hint)
    step_time = median_step_time(used)
    peaks = [s.peak_memory_bytes for s in steps if s.peak_memory_bytes is not None]
    tflops = sorted(s.tflops_per_gpu for s in used if s.tflops_per_gpu is not None)
    label = log.label or f"{log.framework.value} log {where.split('.')[-1]}"
    run = MeasuredRun(model=log.model, num_nodes=log.num_nodes,
                      gpus_per_node=log.gpus_per_node, training=training, parallel=parallel,
                      step_time_s=step_time, peak_memory_bytes=max(peaks) if peaks else None,
                      label=label)
    return ParsedLog(
        label=label, framework=log.framework,
        steps_logged=[s.iteration for s in sorted(steps, key=lambda s: s.iteration)],
        steps_used=[s.iteration for s in used], warmup_skipped=[s.iteration for s in dropped],
        step_time_s=step_time, step_time_min_s=min(s.step_time_s for s in used),
        step_time_max_s=max(s.step_time_s for s in used),
        logged_tflops_per_gpu=tflops[len(tflops) // 2] if tflops else None,
        peak_memory_bytes=max(peaks) if peaks else None,
        peak_memory_kind=memory_kind if peaks else None, run=run)


__all__ = ["LogRefused", "parse_training_log"]
