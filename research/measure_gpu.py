"""Measure, on one GPU, what the cost model predicts: GEMM and fused-attention speed, and the
bytes and time of a real eager transformer layer.

    python research/measure_gpu.py --out research/data/measured/<gpu>.json

Owns: the measurement of one GPU (PyTorch with CUDA, imported only here) and the JSON it
writes. The comparison with the model is `research/compare_measured.py`, and the test that
holds the model to the committed measurement is `tests/research/test_measured_gpu.py`.
Must not: fit or change any constant (the committed JSON is validation data, never
calibration data, unless CALIBRATION.md says otherwise).

What is measured (CUDA events after warm-up, the mean of the timed iterations):
- GEMMs `C[M,N] = A[M,K] B[K,N]` in BF16 (`torch.matmul`) and FP8-E4M3 with per-tensor
  scales (`torch._scaled_mm`, BF16 output), on square sizes and on the shapes of a Llama 3.1
  8B layer at 8,192 tokens;
- causal fused attention forward + backward (`scaled_dot_product_attention`, the FlashAttention
  backend forced, and the cuDNN backend where PyTorch offers it), 32 query heads of 128 on
  16,384 tokens per call;
- one Llama-style decoder layer written the way an eager PyTorch runtime (torchtitan) writes
  it: RMSNorm, Q/K/V projections with grouped KV heads, rotary embedding, fused causal
  attention, output projection, RMSNorm, SwiGLU MLP, residual adds; BF16 weights, no
  dropout. Stored bytes per layer are the growth of allocated memory between a forward
  through one layer and a forward through two (so the input, the output and the weights
  cancel out), and time is forward + backward of one layer.
"""

import argparse
import json
import platform
import sys
from collections.abc import Callable
from typing import Any

from calibration.bench import timed_s

LLAMA_8B = {"hidden": 4096, "heads": 32, "kv_heads": 8, "head_dim": 128, "ffn": 14336}
"""Llama 3.1 8B's layer shape (its Hugging Face config.json)."""


def _timed(torch: Any, fn: Callable[[], object]) -> float:
    """Mean seconds per call after warm-up (`calibration.bench.timed_s`, the kit's timer)."""
    return timed_s(torch, fn, warmup=3, iterations=10)


def _gemm_shapes(tokens: int) -> list[tuple[str, int, int, int]]:
    h, d, ffn = LLAMA_8B["hidden"], LLAMA_8B["head_dim"], LLAMA_8B["ffn"]
    qkv = (LLAMA_8B["heads"] + 2 * LLAMA_8B["kv_heads"]) * d
    shapes = [(f"square {n}", n, n, n) for n in (1024, 2048, 4096, 8192, 16384)]
    shapes += [("llama8b qkv", tokens, qkv, h), ("llama8b out", tokens, h, h),
               ("llama8b gate+up", tokens, 2 * ffn, h), ("llama8b down", tokens, h, ffn)]
    return shapes


def gemms(torch: Any, tokens: int) -> list[dict[str, Any]]:
    """BF16 and FP8 GEMM times on square and Llama 3.1 8B shapes."""
    out = []
    one = torch.tensor(1.0, device="cuda", dtype=torch.float32)
    for name, m, n, k in _gemm_shapes(tokens):
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        seconds = _timed(torch, lambda a=a, b=b: torch.matmul(a, b))
        out.append({"name": name, "dtype": "bf16", "m": m, "n": n, "k": k, "seconds": seconds})
        a8 = a.to(torch.float8_e4m3fn)
        b8 = b.t().contiguous().to(torch.float8_e4m3fn).t()  # column-major, as _scaled_mm needs
        try:
            seconds = _timed(torch, lambda a8=a8, b8=b8: torch._scaled_mm(
                a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16))
        except (RuntimeError, TypeError) as error:  # an FP8 path this torch lacks
            out.append({"name": name, "dtype": "fp8", "m": m, "n": n, "k": k,
                        "error": str(error)[:200]})
            continue
        out.append({"name": name, "dtype": "fp8", "m": m, "n": n, "k": k, "seconds": seconds})
        del a, b, a8, b8
    return out


