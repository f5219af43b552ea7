"""What autograd keeps of torchtitan's eager MoE experts and gpt-oss's sink rescale, measured on
the CPU through ``saved_tensors_hooks``, against the rows :func:`model.activations.
kind_activations` counts with ``eager_elementwise`` (:mod:`model.eager_moe`).

The code is written as pytorch/torchtitan b5bcd76c6 writes it (``torchtitan/models/gpt_oss/
moe.py`` ``swiglu`` and ``GptOssGroupedExperts.forward``; ``torchtitan/models/common/moe.py``
``GroupedExperts.forward``; ``torchtitan/models/gpt_oss/model.py``
``apply_attention_sink_rescale``), tiny, bf16, one process; the attention kernel is a stand-in
that saves its output and log-sum-exp as the flash kernels do."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from tests.fidelity.harness import SavedBytes, storage  # noqa: E402
from trainplan.model.activations import ActivationContext, kind_activations  # noqa: E402
from trainplan.model.arch_parts import MoESpec  # noqa: E402
from trainplan.model.specs import Architecture  # noqa: E402

T, H, K, E, FE, A, D = 32, 64, 2, 4, 48, 4, 16
R = K * T
BF16 = torch.bfloat16


def _arch(clamp: bool) -> Architecture:
    return Architecture(
        num_layers=1,
        hidden_size=H,
        num_attention_heads=A,
        num_kv_heads=A,
        head_dim=D,
        ffn_hidden_size=FE,
        vocab_size=128,
        mlp="swiglu",
        norm="rmsnorm",
        glu_clamp=clamp,
        linear_bias=clamp,
        attention_sinks=clamp,
        moe=MoESpec(num_experts=E, experts_per_token=K, expert_ffn_hidden_size=FE),
    )


def _terms(clamp: bool) -> dict[str, object]:
    ctx = ActivationContext(
        seq_len=T,
        cp=1,
        micro_batch_size=1,
        tp=1,
        sequence_parallel=False,
        flash_attention=True,
        eager_elementwise=True,
        saves_softmax_lse=True,  # fsdp2's flag (model.terms.activation_fields)
    )
    return dict(kind_activations(_arch(clamp), True, ctx).terms)


def _param(*shape: int) -> torch.Tensor:
    return (torch.randn(*shape, dtype=BF16) * 0.1).requires_grad_()


def _swiglu(x, alpha: float = 1.702, limit: float = 7.0):
    x_glu, x_linear = x[..., ::2], x[..., 1::2]
    x_glu = x_glu.clamp(min=None, max=limit)
    x_linear = x_linear.clamp(min=-limit, max=limit)
    out_glu = x_glu * torch.sigmoid(alpha * x_glu)
    return torch.addcmul(out_glu, out_glu, x_linear)


def _routed_expert_bytes(terms: dict[str, object]) -> object:
    """The routed experts' own rows (not the dispatch copies, the combine or the router)."""
    skip = ("inputs (top-k copies)", "outputs for the combine")
    return sum(
        v for n, v in terms.items() if n.startswith("routed expert") and not n.endswith(skip)
    )  # type: ignore[misc]


def test_gpt_oss_experts_keep_seven_of_the_hidden_width():
    torch.manual_seed(0)
    w1, b1, w2, b2 = _param(E, 2 * FE, H), _param(E, 2 * FE), _param(E, H, FE), _param(E, H)
    x = torch.randn(R, H, dtype=BF16, requires_grad=True)
    counts = torch.full((E,), R // E, dtype=torch.int64)
    offs = torch.cumsum(counts, 0, dtype=torch.int32)
    meter = SavedBytes(exclude={storage(t).data_ptr() for t in (w1, b1, w2, b2, x, offs)})
    with meter.hooks():
        h = torch._grouped_mm(x, w1.transpose(-2, -1), offs=offs)
        h = h + b1.repeat_interleave(counts, dim=0, output_size=R)
        y = torch._grouped_mm(_swiglu(h), w2.transpose(-2, -1), offs=offs)
        y = y + b2.repeat_interleave(counts, dim=0, output_size=R)
    # by hand: h_RG 2·R·2f (kept through the clamps' views), the clamped gate, the sigmoid
    # output, out_glu, the clamped linear half and the addcmul result 2·R·f each; the two
    # repeat_interleave index vectors 8·R each (the grouped GEMMs' int32 offsets, 4·E bytes a
    # layer, are left out of the meter and of the rows)
    by_hand = 2 * R * 2 * FE + 5 * 2 * R * FE + 2 * 8 * R
    assert meter.current == by_hand == _routed_expert_bytes(_terms(clamp=True))
    y.float().sum().backward()
    assert meter.current == 0


def test_generic_grouped_experts_keep_silus_output():
    torch.manual_seed(0)
    w1, w3, w2 = _param(E, FE, H), _param(E, FE, H), _param(E, H, FE)
    x = torch.randn(R, H, dtype=BF16, requires_grad=True)
    offs = torch.cumsum(torch.full((E,), R // E), 0, dtype=torch.int32)
    meter = SavedBytes(exclude={storage(t).data_ptr() for t in (w1, w3, w2, x, offs)})
    with meter.hooks():
        h = F.silu(torch._grouped_mm(x, w1.transpose(-2, -1), offs=offs))
        h = h * torch._grouped_mm(x, w3.transpose(-2, -1), offs=offs)
        y = torch._grouped_mm(h, w2.transpose(-2, -1), offs=offs)
    # w1's output, SiLU's output, w3's output and the product, 2·R·f each
    assert meter.current == 4 * 2 * R * FE == _routed_expert_bytes(_terms(clamp=False))
    y.float().sum().backward()
    assert meter.current == 0


class _Kernel(torch.autograd.Function):
    """A flash kernel's saved tensors: its query, key, value (here one input), output and
    FP32 log-sum-exp; the output and the log-sum-exp returned."""

    @staticmethod
    def forward(ctx, q):  # type: ignore[override]
        out, lse = q * 1.0, q.float().sum(-1)
        ctx.save_for_backward(q, out, lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, dlse):  # type: ignore[override]
        q, out, lse = ctx.saved_tensors
        return dout + dlse.unsqueeze(-1).to(dout.dtype)


def test_sink_rescale_keeps_the_kernel_output_beside_wos_input():
    torch.manual_seed(0)
    q = torch.randn(T, A, D, dtype=BF16, requires_grad=True)
    sinks, wo = _param(A), _param(H, A * D)
    meter = SavedBytes(exclude={storage(t).data_ptr() for t in (q, sinks, wo)})
    with meter.hooks():
        out, lse = _Kernel.apply(q)
        scale = torch.sigmoid(lse - sinks.view(1, -1)).unsqueeze(-1)
        y = F.linear((out * scale.to(out.dtype)).reshape(T, -1).contiguous(), wo)
    # the kernel's output 2·T·a·d (kept by the kernel and the product), its log-sum-exp 4·T·a,
    # sigmoid's FP32 output 4·T·a, the BF16 scale 2·T·a, the product (wo's input) 2·T·a·d
    by_hand = 2 * (2 * T * A * D) + 4 * T * A + 4 * T * A + 2 * T * A
    terms = _terms(clamp=True)
    counted = (
        terms["output projection input"]
        + terms["softmax statistics (fp32 logsumexp)"]
        + sum(v for n, v in terms.items() if "sink" in n)  # type: ignore[misc]
    )
    assert meter.current == by_hand == counted
    y.float().sum().backward()
    assert meter.current == 0
