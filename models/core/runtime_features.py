"""Runtime features of a training framework: switches that change how a step runs, not what
it computes (overlaps, the MoE dispatcher).

Owns: the recipe fields that name them (`TrainingSpec.overlap_grad_reduce`,
`overlap_tp_comm`, `tp_dgrad_overlap`, `overlap_ep_comm`, `moe_dispatcher`,
`memory_efficient_norm`, `moe_grouped_gemm`, `moe_permute_fusion`), how the cost model
reads a field the request left to the planner (None) when nothing chose it, the mesh
conditions under which each takes effect (`effective_features`, in the capability vocabulary of
`models/data/frameworks.json`), which of them cost memory (`RUNTIME_FEATURES`: the search
branches on those and takes the others whenever they are available), and the bytes of the
DeepEP buffer (`deepep_buffer_bytes`). The per-layer CUDA graph regions of an MoE layer
(`TrainingSpec.cuda_graph_modules`: Megatron-Core `--cuda-graph-impl transformer_engine
--cuda-graph-modules attn moe_router moe_preprocess`, `transformer_config.py` at d98e8a64)
are a recipe field the cost model reads as stated and the search never turns on: their
graph memory pools are not in the memory ledger (`models.core.moe.host_issue` times them).
Must not: read the
frameworks' capability tables (`models/core/frameworks.py`), search or size anything.
"""

from dataclasses import dataclass

from api_schemas.parallel import PipelineSchedule
from api_schemas.training import MoeDispatcher, TpOverlapEngine, TrainingSpec
from models.core.pipeline import SCHEDULES, StagePlacement

OVERLAP_GRAD_REDUCE = "overlap_grad_reduce"
OVERLAP_TP_COMM = "overlap_tp_comm"
TP_DGRAD_OVERLAP = "tp_dgrad_overlap"
MEMORY_EFFICIENT_NORM = "memory_efficient_norm"
OVERLAP_EP_COMM = "overlap_ep_comm"
DEEPEP = "moe_dispatcher:deepep"
MOE_GROUPED_GEMM = "moe_grouped_gemm"
MOE_PERMUTE_FUSION = "moe_permute_fusion"


DEEPEP_NUM_SMS = 20
"""SMs DeepEP's normal kernels run on: Megatron-LM core_v0.14.0 `--moe-deepep-num-sms`
default 20 (`arguments.py`), DeepEP `Buffer.num_sms` default 20 (`deep_ep/buffers/legacy.py`);
the buffers hold num_sms / 2 channels."""
DEEPEP_NVL_PEERS = 8
"""GPUs one NVLink domain of DeepEP's legacy kernels spans (`LEGACY_NUM_MAX_NVL_PEERS`)."""
DEEPEP_NVL_RECV_TOKENS = {2: 256, 4: 256, 8: 256, 16: 288, 24: 288, 32: 288, 48: 288,
                          64: 288, 96: 480, 128: 560, 144: 720, 160: 720}
"""Tokens each NVLink channel's receive buffer holds, per EP size: the third field of DeepEP's
recommended dispatch and combine configurations (`Buffer.get_dispatch_config`,
`get_combine_config` in `deep_ep/buffers/legacy.py`; both maps agree on it). DeepEP refuses
any other EP size ('Unsupported number of EP ranks')."""
DEEPEP_RDMA_RECV_TOKENS = 128
"""Tokens each RDMA channel's receive buffer holds (the fifth field of every configuration
of the same maps)."""
DEEPEP_TOKEN_META_BYTES = 8 + 128 * 8 + 128 * 4 + 128 * 4
"""Bytes DeepEP reserves beside each buffered token: its source metadata (two int32,
`internode::SourceMeta`), 128 top-k indices (int64 `topk_idx_t`), 128 top-k weights and
128 FP8 scales (fp32), `kNumMaxTopK` = `kNumMaxScales` = 128 in `csrc/legacy/config.hpp`."""


