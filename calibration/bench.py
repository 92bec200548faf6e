"""The measurements, on the GPUs of the node (or nodes) torchrun starts it on.

Owns: timing GEMMs by shape and format, all-reduce / all-gather / all-to-all over a
single-node group and, across nodes, over the whole world, fused attention forward and
backward, and pinned host<->GPU copies, each with CUDA events after warm-up iterations;
rank 0 gathers them into `Microbenchmarks`. Needs PyTorch with CUDA (imported here only).
Must not: compute entries itself (`calibration/results.py` does) or fit anything.
"""

import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from api_schemas.collectives import Collective
from api_schemas.dtypes import DType
from api_schemas.microbenchmarks import Microbenchmarks
from calibration import results


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """What to measure (defaults sized for an 80 GB GPU and a few minutes)."""

    gemm_sizes: tuple[int, ...] = (1024, 2048, 4096, 8192, 16384)
    gemm_shapes: tuple[tuple[int, int], ...] = ((4096, 4096), (8192, 8192), (16384, 4096),
                                               (4096, 14336))
    collective_bytes: tuple[int, ...] = tuple(2**p for p in range(20, 31, 2))
    attention_seq: tuple[int, ...] = (1024, 2048, 4096, 8192, 16384)
    attention_tokens: int = 16384
    attention_heads: int = 16
    head_dim: int = 128
    host_bytes: tuple[int, ...] = (2**24, 2**26, 2**28)
    warmup: int = 5
    iterations: int = 20


def timed_s(torch: Any, fn: Callable[[], object], *, warmup: int, iterations: int) -> float:
    """Mean seconds per call of `fn` on the current stream (CUDA events)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iterations):
        fn()
    end.record()
    torch.cuda.synchronize()
    return float(start.elapsed_time(end)) / 1000.0 / iterations


def _gemms(torch: Any, plan: Plan) -> list[Any]:
    out = []
    formats = [(DType.BF16, torch.bfloat16)]
    for m in plan.gemm_sizes:
        for n, k in plan.gemm_shapes:
            for dtype, torch_dtype in formats:
                a = torch.randn(m, k, device="cuda", dtype=torch_dtype)
                b = torch.randn(k, n, device="cuda", dtype=torch_dtype)
                seconds = timed_s(torch, partial(torch.matmul, a, b), warmup=plan.warmup,
                                 iterations=plan.iterations)
                out.append(results.gemm_entry(m, n, k, dtype, seconds))
    return out


def _attention(torch: Any, plan: Plan) -> list[Any]:
    functional = torch.nn.functional
    out = []
    for seq in plan.attention_seq:
        batch = max(1, plan.attention_tokens // seq)
        shape = (batch, plan.attention_heads, seq, plan.head_dim)
        q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                   for _ in range(3))
        grad = torch.randn(shape, device="cuda", dtype=torch.bfloat16)

        def step(q: Any = q, k: Any = k, v: Any = v, grad: Any = grad) -> None:
            o = functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            o.backward(grad)

        seconds = timed_s(torch, step, warmup=plan.warmup, iterations=plan.iterations)
        out.append(results.attention_entry(batch, plan.attention_heads, seq, plan.head_dim,
                                           causal=True, fused=True, seconds=seconds))
    return out


def _host_link(torch: Any, plan: Plan) -> list[Any]:
    out = []
    for size in plan.host_bytes:
        host = torch.empty(size, dtype=torch.uint8, pin_memory=True)
        device = torch.empty(size, dtype=torch.uint8, device="cuda")
        h2d = timed_s(torch, partial(device.copy_, host, non_blocking=True),
                     warmup=plan.warmup, iterations=plan.iterations)
        d2h = timed_s(torch, partial(host.copy_, device, non_blocking=True),
                     warmup=plan.warmup, iterations=plan.iterations)
        out += [results.host_link_entry("h2d", size, h2d),
                results.host_link_entry("d2h", size, d2h)]
    return out


def _collectives(torch: Any, plan: Plan, group: Any, size: int, per_node: int) -> list[Any]:
    """Each collective over `group` (size ranks, per_node on each node); the slowest
    rank's time counts."""
    dist = torch.distributed
    out = []
    for message in plan.collective_bytes:
        elements = message // 2 // size * size
        if elements == 0:
            continue
        nbytes = elements * 2
        full = torch.empty(elements, device="cuda", dtype=torch.bfloat16)
        shard = torch.empty(elements // size, device="cuda", dtype=torch.bfloat16)
        receive = torch.empty_like(full)
        calls: dict[Collective, Callable[[], object]] = {
            Collective.ALL_REDUCE: partial(dist.all_reduce, full, group=group),
            Collective.ALL_GATHER: partial(dist.all_gather_into_tensor, full, shard,
                                           group=group),
            Collective.ALL_TO_ALL: partial(dist.all_to_all_single, receive, full, group=group),
        }
        for collective, call in calls.items():
            seconds = timed_s(torch, call, warmup=plan.warmup, iterations=plan.iterations)
            slowest = torch.tensor([seconds], device="cuda")
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX, group=group)
            out.append(results.collective_entry(collective, nbytes, size, per_node,
                                                float(slowest.item())))
    return out


def run(plan: Plan) -> Microbenchmarks | None:
    """Measure on this rank; rank 0 returns the results (others None).

    Raises:
        RuntimeError: no CUDA GPU (checked by `__main__` first, with its exit code).
    """
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA GPU")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    per_node = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
    rank = int(os.environ.get("RANK", "0"))
    bench = Microbenchmarks(device_name=torch.cuda.get_device_name(),
                            source=f"atlas-planner calibration kit, torch {torch.__version__}")
    gemm = _gemms(torch, plan)
    attention = _attention(torch, plan)
    host = _host_link(torch, plan)
    collectives: list[Any] = []
    if world > 1:
        dist = torch.distributed
        dist.init_process_group("nccl")
        node = rank // per_node
        groups = [dist.new_group(list(range(n * per_node, (n + 1) * per_node)))
                  for n in range(world // per_node)]
        if per_node > 1:
            collectives += _collectives(torch, plan, groups[node], per_node, per_node)
        if world > per_node:
            collectives += _collectives(torch, plan, None, world, per_node)
        dist.barrier()
        dist.destroy_process_group()
    if rank != 0:
        return None
    return bench.model_copy(update={"gemm": gemm, "attention": attention, "host_link": host,
                                    "collectives": collectives})


__all__ = ["Plan", "run", "timed_s"]
