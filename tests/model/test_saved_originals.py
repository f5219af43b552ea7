"""Megatron-Core's dense linear layers that save their BF16 input under FP8 quantise it again
for the weight gradient (model.saved_originals): the attention output projection under every
recipe but delayed scaling (Megatron-LM d98e8a64dd ``Attention.__init__``:
``set_save_original_input(self.linear_proj)``), Transformer Engine v2.9 ``_Linear.forward``
then casting it row-wise only and ``_Linear.backward`` column-wise only. Hand derived, checked
on the op and through ``evaluate()``'s step time."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import pytest

from tests.model.test_expert_requantise import _pair
from trainplan.model.grouped_gemm import grouped_fp8_rates
from trainplan.model.op_rates import params_in_force
from trainplan.model.op_time import Clock, op_seconds, wgrad_seconds
from trainplan.model.ops import Op, OpKind
from trainplan.model.saved_originals import cast_bytes, requantise_share, requantised_linears
from trainplan.model.specs import TrainingSpec
from trainplan.scenarios.catalogue import get_model
from trainplan.topology.accelerators import get_accelerator

H100 = get_accelerator("H100-SXM")
FORWARD_CAST_S = (6.503 - 5.577) * 1e-3 / (15872 * 28672 + 4096 * 49152) * 4.8 / 3.35
"""Current scaling's forward cast on an H100, seconds per element: Transformer Engine's H200 NVL
profile (autocast − pre-quantized forward ms over its input and weight elements, lowp.toml),
scaled from the H200 NVL's 4.8 TB/s to the H100's 3.35."""


def test_the_second_cast_in_bytes() -> None:
    """Bytes an element of a 16-bit input: current scaling reads it for the amax (2), reads it
    again to cast (2) and writes 1 per FP8 copy; MXFP8 no amax pass. A dense layer saving its
    BF16 input casts row-wise in the forward and column-wise in the backward where it would
    have cast both ways once: tensorwise (5 + 5 − 6) / 6 = 2/3, MXFP8 (3 + 3 − 4) / 4 = 1/2; the
    routed experts' backward casts both ways under current scaling: (5 + 6 − 6) / 6 = 5/6."""
    assert (cast_bytes("tensorwise", 2), cast_bytes("tensorwise", 1)) == (6, 5)
    assert (cast_bytes("mxfp8", 2), cast_bytes("mxfp8", 1)) == (4, 3)
    assert requantise_share("tensorwise", False) == Fraction(2, 3)
    assert requantise_share("mxfp8", False) == requantise_share("mxfp8", True) == Fraction(1, 2)
    assert requantise_share("tensorwise", True) == Fraction(5, 6)


def test_which_layers_save_their_input() -> None:
    """The output projection under current scaling and MXFP8, not delayed scaling, not outside
    Megatron-Core; DeepSeek-V3's shared experts' FC1 unless ``shared_experts`` is recomputed,
    its MLA down-projections where ``layernorm`` is."""
    llama, dsv3 = get_model("llama3-70b").model.arch, get_model("deepseek-v3").model.arch
    assert llama is not None and dsv3 is not None
    t = TrainingSpec(seq_len=4, global_batch_size=1, precision="fp8", fp8_recipe="tensorwise")
    assert requantised_linears(llama, t, "megatron", ()) == {"output projection"}
    assert requantised_linears(llama, replace(t, fp8_recipe="delayed"), "megatron", ()) == set()
    assert requantised_linears(llama, t, "fsdp2", ()) == set()
    bf16 = TrainingSpec(seq_len=4, global_batch_size=1)
    assert requantised_linears(llama, bf16, "megatron", ()) == set()
    shared = "shared experts gate+up projection"
    assert requantised_linears(dsv3, t, "megatron", ()) == {"output projection", shared}
    assert requantised_linears(dsv3, t, "megatron", ("shared_experts",)) == {"output projection"}
    assert requantised_linears(dsv3, t, "megatron", ("layernorm",)) == {
        "output projection", shared, "Q down-projection", "KV down-projection",
    }  # fmt: skip


def test_the_output_projection_quantises_its_input_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Llama 3 70B (80 layers, 64 heads × 128) on 64 H100s, tp 4 × pp 2 (dp 8), current
    scaling, 256 sequences of 8,192 (32 micro-batches a GPU, 40 layers a stage): the output
    projection's weight gradient quantises its saved input [8,192, 64 × 128 / 4 = 2,048] again
    at 2/3 of the forward cast: 2/3 × 2.0213 ps × 16,777,216 = 22.61 µs a layer and micro-batch,
    40 × 32 of them on the step's compute (28.9 ms); the forward and input gradient untouched."""
    g = grouped_fp8_rates("fp8", "tensorwise", H100, "megatron")
    assert g is not None
    p = params_in_force(None, "H100-SXM", None, "megatron")
    c = Clock(H100.peak_flops_per_s, H100.hbm_bytes_per_s, p, linear_speedup=g.kernel_speedup,
              grouped_fp8=g)  # fmt: skip
    saved = replace(
        c,
        grouped_fp8=replace(g, dense_requantised=frozenset({"output projection"}),
                            requantise_shares=(2 / 3, 5 / 6)),
    )  # fmt: skip
    proj = Op("output projection", OpKind.GEMM, m=8192, n=8192, k=2048, weights=True)
    per_op = 2 / 3 * FORWARD_CAST_S * 8192 * 2048
    assert round(per_op * 1e6, 2) == 22.61
    assert wgrad_seconds(proj, saved) - wgrad_seconds(proj, c) == pytest.approx(per_op)
    assert op_seconds(proj, saved) == op_seconds(proj, c)  # the forward
    qkv = replace(proj, name="QKV projection", n=2560, k=8192)
    assert wgrad_seconds(qkv, saved) == wgrad_seconds(qkv, c)
    params = dict(model="llama3-70b", gpu="H100-SXM", tp=4, pp=2, dp=8, precision="fp8",
                  fp8_recipe="tensorwise", global_batch_size=256, seq_len=8192)  # fmt: skip
    now, before = _pair(monkeypatch, **params)
    compute = now.time_terms.compute_s - before.time_terms.compute_s
    assert compute == pytest.approx(40 * 32 * per_op, rel=1e-6)
    assert now.step_s > before.step_s