def attention(torch: Any) -> list[dict[str, Any]]:
    """Causal fused attention forward + backward, per backend and sequence length."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    functional = torch.nn.functional
    heads, dim, tokens = 32, 128, 16384
    out = []
    backends = [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)]
    for seq in (2048, 4096, 8192, 16384):
        batch = tokens // seq
        shape = (batch, heads, seq, dim)
        q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                   for _ in range(3))
        grad = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
        for label, backend in backends:
            def step(q: Any = q, k: Any = k, v: Any = v, grad: Any = grad,
                     backend: Any = backend) -> None:
                with sdpa_kernel([backend]):
                    o = functional.scaled_dot_product_attention(q, k, v, is_causal=True)
                o.backward(grad)
            try:
                seconds = _timed(torch, step)
                forward = _timed(torch, lambda q=q, k=k, v=v, backend=backend: _forward(
                    torch, functional, sdpa_kernel, backend, q, k, v))
            except RuntimeError as error:
                out.append({"backend": label, "seq": seq, "error": str(error)[:200]})
                continue
            out.append({"backend": label, "batch": batch, "heads": heads, "seq": seq,
                        "head_dim": dim, "causal": True, "seconds_fwd_bwd": seconds,
                        "seconds_fwd": forward})
    return out


def _forward(torch: Any, functional: Any, sdpa_kernel: Any, backend: Any,
             q: Any, k: Any, v: Any) -> None:
    with torch.no_grad(), sdpa_kernel([backend]):
        functional.scaled_dot_product_attention(q, k, v, is_causal=True)


def _layer_class(torch: Any) -> Any:
    nn, functional = torch.nn, torch.nn.functional

    class DecoderLayer(nn.Module):  # type: ignore[misc,name-defined]
        def __init__(self, hidden: int, heads: int, kv_heads: int, head_dim: int,
                     ffn: int) -> None:
            super().__init__()
            self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
            self.attention_norm = nn.RMSNorm(hidden, eps=1e-5)
            self.wq = nn.Linear(hidden, heads * head_dim, bias=False)
            self.wk = nn.Linear(hidden, kv_heads * head_dim, bias=False)
            self.wv = nn.Linear(hidden, kv_heads * head_dim, bias=False)
            self.wo = nn.Linear(heads * head_dim, hidden, bias=False)
            self.ffn_norm = nn.RMSNorm(hidden, eps=1e-5)
            self.w1 = nn.Linear(hidden, ffn, bias=False)
            self.w3 = nn.Linear(hidden, ffn, bias=False)
            self.w2 = nn.Linear(ffn, hidden, bias=False)

        @staticmethod
        def _rope(x: Any, cos: Any, sin: Any) -> Any:
            half = x.shape[-1] // 2
            rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
            return x * cos + rotated * sin

        def forward(self, x: Any, cos: Any, sin: Any) -> Any:
            batch, seq, _ = x.shape
            h = self.attention_norm(x)
            q = self.wq(h).view(batch, seq, self.heads, self.head_dim).transpose(1, 2)
            k = self.wk(h).view(batch, seq, self.kv_heads, self.head_dim).transpose(1, 2)
            v = self.wv(h).view(batch, seq, self.kv_heads, self.head_dim).transpose(1, 2)
            q, k = self._rope(q, cos, sin), self._rope(k, cos, sin)
            o = functional.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                        enable_gqa=True)
            x = x + self.wo(o.transpose(1, 2).reshape(batch, seq, -1))
            h = self.ffn_norm(x)
            return x + self.w2(functional.silu(self.w1(h)) * self.w3(h))

    return DecoderLayer


def _rope(torch: Any, seq: int) -> tuple[Any, Any]:
    """Llama 3's rotary cos and sin tables (theta 500,000) for `seq` positions, BF16."""
    head_dim = LLAMA_8B["head_dim"]
    position = torch.arange(seq, device="cuda", dtype=torch.float32)
    inv = 1.0 / (500000.0 ** (torch.arange(0, head_dim, 2, device="cuda",
                                           dtype=torch.float32) / head_dim))
    angles = torch.outer(position, inv)
    cos = torch.cat((angles.cos(), angles.cos()), dim=-1).to(torch.bfloat16)
    sin = torch.cat((angles.sin(), angles.sin()), dim=-1).to(torch.bfloat16)
    return cos, sin


