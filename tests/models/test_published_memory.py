"""The published systems fit under their own recipes, and the sharded-state and runtime
mechanisms reproduce the numbers their sources print."""

import math

import pytest

from api_schemas import ParallelConfig, PipelineSchedule, RecomputeMode, TrainingSpec
from api_schemas.hardware import ClusterSpec
from api_schemas.requests import (
    DEFAULT_MEMORY_HEADROOM_FRAC,
    DEFAULT_MEMORY_MARGIN_FRAC,
    ClusterInput,
)
from models.catalog.presets import cluster_preset, model_preset
from models.core.activations import LayerActivationContext, layer_activation_bytes
from models.core.memory import MemoryLedger, memory_ledger
from models.core.params import count_parameters
from models.core.precision import state_bytes_per_param
from models.core.runtime_memory import nccl_buffer_bytes
from models.core.sharded_states import (
    DEEPSPEED_MAX_LIVE_PARAMS,
    DEEPSPEED_PREFETCH_BUCKET_PARAMS,
    optimizer_offload_bytes,
    zero3_gather_buffers,
)
from models.evidence.memory_evidence import CHECKED, ledger_evidence
from models.evidence.published import (
    DEEPSEEK_V3_2048,
    KIMI_K2_256,
    KIMI_K2_4096,
    LLAMA3_405B_8K,
    LLAMA3_405B_16K,
    LLAMA3_405B_VIRTUAL_STAGES,
    PUBLISHED_SYSTEMS,
    PublishedRun,
    run_model,
)
from solver.runtime_choice import decided_for

GIB = 2**30


def _cluster(run: PublishedRun) -> ClusterSpec:
    cluster = cluster_preset(run.gpu, num_nodes=run.num_nodes, gpus_per_node=run.gpus_per_node)
    return cluster.model_copy(update={"memory_headroom_frac": DEFAULT_MEMORY_HEADROOM_FRAC})


def _decided(run: PublishedRun) -> TrainingSpec:
    """The run's recipe with the runtime features it leaves unset decided as the search
    decides them for its configuration (`solver.runtime_choice.decided_for`)."""
    return decided_for(run_model(run), run.training, run.parallel, _cluster(run),
                       any_target=True)


def _ledger(run: PublishedRun) -> MemoryLedger:
    return memory_ledger(run_model(run), _decided(run), run.parallel, _cluster(run))


def test_the_request_default_leaves_headroom() -> None:
    cluster = ClusterInput(gpu="h100-sxm5-80gb", num_nodes=1)
    assert cluster.memory_headroom_frac == DEFAULT_MEMORY_HEADROOM_FRAC > 0


FITTING = [run for run in PUBLISHED_SYSTEMS if run is not LLAMA3_405B_8K]


@pytest.mark.parametrize("run", FITTING, ids=[run.id for run in FITTING])
def test_each_published_system_fits_under_its_own_recipe(run: PublishedRun) -> None:
    ledger = _ledger(run)
    assert ledger.fits, (run.id, ledger.peak_bytes / GIB, ledger.capacity_bytes / GIB)
    assert run.confidence  # the notes say how sure the ledger is


