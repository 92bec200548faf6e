"""The `mesh`, `rl-seesaw` and `remote-activations` labs and the run-level subcommands of
`atlas-planner`.

Owns: `mesh` (rank coordinates, groups and mesh problems, with GPU and model presets),
`rl-seesaw` (memory by phase and transition times of colocated RL training and rollout),
`remote-activations` (stored activations balanced across pipeline ranks, a what-if),
`run-estimate` (time and cost to train on a token budget), `frontier` (GPU count against
step time and cost over the cluster sizes allowed) and `sensitivity` (the plan under +-20%
network bandwidth, HBM capacity and kernel efficiency): their flags, request documents and
handlers. The shared machinery (request flags, running locally or against `--server`,
output) is passed in by `service/cli/parser.py`. Must not: compute anything itself.
"""

import argparse
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

from pydantic import BaseModel

from api_schemas.mesh import MeshRequest
from api_schemas.requests import ClusterInput, EvaluateRequest
from api_schemas.rl_seesaw import OffloadTier, RlSeesawRequest, RlSeesawResponse
from api_schemas.run_level import (
    FrontierRequest,
    RunEstimateRequest,
    SensitivityFactor,
    SensitivityRequest,
)
from models.catalog.presets import gpu_ids, model_ids, model_preset
from models.catalog.resolve import resolve_cluster
from models.core.mesh.report import mesh_report
from models.labs.remote_activations_report import remote_activations_report
from models.labs.rl_seesaw_report import rl_seesaw_report
from service.cli import COMMAND_HELP
from service.cli.flags import LIST_AXES, apply_constraint_flags
from service.pictures import seesaw_svg
from service.render_run import (
    render_frontier,
    render_mesh,
    render_remote_activations,
    render_rl_seesaw,
    render_run_estimate,
    render_sensitivity,
)

Item = TypeVar("Item")

Runner = Callable[..., int]
"""`service.cli._run`: (args, local, remote, render, *, label=...) -> exit status."""


def _parsed_list(text: str, parse: Callable[[str], Item], what: str) -> list[Item]:
    """'a,b,c' -> [parse(a), parse(b), parse(c)]; `what` names the items in the error."""
    try:
        return [parse(part) for part in text.split(",") if part.strip()]
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"expected {what} separated by commas: {text!r}") \
            from error


def float_list(text: str) -> list[float]:
    """'-0.2,0.2' -> [-0.2, 0.2]."""
    return _parsed_list(text, float, "numbers")


def int_list(text: str) -> list[int]:
    """'1,2,4' -> [1, 2, 4]."""
    return _parsed_list(text, int, "integers")


def mesh_document(args: argparse.Namespace, doc: dict[str, Any]) -> dict[str, Any]:
    """The mesh request: the file (if any) with the flags over it; a GPU preset fills in
    the GPUs per node and a model preset is expanded to its architecture."""
    cluster = doc.setdefault("cluster", {})
    for flag, key in (("nodes", "num_nodes"), ("gpus_per_node", "gpus_per_node"),
                      ("gpu", "gpu")):
        if getattr(args, flag) is not None:
            cluster[key] = getattr(args, flag)
    if "gpus_per_node" not in cluster and isinstance(cluster.get("gpu"), str):
        preset = resolve_cluster(ClusterInput(gpu=cluster["gpu"],
                                              num_nodes=cluster.get("num_nodes", 1)))
        cluster["gpus_per_node"] = preset.gpus_per_node
    parallel = doc.setdefault("parallel", {})
    for axis in LIST_AXES:
        if getattr(args, axis) is not None:
            parallel[axis] = getattr(args, axis)
    for flag, key in (("mbs", "micro_batch_size"), ("schedule", "schedule"),
                      ("zero_stage", "zero_stage")):
        if getattr(args, flag) is not None:
            parallel[key] = getattr(args, flag)
    if args.sp:
        parallel["sequence_parallel"] = True
    if args.model:
        doc["model"] = model_preset(args.model).model_dump(mode="json")
    if args.global_batch is not None and args.seq is not None:
        doc["training"] = {"global_batch_size": args.global_batch,
                           "sequence_length": args.seq}
    for flag, key in (("order", "order"), ("max_ranks", "max_ranks")):
        if getattr(args, flag) is not None:
            doc[key] = getattr(args, flag)
    return doc