def _stored_bytes(torch: Any, layers: list[Any], batch: tuple[int, int],
                  rope: tuple[Any, Any], *, backward: bool) -> int:
    """Bytes the forward of `layers` leaves allocated for the backward, on a fresh
    (micro-batch, seq) input; `backward` runs it afterwards (a compiled graph's first
    backward compiles it)."""
    x = torch.randn(*batch, LLAMA_8B["hidden"], device="cuda", dtype=torch.bfloat16,
                    requires_grad=True)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    y = x
    for module in layers:
        y = module(y, *rope)
    torch.cuda.synchronize()
    grown = torch.cuda.memory_allocated() - before
    if backward:
        y.sum().backward()
    del y, x
    return int(grown)


def layer(torch: Any, seq: int, micro_batch: int) -> dict[str, Any]:
    """Stored bytes and forward+backward time of one eager Llama 3.1 8B layer."""
    shape = LLAMA_8B
    cls = _layer_class(torch)
    layers = [cls(shape["hidden"], shape["heads"], shape["kv_heads"], shape["head_dim"],
                  shape["ffn"]).to(device="cuda", dtype=torch.bfloat16) for _ in range(2)]
    cos, sin = _rope(torch, seq)

    def stored(count: int) -> int:
        return _stored_bytes(torch, layers[:count], (micro_batch, seq), (cos, sin),
                             backward=False)

    one, two = stored(1), stored(2)
    x = torch.randn(micro_batch, seq, shape["hidden"], device="cuda", dtype=torch.bfloat16,
                    requires_grad=True)
    grad = torch.randn_like(x)

    def step() -> None:
        layers[0](x, cos, sin).backward(grad)

    def forward() -> None:
        with torch.no_grad():
            layers[0](x, cos, sin)

    return {"model": "llama-3.1-8b layer (eager PyTorch)", "seq": seq,
            "micro_batch": micro_batch, "stored_bytes_one_layer": one,
            "stored_bytes_two_layers": two, "stored_bytes_per_layer": two - one,
            "seconds_fwd_bwd": _timed(torch, step), "seconds_fwd": _timed(torch, forward)}


def compiled_layer(torch: Any, seq: int) -> dict[str, Any]:
    """Stored bytes of the same layer under `torch.compile` (Inductor's partitioner decides
    what the fused graph saves)."""
    shape = LLAMA_8B
    cls = _layer_class(torch)
    layers = [torch.compile(cls(shape["hidden"], shape["heads"], shape["kv_heads"],
                                shape["head_dim"], shape["ffn"]).to(device="cuda",
                                                                    dtype=torch.bfloat16))
              for _ in range(2)]
    cos, sin = _rope(torch, seq)

    def stored(count: int) -> int:
        return _stored_bytes(torch, layers[:count], (1, seq), (cos, sin), backward=True)

    stored(2)  # compile both (forward and backward graphs) before measuring
    one, two = stored(1), stored(2)
    return {"model": "llama-3.1-8b layer (torch.compile)", "seq": seq, "micro_batch": 1,
            "stored_bytes_one_layer": one, "stored_bytes_two_layers": two,
            "stored_bytes_per_layer": two - one}


