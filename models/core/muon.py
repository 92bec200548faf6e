"""Muon's orthogonalisation: the matrices a rank orthogonalises and what it costs.

Owns: the Newton-Schulz FLOPs and GEMM time of one Muon step over the weight matrices of a
pipeline rank, and how data-parallel sharding of the optimizer states distributes that work
(every rank gathers and orthogonalises every matrix, or one owner per matrix). Must not:
count memory (the full-matrix buffer is a runtime item of `models/core/runtime_memory.py`) or
time the gathers (the step time does, with `models.core.traffic` placements).

Sources:
- [MUON] K. Jordan et al., "Muon: An optimizer for hidden layers in neural networks" (2024):
  the quintic Newton-Schulz iteration, T = 5 steps per update, each step A = X X^T,
  B = b A + c A A, X <- a X + B X on the matrix with rows <= columns; its FLOP overhead over
  training is T m / B for an m x m matrix trained on B tokens per step (0.7% for NanoGPT
  speedrunning, m = 768 and B = 524,288; 0.5% for Llama 405B, m = 16,384 and B = 16M).
- [MOONLIGHT] J. Liu et al., "Muon is Scalable for LLM Training", arXiv:2502.16982,
  Sec. 2.3 (Distributed Muon): under ZeRO-1 each data-parallel rank all-gathers the full
  matrix, orthogonalises it and keeps its own shard; matrices other than embeddings and the
  output head use Muon.
- [K3] Kimi K3, arXiv:2607.24653 (the seed ledger, Sec. 8.4): each rank fetches point to
  point only the shards of the matrices it owns and updates, with no full-parameter buffer
  on every rank.
"""

from dataclasses import dataclass

from api_schemas.architecture import ModelSpec
from api_schemas.dtypes import DType
from api_schemas.hardware import GpuSpec
from api_schemas.parallel import ParallelConfig, RecomputeModule
from models.catalog.kernels import gemm_time_s
from models.core.compute import ComputeContext, attention_gemms, mlp_gemms, moe_gemms

_EXPERT_MODULES = (RecomputeModule.MOE, RecomputeModule.MOE_DOWN_PROJ)
"""The GEMMs of `models.core.compute.moe_gemms` that are routed experts."""

NEWTON_SCHULZ_STEPS = 5
"""Iterations per Muon update ([MUON]; Moonlight and Kimi K2 use the same five)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MuonMatrix:
    """Weight matrices of one shape that a rank updates: `count` of `rows` x `cols`."""

    rows: int
    cols: int
    count: int
    expert: bool
    """Routed-expert matrices (sharded over expert-DP rather than DP x CP)."""

    @property
    def params(self) -> int:
        """Parameters of all `count` matrices."""
        return self.rows * self.cols * self.count


def newton_schulz_flops(rows: int, cols: int, *, steps: int = NEWTON_SCHULZ_STEPS) -> int:
    """FLOPs of Muon's Newton-Schulz iteration on one rows x cols matrix ([MUON]).

    Legend: a = min(rows, cols), b = max(rows, cols) (the iteration runs on the wide
    orientation); per step X X^T costs 2 a^2 b, A A costs 2 a^3, B X costs 2 a^2 b.
    """
    a, b = sorted((rows, cols))
    return steps * (4 * a * a * b + 2 * a * a * a)


def newton_schulz_time_s(matrix: MuonMatrix, *, gpu: GpuSpec,
                         steps: int = NEWTON_SCHULZ_STEPS) -> float:
    """GEMM time of the iteration on `matrix.count` matrices in BF16 (the three products of
    each step timed by `models.catalog.kernels.gemm_time_s`)."""
    a, b = sorted((matrix.rows, matrix.cols))
    one_step = (gemm_time_s(a, a, b, gpu=gpu, dtype=DType.BF16)
                + gemm_time_s(a, a, a, gpu=gpu, dtype=DType.BF16)
                + gemm_time_s(a, b, a, gpu=gpu, dtype=DType.BF16))
    return matrix.count * steps * one_step


def rank_matrices(spec: ModelSpec, parallel: ParallelConfig, layers: tuple[int, ...],
                  gpu: GpuSpec) -> list[MuonMatrix]:
    """The Muon-updated matrices of the layers one rank holds, at their rank-local shapes
    (tensor- and expert-parallel splits applied): the model's GEMM weights as the framework
    stores them (fused QKV and gate-up), routers included; embeddings and the head stay on
    AdamW ([MOONLIGHT] Sec. 2)."""
    ctx = ComputeContext(gpu=gpu, seq_len=1, micro_batch_size=1, tp=parallel.tp,
                         ep=parallel.ep, etp=parallel.etp)
    kinds = {False: 0, True: 0}
    for index in layers:
        kinds[spec.is_moe_layer(index)] += 1
    out: list[MuonMatrix] = []
    for moe_layer, held in kinds.items():
        if held == 0:
            continue
        gemms = attention_gemms(spec, ctx)
        if moe_layer:
            gemms += moe_gemms(spec, ctx)
        else:
            gemms += mlp_gemms(spec, spec.ffn_hidden_size, tokens=1, split=parallel.tp,
                               module=RecomputeModule.MLP)
        for g in gemms:
            out.append(MuonMatrix(rows=g.k, cols=g.n, count=held * g.groups,
                                  expert=g.module in _EXPERT_MODULES))
    return out


__all__ = [
    "NEWTON_SCHULZ_STEPS",
    "MuonMatrix",
    "newton_schulz_flops",
    "newton_schulz_time_s",
    "rank_matrices",
]
