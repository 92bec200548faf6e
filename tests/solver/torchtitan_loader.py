"""torchtitan's own job-config loader at the pinned release, for the export tests.

torchtitan v0.2.2 (the last release that reads TOML job configs) is installed without its
dependencies by `.ci/run` (`pip install --no-deps torchtitan==0.2.2` plus `tyro`): its
`ConfigManager` (TOML -> `JobConfig` dataclasses via tyro, rejecting unknown keys) is plain
Python, but the package's `__init__` files import torch and its CUDA wheels are gigabytes.
This helper therefore registers the `torchtitan`, `torchtitan.config` and
`torchtitan.tools` packages by path (their modules run unmodified) and, only when torch is
absent, an empty `torch` module with a `device` class: `job_config.py` imports torch
without using it while parsing, and tyro asks for `torch.device` when torch is imported.
"""

import importlib.metadata
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

PINNED = "0.2.2"


def installed() -> str | None:
    """The installed torchtitan version, or None."""
    try:
        return importlib.metadata.version("torchtitan")
    except importlib.metadata.PackageNotFoundError:
        return None


def _register() -> Any:
    if "torch" not in sys.modules:
        try:
            import torch  # noqa: F401
        except ImportError:
            shim = types.ModuleType("torch")
            shim.device = type("device", (), {})  # type: ignore[attr-defined]
            sys.modules["torch"] = shim
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
    manager = _register()
    with tempfile.NamedTemporaryFile("w", suffix=".toml", encoding="utf-8") as handle:
        handle.write(toml_text)
        handle.flush()
        return manager().parse_args(["--job.config_file", handle.name])
