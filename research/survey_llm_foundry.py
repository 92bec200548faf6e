"""The cost model on MosaicML llm-foundry's MPT throughput tables, each run as printed.

    python research/survey_llm_foundry.py [--rows] [--attention-kernel KERNEL]

Rows: `research/data/llm_foundry_mpt.json` (216 rows of the benchmark README at
mosaicml/llm-foundry 5e85bd62d4, Composer with PyTorch FSDP on 8 to 512 A100 or H100, MPT
125M to 70B, sequences of 512 to 65,536 tokens). Each row is evaluated once with
exactly what it prints (GPUs, micro-batch, gradient accumulation, global batch, sequence
length, sharding strategy, activation checkpointing) and, for what it does not print, the
run settings its sweep script states (`RECIPE`, the data file's `recipe`); nothing is chosen
by the planner. The comparison is tokens/s per GPU, the printed column; the memory ledger's
peak of each run, all of which trained, is checked against the GPU's capacity, and the
ratio errors of every two runs of one table against the robust choice's pairwise band. `--rows`
prints every row; `--attention-kernel` evaluates every row with another kernel than the
recipe's (what the recipe's kernel is worth).

The runs' attention kernel (`attn_impl: triton`: llm-foundry's Triton FlashAttention of 2022,
`llmfoundry/models/layers/flash_attn_triton.py` on `triton-pre-mlir`) is named in the recipe
(`TrainingSpec.attention_kernel`), at its own measured level
(`models.catalog.kernels.A100_TRITON_ATTENTION_FRAC`; on H100 the FlashAttention 2022 level
stands in), and so is the early stop of PyTorch's non-reentrant checkpoint
(`TrainingSpec.checkpoint_early_stop`).

Why a survey and not rows of `research/validate_published.py`: the rows would enter the error
bands the planner reads (`models.evidence.error_bands`) with a kernel and a runtime
(Composer, FSDP1) no plan is made for; research/published_runs.md says so.

Owns: reading the data file, the MPT architecture of a row, its recipe and configuration,
and the summary by table, sequence length, model and checkpointing. Must not: fit anything
(the rows are validation data) or write any file.
"""

import argparse
import itertools
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from api_schemas import ModelSpec, ParallelConfig, TrainingSpec
from api_schemas.architecture import MlpKind, NormKind
from api_schemas.dtypes import DType
from api_schemas.hardware import ClusterSpec
from api_schemas.parallel import PipelineSchedule, RecomputeMode
from api_schemas.training import AttentionKernel, ElementwiseFusion
from models.catalog.presets import cluster_preset
from models.core.memory import memory_ledger
from models.core.step_time import estimate_step
from models.evidence.error_bands import percentile
from models.evidence.pairwise_band import PAIRWISE_PERCENTILE, pairwise_band, ratio_error

DATA_PATH = Path(__file__).resolve().parent / "data" / "llm_foundry_mpt.json"

DATA: dict[str, Any] = json.loads(DATA_PATH.read_text())
"""The data file, read once: `source`, `architectures`, `recipe` and `rows`."""

RECIPE: dict[str, dict[str, Any]] = DATA["recipe"]
"""What a row does not print and the survey takes (`value`), each with where it comes from
(`source`): the data file's `recipe`. Keys: `compute_dtype` (by printed precision),
`elementwise_fusion`, `attention_kernel`, `fused_cross_entropy`, `grad_dtype`,
`checkpoint_early_stop` (`TrainingSpec` values),
`zero_stage` (by printed sharding strategy), `recompute` (by the printed checkpointing
column, "true" or "false")."""


def recipe(name: str) -> Any:
    """The recipe's value of `name`."""
    return RECIPE[name]["value"]


LINK_BYTES_PER_S = {
    "A100 80GB with 1600 Gbps node-node interconnect (RoCE)": 1600e9 / 8 / 8,
    "A100 40GB with 1600 Gbps node-node interconnect (RoCE)": 1600e9 / 8 / 8,
}
"""Scale-out bytes per second per GPU where the table's title prints the node's link
(1600 Gb/s per node of 8 GPUs); the H100 tables print none and take the catalog's."""


def load_rows() -> list[dict[str, Any]]:
    """Every row of the data file."""
    rows: list[dict[str, Any]] = DATA["rows"]
    return rows


