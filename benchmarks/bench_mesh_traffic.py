"""How fast the mesh, its rules and the step traffic are on large clusters.

Run: .venv/bin/python benchmarks/bench_mesh_traffic.py
Prints, per configuration, the median wall time of building the mesh, checking every rule
(with alternatives for whatever fails), and computing one stage's step traffic, then the
per-axis communication time of that stage (a deterministic model, not a measurement).
"""

import statistics
import time
from collections.abc import Callable
from functools import partial

from api_schemas import (
    AttentionKind,
    ClusterSpec,
    DType,
    GpuSpec,
    LinkSpec,
    MLASpec,
    ModelSpec,
    MoESpec,
    ParallelConfig,
    PipelineSchedule,
    TrainingSpec,
)
from models.core.mesh import build_mesh, mesh_problems
from models.core.traffic import TrafficAxis, step_traffic

GIB = 2**30
REPEATS = 5


def _cluster(name: str, nodes: int, nvlink: float) -> ClusterSpec:
    gpu = GpuSpec(id=name, name=name, memory_bytes=80 * GIB, hbm_bandwidth_bytes_per_s=3.35e12,
                  dense_peak_flop_per_s={DType.BF16: 989.4e12})
    return ClusterSpec(gpu=gpu, num_nodes=nodes, gpus_per_node=8,
                       intra_node=LinkSpec(bandwidth_bytes_per_s=nvlink, latency_s=3e-6),
                       inter_node=LinkSpec(bandwidth_bytes_per_s=50e9, latency_s=10e-6))


LLAMA_405B = ModelSpec(name="llama-3.1-405b", num_layers=126, hidden_size=16384,
                       num_attention_heads=128, num_kv_heads=8, attention=AttentionKind.GQA,
                       ffn_hidden_size=53248, vocab_size=128256)
DEEPSEEK_V3 = ModelSpec(
    name="deepseek-v3", num_layers=61, hidden_size=7168, num_attention_heads=128,
    attention=AttentionKind.MLA,
    mla=MLASpec(q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
                v_head_dim=128),
    ffn_hidden_size=18432, vocab_size=129280,
    moe=MoESpec(num_experts=256, top_k=8, expert_ffn_hidden_size=2048, num_shared_experts=1,
                shared_expert_ffn_hidden_size=2048, first_dense_layers=3,
                num_expert_groups=8, topk_groups=4))

CASES = [
    ("llama-405b 16384xH100 tp8 pp16 dp128", LLAMA_405B,
     TrainingSpec(global_batch_size=2048, sequence_length=8192),
     ParallelConfig(tp=8, pp=16, dp=128,
                    sequence_parallel=True, layers_per_stage=(7,) + (8,) * 14 + (7,)),
     _cluster("h100", 2048, 360e9)),
    ("deepseek-v3 2048xH800 pp16 dp128 ep64", DEEPSEEK_V3,
     TrainingSpec(global_batch_size=15360, sequence_length=4096),
     ParallelConfig(pp=16, dp=128, ep=64, schedule=PipelineSchedule.DUALPIPE,
                    layers_per_stage=(4,) * 15 + (1,)),
     _cluster("h800", 256, 160e9)),
    ("llama-405b 1024xH100 tp8 cp16 pp8 (128k)", LLAMA_405B,
     TrainingSpec(global_batch_size=64, sequence_length=131072),
     ParallelConfig(tp=8, cp=16, pp=8, dp=1, sequence_parallel=True,
                    layers_per_stage=(15,) + (16,) * 6 + (15,)),
     _cluster("h100", 128, 360e9)),
]


def _median_ms(fn: Callable[[], object]) -> float:
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> None:
    header = f"{'configuration':44s} {'mesh ms':>8s} {'rules ms':>9s} {'traffic ms':>11s}"
    print(header)
    print("-" * len(header))
    results = []
    for name, model, training, parallel, cluster in CASES:
        mesh_ms = _median_ms(partial(build_mesh, parallel, num_nodes=cluster.num_nodes,
                                     gpus_per_node=cluster.gpus_per_node))
        rules_ms = _median_ms(partial(mesh_problems, parallel, model=model,
                                      num_nodes=cluster.num_nodes,
                                      gpus_per_node=cluster.gpus_per_node, training=training))
        traffic_ms = _median_ms(partial(step_traffic, model, training=training,
                                        parallel=parallel, cluster=cluster))
        print(f"{name:44s} {mesh_ms:8.2f} {rules_ms:9.2f} {traffic_ms:11.2f}")
        results.append((name, step_traffic(model, training=training, parallel=parallel,
                                           cluster=cluster)))
    print()
    print(f"{'configuration':44s} {'axis':>4s} {'comm s/step':>12s} {'exposed s':>10s} "
          f"{'GiB sent/rank':>14s}")
    for name, traffic in results:
        for axis in TrafficAxis:
            if not traffic.of_axis(axis):
                continue
            print(f"{name:44s} {axis.value:>4s} {traffic.time_s(axis):12.3f} "
                  f"{traffic.exposed_time_s(axis):10.3f} "
                  f"{traffic.bytes_sent_per_rank(axis) / GIB:14.2f}")


if __name__ == "__main__":
    main()
