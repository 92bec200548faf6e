"""Command-line flags for every constraint, objective, recipe and cluster option.

Owns: the request flags every computing command shares (`add_request_flags`: the file,
presets, degrees or pins, recipe; `add_output_flags`: `--server`, `--json`, `--output`,
`--svg`, `--trace`), and the flags that map one-to-one onto request fields those leave out
(allowed sets of degrees, forbidden values, GPU and throughput limits, price, offload and
FP8 permissions, FP8 compute, memory headroom, solver workers and seed), their parsing, and
writing them into a request document. Must not: validate values beyond parsing (the API
schemas do) or run anything.
"""

import argparse
from typing import Any

from api_schemas.requests import Objective
from api_schemas.training import VisionPlacement
from models.catalog.presets import gpu_ids, model_ids
from service.client import DEFAULT_BASE_URL

LIST_AXES = ("tp", "pp", "dp", "cp", "ep", "etp", "vpp")


def int_or_list(text: str) -> int | list[int]:
    """'8' -> 8, '4,8' -> [4, 8]: a pin or an allowed set."""
    values = [int(part) for part in text.split(",") if part.strip()]
    if not values:
        raise argparse.ArgumentTypeError(f"expected an integer or a comma list, got {text!r}")
    return values[0] if len(values) == 1 else values


def str_or_list(text: str) -> str | list[str]:
    """'1f1b' -> '1f1b', '1f1b,zb_h1' -> ['1f1b', 'zb_h1']."""
    values = [part.strip() for part in text.split(",") if part.strip()]
    return values[0] if len(values) == 1 else values


def forbid_item(text: str) -> tuple[str, list[Any]]:
    """'schedule=dualpipe,zbv' -> ('schedule', ['dualpipe', 'zbv']); integers stay integers."""
    key, sep, values = text.partition("=")
    if not sep or not key or not values:
        raise argparse.ArgumentTypeError(f"expected KEY=V1[,V2...], got {text!r}")
    parsed: list[Any] = [int(v) if v.strip().isdigit() else v.strip()
                         for v in values.split(",") if v.strip()]
    return key.strip(), parsed


def add_recipe_flags(parser: argparse.ArgumentParser) -> None:
    """Flags every request command shares: FP8 compute, the memory headroom and the safety
    margin."""
    parser.add_argument("--fp8", action="store_true",
                        help="FP8 compute (training.compute_dtype = fp8, DeepSeek-V3 recipe)")
    parser.add_argument("--headroom", type=float, metavar="FRAC",
                        help="GPU memory kept free, a fraction (cluster.memory_headroom_frac)")
    parser.add_argument("--margin", type=float, metavar="FRAC",
                        help="safety margin for the memory model's error, a fraction of the "
                        "usable memory (cluster.memory_margin_frac; default 0.0384, 0 plans "
                        "up to the usable memory)")
    parser.add_argument("--vision-images", type=float, metavar="N",
                        help="images per sequence of a vision encoder beside the model "
                        "(training.vision.images_per_sequence)")
    parser.add_argument("--vision-placement", choices=[p.value for p in VisionPlacement],
                        help="where the vision encoder runs: stage0, dep (Kimi K2.5) or "
                        "bubbles (Kimi K3); needs --vision-images")


def add_constraint_flags(parser: argparse.ArgumentParser) -> None:
    """Constraint, objective and solver flags of a search (plan and the run-level answers)."""
    parser.add_argument("--cp-kind", type=str_or_list, help="allowed context-parallel kinds "
                        "(comma list)")
    parser.add_argument("--allow-offload", action=argparse.BooleanOptionalAction, default=None,
                        help="may the planner offload activations to host memory")
    parser.add_argument("--allow-fp8-activations", action=argparse.BooleanOptionalAction,
                        default=None, help="may the planner store activations in FP8")
    parser.add_argument("--gradient-host-shards", action="store_true", default=None,
                        help="give every candidate Pipeline ZeRO-2 (Kimi K3: gradient shards "
                        "in host memory, two GPU chunk buffers)")
    parser.add_argument("--allow-gradient-host-shards", action="store_true", default=None,
                        help="may the search choose Pipeline ZeRO-2 (needs --framework any)")
    parser.add_argument("--allow-remote-offload", action="store_true", default=None,
                        help="may the search choose remote activation offload to other "
                        "pipeline ranks (Kimi K3; needs --framework any)")
    parser.add_argument("--allow-optimizer-offload", action=argparse.BooleanOptionalAction,
                        default=None, help="may the search keep the optimizer states in host "
                        "memory (Megatron-LM --optimizer-cpu-offload, DeepSpeed ZeRO-Offload) "
                        "where the target framework offers it (default: yes; "
                        "--no-allow-optimizer-offload forbids it)")
    parser.add_argument("--optimizer-offload-frac", type=float, default=None,
                        help="fix the share of the optimizer states in host memory (0 forbids "
                        "it)")
    parser.add_argument("--framework", choices=["megatron-lm", "torchtitan", "deepspeed", "any"],
                        help="framework the plan must run on ('any': also features of no "
                        "released framework)")
    parser.add_argument("--forbid", type=forbid_item, action="append", metavar="KEY=V1,V2",
                        help="forbid values of a plan key, e.g. schedule=dualpipe (repeatable)")
    parser.add_argument("--max-gpus", type=int, help="use at most this many GPUs")
    parser.add_argument("--target-tokens-per-s", type=float,
                        help="throughput the plan must reach (min_gpus objective)")
    parser.add_argument("--gpu-hour-price", type=float,
                        help="price of one GPU-hour (cost_per_token objective, cost fields)")
    parser.add_argument("--objective", choices=[o.value for o in Objective],
                        help="what to optimise (default throughput)")
    parser.add_argument("--time-limit", type=float, help="search time limit, seconds")
    parser.add_argument("--top-k", type=int, help="alternatives to report")
    parser.add_argument("--workers", type=int, help="CP-SAT worker threads")
    parser.add_argument("--seed", type=int, help="CP-SAT random seed")