def deepep_buffer_bytes(hidden_size: int, ep: int) -> int:
    """GPU bytes of the DeepEP buffer Megatron-LM allocates for an EP group: the NVLink
    buffer plus, across nodes, the RDMA buffer, each rounded up to 128 bytes.

    Source: Megatron-LM core_v0.14.0 `megatron/core/transformer/moe/fused_a2a.py: get_buffer`
    (the larger of the dispatch and combine size hints, hidden bytes = hidden x max(element
    size, 2)); DeepEP `csrc/legacy/config.hpp: get_nvl_buffer_size_hint`,
    `get_rdma_buffer_size_hint`. Legend: ch = num_sms / 2 channels, nvl = min(ep, 8),
    rdma = max(ep / 8, 1), hb = 2 x hidden; NVL = ch x nvl x ((2 rdma + 3) x 4 +
    R_nvl x (hb + meta)); RDMA (ep > 8) = ch x rdma x ((8 x 2 + 2) x 2 x 4 + R_rdma x 2 x
    (hb + meta + 16)).
    Assumes: an EP size outside DeepEP's table takes the next larger entry's receive size
    (the largest beyond it); DeepEP itself refuses such sizes, so the planner never chooses
    DeepEP for them (`DEEPEP_NVL_RECV_TOKENS`).
    """
    if ep <= 1:
        return 0
    sizes = sorted(DEEPEP_NVL_RECV_TOKENS)
    key = next((size for size in sizes if size >= ep), sizes[-1])
    channels = DEEPEP_NUM_SMS // 2
    nvl = min(ep, DEEPEP_NVL_PEERS)
    rdma = max(ep // DEEPEP_NVL_PEERS, 1)
    hidden_bytes = 2 * hidden_size
    nvl_bytes = channels * nvl * ((2 * rdma + 3) * 4 + DEEPEP_NVL_RECV_TOKENS[key]
                                  * (hidden_bytes + DEEPEP_TOKEN_META_BYTES))
    rdma_bytes = 0
    if ep > DEEPEP_NVL_PEERS:
        rdma_bytes = channels * rdma * ((DEEPEP_NVL_PEERS * 2 + 2) * 2 * 4
                                        + DEEPEP_RDMA_RECV_TOKENS * 2
                                        * (hidden_bytes + DEEPEP_TOKEN_META_BYTES + 16))
    return -(-nvl_bytes // 128) * 128 + -(-rdma_bytes // 128) * 128


def deepep_supports(ep: int) -> bool:
    """Whether DeepEP has a configuration for this EP size (`DEEPEP_NVL_RECV_TOKENS`)."""
    return ep in DEEPEP_NVL_RECV_TOKENS


@dataclass(frozen=True, slots=True, kw_only=True)
class RuntimeFeature:
    """One runtime feature: its capability name, the recipe field that fixes it, whether it
    costs memory, and what it needs of the mesh."""

    name: str
    field: str
    costs_memory: bool
    """True: the search tries the plan with and without it (it trades memory for time);
    False: it only lowers the step time in the cost model, so it is taken whenever the
    framework offers it and the mesh meets its prerequisites."""
    needs: str
    """The prerequisites, in words (why a plan does not use it)."""
    source: str
    tried_off_first: bool = False
    """True (with `costs_memory`): it only frees memory, at no time cost, so the search
    tries the plan without it first and keeps it only where it makes the plan fit or lets a
    cheaper activation policy fit (a plan that fits as fast without it does not need it)."""


RUNTIME_FEATURES = (
    RuntimeFeature(
        name=OVERLAP_GRAD_REDUCE, field="overlap_grad_reduce", costs_memory=False,
        needs="data parallelism (a gradient reduction to overlap)",
        source="Megatron-LM core_v0.14.0 --overlap-grad-reduce / --overlap-param-gather "
               "(megatron/training/arguments.py); DeepSpeed zero_optimization.overlap_comm; "
               "torchtitan FSDP2 prefetching"),
    RuntimeFeature(
        name=OVERLAP_TP_COMM, field="overlap_tp_comm", costs_memory=False,
        needs="TP > 1 with sequence parallelism (--tp-comm-overlap asserts "
              "--sequence-parallel)",
        source="Megatron-LM core_v0.14.0 --tp-comm-overlap (Transformer Engine userbuffers); "
               "torchtitan v0.2.2 parallelism.enable_async_tensor_parallel"),
    RuntimeFeature(
        name=TP_DGRAD_OVERLAP, field="tp_dgrad_overlap", costs_memory=False,
        needs="TP > 1 (a column-parallel input-gradient collective to overlap); with "
              "sequence parallelism and overlap_tp_comm the userbuffers overlap takes its "
              "place",
        source="Megatron-LM 3f65246911 / 16c90445e7 (Sep. 2021) "
               "--async-tensor-model-parallel-allreduce, default on "
               "(megatron/mpu/layers.py LinearWithGradAccumulationAndAsyncAllreduce); "
               "Megatron-Core LinearWithGradAccumulationAndAsyncCommunication and Transformer "
               "Engine Linear / LayerNormLinear ('Overlap dgrad-RS/AR with wgrad')"),
    RuntimeFeature(
        name=MEMORY_EFFICIENT_NORM, field="memory_efficient_norm", costs_memory=True,
        tried_off_first=True,
        needs="a norm whose output the next GEMM already keeps in 16 bits at the same shard "
              "(not FP8 GEMM inputs, not a gathered sequence); elsewhere it frees nothing",
        source="Llama 3, arXiv:2407.21783 Sec. 3.3.2 (the input tensors of each pipeline "
               "stage that later computation does not use are deallocated; the outputs are "
               "freed after the send as Megatron-LM's deallocate_output_tensor does, "
               "megatron/core/pipeline_parallel/schedules.py, which the ledger always "
               "assumes); Apex FusedRMSNorm(memory_efficient=True). Megatron-LM "
               "--memory-efficient-layer-norm applies to its local Apex LayerNorm only, not "
               "Transformer Engine's norms: no released framework's standard path has it"),
    RuntimeFeature(
        name=DEEPEP, field="moe_dispatcher", costs_memory=True,
        needs="an MoE model with an EP size in DeepEP's configuration table (2 to 160)",
        source="Megatron-LM core_v0.12.0+ --moe-token-dispatcher-type flex --moe-enable-deepep; "
               "torchtitan v0.2.2 parallelism.expert_parallel_comm_backend = 'deepep'"),
    RuntimeFeature(
        name=OVERLAP_EP_COMM, field="overlap_ep_comm", costs_memory=True,
        needs="an MoE model with EP > 1, interleaving (VPP > 1) when PP > 1, more than one "
              "micro-batch without a pipeline, and no full recomputation",
        source="Megatron-LM core_v0.14.0 --overlap-moe-expert-parallel-comm "
               "(megatron/core/transformer/transformer_config.py: EP > 1, virtual pipeline "
               "when PP > 1, no full recomputation or recompute method; "
               "megatron/core/pipeline_parallel/schedules.py: one extra warm-up micro-batch, "
               "combined 1F1B without a pipeline)"),
    RuntimeFeature(
        name=MOE_GROUPED_GEMM, field="moe_grouped_gemm", costs_memory=False,
        needs="an MoE model (routed experts)",
        source="Megatron-LM core_v0.14.0 --moe-grouped-gemm (megatron/training/arguments.py; "
               "TEGroupedMLP, else SequentialMLP's per-expert loop, "
               "megatron/core/transformer/moe/experts.py); torchtitan v0.2.2 MoEArgs."
               "use_grouped_mm (torch._grouped_mm, default on); DeepSpeed 0.19.2+ "
               "expert_parallel.use_grouped_mm"),
    RuntimeFeature(
        name=MOE_PERMUTE_FUSION, field="moe_permute_fusion", costs_memory=False,
        needs="an MoE model (routed experts)",
        source="Megatron-LM core_v0.14.0 --moe-permute-fusion (megatron/training/arguments.py; "
               "Transformer Engine >= 2.1 fused permute / unpermute, "
               "megatron/core/transformer/transformer_config.py and "
               "megatron/core/transformer/moe/moe_utils.py)"),
)
"""Every runtime feature, cheapest to decide first."""

BY_NAME = {feature.name: feature for feature in RUNTIME_FEATURES}


def grad_reduce_overlapped(training: TrainingSpec) -> bool:
    """Whether the gradient reduction overlaps backward: unset reads as on (every released
    framework overlaps it by default or with one switch), except under DeepSpeed's pipeline
    engine (`TrainingSpec.pipe_engine_p2p`), which reduces after the step's last backward
    whatever `overlap_comm` says.

    Source: deepspeed/runtime/pipe/schedule.py `TrainSchedule.steps` appends ReduceTiedGrads,
    ReduceGrads and OptimizerStep after the last micro-batch's instructions, and
    deepspeed/runtime/pipe/engine.py `_exec_backward_pass` runs the backward without the
    engine's gradient all-reduce (its `_exec_reduce_grads` then reduces every bucket), from
    v0.3 through v0.19.5.
    """
    return training.overlap_grad_reduce is not False and training.pipe_engine_p2p is None


def userbuffers_tp_overlap(training: TrainingSpec, sequence_parallel: bool) -> bool:
    """Whether the TP collectives overlap the GEMMs as Transformer Engine's userbuffers
    overlaps them (`overlap_tp_comm` with sequence parallelism, its runtime userbuffers or
    unset), the overlap `models.core.step_time.exposure.tp_overlap_exposed_s` prices.

    PyTorch's micro-pipelined async TP (`TpOverlapEngine.PYTORCH_ASYNC_TP`, torchtitan's)
    is not: its collectives are priced as without any overlap. Its gain is measured but
    not modelled: torchtitan printed +5.7% to +16.4% on five pairs of runs without and with
    it (`benchmarks/llama3_h100_202412_torchtitan.md` Table 4;
    `benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md`, torch 38410cf9 of 2025-06-14),
    where the userbuffers rule would credit +22% to +34% (`research/async_tp_pairs.py`),
    and the collectives Inductor's pass fuses (torch/_inductor/fx_passes/
    micro_pipeline_tp.py: each all-gather feeding a matmul's left operand, each
    reduce-scatter of one matmul's output; not the backward reduce-scatter of a sum of
    matmuls) cover most of a layer's, so which of its costs keep the gain that small is not
    known here. Crediting nothing keeps a plan's promise under what the runtime delivers.
    """
    return (bool(training.overlap_tp_comm) and sequence_parallel
            and training.tp_overlap_engine in (None, TpOverlapEngine.USERBUFFERS))


def grouped_gemm_on(training: TrainingSpec) -> bool:
    """Whether the local experts run as one grouped GEMM: unset reads as on (every published
    MoE recipe the model is calibrated on sets `--moe-grouped-gemm`)."""
    return training.moe_grouped_gemm is not False


def permute_fused(training: TrainingSpec) -> bool:
    """Whether the MoE permutation runs fused: unset reads as on (every published MoE recipe
    the model is calibrated on sets `--moe-permute-fusion`)."""
    return training.moe_permute_fusion is not False


def dispatcher(training: TrainingSpec) -> MoeDispatcher:
    """The MoE dispatcher the cost model times: unset reads as the NCCL all-to-all."""
    return training.moe_dispatcher or MoeDispatcher.ALLTOALL


def ep_overlap_mesh(schedule: PipelineSchedule, *, pp: int, num_micro_batches: int) -> bool:
    """Whether a mesh and schedule admit the batch-level EP overlap of another micro-batch's
    compute: an interleaved (looped) pipeline, or no pipeline with at least two micro-batches
    (Megatron-LM core_v0.14.0 combined 1F1B: `combined_1f1b_schedule_for_no_pipelining`
    pairs micro-batch i's backward with micro-batch i+1's forward)."""
    if pp == 1:
        return num_micro_batches > 1
    return SCHEDULES[schedule].placement == StagePlacement.LOOPED


def ep_overlap_active(training: TrainingSpec, schedule: PipelineSchedule, *, pp: int,
                      ep: int, num_micro_batches: int) -> bool:
    """Whether `overlap_ep_comm` takes effect on this mesh (set, EP > 1, a schedule that
    pairs micro-batches)."""
    return bool(training.overlap_ep_comm) and ep > 1 and ep_overlap_mesh(
        schedule, pp=pp, num_micro_batches=num_micro_batches)


def effective_features(training: TrainingSpec, *, moe: bool, tp: int, dp: int, ep: int,
                       sequence_parallel: bool) -> set[str]:
    """The runtime features a recipe turns on for a mesh, in the capability vocabulary
    (a feature whose prerequisites the mesh lacks does nothing and is not listed; the
    schedule condition of `overlap_ep_comm` is the frameworks' forbidden rules')."""
    out: set[str] = set()
    if dp > 1 and grad_reduce_overlapped(training):
        out.add(OVERLAP_GRAD_REDUCE)
    if tp > 1 and sequence_parallel and training.overlap_tp_comm:
        out.add(OVERLAP_TP_COMM)
    elif tp > 1 and training.tp_dgrad_overlap:
        out.add(TP_DGRAD_OVERLAP)
    if training.memory_efficient_norm:
        out.add(MEMORY_EFFICIENT_NORM)
    if moe:
        # Listed only where the recipe turns them on: unset is priced as on
        # (`grouped_gemm_on`, `permute_fused`) but asks nothing of a framework, which then
        # runs its own kernels (torchtitan and DeepSpeed have no fused permutation).
        if training.moe_grouped_gemm:
            out.add(MOE_GROUPED_GEMM)
        if training.moe_permute_fusion:
            out.add(MOE_PERMUTE_FUSION)
    if moe and ep > 1:
        if dispatcher(training) == MoeDispatcher.DEEPEP:
            out.add(DEEPEP)
        if training.overlap_ep_comm:
            out.add(OVERLAP_EP_COMM)
    return out


def with_features(training: TrainingSpec, on: frozenset[str]) -> dict[str, object]:
    """The recipe fields that turn on exactly the unset features in `on` (and off the unset
    others); fields the request fixed are kept."""
    update: dict[str, object] = {}
    for feature in RUNTIME_FEATURES:
        if getattr(training, feature.field) is not None:
            continue
        chosen = feature.name in on
        if feature.name == DEEPEP:
            update[feature.field] = MoeDispatcher.DEEPEP if chosen else MoeDispatcher.ALLTOALL
        else:
            update[feature.field] = chosen
    return update


__all__ = [
    "BY_NAME",
    "DEEPEP",
    "MEMORY_EFFICIENT_NORM",
    "MOE_GROUPED_GEMM",
    "MOE_PERMUTE_FUSION",
    "OVERLAP_EP_COMM",
    "OVERLAP_GRAD_REDUCE",
    "OVERLAP_TP_COMM",
    "RUNTIME_FEATURES",
    "RuntimeFeature",
    "TP_DGRAD_OVERLAP",
    "DEEPEP_NUM_SMS",
    "DEEPEP_NVL_RECV_TOKENS",
    "deepep_buffer_bytes",
    "deepep_supports",
    "dispatcher",
    "effective_features",
    "ep_overlap_active",
    "grouped_gemm_on",
    "permute_fused",
    "ep_overlap_mesh",
    "userbuffers_tp_overlap",
    "grad_reduce_overlapped",
    "with_features",
]
