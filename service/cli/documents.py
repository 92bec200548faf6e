"""Request documents of the `atlas-planner` commands.

Owns: reading a JSON or YAML request file (`-` for stdin) and laying the preset and degree
flags over it (`build_request`). Must not: run anything.
"""

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from service.cli.flags import apply_recipe_flags, set_field


def load_document(source: str) -> dict[str, Any]:
    """A request document from a JSON or YAML file ('-' reads stdin)."""
    text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
    loaded = yaml.safe_load(text) if not source.endswith(".json") else json.loads(text)
    if not isinstance(loaded, dict):
        raise SystemExit(f"atlas-planner: {source} must hold a JSON/YAML object")
    return loaded


_MODEL_FLAGS = (("gpu", ("cluster", "gpu")), ("nodes", ("cluster", "num_nodes")),
                ("gpus_per_node", ("cluster", "gpus_per_node")),
                ("global_batch", ("training", "global_batch_size")),
                ("seq", ("training", "sequence_length")))
_PARALLEL_FLAGS = ("tp", "pp", "dp", "cp", "ep", "etp", "vpp", "schedule", "zero_stage",
                   "recompute")


def build_request(args: argparse.Namespace, *, degrees_key: str) -> dict[str, Any]:
    """The request document: the file (if any) with the flags applied over it.

    Args:
        args: parsed flags.
        degrees_key: where --tp, --pp, ... go: 'parallel' (evaluate, memory: the
            configuration) or 'constraints' (plan: pins on the search).
    """
    doc = load_document(args.file) if args.file else {}
    if args.model:
        doc["model"] = {"preset": args.model}
    if args.hf_config:
        doc["model"] = {"hf_config": load_document(args.hf_config)}
    for flag, path in _MODEL_FLAGS:
        set_field(doc, path, getattr(args, flag))
    for flag in _PARALLEL_FLAGS:
        set_field(doc, (degrees_key, flag), getattr(args, flag))
    set_field(doc, (degrees_key, "micro_batch_size"), args.mbs)
    if args.sp:
        set_field(doc, (degrees_key, "sequence_parallel"), True)
    apply_recipe_flags(doc, args)
    return doc