def set_field(doc: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    """Write `value` at `path` of the request document, making the objects on the way;
    nothing for None (a flag not given)."""
    if value is None:
        return
    node = doc
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value


def apply_recipe_flags(doc: dict[str, Any], args: argparse.Namespace) -> None:
    """Write --fp8, --headroom and --margin into the request document."""
    if getattr(args, "fp8", False):
        set_field(doc, ("training", "compute_dtype"), "fp8")
    set_field(doc, ("cluster", "memory_headroom_frac"), getattr(args, "headroom", None))
    set_field(doc, ("cluster", "memory_margin_frac"), getattr(args, "margin", None))
    images = getattr(args, "vision_images", None)
    if images is not None:
        set_field(doc, ("training", "vision", "images_per_sequence"), images)
        set_field(doc, ("training", "vision", "placement"), getattr(args, "vision_placement", None))


def apply_constraint_flags(doc: dict[str, Any], args: argparse.Namespace) -> None:
    """Write the constraint, objective and solver flags into the request document."""
    for flag, key in (("cp_kind", "cp_kind"), ("allow_offload", "allow_offload"),
                      ("allow_fp8_activations", "allow_fp8_activations"),
                      ("gradient_host_shards", "gradient_host_shards"),
                      ("allow_gradient_host_shards", "allow_gradient_host_shards"),
                      ("allow_remote_offload", "allow_remote_offload"),
                      ("allow_optimizer_offload", "allow_optimizer_offload"),
                      ("optimizer_offload_frac", "optimizer_offload_frac"),
                      ("framework", "framework"),
                      ("max_gpus", "max_gpus"), ("target_tokens_per_s", "target_tokens_per_s"),
                      ("gpu_hour_price", "gpu_hour_price")):
        set_field(doc, ("constraints", key), getattr(args, flag, None))
    for key, values in getattr(args, "forbid", None) or []:
        forbidden = doc.setdefault("constraints", {}).setdefault("forbid", {})
        forbidden[key] = [*forbidden.get(key, []), *values]
    set_field(doc, ("objective",), getattr(args, "objective", None))
    for flag, key in (("time_limit", "time_limit_s"), ("top_k", "top_k"),
                      ("workers", "num_workers"), ("seed", "random_seed")):
        set_field(doc, ("solver", key), getattr(args, flag, None))


def add_request_flags(parser: argparse.ArgumentParser, *, pins: bool = False,
                       svg: str | None = None, trace: bool = False) -> None:
    parser.add_argument("file", nargs="?", help="request as a JSON or YAML file ('-' = stdin)")
    parser.add_argument("--model", help=f"model preset, one of: {', '.join(model_ids())}")
    parser.add_argument("--hf-config", help="a Hugging Face config.json as the model")
    parser.add_argument("--gpu", help=f"GPU preset, one of: {', '.join(gpu_ids())}")
    parser.add_argument("--nodes", type=int, help="number of nodes")
    parser.add_argument("--gpus-per-node", type=int, help="GPUs per node (default: preset)")
    parser.add_argument("--global-batch", type=int, help="sequences per optimizer step")
    parser.add_argument("--seq", type=int, help="tokens per sequence")
    what = "pin (N) or allow (N,M,...) the search's" if pins else "the configuration's"
    number = int_or_list if pins else int
    for axis in LIST_AXES:
        parser.add_argument(f"--{axis}", type=number, help=f"{what} {axis} degree")
    parser.add_argument("--mbs", type=number, help=f"{what} micro-batch size")
    parser.add_argument("--schedule", type=str_or_list if pins else str,
                        help=f"{what} pipeline schedule, e.g. 1f1b, zb_h1")
    if pins:
        parser.add_argument("--zero-stage", type=int_or_list, help=f"{what} ZeRO stage")
        parser.add_argument("--recompute", type=str_or_list, help=f"{what} recomputation "
                            "(none, selective, full)")
    else:
        parser.add_argument("--zero-stage", type=int, choices=(0, 1, 2, 3),
                            help=f"{what} ZeRO stage")
        parser.add_argument("--recompute", choices=("none", "selective", "full"),
                            help=f"{what} recomputation")
    parser.add_argument("--sp", action="store_true", help="Megatron sequence parallelism")
    add_recipe_flags(parser)
    if pins:
        add_constraint_flags(parser)
    add_output_flags(parser, svg=svg, trace=trace)


def add_output_flags(parser: argparse.ArgumentParser, *, svg: str | None = None,
                      trace: bool = False) -> None:
    parser.add_argument("--server", metavar="URL", help="send to a running service instead "
                        f"of computing here (e.g. {DEFAULT_BASE_URL})")
    parser.add_argument("--json", action="store_true", help="print the JSON answer")
    parser.add_argument("-o", "--output", metavar="FILE", help="also write the JSON answer")
    if svg is not None:
        parser.add_argument("--svg", metavar="FILE", help=f"also write {svg} as SVG")
    if trace:
        parser.add_argument("--trace", metavar="FILE", help="also write the pipeline "
                            "iteration as Chrome Trace Event JSON (open it in Perfetto)")


__all__ = [
    "LIST_AXES",
    "add_output_flags",
    "add_constraint_flags",
    "add_recipe_flags",
    "add_request_flags",
    "apply_constraint_flags",
    "apply_recipe_flags",
    "forbid_item",
    "int_or_list",
    "set_field",
    "str_or_list",
]
