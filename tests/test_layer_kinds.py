"""Layer kinds have one home: their records in `models/core/layer_kinds/`, found by the registry.

Two checks: an AST scan of the product packages that fails on code outside the records that
branches on a layer kind (compares or matches a kind name, keys a table by one, or asks
whether a kind's sub-spec is present), and a toy layer kind, registered here and nowhere
else, that flows through the parameter count, the FLOPs, the memory ledger and the step
time.
"""

import ast
from pathlib import Path

import pytest

from api_schemas import ParallelConfig, TrainingSpec
from api_schemas.architecture import ModelSpec
from api_schemas.parallel import RecomputeModule
from models.catalog.presets import cluster_preset, model_preset
from models.core.activations import ACTIVATION_BYTES, LayerActivationContext, layer_activation_bytes
from models.core.flops import layer_forward_flops, model_forward_flops
from models.core.layer_kinds import registry
from models.core.layer_kinds.base import MlpRecord, StoredTerm
from models.core.layer_kinds.dense_attention import DenseAttention
from models.core.memory import memory_ledger
from models.core.params import count_parameters
from models.core.step_time import estimate_step
from models.errors import InvalidSpecError

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("models", "solver", "service")
RECORDS = ROOT / "models" / "core" / "layer_kinds"
KIND_ENUMS = frozenset({"AttentionKind", "MlpKind", "NormKind", "LinearAttentionKind"})
KIND_FIELDS = frozenset({"attention", "mlp", "norm"})
"""`ModelSpec` fields that hold a kind name (compared with a string literal: a branch)."""
SUB_SPECS = frozenset({"moe", "mla", "linear_attention"})
"""`ModelSpec` fields whose presence means a layer kind (`spec.moe is None`: a branch)."""

ALLOWED_PRESENCE_CHECKS: dict[str, int] = {
    # Each of these reads the MoE block's or the linear-attention layers' own fields right
    # after asking (so the type checker needs the `is None` narrowing): what an MoE layer
    # costs in time and memory still lives in models/core/compute.py,
    # models/core/moe/host_issue.py, the memory ledger's rank modules (rank_states.py,
    # rank_activations.py) and models/core/runtime_memory.py beside the dense code, and the
    # exporters write the expert settings. Moving them into the MoE block's record is the next
    # step, after the solver's candidate refactor lands in those files. Model-level questions
    # ("is there an expert axis") ask `has_routed_experts`.
    "models/core/compute.py": 2,  # MoE block times, elementwise bytes
    "models/core/moe/host_issue.py": 2,  # MoE host sync and issue (moved from compute.py)
    "models/core/rank_activations.py": 1,  # EP-overlap paired micro-batches
    "models/core/rank_states.py": 1,  # expert data-parallel degree
    "models/core/runtime_memory.py": 3,  # DeepEP / all-to-all buffers; the KCP state buffer
    "service/limits.py": 1,  # the routed expert count a request may carry
    "solver/calibration.py": 1,  # MoE layer forwards of a calibration run
    "solver/export/deepspeed.py": 1,  # DeepSpeed MoE arguments
    "solver/export/launch.py": 3,  # expert count and EP in the launch summary
    "solver/export/megatron.py": 2,  # EP degrees, EP overlap
    "solver/export/megatron_model.py": 1,  # note: linear-attention layers need own spec
    "solver/export/torchtitan.py": 6,  # torchtitan's MoE / EP settings
    "solver/logs/__init__.py": 1,  # expected expert count in a parsed log
}
"""Files that still ask whether the model has a sub-spec, with how often: the count may
only fall (lower it when a site moves into a record)."""


def _is_kind_member(node: ast.expr) -> bool:
    """`AttentionKind.MLA` (or `architecture.AttentionKind.MLA`)."""
    if not isinstance(node, ast.Attribute):
        return False
    owner = node.value
    name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", None)
    return name in KIND_ENUMS


def _is_kind_field(node: ast.expr) -> bool:
    return isinstance(node, ast.Attribute) and node.attr in KIND_FIELDS


def _is_sub_spec(node: ast.expr) -> bool:
    return isinstance(node, ast.Attribute) and node.attr in SUB_SPECS


