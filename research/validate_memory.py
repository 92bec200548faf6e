"""Predicted vs measured peak memory for every measured peak in the published-runs data
(`data/published_runs.json`) and the memory-only data (`data/measured_peaks.json`).

Run: .venv/bin/python research/validate_memory.py [--write]

Rows: the Zero Bubble paper's Table 4 (Qi et al. 2024, arXiv:2401.10241; setup in Table 3),
48 cells of 4 models x 4 schedules x 3 micro-batch counts, each printing the peak memory of
the busiest GPU; and the same paper's ZB-V version, Table 6 (6.2B, 14.6B, 28.3B on 16, 24
and 32 GPUs, one pipeline stage per GPU; ZB-V, ZB-2p with half the micro-batch and twice the
micro-batches, ZB-1p, 1F1B), Table 11 (1F1B and ZB-1p with the micro-batch doubled) and
Table 12 (m = p micro-batches), 66 cells. ZB-V runs two one-layer chunks per rank in a V
(rank r holds chunks r and 2p - 1 - r); the two padded chunks are the first and the last
(the scripts' `--allow-padding-num-layers`: `ParallelTransformer.get_offset` takes one layer
from chunk 0 and chunk 2p - 1), so rank 0 holds the embedding and the loss and no layer. The
recipe is the paper's code as published with it (sail-sg/zero-bubble-pipeline-parallelism,
examples/pretrain_zbh1.sh and pretrain_llama_7b.sh at commits 475e0629 / ed85b11c):
Megatron-LM with `--fp16` (fp16 weights and DDP gradient buffer; fp32 master weights and
Adam moments), Megatron's default dropout 0.1 on attention and hidden states, no
`--use-flash-attn` (the attention scores are materialised), sequence 1024, the GPTSentencePiece
tokenizer (32,000 tokens), tied embeddings, no recomputation, no optimizer sharding (dp =
1), and the first and last stage one layer short (the embedding and the loss take a layer's
slot).

Reading of the printed unit: Megatron's memory report prints MiB (2^20), so a printed "GB"
is taken as GiB (2^30); this is the reading that makes the ledger's ratios smallest.

Rows: torchtitan's benchmark notes (pytorch/torchtitan
benchmarks/llama3_h100_202412_torchtitan.md, Tables 1-6, torch 1963fc8 / torchtitan 9dec370;
llama3-8b_h200_202506_trainy-whitefiber.md). What is printed: torchtitan's
`DeviceMemoryMonitor.get_peak_stats` (components/metrics.py) reads
`torch.cuda.memory_stats()["reserved_bytes.all.peak"]` and logs it in GiB (2^30): the caching
allocator's reserved peak since the last log (10 iterations), which includes its fragmentation
but not the CUDA context nor NCCL's own buffers (the ledger counts both, about 1 GiB, so it
over-counts reserved slightly). The Dec 2024 note takes the maximum over all GPUs (footnote
1); the ledger's peak is its busiest stage. Recipe, from the notes and the defaults of
torchtitan at that commit: Llama 3.1 presets, sequence 8192 where the table does not print one
(train_configs/llama3_*.toml `seq_len`), FSDP2 over the data-parallel (and context-parallel)
ranks with bf16 compute, fp32 master weights, gradients reduced in fp32 and fp32 AdamW
moments, parameters not resharded after forward when pipelining (parallelize_llama:
`reshard_after_forward = not pp_enabled`) and their gradients reduce-scattered only after the
last micro-batch (torch pipelining's FSDP2 stage, `fsdp_defer_grad_sync=True`), tensor
parallel with sequence parallel norms whose all-gathered outputs the column-parallel linears
save (`sequence_parallel_saves_gathered=True`: PrepareModuleInput to Replicate) and a
vocabulary-parallel loss, Float8 linears where the row says so, and the loss
`F.cross_entropy(pred.float(), labels)` (train.py at 9dec370: unfused, its
`torch.compile(loss_fn)` commented out, so `fused_cross_entropy=False`). The June 2025 H200
note ran torchtitan e7c0cae, whose `components/loss.py: build_cross_entropy_loss` compiles the
loss whenever `--training.compile` is set: Inductor's cross entropy keeps the bf16 logits and
writes their bf16 gradient in one kernel (2V + 2V bytes per token, which the ledger's fused
loss counts as its 4V fp32 logits with the gradient in place), so those rows take
`fused_cross_entropy=True` (`LOSS_COMPILED`). Pipelined rows split the local batch into pp
micro-batches (torchtitan's default `pipeline_parallel_microbatches`) and interleave two
chunks per rank. Not expressible (each row's note says which): torchtitan's op-level selective
checkpointing (`selective_ac_option = 'op'`: every second matmul output recomputed) is taken
as the ledger's selective mode (attention core only), which stores more; torch.compile's
memory savings are not modelled. The H100 here is the 96 GB HBM2e part at 500 W: the cluster
is the H100 SXM5 preset with its memory overridden to 96 GB (the peak does not depend on the
capacity).

With --write the table goes to research/MEMORY_PEAKS.md.
"""

