"""torchtitan's own job-config loader at the pinned release, for the export tests.

torchtitan v0.2.2 (the last release that reads TOML job configs) is installed without its
dependencies by `.ci/run` (`pip install --no-deps torchtitan==0.2.2` plus `tyro`): its
`ConfigManager` (TOML -> `JobConfig` dataclasses via tyro, rejecting unknown keys) is plain
Python, but the package's `__init__` files import torch and its CUDA wheels are gigabytes.
This helper therefore registers the `torchtitan`, `torchtitan.config` and
`torchtitan.tools` packages by path (their modules run unmodified) and, only when torch is
absent, an empty `torch` module with a `device` class: `job_config.py` imports torch
without using it while parsing, and tyro asks for `torch.device` when torch is imported.
That stand-in is in `sys.modules` only while the loader runs: a later test in the same
process that looks for torch (`importlib.util.find_spec`) must not find it.
"""

import importlib.metadata
import sys
import tempfile
import types
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from api_schemas import ParallelConfig, TrainingSpec
from api_schemas.parallel import RecomputeMode
from models.catalog.presets import model_preset
from solver.export import TORCHTITAN_SCHEDULES, torchtitan_toml

PINNED = "0.2.2"


def installed() -> str | None:
    """The installed torchtitan version, or None."""
    try:
        return importlib.metadata.version("torchtitan")
    except importlib.metadata.PackageNotFoundError:
        return None


_TORCH_STAND_IN = types.ModuleType("torch")
_TORCH_STAND_IN.device = type("device", (), {})  # type: ignore[attr-defined]


@contextmanager
def _torch_or_stand_in() -> Iterator[None]:
    """torch if it is installed; else `_TORCH_STAND_IN` as `torch` until the block ends."""
    if "torch" in sys.modules:
        yield
        return
    try:
        import torch  # noqa: F401
    except ImportError:
        sys.modules["torch"] = _TORCH_STAND_IN
        try:
            yield
        finally:
            if sys.modules.get("torch") is _TORCH_STAND_IN:
                del sys.modules["torch"]
        return
    yield


def _register() -> Any:
    root = Path(str(importlib.metadata.distribution("torchtitan").locate_file("torchtitan")))
    for name, path in (("torchtitan", root), ("torchtitan.config", root / "config"),
                       ("torchtitan.tools", root / "tools")):
        if name not in sys.modules:
            package = types.ModuleType(name)
            package.__path__ = [str(path)]
            sys.modules[name] = package
    from torchtitan.config.manager import ConfigManager

    return ConfigManager


def load_job_config(toml_text: str) -> Any:
    """The `JobConfig` torchtitan's `ConfigManager.parse_args` builds from a TOML text
    (raises what torchtitan raises on a key it does not know)."""
    with _torch_or_stand_in():
        manager = _register()
        with tempfile.NamedTemporaryFile("w", suffix=".toml", encoding="utf-8") as handle:
            handle.write(toml_text)
            handle.flush()
            return manager().parse_args(["--job.config_file", handle.name])


def check_torchtitan(spec_name: str, training: TrainingSpec, parallel: ParallelConfig) -> Any:
    """Load a plan's torchtitan export with torchtitan's own loader and assert that it reads
    back the plan's degrees, schedule, micro-batch and recompute mode; the `JobConfig`."""
    spec = model_preset(spec_name)
    config = load_job_config(torchtitan_toml(spec, training, parallel))
    p = config.parallelism
    assert (p.tensor_parallel_degree, p.pipeline_parallel_degree,
            p.context_parallel_degree) == (parallel.tp, parallel.pp, parallel.cp)
    assert p.data_parallel_replicate_degree * p.data_parallel_shard_degree == parallel.dp
    if spec.moe is not None:
        assert p.expert_parallel_degree == parallel.ep
    if parallel.pp > 1:
        schedule = parallel.schedule
        if schedule == "interleaved_1f1b" and parallel.vpp == 1:
            schedule = "1f1b"
        assert p.pipeline_parallel_schedule == TORCHTITAN_SCHEDULES[schedule]
        assert p.pipeline_parallel_microbatch_size == parallel.micro_batch_size
    assert config.training.global_batch_size in (-1, training.global_batch_size)
    recompute = parallel.policy_of(0).recompute
    if recompute in (RecomputeMode.NONE, RecomputeMode.SELECTIVE, RecomputeMode.FULL):
        assert config.activation_checkpoint.mode == str(recompute.value)
    return config