def cmd_mesh(args: argparse.Namespace, *, run: Runner,
             load: Callable[[str], dict[str, Any]]) -> int:
    """Lay a configuration out on a cluster; exit status 1 when a rule reports an error."""
    doc = mesh_document(args, load(args.file) if args.file else {})

    def invalid(result: BaseModel) -> bool:
        return not getattr(result, "valid", True)

    return run(args, lambda: mesh_report(MeshRequest.model_validate(doc)),
               lambda client: client.mesh(doc), render_mesh, failed=invalid)


ROLLOUT_FLAGS = (("rollout_tp", "tp"), ("rollout_pp", "pp"), ("weight_dtype", "weight_dtype"),
                 ("kv_dtype", "kv_dtype"), ("gpu_memory_utilization", "gpu_memory_utilization"),
                 ("context_length", "context_length"), ("offload_tier", "offload_tier"),
                 ("nvme_bandwidth", "nvme_bandwidth_bytes_per_s"),
                 ("bucket_bytes", "bucket_bytes"))
"""Flags of `rl-seesaw` and the `rollout` fields they set."""


def seesaw_picture(result: BaseModel) -> tuple[str | None, dict[str, Any] | None]:
    """The memory-by-phase picture of a seesaw answer."""
    return (seesaw_svg(result), None) if isinstance(result, RlSeesawResponse) else (None, None)


def cmd_rl_seesaw(args: argparse.Namespace, *, run: Runner,
                  build: Callable[..., dict[str, Any]]) -> int:
    """Memory by phase of training and rollout on the same GPUs, and the transitions."""
    doc = build(args, degrees_key="parallel")
    if args.optimizer is not None:
        doc.setdefault("training", {})["optimizer"] = args.optimizer
    if args.pipeline_zero2:
        doc.setdefault("parallel", {})["gradient_host_shards"] = True
    rollout = doc.setdefault("rollout", {})
    for flag, key in ROLLOUT_FLAGS:
        if getattr(args, flag) is not None:
            rollout[key] = getattr(args, flag)
    for flag, key, value in (("external_kv_pool", "external_kv_pool", True),
                             ("pipelined_update", "pipelined_update", True),
                             ("no_gradient_buffer_reuse", "reuse_gradient_buffer", False)):
        if getattr(args, flag):
            rollout[key] = value
    return run(args, lambda: rl_seesaw_report(RlSeesawRequest.model_validate(doc)),
               lambda client: client.rl_seesaw(doc), render_rl_seesaw,
               pictures=seesaw_picture)


def cmd_remote_activations(args: argparse.Namespace, *, run: Runner,
                           build: Callable[..., dict[str, Any]]) -> int:
    """Stored activations balanced across the pipeline ranks of one configuration."""
    doc = build(args, degrees_key="parallel")
    return run(args, lambda: remote_activations_report(EvaluateRequest.model_validate(doc)),
               lambda client: client.remote_activations(doc), render_remote_activations)


def _search_document(args: argparse.Namespace, build: Callable[..., dict[str, Any]],
                     **flags: str) -> dict[str, Any]:
    """The request of a command that searches: the file and flags, the constraint flags over
    them, and each set flag of `flags` (request key = flag name) under its key."""
    doc = build(args, degrees_key="constraints")
    apply_constraint_flags(doc, args)
    for key, flag in flags.items():
        if getattr(args, flag) is not None:
            doc[key] = getattr(args, flag)
    return doc


def cmd_run_estimate(args: argparse.Namespace, *, run: Runner,
                     build: Callable[..., dict[str, Any]]) -> int:
    """Time and cost to train on --token-budget tokens."""
    doc = _search_document(args, build, token_budget="token_budget")
    reliability = {field: value for field, value in (
        ("failures_per_gpu_hour", args.failures_per_gpu_hour),
        ("storage_bandwidth_bytes_per_s", args.storage_bandwidth),
        ("node_storage_bandwidth_bytes_per_s", args.node_storage_bandwidth),
        ("restart_s", args.restart_s),
        ("checkpoint_interval_s", args.checkpoint_interval_s),
        ("async_save", True if args.async_save else None)) if value is not None}
    if reliability:
        doc["reliability"] = {**doc.get("reliability", {}), **reliability}
    from solver.run_level import estimate_run  # the solver loads on use

    return run(args, lambda: estimate_run(RunEstimateRequest.model_validate(doc)),
               lambda client: client.run_estimate(doc), render_run_estimate,
               label="searching")


