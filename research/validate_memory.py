"""Predicted vs measured peak memory for every measured peak in the published-runs data.

Run: .venv/bin/python research/validate_memory.py [--write]

Rows: the Zero Bubble paper's Table 4 (Qi et al. 2024, arXiv:2401.10241; setup in Table
3), 64 cells of 4 models x 4 schedules x 3-4 micro-batch counts, each printing the peak
memory of the busiest GPU. The recipe is the paper's code as published with it
(sail-sg/zero-bubble-pipeline-parallelism, examples/pretrain_zbh1.sh and
pretrain_llama_7b.sh at commits 475e0629 / ed85b11c): Megatron-LM with `--fp16` (fp16
weights and DDP gradient buffer; fp32 master weights and Adam moments), Megatron's
default dropout 0.1 on attention and hidden states, no `--use-flash-attn` (the attention
scores are materialised), sequence 1024, the GPTSentencePiece tokenizer (32,000 tokens),
tied embeddings, no recomputation, no optimizer sharding (dp = 1), and the first and last
stage one layer short (the embedding and the loss take a layer's slot).

Reading of the printed unit: Megatron's memory report prints MiB (2^20), so a printed "GB"
is taken as GiB (2^30); this is the reading that makes the ledger's ratios smallest.

With --write the table goes to research/MEMORY_PEAKS.md.
"""

import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from api_schemas import DType, ParallelConfig, PipelineSchedule, TrainingSpec
from models.catalog import cluster_preset, megatron_gpt
from models.memory import memory_ledger

ROOT = Path(__file__).resolve().parent
DATA = json.loads((ROOT / "data" / "published_runs.json").read_text())
OUT = ROOT / "MEMORY_PEAKS.md"
ZERO_BUBBLE_VOCAB = 32_000
"""The GPTSentencePiece tokenizer shipped with the Zero Bubble sample dataset (a LLaMA
SentencePiece model, 32,000 tokens); Table 3 does not print it."""
SCHEDULES = {"zb-1p": PipelineSchedule.ZB_H1, "zb-2p": PipelineSchedule.ZB_H2,
             "1f1b": PipelineSchedule.ONE_F_ONE_B,
             "interleaved_1f1b": PipelineSchedule.INTERLEAVED_1F1B}
WORST_RATIO_FLOOR = 0.95
MEDIAN_RATIO_CEILING = 1.15


@dataclass(frozen=True, slots=True, kw_only=True)
class PeakRow:
    """One measured peak and the ledger's prediction."""

    run_id: str
    schedule: str
    measured_bytes: int
    predicted_bytes: int
    binding_stage: int
    note: str

    @property
    def ratio(self) -> float:
        """Predicted / measured."""
        return self.predicted_bytes / self.measured_bytes


def _measured_bytes(row: dict[str, Any]) -> int:
    text = row["measured_as_printed"]
    printed = float(text.split("peak memory ")[1].split(" GB")[0])
    return int(printed * 2**30)


def zero_bubble_row(row: dict[str, Any]) -> PeakRow:
    """The ledger of one Table 4 cell against its printed peak."""
    m, p = row["model"], row["parallel"]
    pp, layers = p["pp"], m["num_layers"]
    slots = (layers + 2) // pp  # the embedding and the loss each take one layer's slot
    schedule = p["schedule"].split(" ")[0]
    training = TrainingSpec(global_batch_size=p["global_batch_size"], sequence_length=m["seq_len"],
                            param_dtype=DType.FP16, grad_dtype=DType.FP16, dropout=True,
                            flash_attention=False, overlap_grad_reduce=False)
    spec = megatron_gpt(name=m["name"], num_layers=layers, hidden_size=m["hidden_size"],
                        num_heads=m["num_heads"], vocab_size=ZERO_BUBBLE_VOCAB,
                        seq_len=m["seq_len"])
    if schedule == "interleaved_1f1b":
        # One layer per virtual chunk; the embedding and the loss take a chunk each.
        chunks = (0,) + (1,) * layers + (0,)
        parallel = ParallelConfig(pp=pp, vpp=slots, schedule=SCHEDULES[schedule],
                                  micro_batch_size=p["micro_batch_size"], zero_stage=0,
                                  layers_per_virtual_stage=chunks)
        note = "one layer per chunk; embedding-only first and loss-only last chunk"
    else:
        split = (slots - 1,) + (slots,) * (pp - 2) + (slots - 1,)
        parallel = ParallelConfig(pp=pp, schedule=SCHEDULES[schedule],
                                  micro_batch_size=p["micro_batch_size"], zero_stage=0,
                                  layers_per_stage=split)
        note = f"layers per stage {split[0]}/{slots}/.../{split[-1]}"
    cluster = cluster_preset(row["hardware"]["gpu"], num_nodes=max(1, pp // 8),
                             gpus_per_node=min(8, pp))
    ledger = memory_ledger(spec, training, parallel, cluster)
    return PeakRow(run_id=row["id"], schedule=schedule, measured_bytes=_measured_bytes(row),
                   predicted_bytes=ledger.peak_bytes, binding_stage=ledger.binding_stage,
                   note=note)


def peak_rows() -> list[PeakRow]:
    """Every measured peak of the data set with its prediction."""
    return [zero_bubble_row(row) for row in DATA["runs"] if row["source_id"] == "zerobubble"
            and "peak memory" in (row.get("measured_as_printed") or "")]


def table(rows: list[PeakRow]) -> str:
    """The markdown report."""
    ratios = [r.ratio for r in rows]
    lines = [
        "# Predicted vs measured peak memory",
        "",
        ("Written by `research/validate_memory.py --write`; do not edit by hand. The recipe "
        "of each source and the reading of its units are in the script's docstring."),
        "",
        (f"{len(rows)} measured peaks. predicted / measured: worst (lowest) "
        f"{min(ratios):.3f}, median {statistics.median(ratios):.3f}, highest "
        f"{max(ratios):.3f} (targets: worst >= {WORST_RATIO_FLOOR}, median <= "
        f"{MEDIAN_RATIO_CEILING})."),
        "",
        "| run | schedule | measured GiB | predicted GiB | ratio | binding stage | note |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        lines.append(f"| `{r.run_id}` | {r.schedule} | {r.measured_bytes / 2**30:.1f} | "
                     f"{r.predicted_bytes / 2**30:.1f} | {r.ratio:.3f} | {r.binding_stage} | "
                     f"{r.note} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    rows = peak_rows()
    text = table(rows)
    if "--write" in sys.argv:
        OUT.write_text(text)
    sys.stdout.write(text)


if __name__ == "__main__":
    main()