def _compare_branches(node: ast.Compare) -> str | None:
    operands = [node.left, *node.comparators]
    members = [o for o in operands if _is_kind_member(o)]
    members += [e for o in operands if isinstance(o, (ast.Tuple, ast.List, ast.Set))
                for e in o.elts if _is_kind_member(e)]
    if members:
        return "compares a layer-kind name"
    strings = any(isinstance(o, ast.Constant) and isinstance(o.value, str) for o in operands)
    if strings and any(_is_kind_field(o) for o in operands):
        return "compares a layer-kind field with a string"
    nones = any(isinstance(o, ast.Constant) and o.value is None for o in operands)
    if nones and any(_is_sub_spec(o) for o in operands):
        return "presence"
    return None


def _branches(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) of every branch on a layer kind in a module."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            what = _compare_branches(node)
            if what is not None:
                found.append((node.lineno, what))
        elif isinstance(node, ast.Dict):
            if any(key is not None and _is_kind_member(key) for key in node.keys):
                found.append((node.lineno, "keys a table by layer-kind name"))
        elif isinstance(node, ast.match_case):
            if any(_is_kind_member(sub) for sub in ast.walk(node.pattern)
                   if isinstance(sub, ast.expr)):
                found.append((node.pattern.lineno, "matches a layer-kind name"))
    return found


def _product_modules() -> list[Path]:
    return [path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))
            if RECORDS not in path.parents]


def test_the_scan_sees_each_kind_of_branch() -> None:
    source = """
if spec.attention == AttentionKind.MLA: pass
if spec.mlp in (MlpKind.GELU, MlpKind.SWIGLU): pass
per = {NormKind.RMSNORM: 1}[spec.norm]
if spec.attention == "mla": pass
if spec.moe is not None: pass
match la.kind:
    case LinearAttentionKind.KDA: pass
fields = {"mlp": MlpKind.GELU if act == "gelu" else MlpKind.SWIGLU}
"""
    found = _branches(ast.parse(source))
    assert sorted(line for line, _ in found) == [2, 3, 4, 5, 6, 8]
    assert [what for _, what in found].count("presence") == 1


def test_no_module_outside_the_records_branches_on_a_layer_kind() -> None:
    offenders: list[str] = []
    presence: dict[str, int] = {}
    for path in _product_modules():
        rel = path.relative_to(ROOT).as_posix()
        for line, what in _branches(ast.parse(path.read_text(encoding="utf-8"))):
            if what == "presence":
                presence[rel] = presence.get(rel, 0) + 1
            else:
                offenders.append(f"{rel}:{line} {what}")
    assert offenders == [], "ask the layer kind's record (models/core/layer_kinds) instead"
    grown = {rel: n for rel, n in presence.items() if n > ALLOWED_PRESENCE_CHECKS.get(rel, 0)}
    assert grown == {}, "a new `spec.<sub-spec> is None` branch: ask a layer-kind record"
    stale = {rel: n for rel, n in ALLOWED_PRESENCE_CHECKS.items() if presence.get(rel, 0) < n}
    assert stale == {}, "a presence check moved: lower its count in ALLOWED_PRESENCE_CHECKS"


def test_every_kind_name_has_a_record() -> None:
    from api_schemas.architecture import AttentionKind, LinearAttentionKind, MlpKind, NormKind

    assert set(registry.ATTENTION_KINDS) == set(AttentionKind)
    assert set(registry.LINEAR_ATTENTION_KINDS) == set(LinearAttentionKind)
    assert set(registry.MLP_KINDS) == set(MlpKind)
    assert set(registry.NORM_KINDS) == set(NormKind)


def test_an_unknown_kind_is_an_error_not_another_kinds_numbers() -> None:
    spec = model_preset("llama-3.1-8b").model_copy(update={"mlp": "relu2"})
    with pytest.raises(InvalidSpecError, match="mlp='relu2' is not a known layer kind"):
        count_parameters(spec)


TOY_MLP = MlpRecord(name="swiglu", up_matrices=3, eager_product=False, megatron_args=())
"""A toy MLP with three up-side matrices (four in all): declared here and registered below,
nowhere else. It borrows SwiGLU's elementwise pass counts by name."""