import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from api_schemas import DType, ParallelConfig, PipelineSchedule, RecomputeMode, TrainingSpec
from api_schemas.parallel import DEFAULT_RECOMPUTE_MODULES, RecomputeModule
from models.catalog.presets import cluster_preset, megatron_gpt, model_preset
from models.core.memory import memory_ledger

ROOT = Path(__file__).resolve().parent
DATA = json.loads((ROOT / "data" / "published_runs.json").read_text())
MEASURED = json.loads((ROOT / "data" / "measured_peaks.json").read_text())
OUT = ROOT / "MEMORY_PEAKS.md"
ZERO_BUBBLE_VOCAB = 32_000
"""The GPTSentencePiece tokenizer shipped with the Zero Bubble sample dataset (a LLaMA
SentencePiece model, 32,000 tokens); Table 3 does not print it."""
SCHEDULES = {"zb-1p": PipelineSchedule.ZB_H1, "zb-2p": PipelineSchedule.ZB_H2,
             "zb-v": PipelineSchedule.ZBV, "1f1b": PipelineSchedule.ONE_F_ONE_B,
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
    """The ledger of one Zero Bubble cell (Tables 4, 6, 11, 12) against its printed peak."""
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
    elif schedule == "zb-v":
        # Two chunks per rank in a V; the first and the last chunk are one layer short.
        per_chunk = slots // 2
        chunks = (per_chunk - 1,) + (per_chunk,) * (2 * pp - 2) + (per_chunk - 1,)
        parallel = ParallelConfig(pp=pp, vpp=2, schedule=SCHEDULES[schedule],
                                  micro_batch_size=p["micro_batch_size"], zero_stage=0,
                                  layers_per_virtual_stage=chunks)
        note = f"V of {per_chunk}-layer chunks; rank 0: embedding and loss only"
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


TORCHTITAN_SEQ_LEN = 8192
"""torchtitan train_configs/llama3_{8b,70b,405b}.toml `seq_len` (the tables that do not print a
sequence length ran the default configs)."""
H100_96GB_BYTES = 96 * 10**9
"""Grand Teton H100: 96 GB HBM2e (the note's Hardware section)."""


LOSS_COMPILED = {"llama3_h100_202412": False, "llama3-8b_h200_202506_trainy-whitefiber": True}
"""Per benchmark note: whether `--training.compile` also compiled the loss at the note's
torchtitan commit. 9dec370 (Dec 2024 note): train.py leaves `torch.compile(loss_fn)` commented
out. e7c0cae (Jun 2025 H200 note): components/loss.py `build_cross_entropy_loss` wraps the loss in
`torch.compile` when `training.compile` is set."""


def _torchtitan_measured_bytes(row: dict[str, Any]) -> int:
    text = row["measured_as_printed"].split(", ")[1]
    return int(float(text.split(" GiB")[0]) * 2**30)


def torchtitan_row(row: dict[str, Any]) -> PeakRow:
    """The ledger of one torchtitan benchmark row against its logged reserved peak."""
    m, p, hw = row["model"], row["parallel"], row["hardware"]
    num_gpus = hw["num_gpus"]
    tp, pp, cp = p["tp"] or 1, p["pp"] or 1, p["cp"] or 1
    dp = p["dp"] or num_gpus // (tp * pp * cp)
    local_batch = p["micro_batch_size"]
    # The default toml: selective with the op policy (`RecomputeModule.OP_SAC`).
    recompute = (p["recompute"] or "selective (per-op)").split(" ")[0]
    per_op = recompute == "selective" and "per-op" in (p["recompute"] or "selective (per-op)")
    fp8 = "fp8" in (p["precision"] or "")
    notes = []
    compiled = "torch.compile on" in (p["notes"] or "")
    loss_compiled = compiled and LOSS_COMPILED[row["location"].split(",")[0]]
    if compiled:
        notes.append("torch.compile savings not modelled"
                     + ("; loss compiled (fused)" if loss_compiled else ""))
    training = TrainingSpec(global_batch_size=local_batch * dp,
                            sequence_length=m["seq_len"] or TORCHTITAN_SEQ_LEN,
                            compute_dtype=DType.FP8 if fp8 else DType.BF16,
                            fused_cross_entropy=loss_compiled)
    schedule = p["schedule"] or "none"
    extra: dict[str, Any] = {}
    if pp > 1:
        extra = {"schedule": SCHEDULES[schedule], "fsdp_reshard_after_forward": False,
                 "fsdp_defer_grad_sync": True, "micro_batch_size": local_batch // pp}
        if schedule == "interleaved_1f1b":
            extra["vpp"] = 2
            notes.append("two chunks per rank taken")
    else:
        extra = {"micro_batch_size": local_batch}
    parallel = ParallelConfig(tp=tp, pp=pp, dp=dp, cp=cp, zero_stage=3, fsdp=True,
                              sequence_parallel=tp > 1, sequence_parallel_saves_gathered=tp > 1,
                              recompute=RecomputeMode(recompute),
                              recompute_modules=((RecomputeModule.OP_SAC,) if per_op
                                                 else DEFAULT_RECOMPUTE_MODULES), **extra)
    gpu = hw["gpu"]
    cluster = cluster_preset(gpu, num_nodes=max(1, num_gpus // 8), gpus_per_node=min(8, num_gpus))
    if not hw["gpu_exact"] and gpu == "h100-sxm5-80gb":
        cluster = cluster.model_copy(update={
            "gpu": cluster.gpu.model_copy(update={"memory_bytes": H100_96GB_BYTES})})
    ledger = memory_ledger(model_preset(m["preset"]), training, parallel, cluster)
    return PeakRow(run_id=row["id"], schedule=schedule.split(" ")[0],
                   measured_bytes=_torchtitan_measured_bytes(row),
                   predicted_bytes=ledger.peak_bytes, binding_stage=ledger.binding_stage,
                   note="; ".join(notes))


def _has_peak(row: dict[str, Any]) -> bool:
    text = row.get("measured_as_printed") or ""
    return "peak memory" in text or "GiB" in text


def peak_rows() -> list[PeakRow]:
    """Every measured peak of the data set with its prediction."""
    rows = [zero_bubble_row(row) for row in DATA["runs"] if row["source_id"] == "zerobubble"
            and _has_peak(row)]
    rows += [zero_bubble_row(row) for row in MEASURED["runs"]
             if row["source_id"] == "zerobubble_zbv"]
    rows += [torchtitan_row(row) for row in DATA["runs"]
             if row["source_id"] == "torchtitan_bench" and _has_peak(row)]
    return rows


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
