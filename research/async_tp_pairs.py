"""PyTorch's async TP as torchtitan measured it, against the userbuffers overlap rule.

Run: PYTHONPATH=. .venv/bin/python research/async_tp_pairs.py

Prints, for each pair of torchtitan runs that differ only in
`parallelism.enable_async_tensor_parallel` (`ASYNC_TP_PAIRS`): the printed tokens/s per GPU
without and with async TP and the measured gain; the model's prediction of the run without
it as published (`validate_published.predict`); and the gain the cost model would credit if
it priced the async run by Transformer Engine's userbuffers rule
(`TpOverlapEngine.USERBUFFERS`) instead of crediting nothing
(`models.core.runtime_features.userbuffers_tp_overlap`, which the as-published rows run
under). The figures behind that function's docstring.

Owns: `ASYNC_TP_PAIRS` and these printouts. Must not: change a row's settings or a constant
of the model (the rows are validation-only).
"""

from typing import Any

from api_schemas import TpOverlapEngine
from models.core.step_time import estimate_step
from research import validate_published as vp

ASYNC_TP_PAIRS: tuple[tuple[str, str], ...] = (
    ("torchtitan-t4-70b-256gpu-2d", "torchtitan-t4-70b-256gpu-2d-asynctp"),
    ("torchtitan-asynctp-70b-256gpu-bf16-vanilla", "torchtitan-asynctp-70b-256gpu-bf16-async"),
    ("torchtitan-asynctp-70b-256gpu-f8tw-vanilla", "torchtitan-asynctp-70b-256gpu-f8tw-async"),
    ("torchtitan-asynctp-8b-64gpu-bf16-vanilla", "torchtitan-asynctp-8b-64gpu-bf16-async"),
    ("torchtitan-asynctp-8b-64gpu-f8tw-vanilla", "torchtitan-asynctp-8b-64gpu-f8tw-async"),
)
"""(without, with) async TP: torchtitan `benchmarks/llama3_h100_202412_torchtitan.md`
Table 4 (Llama 3.1 70B, FSDP 32 x TP 8, Float8, December 2024) and
`benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md` (70B and 8B, BF16 and Float8
tensorwise, torch 38410cf9 of 2025-06-14); the rowwise Float8 pairs are not transcribed."""


def _row(row_id: str) -> dict[str, Any]:
    return next(r for r in vp.DATA["runs"] if r["id"] == row_id)


def userbuffers_rate(row: dict[str, Any]) -> float:
    """Tokens/s per GPU of a row as published, with its TP overlap priced as userbuffers."""
    row = vp.with_run_defaults(row)
    spec = vp.as_published_model(row)
    config = vp.as_published_config(row)
    if spec is None or config is None:
        raise ValueError(f"{row['id']} is not evaluated as published")
    parallel, training = config
    training = training.model_copy(update={"overlap_tp_comm": True,
                                           "tp_overlap_engine": TpOverlapEngine.USERBUFFERS})
    est = estimate_step(spec, training, parallel, vp.row_cluster(row))
    return est.tokens_per_s / row["hardware"]["num_gpus"]


def pair_figures(without_id: str, with_id: str) -> dict[str, float]:
    """The printed rates of a pair, the model's rate of each as published, and the rate the
    userbuffers rule gives the run with async TP."""
    without, with_ = _row(without_id), _row(with_id)
    off = vp.predict(without, vp.AS_PUBLISHED_PROTOCOL)
    on = vp.predict(with_, vp.AS_PUBLISHED_PROTOCOL)
    if off is None or on is None:
        raise ValueError(f"{without_id} / {with_id}: not evaluated as published")
    return {"printed_off": off[0], "printed_on": on[0], "model_off": off[1],
            "model_on": on[1], "userbuffers_on": userbuffers_rate(with_)}


def main() -> None:
    for without_id, with_id in ASYNC_TP_PAIRS:
        f = pair_figures(without_id, with_id)
        measured = 100 * (f["printed_on"] / f["printed_off"] - 1)
        credited = 100 * (f["model_on"] / f["model_off"] - 1)
        userbuffers = 100 * (f["userbuffers_on"] / f["model_off"] - 1)
        print(f"{with_id:45s} printed {f['printed_off']:8.1f} -> {f['printed_on']:8.1f} "
              f"({measured:+.1f}%); model {f['model_off']:8.1f} -> {f['model_on']:8.1f} "
              f"({credited:+.1f}%, async TP not credited); userbuffers rule "
              f"{f['userbuffers_on']:8.1f} ({userbuffers:+.1f}%)")


if __name__ == "__main__":
    main()
