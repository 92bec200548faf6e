"""The registry of layer kinds: the one place that maps a kind name to its record.

Owns: `ATTENTION_KINDS`, `LINEAR_ATTENTION_KINDS`, `MLP_KINDS` and `NORM_KINDS` (one record
per member of `AttentionKind`, `LinearAttentionKind`, `MlpKind` and `NormKind`) and their
lookups (an unknown name is an error, never another kind's numbers). Must not: hold any
kind's facts itself (each record lives in its own module), or be branched around: the cost
model asks a record, it never compares a kind name (`tests/test_layer_kinds.py`).

Adding a layer kind: write its record module in this package, add the name to its enum in
`api_schemas/architecture.py` and the record to the table below.
"""

from typing import TypeVar

from api_schemas.architecture import (
    AttentionKind,
    LinearAttentionKind,
    LinearAttentionSpec,
    MlpKind,
    ModelSpec,
    NormKind,
)
from api_schemas.parallel import RecomputeModule
from models.core.layer_kinds.base import (
    AttentionRecord,
    LinearAttentionRecord,
    MlpBlockRecord,
    MlpRecord,
    NormRecord,
)
from models.core.layer_kinds.dense_attention import DENSE_ATTENTION
from models.core.layer_kinds.linear_attention import GATED_DELTA, KDA
from models.core.layer_kinds.mla import MLA
from models.core.layer_kinds.mlp import GELU, SWIGLU
from models.core.layer_kinds.moe import DENSE_MLP_BLOCK, MOE_BLOCK
from models.core.layer_kinds.norm import LAYERNORM, LAYERNORM_NO_AFFINE, RMSNORM
from models.core.search_memo import model_tables
from models.errors import InvalidSpecError

ATTENTION_KINDS: dict[str, AttentionRecord] = {
    AttentionKind.MHA: DENSE_ATTENTION,
    AttentionKind.GQA: DENSE_ATTENTION,
    AttentionKind.MLA: MLA,
}
LINEAR_ATTENTION_KINDS: dict[str, LinearAttentionRecord] = {
    LinearAttentionKind.KDA: KDA,
    LinearAttentionKind.GATED_DELTA: GATED_DELTA,
}
MLP_KINDS: dict[str, MlpRecord] = {MlpKind.GELU: GELU, MlpKind.SWIGLU: SWIGLU}
NORM_KINDS: dict[str, NormRecord] = {
    NormKind.LAYERNORM: LAYERNORM,
    NormKind.RMSNORM: RMSNORM,
    NormKind.LAYERNORM_NO_AFFINE: LAYERNORM_NO_AFFINE,
}


R = TypeVar("R")


def _lookup(table: dict[str, R], name: str, field: str) -> R:
    """`table[name]`, or the error naming the known kinds."""
    found = table.get(name)
    if found is None:
        known = ", ".join(f"'{kind}'" for kind in table)
        raise InvalidSpecError(f"{field}='{name}' is not a known layer kind: use one of "
                               f"{known}", field=field)
    return found


def attention_kind(spec: ModelSpec) -> AttentionRecord:
    """The record of the model's softmax attention."""
    return _lookup(ATTENTION_KINDS, spec.attention, "attention")


def linear_attention_kind(la: LinearAttentionSpec) -> LinearAttentionRecord:
    """The record of a hybrid model's linear attention."""
    return _lookup(LINEAR_ATTENTION_KINDS, la.kind, "linear_attention.kind")


def mlp_kind(spec: ModelSpec) -> MlpRecord:
    """The record of the model's MLP (dense layers, shared and routed experts alike)."""
    return _lookup(MLP_KINDS, spec.mlp, "mlp")


def mlp_block(spec: ModelSpec, layer_index: int) -> MlpBlockRecord:
    """The record of layer `layer_index`'s MLP block: the MoE block where the model routes
    (`ModelSpec.is_moe_layer`), else a dense MLP."""
    return MOE_BLOCK if spec.is_moe_layer(layer_index) else DENSE_MLP_BLOCK


def mlp_blocks(spec: ModelSpec) -> tuple[MlpBlockRecord, ...]:
    """The distinct MLP blocks of the model's layers, in the order of their first layer.

    Looks only as far as the first layer of each block (a dense model has one block), so
    the cost model may ask it per ledger without walking every layer; an MoE model's are
    kept on the search's tables of the model (the search asks per candidate)."""
    if spec.moe is None:
        return (DENSE_MLP_BLOCK,)
    tables = model_tables(spec)
    if tables.mlp_blocks is None:
        tables.mlp_blocks = _mlp_blocks(spec)
    return tables.mlp_blocks


def _mlp_blocks(spec: ModelSpec) -> tuple[MlpBlockRecord, ...]:
    """`mlp_blocks` of a model with MoE layers."""
    layers = range(spec.num_layers)
    first_moe = next((i for i in layers if spec.is_moe_layer(i)), None)
    first_dense = next((i for i in layers if not spec.is_moe_layer(i)), None)
    found = sorted([(i, n) for n, i in enumerate((first_moe, first_dense)) if i is not None])
    return tuple([(MOE_BLOCK, DENSE_MLP_BLOCK)[n] for _, n in found])


def kind_recompute_modules(spec: ModelSpec, *, cheap_only: bool = False
                           ) -> tuple[RecomputeModule, ...]:
    """Recompute modules the model's layer kinds add to the common ones (attention core,
    norms): MLA's up-projections, the MoE block's; `cheap_only`: those cheap to rebuild
    (kept on the search's tables of the model: the search asks per policy ladder)."""
    if not cheap_only:
        return _kind_recompute_modules(spec, cheap_only=False)
    tables = model_tables(spec)
    if tables.cheap_recompute_modules is None:
        tables.cheap_recompute_modules = _kind_recompute_modules(spec, cheap_only=True)
    return tables.cheap_recompute_modules


def _kind_recompute_modules(spec: ModelSpec, *, cheap_only: bool
                            ) -> tuple[RecomputeModule, ...]:
    out = list(attention_kind(spec).recompute_modules)
    for block in mlp_blocks(spec):
        out += block.cheap_recompute_modules if cheap_only else block.recompute_modules
    return tuple(out)


def norm_kind(spec: ModelSpec) -> NormRecord:
    """The record of the model's norms."""
    return _lookup(NORM_KINDS, spec.norm, "norm")


__all__ = ["ATTENTION_KINDS", "LINEAR_ATTENTION_KINDS", "MLP_KINDS", "NORM_KINDS",
           "attention_kind", "kind_recompute_modules", "linear_attention_kind", "mlp_block",
           "mlp_blocks", "mlp_kind", "norm_kind"]