def test_llama3_405b_on_8k_gpus_fits_under_its_own_recipe() -> None:
    # With N = PP = 16 (the smallest group the paper describes; Megatron-LM refuses N < PP and
    # torch's flexible interleaved 1F1B takes N = M / max(1, M // PP) = 16 for M = 32), the
    # stated layout and each stage's input freed (Sec. 3.3.2): about 73.4 of 78.4 GiB.
    # The preset fixes no memory switch: the search chooses the memory-efficient norm (a
    # runtime feature of target 'any') because no released framework's option fits.
    assert not LLAMA3_405B_8K.parallel.norm_saves_output
    assert LLAMA3_405B_8K.training.memory_efficient_norm is None
    decided = _decided(LLAMA3_405B_8K)
    assert decided.memory_efficient_norm is True
    ledger = _ledger(LLAMA3_405B_8K)
    assert ledger.fits
    assert 0.90 < ledger.peak_bytes / ledger.capacity_bytes < 0.97
    # The same run with each norm keeping its input (the stage input kept until its backward)
    # is about 1.05x the cap: freeing the stage inputs is what makes the stated recipe fit.
    kept = decided.model_copy(update={"memory_efficient_norm": False})
    without = memory_ledger(run_model(LLAMA3_405B_8K), kept, LLAMA3_405B_8K.parallel,
                            _cluster(LLAMA3_405B_8K))
    assert 1.0 < without.peak_bytes / without.capacity_bytes < 1.08
    # The stage-input deallocation frees, per layer and micro-batch in flight, the attention
    # and MLP norm inputs: 2 x 2h / t bytes per token (h = 16,384, t = 8 with SP), 141 chunks
    # of one layer in flight on stage 1 at 8,192 tokens each.
    freed = without.stages[1].bytes_of("activations") - ledger.stages[1].bytes_of("activations")
    assert freed == 141 * 8192 * 2 * (2 * 16_384 // 8)


def test_llama3_405b_uses_the_stated_layout_and_the_smallest_group() -> None:
    # Sec. 3.3.2: one layer fewer on the first and last stages leaves the first chunk of the
    # first stage with only the embedding and the last chunk of the last stage with only the
    # output projection and loss, so a chunk holds one layer: 126 + 2 = 16 x 8.
    for run in (LLAMA3_405B_8K, LLAMA3_405B_16K):
        parallel = run.parallel
        assert parallel.pp * parallel.vpp == len(LLAMA3_405B_VIRTUAL_STAGES) == 128
        assert parallel.layers_per_virtual_stage == LLAMA3_405B_VIRTUAL_STAGES
        assert LLAMA3_405B_VIRTUAL_STAGES[0] == LLAMA3_405B_VIRTUAL_STAGES[-1] == 0
        assert sum(LLAMA3_405B_VIRTUAL_STAGES) == run_model(run).num_layers == 126
        assert parallel.microbatch_group_size is None  # N = pp, Megatron's and the minimum
    ledger = _ledger(LLAMA3_405B_8K)
    # 32 micro-batches on 16 ranks, N = 16: stage 1 holds 2 (16 - 2) + 7 x 16 + 1 = 141.
    assert ledger.stages[1].in_flight_chunks == 141


def test_llama3_405b_unit_is_what_a_layer_backward_reads() -> None:
    # One layer, one 8K sequence, TP8 with sequence parallelism and a fused attention kernel:
    # two norm inputs and two GEMM inputs of h / t, Q and V with 16 + 1 heads and K with one KV
    # head of 128, the attention output, fp32 log-sum-exp for 16 heads, the SwiGLU gate and up
    # outputs and their product (53,248 / 8 wide); no stage output (deallocated after the
    # send, arXiv:2407.21783 Sec. 3.3.2) and no norm input (the stage's input freed: the norms
    # keep their outputs, which the next GEMMs keep anyway).
    per_token = {"qkv input (norm output)": 4096, "Q, V": 4352, "K": 256,
                 "output-projection input": 4096, "softmax statistics": 64,
                 "MLP input (norm output)": 4096, "MLP up-projection output (gate)": 13312,
                 "MLP up-projection output (up)": 13312, "MLP activation output": 13312}
    ctx = LayerActivationContext(seq_len=8192, micro_batch_size=1, tp=8, sequence_parallel=True,
                                 norm_saves_output=True)
    layer = layer_activation_bytes(run_model(LLAMA3_405B_8K), 1, ctx)
    kept = {t.name: t.bytes // 8192 for t in layer.tensors if t.kept_only_by is None}
    assert kept == per_token and sum(per_token.values()) == 56_896
    stage = _ledger(LLAMA3_405B_8K).stages[1]
    assert stage.bytes_of("activations") == 141 * 8192 * 56_896


def test_no_published_system_relies_on_unstated_activation_offload() -> None:
    # Only Kimi K2 states CPU offload of activations (Sec. 2.4.3).
    for run in PUBLISHED_SYSTEMS:
        offloaded = run.parallel.activation_offload_frac > 0
        assert offloaded == run.id.startswith("kimi-k2"), run.id


def test_kimi_k2_states_are_about_6_tb_and_30_gb_per_gpu() -> None:
    # arXiv:2507.20534 Sec. 2.4.3: BF16 parameters and FP32 gradient accumulation need
    # about 6 TB of GPU memory over the 256-GPU model-parallel group; with the dense part
    # replicated over the unit's data-parallel ranks a GPU holds about 30 GB of them.
    spec = run_model(KIMI_K2_256)
    per_param = state_bytes_per_param(KIMI_K2_256.training)
    unique_tb = count_parameters(spec).total * (per_param.weights + per_param.gradients) / 1e12
    assert 5.5 <= unique_tb <= 6.8
    states = [s.bytes_of("parameters") + s.bytes_of("gradients")
              for s in _ledger(KIMI_K2_256).stages]
    assert 25e9 <= max(states) <= 33e9
    with_optimizer = max(s.bytes_of("parameters") + s.bytes_of("gradients")
                         + s.bytes_of("optimizer") for s in _ledger(KIMI_K2_4096).stages)
    assert 25e9 <= with_optimizer <= 36e9  # ZeRO-1 over the replicas: optimizer is small


def test_kimi_k2_on_one_unit_keeps_its_optimizer_states_in_host_memory() -> None:
    ledger = _ledger(KIMI_K2_256)
    assert all(s.bytes_of("optimizer") == 0 for s in ledger.stages)
    assert ledger.fits_host and ledger.host_peak_bytes > 20 * GIB


def test_deepseek_v3_fp8_weights_on_the_fly_hold_less_than_a_cached_copy() -> None:
    cached = DEEPSEEK_V3_2048.training.model_copy(
        update={"fp8_weight_storage": "high_precision_plus_fp8"})
    run = DEEPSEEK_V3_2048
    on_the_fly = _ledger(run).stages[2].total_bytes
    cluster = cluster_preset(run.gpu, num_nodes=run.num_nodes)
    with_copy = memory_ledger(run_model(run), cached, run.parallel, cluster).stages[2]
    assert with_copy.total_bytes > on_the_fly


def test_zero3_gathers_a_module_and_a_prefetch_bucket_not_two_layers() -> None:
    # A 530B-class layer (h = 20480, 12 h^2 = 5.0e9 params) on one GPU: DeepSpeed gathers the
    # largest Linear (4 h^2 = 1.68e9) and prefetches a bucket, never two whole layers.
    h = 20480
    layer, linear = 12 * h * h, 4 * h * h
    deepspeed = zero3_gather_buffers(largest_unit_params=layer, largest_module_params=linear,
                                     param_bytes=2, grad_bytes=2, fsdp=False)
    assert deepspeed.gathered_parameters_bytes == 2 * linear  # one module above max live
    small = zero3_gather_buffers(largest_unit_params=10**8, largest_module_params=10**7,
                                 param_bytes=2, grad_bytes=2, fsdp=False)
    expected = min(DEEPSPEED_MAX_LIVE_PARAMS, 10**7 + DEEPSPEED_PREFETCH_BUCKET_PARAMS)
    assert small.gathered_parameters_bytes == 2 * expected
    fsdp = zero3_gather_buffers(largest_unit_params=layer, largest_module_params=linear,
                                param_bytes=2, grad_bytes=2, fsdp=True)
    assert fsdp.gathered_parameters_bytes == 2 * 2 * layer  # FSDP: two units unsharded


def test_a_published_zero3_530b_layout_on_a100_fits() -> None:
    # MT-NLG's shape under DeepSpeed ZeRO-3 over 8 x 35-way model parallelism: the gather
    # buffer is one module, so ZeRO-3 is no longer the reason it overflows.
    spec = model_preset("gpt-530b")
    training = TrainingSpec(global_batch_size=1920, sequence_length=2048)
    parallel = ParallelConfig(tp=8, pp=35, dp=16, zero_stage=3, recompute="full",
                              sequence_parallel=True)
    cluster = cluster_preset("a100-sxm4-80gb", num_nodes=560)
    stage = memory_ledger(spec, training, parallel, cluster).stages[1]
    gathered = next(c for c in stage.components if c.name == "ZeRO-3 gathered parameters")
    assert gathered.bytes < 2 * GIB
    assert stage.total_bytes < cluster.capacity_bytes


def test_fsdp_without_resharding_keeps_the_stage_parameters_resident() -> None:
    spec = model_preset("llama-3.1-70b")
    training = TrainingSpec(global_batch_size=64, sequence_length=4096)
    base = ParallelConfig(tp=8, pp=1, dp=8, zero_stage=3, fsdp=True, recompute="full",
                          sequence_parallel=True)
    cluster = cluster_preset("h100-sxm5-80gb", num_nodes=8)
    reshard = memory_ledger(spec, training, base, cluster).stages[0]
    resident = memory_ledger(spec, training, base.model_copy(
        update={"fsdp_reshard_after_forward": False}), cluster).stages[0]
    assert resident.bytes_of("parameters") > 8 * reshard.bytes_of("parameters")


def test_zero_offload_moves_2m_bytes_each_way() -> None:
    # ZeRO-Offload arXiv:2101.06840 Sec. 4.1: fp16 gradients down and fp16 parameters up,
    # 2M bytes each for M parameters; the 12M bytes of fp32 states stay on the CPU.
    m = 10**9
    moved = optimizer_offload_bytes(sharded_params=m, optimizer_bytes_per_param=12,
                                    grad_bytes=2, param_bytes=2, offload_frac=1.0)
    assert moved.gradients_to_host_bytes_per_step == 2 * m
    assert moved.parameters_to_gpu_bytes_per_step == 2 * m
    assert moved.host_bytes == 12 * m


def test_nccl_buffers_follow_the_communicators_a_mesh_opens() -> None:
    # NCCL_BUFFSIZE 4 MiB x 16 channels x 2 directions = 128 MiB per communicator.
    alone = nccl_buffer_bytes(ParallelConfig())
    assert alone == 128 * 2**20
    mesh = nccl_buffer_bytes(ParallelConfig(tp=8, pp=4, dp=2))
    assert mesh == (1 + 2 + 2) * 128 * 2**20
    assert math.isclose(mesh / alone, 5)


def test_the_notes_say_which_ledger_mechanisms_no_measured_peak_backs() -> None:
    checked_only = ledger_evidence(
        TrainingSpec(global_batch_size=8, sequence_length=1024, flash_attention=False),
        ParallelConfig(pp=8, zero_stage=0), is_moe=False)
    assert checked_only == (CHECKED,)
    deepseek = ledger_evidence(DEEPSEEK_V3_2048.training, DEEPSEEK_V3_2048.parallel,
                               is_moe=True)
    assert len(deepseek) == 2 and "FP8" in deepseek[1] and "routed-expert" in deepseek[1]
    # torchtitan's logged peaks check FSDP2 with fused attention and the PyTorch loss.
    torchtitan_like = ledger_evidence(
        TrainingSpec(global_batch_size=8, sequence_length=8192, fused_cross_entropy=False),
        ParallelConfig(dp=8, zero_stage=3, fsdp=True), is_moe=False)
    assert torchtitan_like == (CHECKED,)
    deepspeed = ledger_evidence(TrainingSpec(global_batch_size=8, sequence_length=8192),
                                ParallelConfig(dp=8, zero_stage=3), is_moe=False)
    assert len(deepspeed) == 2 and "DeepSpeed" in deepspeed[1]


def test_each_rung_of_the_kimi_k2_ladder_lowers_the_peak() -> None:
    # Sec. 2.4.3: recompute LayerNorm, SwiGLU and MLA up-projections; then the MoE
    # down-projections; then FP8-E4M3 storage; then CPU offload of the rest.
    from api_schemas.parallel import RecomputeModule as M

    run = KIMI_K2_256
    cheap = (M.LAYERNORM, M.MOE_ACT, M.MLA_UP_PROJ)
    rungs = [
        {"recompute": "none", "fp8_activations": False, "activation_offload_frac": 0.0},
        {"recompute": "selective", "recompute_modules": cheap, "fp8_activations": False,
         "activation_offload_frac": 0.0},
        {"recompute": "selective", "recompute_modules": (*cheap, M.MOE_DOWN_PROJ),
         "fp8_activations": False, "activation_offload_frac": 0.0},
        {"recompute": "selective", "recompute_modules": (*cheap, M.MOE_DOWN_PROJ),
         "fp8_activations": True, "activation_offload_frac": 0.0},
        {"recompute": "selective", "recompute_modules": (*cheap, M.MOE_DOWN_PROJ),
         "fp8_activations": True, "activation_offload_frac": 1.0},
    ]
    cluster = cluster_preset(run.gpu, num_nodes=run.num_nodes)
    peaks = [memory_ledger(run_model(run), run.training, ParallelConfig.model_validate(
        {**run.parallel.model_dump(), **rung}), cluster).peak_bytes for rung in rungs]
    assert all(later < earlier for earlier, later in zip(peaks, peaks[1:], strict=False))


def test_an_unfused_cross_entropy_holds_two_more_fp32_logit_tensors_in_backward() -> None:
    # PyTorch's log_softmax backward holds its fp32 output, the fp32 gradient nll_loss
    # writes and the fp32 input gradient: 8 V bytes per token beyond the saved 4 V.
    # Llama 3.1 8B, 32,768 tokens: 8 x 128,256 x 32,768 B = 31.3 GiB.
    spec = model_preset("llama-3.1-8b")
    parallel = ParallelConfig(dp=8, zero_stage=3, fsdp=True, recompute=RecomputeMode.FULL)
    cluster = cluster_preset("h100-sxm5-80gb", num_nodes=1)
    fused = TrainingSpec(global_batch_size=8, sequence_length=32768)
    unfused = fused.model_copy(update={"fused_cross_entropy": False})
    stage = memory_ledger(spec, unfused, parallel, cluster).stages[0]
    extra = sum(c.bytes for c in stage.components
                if c.name == "cross-entropy backward working set")
    working = sum(c.bytes for c in stage.components if c.name == "recompute working set")
    assert extra + working == 8 * 128_256 * 32_768
    assert round((extra + working) / GIB, 1) == 31.3
    fused_stage = memory_ledger(spec, fused, parallel, cluster).stages[0]
    assert fused_stage.total_bytes < stage.total_bytes
    assert not any(c.name == "cross-entropy backward working set"
                   for c in fused_stage.components)


def test_deferred_fsdp_gradient_sync_keeps_the_stage_gradients_unsharded() -> None:
    # torch pipelining runs an FSDP2 stage's backwards without gradient sync and
    # reduce-scatters after the last one; FSDP2 accumulates the unsharded gradients in the
    # reduce dtype (fp32): 4 bytes for every parameter of the stage.
    spec = model_preset("llama-3.1-405b")
    training = TrainingSpec(global_batch_size=256, sequence_length=8192)
    base = ParallelConfig(tp=8, pp=8, dp=8, zero_stage=3, fsdp=True, sequence_parallel=True,
                          fsdp_reshard_after_forward=False, recompute=RecomputeMode.FULL,
                          schedule=PipelineSchedule.ONE_F_ONE_B)
    deferred = base.model_copy(update={"fsdp_defer_grad_sync": True})
    cluster = cluster_preset("h100-sxm5-80gb", num_nodes=64)
    before = memory_ledger(spec, training, base, cluster).stages[1]
    after = memory_ledger(spec, training, deferred, cluster).stages[1]
    accumulators = sum(c.bytes for c in after.components
                       if c.name.startswith("unsharded gradient accumulators"))
    stage_params = sum(int(c.note.split(" params")[0]) for c in before.components
                       if c.name.startswith("weights: "))
    assert training.grad_dtype.num_bytes == 4
    assert accumulators == pytest.approx(4 * stage_params, abs=8)
    assert round(accumulators / GIB, 1) == 23.8  # 6.38B parameters of stage 1 in fp32
    assert after.total_bytes - before.total_bytes >= accumulators
    with pytest.raises(ValueError, match="fsdp_defer_grad_sync"):
        ParallelConfig(dp=8, fsdp_defer_grad_sync=True)


def test_dtensor_sequence_parallel_keeps_the_gathered_gemm_inputs() -> None:
    # Megatron-LM ([KOR22] Sec. 4.2.2) keeps the QKV and MLP inputs as sequence shards (2h/t
    # each per token) and all-gathers them again in backward; PyTorch DTensor's
    # PrepareModuleInput(Replicate) before ColwiseParallel leaves the gathered input (2h) to
    # autograd: 2 x 2h (1 - 1/t) bytes more per token and layer.
    spec = model_preset("llama-3.1-70b")
    training = TrainingSpec(global_batch_size=8, sequence_length=8192)
    megatron = ParallelConfig(tp=8, dp=8, sequence_parallel=True)
    dtensor = megatron.model_copy(update={"sequence_parallel_saves_gathered": True})
    cluster = cluster_preset("h100-sxm5-80gb", num_nodes=8)
    layers = [sum(c.bytes for c in memory_ledger(spec, training, p, cluster).stages[0].components
                  if c.name == "activations: layers") for p in (megatron, dtensor)]
    h, t, tokens = spec.hidden_size, 8, 8192
    assert layers[1] - layers[0] == pytest.approx(
        spec.num_layers * tokens * 2 * 2 * h * (1 - 1 / t), rel=1e-6)
    # The output projection's input too (the head's ColwiseParallel).
    heads = [sum(c.bytes for c in memory_ledger(spec, training, p, cluster).stages[0].components
                 if c.name == "activations: embedding, head, logits, MTP")
             for p in (megatron, dtensor)]
    assert heads[1] - heads[0] == pytest.approx(tokens * 2 * h * (1 - 1 / t), abs=2)
    with pytest.raises(ValueError, match="sequence_parallel_saves_gathered"):
        ParallelConfig(tp=8, sequence_parallel_saves_gathered=True)


def test_loss_parallel_cross_entropy_backward_holds_three_more_fp32_shards() -> None:
    # torch.distributed.tensor.parallel.loss fuses both backwards as
    # (zeros_like(x) + exp(x)) * grad_output: the saved log-probabilities x, the zeros,
    # exp(x) and the sum live at once, 12 V / t bytes per token beyond x.
    from models.core.activations import LayerActivationContext, loss_backward_working_bytes

    spec = model_preset("llama-3.1-70b")
    plain = LayerActivationContext(seq_len=8192, micro_batch_size=16)
    parallel = LayerActivationContext(seq_len=8192, micro_batch_size=16, tp=8,
                                      sequence_parallel=True)
    tokens = 8192 * 16
    assert loss_backward_working_bytes(spec, plain) == 8 * spec.vocab_size * tokens
    assert loss_backward_working_bytes(spec, parallel) == 12 * spec.vocab_size * tokens // 8


def test_the_fsdp_root_unit_stays_gathered_through_the_step() -> None:
    # FSDP never reshards the root (the embedding and head no block wraps) after forward:
    # Llama 3.1 8B, 2 x 128,256 x 4,096 bf16 parameters = 1.96 GiB on every rank.
    from models.core.runtime_memory import fsdp_root_unit_bytes

    spec = model_preset("llama-3.1-8b")
    training = TrainingSpec(global_batch_size=8, sequence_length=8192)
    cluster = cluster_preset("h100-sxm5-80gb", num_nodes=1)
    fsdp = ParallelConfig(dp=8, zero_stage=3, fsdp=True)
    stage = memory_ledger(spec, training, fsdp, cluster).stages[0]
    root = sum(c.bytes for c in stage.components if c.name == "FSDP root unit gathered")
    assert root == 2 * 128_256 * 4_096 * 2
    assert round(root / GIB, 2) == 1.96
    resident = fsdp.model_copy(update={"fsdp_reshard_after_forward": False})
    deepspeed = ParallelConfig(dp=8, zero_stage=3)
    for parallel in (resident, deepspeed):
        stage = memory_ledger(spec, training, parallel, cluster).stages[0]
        assert not any(c.name == "FSDP root unit gathered" for c in stage.components)
    assert fsdp_root_unit_bytes  # exported for the ledger's readers


@pytest.mark.parametrize("run", PUBLISHED_SYSTEMS, ids=[run.id for run in PUBLISHED_SYSTEMS])
def test_the_default_safety_margin_keeps_every_published_system(run: PublishedRun) -> None:
    """The request's default margin (the ledger's worst under-prediction of a measured peak)
    does not refuse a layout that ran: every published system's own recipe stays within the
    usable memory less the margin (the largest, Llama 3 405B on 8K GPUs, at 73.4 of 75.4 GiB)."""
    cluster = cluster_preset(run.gpu, num_nodes=run.num_nodes, gpus_per_node=run.gpus_per_node)
    cluster = cluster.model_copy(update={"memory_headroom_frac": DEFAULT_MEMORY_HEADROOM_FRAC,
                                         "memory_margin_frac": DEFAULT_MEMORY_MARGIN_FRAC})
    training = decided_for(run_model(run), run.training, run.parallel, cluster,
                           any_target=True)
    ledger = memory_ledger(run_model(run), training, run.parallel, cluster)
    assert ledger.margin_bytes == cluster.memory_margin_bytes > 0
    assert ledger.fits, (run.id, ledger.peak_bytes / GIB, ledger.capacity_bytes / GIB)