def training_step_memory(torch: Any, layers: int, seq: int, steps: int) -> dict[str, Any]:
    """Peak allocated and reserved bytes of a few training steps of a truncated Llama 3.1 8B
    (fp32 weights, BF16 autocast, fused AdamW, no recomputation): the caching allocator's
    reserve beyond what tensors hold, under the PYTORCH_CUDA_ALLOC_CONF this process has."""
    import os

    shape, vocab = LLAMA_8B, 128256
    cls = _layer_class(torch)
    nn = torch.nn

    class Model(nn.Module):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab, shape["hidden"])
            self.layers = nn.ModuleList(cls(shape["hidden"], shape["heads"], shape["kv_heads"],
                                            shape["head_dim"], shape["ffn"])
                                        for _ in range(layers))
            self.norm = nn.RMSNorm(shape["hidden"], eps=1e-5)
            self.head = nn.Linear(shape["hidden"], vocab, bias=False)

        def forward(self, tokens: Any, cos: Any, sin: Any) -> Any:
            x = self.embed(tokens)
            for layer in self.layers:
                x = layer(x, cos, sin)
            return self.head(self.norm(x))

    model = Model().cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)
    cos, sin = _rope(torch, seq)
    per_step = []
    torch.cuda.reset_peak_memory_stats()
    for _ in range(steps):
        tokens = torch.randint(0, vocab, (1, seq), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(tokens, cos, sin)
        loss = torch.nn.functional.cross_entropy(logits.float().view(-1, vocab),
                                                 tokens.view(-1))
        del logits
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        per_step.append({"max_allocated": torch.cuda.max_memory_allocated(),
                         "max_reserved": torch.cuda.max_memory_reserved()})
    stats = torch.cuda.memory_stats()
    return {"alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""), "layers": layers,
            "seq": seq, "params": sum(p.numel() for p in model.parameters()),
            "steps": per_step, "num_alloc_retries": stats.get("num_alloc_retries", 0)}


DEEPSEEK_V3_EXPERT = {"hidden": 7168, "ffn": 2048}
"""DeepSeek-V3's routed expert (its Hugging Face config.json: hidden_size,
moe_intermediate_size)."""


def grouped_gemms(torch: Any) -> list[dict[str, Any]]:
    """The routed experts' GEMMs of one MoE layer on one rank, BF16: `groups` local experts
    with `m` tokens each, as a loop of one GEMM per expert (`torch.matmul`) and as one
    grouped GEMM (`torch._grouped_mm`, the kernel torchtitan's MoE calls)."""
    h, f = DEEPSEEK_V3_EXPERT["hidden"], DEEPSEEK_V3_EXPERT["ffn"]
    out = []
    for groups in (8, 32):
        for m in (128, 512, 2048, 8192):
            for name, k, n in (("gate+up", h, 2 * f), ("down", f, h)):
                a = torch.randn(groups * m, k, device="cuda", dtype=torch.bfloat16)
                w = torch.randn(groups, n, k, device="cuda", dtype=torch.bfloat16)
                parts = a.split(m)

                def loop(parts: Any = parts, w: Any = w) -> None:
                    for e, x in enumerate(parts):
                        torch.matmul(x, w[e].t())

                row = {"name": f"deepseek-v3 expert {name}", "groups": groups, "m": m,
                       "n": n, "k": k, "dtype": "bf16", "seconds_loop": _timed(torch, loop)}
                offsets = torch.arange(m, groups * m + 1, m, device="cuda", dtype=torch.int32)
                try:
                    row["seconds_grouped"] = _timed(torch, lambda a=a, w=w, o=offsets:
                                                    torch._grouped_mm(a, w.transpose(-2, -1),
                                                                      offs=o))
                except (RuntimeError, TypeError, AttributeError) as error:
                    row["grouped_error"] = str(error)[:200]
                out.append(row)
                del a, w
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--only", choices=("kernels", "compiled", "allocator", "grouped"),
                        default="kernels", help="kernels and the eager layer (default), the "
                        "compiled layer, or a short training run's allocator reserve")
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("measure_gpu: no CUDA GPU visible; nothing measured", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    if args.only != "kernels":
        parts = {"compiled": lambda: compiled_layer(torch, 4096),
                 "grouped": lambda: grouped_gemms(torch),
                 "allocator": lambda: training_step_memory(torch, layers=4, seq=8192,
                                                           steps=4)}
        part = parts[args.only]()
        extra = {"device_name": torch.cuda.get_device_name(), "torch": torch.__version__,
                 args.only: part}
        with open(args.out, "w") as handle:
            json.dump(extra, handle, indent=1)
        print(json.dumps(extra, indent=1))
        return 0
    result = {
        "device_name": torch.cuda.get_device_name(),
        "torch": torch.__version__, "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(), "python": platform.python_version(),
        "gemm": gemms(torch, tokens=8192),
        "attention": attention(torch),
        "layer": [layer(torch, seq, 1) for seq in (4096, 8192)],
    }
    with open(args.out, "w") as handle:
        json.dump(result, handle, indent=1)
    print(json.dumps({k: v for k, v in result.items() if k != "gemm"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
