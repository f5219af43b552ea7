"""What autograd keeps of a torchtitan-shaped Llama block run eagerly (``fsdp2`` with
``compile`` false), measured on the CPU through ``saved_tensors_hooks``, against
:func:`model.activations.kind_activations` with ``eager_elementwise`` (the rows of
:func:`model.eager_saved.eager_rows`).

The block is written as torchtitan 9dec370 writes it (``torchtitan/models/norms.py``
``RMSNorm``; ``torchtitan/models/llama/model.py`` ``apply_rotary_emb``, ``repeat_kv``,
``Attention``, ``FeedForward``, ``TransformerBlock``), tiny, bf16, one process."""

from __future__ import annotations

from fractions import Fraction

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from tests.fidelity.harness import SavedBytes, storage  # noqa: E402
from trainplan.model.activations import ActivationContext, kind_activations  # noqa: E402
from trainplan.model.specs import Architecture  # noqa: E402

B, S_LEN, H, A, G, FFN = 2, 32, 64, 4, 2, 160
D = H // A


def _rmsnorm(x, weight):
    def _norm(t):
        return t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + 1e-6)

    return _norm(x.float()).type_as(x) * weight


def _rope(xq, xk, freqs_cis):
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    f = freqs_cis.view(1, xq_.shape[1], 1, xq_.shape[-1])
    xq_out = torch.view_as_real(xq_ * f).flatten(3)
    xk_out = torch.view_as_real(xk_ * f).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


def _repeat_kv(x, n_rep):
    bs, slen, kv, hd = x.shape
    return x[:, :, :, None, :].expand(bs, slen, kv, n_rep, hd).reshape(bs, slen, kv * n_rep, hd)


def _block(x, p, freqs_cis):
    xq = F.linear(n := _rmsnorm(x, p["attn_norm"]), p["wq"]).view(B, S_LEN, A, D)
    xk = F.linear(n, p["wk"]).view(B, S_LEN, G, D)
    xv = F.linear(n, p["wv"]).view(B, S_LEN, G, D)
    xq, xk = _rope(xq, xk, freqs_cis)
    keys, values = _repeat_kv(xk, A // G), _repeat_kv(xv, A // G)
    q, k, v = (t.transpose(1, 2) for t in (xq, keys, values))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    out = out.transpose(1, 2).contiguous().view(B, S_LEN, -1)
    h = x + F.linear(out, p["wo"])
    m = _rmsnorm(h, p["ffn_norm"])
    return h + F.linear(F.silu(F.linear(m, p["w1"])) * F.linear(m, p["w3"]), p["w2"])


def test_eager_llama_block_keeps_what_the_eager_rows_count():
    torch.manual_seed(0)
    bf16 = torch.bfloat16
    shapes = {
        "attn_norm": (H,),
        "ffn_norm": (H,),
        "wq": (A * D, H),
        "wk": (G * D, H),
        "wv": (G * D, H),
        "wo": (H, A * D),
        "w1": (FFN, H),
        "w3": (FFN, H),
        "w2": (H, FFN),
    }
    p = {k: (torch.randn(s, dtype=bf16) * 0.1).requires_grad_() for k, s in shapes.items()}
    freqs = torch.polar(torch.ones(S_LEN, D // 2), torch.randn(S_LEN, D // 2))  # a buffer
    x = torch.randn(B, S_LEN, H, dtype=bf16, requires_grad=True)
    meter = SavedBytes(exclude={storage(t).data_ptr() for t in (*p.values(), freqs)})
    with meter.hooks():
        y = _block(x, p, freqs)
    measured = meter.current
    arch = Architecture(
        num_layers=1,
        hidden_size=H,
        num_attention_heads=A,
        num_kv_heads=G,
        ffn_hidden_size=FFN,
        vocab_size=128,
        mlp="swiglu",
        norm="rmsnorm",
    )
    ctx = dict(seq_len=S_LEN, cp=1, micro_batch_size=B, tp=1, sequence_parallel=False)
    # fsdp2's flags (model.terms.activation_fields): SDPA keeps its log-sum-exp, eager or not
    ctx = dict(ctx, flash_attention=True, saves_softmax_lse=True)
    eager = kind_activations(arch, False, ActivationContext(**ctx, eager_elementwise=True))
    fused = kind_activations(arch, False, ActivationContext(**ctx))
    # by hand, T = 64 tokens, bf16: two norms' FP32 copy 4·T·h, normalised output 2·T·h and rstd
    # 4·T; the QKV and FC1 inputs 2·T·h each; Q 2·T·a·d; K and V repeated 2·T·a·d each; SDPA's
    # output (wo's input, one storage) 2·T·a·d and log-sum-exp 4·a·T; w1 and w3 outputs, SiLU's
    # output and the product 2·T·f each
    T = B * S_LEN
    by_hand = (
        2 * (4 * T * H + 2 * T * H + 4 * T)
        + 2 * (2 * T * H)
        + 4 * (2 * T * A * D)
        + 4 * A * T
        + 4 * (2 * T * FFN)
    )
    assert measured == by_hand == eager.full_bytes
    # the fused kernels' count (the paper's) is what Megatron-Core's layers and Inductor keep;
    # SDPA's log-sum-exp 4·a·T is in both (Inductor's partitioner never recomputes SDPA)
    assert eager.full_bytes - fused.full_bytes == Fraction(
        2 * (4 * T * H + 4 * T) + 2 * 2 * T * (A - G) * D + 2 * T * FFN
    )
    y.float().sum().backward()
    assert meter.current == 0