def cmd_frontier(args: argparse.Namespace, *, run: Runner,
                 build: Callable[..., dict[str, Any]]) -> int:
    """The best plan on each of --nodes-options and the Pareto-optimal sizes."""
    doc = _search_document(args, build, num_nodes_options="nodes_options")
    if "num_nodes" not in doc.get("cluster", {}) and doc.get("num_nodes_options"):
        doc.setdefault("cluster", {})["num_nodes"] = max(doc["num_nodes_options"])
    from solver.run_level import frontier  # the solver loads on use

    return run(args, lambda: frontier(FrontierRequest.model_validate(doc)),
               lambda client: client.frontier(doc), render_frontier, label="searching")


def cmd_sensitivity(args: argparse.Namespace, *, run: Runner,
                    build: Callable[..., dict[str, Any]]) -> int:
    """The plan with network bandwidth, HBM capacity and kernel efficiency changed."""
    doc = _search_document(args, build, deltas="deltas", factors="factors")
    from solver.run_level import sensitivity  # the solver loads on use

    return run(args, lambda: sensitivity(SensitivityRequest.model_validate(doc)),
               lambda client: client.sensitivity(doc), render_sensitivity, label="searching")


def _add_mesh_parser(commands: Any, *, add_output_flags: Callable[..., None]
                     ) -> argparse.ArgumentParser:
    mesh = commands.add_parser("mesh", help=COMMAND_HELP["mesh"])
    mesh.add_argument("file", nargs="?", help="request as a JSON or YAML file")
    mesh.add_argument("--gpu", help=f"GPU preset, one of: {', '.join(gpu_ids())}")
    mesh.add_argument("--nodes", type=int, help="number of nodes")
    mesh.add_argument("--gpus-per-node", type=int, help="GPUs per node (default: preset)")
    for axis in LIST_AXES:
        mesh.add_argument(f"--{axis}", type=int, help=f"{axis} degree")
    mesh.add_argument("--mbs", type=int, help="micro-batch size")
    mesh.add_argument("--schedule", help="pipeline schedule")
    mesh.add_argument("--zero-stage", type=int, choices=(0, 1, 2, 3), help="ZeRO stage")
    mesh.add_argument("--sp", action="store_true", help="Megatron sequence parallelism")
    mesh.add_argument("--order", help="rank order of the axes, e.g. tp-cp-ep-dp-pp")
    mesh.add_argument("--model", help=f"check head, layer and expert rules against a model "
                      f"preset, one of: {', '.join(model_ids())}")
    mesh.add_argument("--global-batch", type=int, help="sequences per step (batch rules)")
    mesh.add_argument("--seq", type=int, help="tokens per sequence (batch rules)")
    mesh.add_argument("--max-ranks", type=int, help="list at most this many ranks")
    add_output_flags(mesh)
    return mesh


def _add_rl_seesaw_parser(commands: Any, *,
                          add_request_flags: Callable[..., None]) -> argparse.ArgumentParser:
    """The `rl-seesaw` subcommand's flags."""
    seesaw = commands.add_parser("rl-seesaw", help=COMMAND_HELP["rl-seesaw"])
    add_request_flags(seesaw, svg="the memory by phase")
    seesaw.add_argument("--optimizer", help="training optimizer, e.g. adam, muon")
    seesaw.add_argument("--pipeline-zero2", action="store_true",
                        help="gradient shards in host memory, two chunk buffers on the GPU")
    seesaw.add_argument("--rollout-tp", type=int, help="tensor parallel of one inference "
                        "instance (default 8)")
    seesaw.add_argument("--rollout-pp", type=int, help="pipeline stages of one inference "
                        "instance (default 1)")
    seesaw.add_argument("--weight-dtype", help="inference weight format, e.g. bf16, fp8")
    seesaw.add_argument("--kv-dtype", help="KV-cache format, e.g. bf16, fp8")
    seesaw.add_argument("--gpu-memory-utilization", type=float,
                        help="share of the GPU the inference engine takes (default 0.9)")
    seesaw.add_argument("--context-length", type=int, help="tokens of one rollout context "
                        "(default 1048576)")
    seesaw.add_argument("--offload-tier", choices=[t.value for t in OffloadTier],
                        help="where training states wait during the rollout")
    seesaw.add_argument("--nvme-bandwidth", type=float,
                        help="one node's NVMe bandwidth, bytes/s (needed with nvme)")
    seesaw.add_argument("--bucket-bytes", type=int, help="checkpoint-engine bucket, bytes")
    seesaw.add_argument("--external-kv-pool", action="store_true",
                        help="a write-back KV pool in host DRAM")
    seesaw.add_argument("--pipelined-update", action="store_true",
                        help="overlap the weight update's copy, broadcast and reload")
    seesaw.add_argument("--no-gradient-buffer-reuse", action="store_true",
                        help="give the reference model its own GPU copy")
    return seesaw