def mpt_spec(size: str, seq_len: int) -> ModelSpec:
    """The MPT model of `size` at `seq_len` tokens: LayerNorm and every linear layer with a
    bias, a learned position table of `seq_len` rows, GELU MLP, tied embeddings (the data
    file's `architecture_notes`)."""
    arch = DATA["architectures"][size]
    d = arch["d_model"]
    return ModelSpec(name=f"mpt-{size}", num_layers=arch["n_layers"], hidden_size=d,
                     num_attention_heads=arch["n_heads"],
                     ffn_hidden_size=arch["expansion_ratio"] * d, mlp=MlpKind.GELU,
                     norm=NormKind.LAYERNORM, vocab_size=arch["vocab_size"],
                     tie_word_embeddings=True, learned_position_embeddings=seq_len,
                     linear_bias=True, attention_bias=True)


def row_cluster(row: dict[str, Any]) -> ClusterSpec:
    """The row's GPUs, 8 per node, with the table's printed scale-out link where it has
    one."""
    gpus = row["num_gpus"]
    cluster = cluster_preset(row["gpu"], num_nodes=max(1, gpus // 8), gpus_per_node=min(8, gpus))
    link = LINK_BYTES_PER_S.get(row["table"])
    if link is None:
        return cluster
    return cluster.model_copy(update={"inter_node": cluster.inter_node.model_copy(
        update={"bandwidth_bytes_per_s": link})})


def row_config(row: dict[str, Any], kernel: AttentionKernel | None = None
               ) -> tuple[ParallelConfig, TrainingSpec]:
    """The configuration a row ran: data parallelism over every GPU, its printed
    micro-batch, sharding and checkpointing, and `RECIPE` for the rest (`kernel` in place
    of the recipe's attention kernel where given)."""
    zero = recipe("zero_stage")[row["sharding_strategy"]]
    checkpointing = str(row["activation_checkpointing"]).lower()
    parallel = ParallelConfig(tp=1, pp=1, dp=row["num_gpus"],
                              micro_batch_size=row["micro_batch_size"], zero_stage=zero,
                              fsdp=zero == 3, schedule=PipelineSchedule.ONE_F_ONE_B,
                              recompute=RecomputeMode(recipe("recompute")[checkpointing]))
    training = TrainingSpec(global_batch_size=row["global_batch_size"],
                            sequence_length=row["seq_len"],
                            compute_dtype=DType(recipe("compute_dtype")[row["precision"]]),
                            flash_attention=True,
                            attention_kernel=kernel or AttentionKernel(recipe("attention_kernel")),
                            elementwise_fusion=ElementwiseFusion(recipe("elementwise_fusion")),
                            fused_cross_entropy=recipe("fused_cross_entropy"),
                            checkpoint_early_stop=recipe("checkpoint_early_stop"),
                            grad_dtype=DType(recipe("grad_dtype")))
    return parallel, training


def surveyed(row: dict[str, Any]) -> str | None:
    """Why a row is left out, or None (every printed row is evaluated): a row whose global
    batch is not micro-batch x accumulation x GPUs splits its micro-batches unevenly, which
    Composer allows and the step time does not describe."""
    if row["global_batch_size"] != row["micro_batch_size"] * row["grad_accum"] * row["num_gpus"]:
        return "uneven micro-batches (global batch is not micro-batch x accumulation x GPUs)"
    return None


def predicted_tokens_per_s_per_gpu(row: dict[str, Any],
                                   kernel: AttentionKernel | None = None) -> float:
    """The cost model's tokens/s per GPU of the row's configuration (`row_config`)."""
    parallel, training = row_config(row, kernel)
    estimate = estimate_step(mpt_spec(row["model"], row["seq_len"]), training, parallel,
                             row_cluster(row))
    return training.tokens_per_step / estimate.step_time_s / row["num_gpus"]


def peak_fraction(row: dict[str, Any]) -> float:
    """The busiest rank's peak bytes in the memory ledger over the GPU's capacity
    (`models.core.memory.memory_ledger`): every row ran, so above 1 the ledger would have
    refused a configuration that trained."""
    parallel, training = row_config(row)
    cluster = row_cluster(row)
    ledger = memory_ledger(mpt_spec(row["model"], row["seq_len"]), training, parallel, cluster)
    return max(stage.total_bytes for stage in ledger.stages) / cluster.capacity_bytes


def relative_error(row: dict[str, Any], kernel: AttentionKernel | None = None) -> float:
    """(predicted - printed) / printed tokens/s per GPU: positive where the model is fast."""
    printed = row["tokens_per_s_per_gpu"]
    return (predicted_tokens_per_s_per_gpu(row, kernel) - printed) / printed


def pair_ratio_errors(errors: list[tuple[dict[str, Any], float]]) -> list[float]:
    """The ratio error of every two runs of one table (`models.evidence.pairwise_band.
    ratio_error`: how far the predicted ratio of their step times is from the printed one)."""
    by_table: dict[tuple[str, str], list[float]] = defaultdict(list)
    for row, error in errors:
        by_table[(row["table"], row["gpu"])].append(error)
    return [ratio_error(a, b) for table in by_table.values()
            for a, b in itertools.combinations(table, 2)]


def pairwise_summary(errors: list[tuple[dict[str, Any], float]]) -> str:
    """`pair_ratio_errors` beside the pairwise band the planner's robust choice reads
    (`pairwise_band`, from the validator's held-out rows): their 80th percentile and the
    share of pairs within the band."""
    pair_errors = pair_ratio_errors(errors)
    band = pairwise_band().frac
    within = sum(e <= band for e in pair_errors) / len(pair_errors)
    return (f"pairs: {len(pair_errors)} of one table, ratio error P{PAIRWISE_PERCENTILE:.0f} "
            f"{100 * percentile(pair_errors, PAIRWISE_PERCENTILE):.1f}% (median "
            f"{100 * statistics.median(pair_errors):.1f}%); {100 * within:.0f}% within the "
            f"planner's pairwise band of {100 * band:.1f}%")


def _seq_bucket(seq_len: int) -> str:
    return "up to 2,048" if seq_len <= 2048 else "4,096-8,192" if seq_len <= 8192 \
        else "16,384 and more"


def summary(errors: list[tuple[dict[str, Any], float]]) -> list[str]:
    """Median and largest |error| per table, sequence-length bucket (also per GPU), model,
    activation checkpointing and precision."""
    groups: dict[str, list[float]] = defaultdict(list)
    for row, error in errors:
        groups["all"].append(error)
        groups[f"table {row['table']}"].append(error)
        groups[f"sequence {_seq_bucket(row['seq_len'])}"].append(error)
        groups[f"model {row['model']}"].append(error)
        groups[f"activation checkpointing {row['activation_checkpointing']}"].append(error)
        groups[f"{row['gpu'][:4]} sequence {_seq_bucket(row['seq_len'])}"].append(error)
        groups[f"precision {row['precision']}"].append(error)
    lines = []
    for name, values in groups.items():
        absolute = [abs(v) for v in values]
        lines.append(f"{name:70s} n={len(values):3d} median |error| "
                     f"{100 * statistics.median(absolute):5.1f}%  max {100 * max(absolute):5.1f}%"
                     f"  median signed {100 * statistics.median(values):+5.1f}%")
    return lines


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", action="store_true", help="print every row")
    parser.add_argument("--attention-kernel", type=AttentionKernel, default=None,
                        choices=list(AttentionKernel), help="in place of the recipe's")
    args = parser.parse_args(argv)
    errors = []
    for row in load_rows():
        why = surveyed(row)
        if why is not None:
            if args.rows:
                print(f"skipped {row['model']} s={row['seq_len']} {row['num_gpus']} GPUs: {why}")
            continue
        error = relative_error(row, args.attention_kernel)
        errors.append((row, error))
        if args.rows:
            print(f"{row['table'][:20]:20s} {row['model']:>5s} s={row['seq_len']:6d} "
                  f"{row['num_gpus']:4d} GPUs mb={row['micro_batch_size']:3d} "
                  f"ga={row['grad_accum']:2d} {row['sharding_strategy']:13s} "
                  f"ckpt={row['activation_checkpointing']!s:5s} printed "
                  f"{row['tokens_per_s_per_gpu']:7d} tokens/s/GPU  error {100 * error:+6.1f}%")
    print("\n".join(summary(errors)))
    print(pairwise_summary(errors))
    peaks = sorted(peak_fraction(row) for row, _ in errors)
    print(f"memory: the ledger's peak over the capacity {peaks[0]:.2f}-{peaks[-1]:.2f} "
          f"(median {statistics.median(peaks):.2f}); {sum(p > 1.0 for p in peaks)} of "
          f"{len(peaks)} runs that trained would be refused")


if __name__ == "__main__":
    main(sys.argv[1:])