class _ToyAttention(DenseAttention):
    """A toy attention kind: dense attention that keeps one more d-wide tensor per query
    head for backward, rebuilt by core-attention recomputation."""

    def stored_terms(self, spec: ModelSpec, *, tp: float, replicated_divisor: float,
                     activation_bytes: float) -> list[StoredTerm]:
        extra = StoredTerm("toy gate", activation_bytes * spec.num_attention_heads / tp
                           * spec.dim_per_head, (RecomputeModule.CORE_ATTN,))
        return [*super().stored_terms(spec, tp=tp, replicated_divisor=replicated_divisor,
                                      activation_bytes=activation_bytes), extra]

    def params(self, spec: ModelSpec, *, matrices_only: bool) -> int:
        gate = spec.hidden_size * spec.num_attention_heads * spec.dim_per_head
        return super().params(spec, matrices_only=matrices_only) + gate


@pytest.fixture
def toy_kinds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(registry.MLP_KINDS, "toy_mlp", TOY_MLP)
    monkeypatch.setitem(registry.ATTENTION_KINDS, "toy_attention", _ToyAttention())


BASE = model_preset("llama-3.1-8b")
TRAINING = TrainingSpec(global_batch_size=64, sequence_length=4096)
PARALLEL = ParallelConfig(tp=2, pp=2, dp=16, micro_batch_size=1, sequence_parallel=True)
CLUSTER = cluster_preset("h100-sxm5-80gb", num_nodes=8)


@pytest.mark.usefixtures("toy_kinds")
def test_a_toy_mlp_kind_flows_through_params_flops_memory_and_step_time() -> None:
    toy = BASE.model_copy(update={"mlp": "toy_mlp"})
    h, f, layers, seq = BASE.hidden_size, BASE.ffn_hidden_size, BASE.num_layers, 4096
    # One more h x f matrix per layer than SwiGLU's three.
    assert count_parameters(toy).total - count_parameters(BASE).total == layers * h * f
    extra_gemm = layer_forward_flops(toy, 0, seq_len=seq).gemm_flop - layer_forward_flops(
        BASE, 0, seq_len=seq).gemm_flop
    assert extra_gemm == 2.0 * seq * h * f
    assert model_forward_flops(toy, seq_len=seq) > model_forward_flops(BASE, seq_len=seq)
    # One more up-projection output of f per token on the layer's ledger.
    ctx = LayerActivationContext(seq_len=seq, micro_batch_size=1)
    toy_layer, base_layer = layer_activation_bytes(toy, 0, ctx), layer_activation_bytes(
        BASE, 0, ctx)
    assert toy_layer.total_bytes - base_layer.total_bytes == seq * ACTIVATION_BYTES * f
    toy_ledger = memory_ledger(toy, TRAINING, PARALLEL, CLUSTER)
    base_ledger = memory_ledger(BASE, TRAINING, PARALLEL, CLUSTER)
    assert toy_ledger.peak_bytes > base_ledger.peak_bytes
    # And a step: a third more MLP work per layer takes longer.
    toy_step = estimate_step(toy, TRAINING, PARALLEL, CLUSTER)
    assert toy_step.step_time_s > estimate_step(BASE, TRAINING, PARALLEL, CLUSTER).step_time_s


@pytest.mark.usefixtures("toy_kinds")
def test_a_toy_attention_kind_flows_through_params_and_memory() -> None:
    toy = BASE.model_copy(update={"attention": "toy_attention"})
    h, a, d = BASE.hidden_size, BASE.num_attention_heads, BASE.dim_per_head
    assert count_parameters(toy).total - count_parameters(BASE).total == BASE.num_layers * (
        h * a * d)
    ctx = LayerActivationContext(seq_len=4096, micro_batch_size=1, tp=2)
    toy_layer = layer_activation_bytes(toy, 0, ctx)
    gate = [t for t in toy_layer.tensors if t.name == "toy gate"]
    assert [t.bytes for t in gate] == [4096 * ACTIVATION_BYTES * a // 2 * d]
    assert RecomputeModule.CORE_ATTN in gate[0].dropped_by
    assert memory_ledger(toy, TRAINING, PARALLEL, CLUSTER).peak_bytes > memory_ledger(
        BASE, TRAINING, PARALLEL, CLUSTER).peak_bytes