def _add_run_estimate_parser(commands: Any, *,
                             add_request_flags: Callable[..., None]) -> argparse.ArgumentParser:
    """The `run-estimate` subcommand's flags."""
    estimate = commands.add_parser("run-estimate", help=COMMAND_HELP["run-estimate"])
    add_request_flags(estimate, pins=True)
    estimate.add_argument("--token-budget", type=int, help="training tokens of the run")
    estimate.add_argument("--failures-per-gpu-hour", type=float,
                          help="job-stopping failures per GPU-hour (default Llama 3's, 1.97e-5)")
    estimate.add_argument("--storage-bandwidth", type=float,
                          help="aggregate checkpoint-store write bandwidth, bytes/s (2e12)")
    estimate.add_argument("--node-storage-bandwidth", type=float,
                          help="one node's links to the store, bytes/s (1e11)")
    estimate.add_argument("--restart-s", type=float,
                          help="seconds from a failure to training again (600)")
    estimate.add_argument("--checkpoint-interval-s", type=float,
                          help="training seconds between saves (default: Daly's optimum)")
    estimate.add_argument("--async-save", action="store_true",
                          help="save asynchronously (training stops only for the host copy)")
    return estimate


def register_lab_commands(commands: Any, *, run: Runner,
                          add_request_flags: Callable[..., None],
                          add_output_flags: Callable[..., None],
                          build: Callable[..., dict[str, Any]],
                          load: Callable[[str], dict[str, Any]]) -> None:
    """Add `mesh`, `rl-seesaw`, `remote-activations`, `run-estimate`, `frontier` and
    `sensitivity` to the subcommands."""
    mesh = _add_mesh_parser(commands, add_output_flags=add_output_flags)
    mesh.set_defaults(handler=partial(cmd_mesh, run=run, load=load))

    seesaw = _add_rl_seesaw_parser(commands, add_request_flags=add_request_flags)
    seesaw.set_defaults(handler=partial(cmd_rl_seesaw, run=run, build=build))

    remote = commands.add_parser("remote-activations",
                                 help=COMMAND_HELP["remote-activations"])
    add_request_flags(remote)
    remote.set_defaults(handler=partial(cmd_remote_activations, run=run, build=build))

    estimate = _add_run_estimate_parser(commands, add_request_flags=add_request_flags)
    estimate.set_defaults(handler=partial(cmd_run_estimate, run=run, build=build))

    front = commands.add_parser("frontier", help=COMMAND_HELP["frontier"])
    add_request_flags(front, pins=True)
    front.add_argument("--nodes-options", type=int_list, help="cluster sizes to try, in "
                       "nodes, e.g. 1,2,4,8")
    front.set_defaults(handler=partial(cmd_frontier, run=run, build=build))

    sens = commands.add_parser("sensitivity", help=COMMAND_HELP["sensitivity"])
    add_request_flags(sens, pins=True)
    sens.add_argument("--deltas", type=float_list,
                      help="relative changes, default -0.2,0.2 (write --deltas=-0.2,0.2)")
    sens.add_argument("--factors", type=lambda text: text.split(","),
                      help=f"comma list of {', '.join(f.value for f in SensitivityFactor)}")
    sens.set_defaults(handler=partial(cmd_sensitivity, run=run, build=build))


__all__ = [
    "cmd_frontier",
    "cmd_mesh",
    "cmd_remote_activations",
    "cmd_rl_seesaw",
    "cmd_run_estimate",
    "cmd_sensitivity",
    "float_list",
    "int_list",
    "mesh_document",
    "register_lab_commands",
    "seesaw_picture",
]
