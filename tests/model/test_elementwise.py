"""torchtitan's eager elementwise passes against compiled (fused) ones (:mod:`model.elementwise`):
the bytes and kernels of each eager operator, counted by hand from torchtitan's model code at
9dec370, and the step time they add through ``evaluate``."""

from __future__ import annotations

import pytest

import trainplan
from trainplan.model.elementwise import Elementwise, elementwise_mode
from trainplan.model.errors import InputError
from trainplan.model.op_time import Clock, layer_compute
from trainplan.model.ops import LayerShape, OpKind, layer_ops
from trainplan.model.roofline import RooflineParams
from trainplan.model.specs import Architecture

# a Llama-style layer: h 4096, a 32, g 8 (d 128), f 14336, SwiGLU, RoPE, RMSNorm
LLAMA = Architecture(
    num_layers=1, hidden_size=4096, num_attention_heads=32, num_kv_heads=8,
    ffn_hidden_size=14336, vocab_size=128256, mlp="swiglu", norm="rmsnorm",
    position_embedding="rope",
)  # fmt: skip
T = 2 * 8192  # b 2 at s 8192, tp 1


def _ops(mode: Elementwise) -> dict[str, tuple[float, float, int, int]]:
    x = LayerShape(LLAMA, False, 8192, 2, 1, elementwise=mode)
    return {
        o.name: (o.forward_bytes, o.backward_bytes, o.forward_kernels, o.backward_kernels)
        for o in layer_ops(x)
        if o.kind is OpKind.MEMORY
    }


def test_eager_operators_move_what_the_code_reads_and_writes() -> None:
    eager, fused = _ops(Elementwise.EAGER), _ops(Elementwise.FUSED)
    th = T * 4096
    # RMSNorm: x.float() 6, pow 8, mean 4, x·r 8, type_as 6, ·weight 4 = 36 | 92 B per element
    assert eager["input norm"] == (36 * th, 92 * th, 8, 16)
    assert fused["input norm"] == (4 * th, 6 * th, 1, 1)
    # rotary embedding on q and k, (32 + 8)·128 per token: cast 6, complex product 8, cast 6
    qk = T * 40 * 128
    assert eager["rotary embedding"] == (20 * qk, 20 * qk, 6, 6)
    # SwiGLU per f element: silu 4 + product 6 | two product gradients 12 + silu_backward 6
    tf = T * 14336
    assert eager["MLP SwiGLU"] == (10 * tf, 18 * tf, 2, 3)
    # repeat_kv: k and v, read 8 heads and write 32, ·128·2 bytes per token each way
    assert eager["repeat_kv"][:2] == (2 * 2 * T * 40 * 128,) * 2
    assert "repeat_kv" not in fused
    # residual adds are one kernel either way
    assert eager["MLP residual"] == fused["MLP residual"]


def test_eager_layer_time_adds_the_bytes_and_launches() -> None:
    c = Clock(989e12, 2.4e12, RooflineParams(gemm_efficiency=0.7))  # e_HBM 0.9, t_kernel 3 µs
    x = LayerShape(LLAMA, False, 8192, 2, 1)
    compiled = layer_compute(
        LayerShape(LLAMA, False, 8192, 2, 1, elementwise=Elementwise.COMPILED), c
    )
    eager = layer_compute(LayerShape(LLAMA, False, 8192, 2, 1, elementwise=Elementwise.EAGER), c)
    th, qk, tf = T * 4096, T * 40 * 128, T * 14336
    # forward: 2 norms (36 − 4)·th, RoPE (20 − 4)·qk, SwiGLU (10 − 6)·tf; 2·7 + 5 + 1 launches
    extra = (2 * 32 * th + 16 * qk + 4 * tf) / (0.9 * 2.4e12) + (2 * 7 + 5 + 1) * 3e-6
    assert eager.forward_s - compiled.forward_s == pytest.approx(extra, rel=1e-9)
    # backward: 2 norms (92 − 6)·th, RoPE (20 − 4)·qk, SwiGLU (18 − 10)·tf; 2·15 + 5 + 2
    extra = (2 * 86 * th + 16 * qk + 8 * tf) / (0.9 * 2.4e12) + (2 * 15 + 5 + 2) * 3e-6
    assert eager.backward_s - compiled.backward_s == pytest.approx(extra, rel=1e-9)
    assert layer_compute(x, c).forward_s < compiled.forward_s  # the repeat_kv copy


def test_compile_is_torchtitans_and_refused_elsewhere() -> None:
    assert elementwise_mode("fsdp2", None) is Elementwise.EAGER  # torchtitan's default
    assert elementwise_mode("megatron", None) is Elementwise.FUSED
    assert elementwise_mode("deepspeed", False) is Elementwise.FUSED
    run = dict(model="llama3-8b", gpu="H100-SXM", dp=8, micro_batch_size=2)
    run |= dict(global_batch_size=16, seq_len=8192, framework="fsdp2", zero_stage=3)
    eager = trainplan.evaluate(**run).step_s
    compiled = trainplan.evaluate(**run, compile=True).step_s
    assert eager > compiled * 1.1
    with pytest.raises(InputError, match="compile: true applies to framework fsdp2"):
        trainplan.evaluate(**(run | dict(framework="megatron", zero_stage=1)), compile=True)
