"""The routed experts' quantisations the step time charges beyond one cast per operand, hand
derived from Transformer Engine v2.9 (``pytorch/module/grouped_linear.py``
``_GroupedLinear.backward``, ``pytorch/csrc/extensions/bias.cpp`` ``bgrad_quantize``):

* FC1's output gradient with its bias gradient, one ``tex.bgrad_quantize`` per local expert
  (2 launches under delayed scaling, MXFP8 and block scaling, 5 under current scaling, whose
  ``at::sum_out`` also reads the BF16 gradient once more);
* a saved BF16 input quantised again for the weight gradient (``tex.split_quantize(inp_view,
  ctx.m_splits, ctx.input_quantizers)`` under ``ctx.save_original_input``: FC2 under
  Megatron-Core's ``moe_act`` recompute module, FC1 under the ``expert_fc1`` offload).

Each is checked on the op and through ``evaluate()``'s step time against the same layout with
the grouped GEMMs' rates as they stood without it (the part's rates alone)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

import trainplan
from trainplan.model.estimate import Estimate
from trainplan.model.expert_saved_inputs import requantised_inputs
from trainplan.model.grouped_gemm import grouped_fp8_rates
from trainplan.model.host_calls import expert_quantise_calls
from trainplan.model.offload import Offload
from trainplan.model.op_rates import params_in_force
from trainplan.model.op_time import Clock, dgrad_seconds, op_seconds, wgrad_seconds
from trainplan.model.ops import Op, OpKind
from trainplan.model.specs import TrainingSpec
from trainplan.model.terms import roofline, split_free
from trainplan.topology.accelerators import get_accelerator

T_KERNEL = 3e-6
"""The H100's deployed ``t_kernel`` (:attr:`model.roofline.RooflineParams.kernel_overhead_s`)."""
H100 = get_accelerator("H100-SXM")
FORWARD_CAST_S = (6.503 - 5.577) * 1e-3 / (15872 * 28672 + 4096 * 49152) * 4.8 / 3.35
"""Current scaling's forward cast on an H100, seconds per element: Transformer Engine's H200 NVL
profile (autocast − pre-quantized forward ms over its input and weight elements, lowp.toml),
scaled from the H200 NVL's 4.8 TB/s to the H100's 3.35."""


def _pair(monkeypatch: pytest.MonkeyPatch, **params: Any) -> tuple[Estimate, Estimate]:
    """(the layout as evaluated, the same layout with the grouped GEMMs' rates of the part
    alone: no FC1 bias kernels, no input quantised again — the step time before these terms)."""
    split_free.MEMO.clear()
    now = trainplan.evaluate(**params)
    split_free.MEMO.clear()
    monkeypatch.setattr(roofline, "experts_fp8", lambda rates, *_: rates)
    before = trainplan.evaluate(**params)
    split_free.MEMO.clear()
    return now, before


def _clock(recipe: str) -> Clock:
    g = grouped_fp8_rates("fp8", recipe, H100, "megatron")
    assert g is not None
    p = params_in_force(None, "H100-SXM", None, "megatron")
    assert p.kernel_overhead_s == T_KERNEL
    return Clock(H100.peak_flops_per_s, H100.hbm_bytes_per_s, p, linear_speedup=g.kernel_speedup,
                 grouped_fp8=g)  # fmt: skip


def test_fc1_bias_gradient_is_quantised_one_expert_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """gpt-oss-120b (128 experts with biases, 36 MoE layers) on 8 H100s, dp 8, ep 8 (16 local
    experts), delayed scaling, 64 sequences of 4,096 (8 micro-batches a GPU): one fused cast
    of all experts' FC1 output gradient (0 launches more) becomes 16 ``bgrad_quantize`` of 2
    kernels (the cast and ``reduce_dbias``): FC1's input gradient gains 16 × 2 × 3 µs = 96 µs
    per layer and micro-batch, the step's compute and the step 8 × 36 × 96 µs = 27.648 ms
    (nothing overlaps the experts' backward here). The host note counts the same 32 launches."""
    fc1 = Op("experts up", OpKind.GEMM, m=2048, n=2 * 2880, k=2880, batch=16)
    c = _clock("delayed")
    assert c.grouped_fp8 is not None and c.grouped_fp8.cast_kernels == 0
    biased = replace(c, grouped_fp8=replace(c.grouped_fp8, fc1_grad_kernels=2))
    assert dgrad_seconds(fc1, biased) - dgrad_seconds(fc1, c) == pytest.approx(16 * 2 * T_KERNEL)
    assert op_seconds(fc1, biased) == op_seconds(fc1, c)  # the forward is the same
    assert wgrad_seconds(fc1, biased) == wgrad_seconds(fc1, c)
    assert expert_quantise_calls(128, 8, "megatron", "delayed", H100, fc1_bias=True) == 16 * 2
    now, before = _pair(
        monkeypatch, model="gpt-oss-120b", gpu="H100-SXM", dp=8, ep=8, precision="fp8",
        fp8_recipe="delayed", global_batch_size=64, seq_len=4096,
    )  # fmt: skip
    assert now.num_microbatches == 8
    compute = now.time_terms.compute_s - before.time_terms.compute_s
    assert compute == pytest.approx(8 * 36 * 16 * 2 * T_KERNEL, rel=1e-9)  # 27.648 ms
    assert now.step_s - before.step_s == pytest.approx(compute, rel=1e-9)


def test_current_scalings_bias_gradient_reads_the_gradient_again() -> None:
    """Current scaling has no fused cast-and-bias kernel: per expert ``at::sum_out`` (reading
    the expert's rows of the BF16 gradient once) and the quantizer's 4 kernels — 5 launches
    where the cast alone launches 4. FC1 of 16 experts, 2,048 rows and 5,760 outputs each:
    16 × (5 − 4) × 3 µs more launches and 2 · 2,048 · 5,760 · 16 bytes at 0.9 × 3.35 TB/s."""
    fc1 = Op("experts up", OpKind.GEMM, m=2048, n=5760, k=2880, batch=16)
    c = _clock("tensorwise")
    assert c.grouped_fp8 is not None and c.grouped_fp8.cast_kernels == 4
    g = replace(c.grouped_fp8, fc1_grad_kernels=5, fc1_bias_reads=True)
    read = 2 * 2048 * 5760 * 16 / (0.9 * 3.35e12)  # 125.2 µs
    gained = dgrad_seconds(fc1, replace(c, grouped_fp8=g)) - dgrad_seconds(fc1, c)
    assert gained == pytest.approx(16 * T_KERNEL + read)
    assert round(read * 1e6, 1) == 125.2


def test_moe_act_recompute_quantises_fc2s_input_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Qwen3-30B-A3B (128 experts, h 2,048, expert FFN 768, 48 MoE layers) on 8 H100s, dp 8,
    ep 8 (16 local experts), current scaling, selective recomputation of ``moe_act``: FC2 saves
    its BF16 input and its weight-gradient pass quantises it again. 4,096 tokens × 8 copies
    over 8 ranks' 128 experts: 2,048 rows an expert, so 16 · 2,048 · 768 input elements at the
    forward cast's seconds per element, plus the forward's 15 × 4 launches of 3 µs: about
    230.9 µs per layer and micro-batch, × 48 layers × 8 micro-batches on the step's compute.
    FC1 and the forward are untouched; the host note counts 16 × 4 more launches.

    The second cast is 5/6 of a both-ways one (model.saved_originals.requantise_share: the
    forward then casts row-wise only, 5 B an element under current scaling — the amax read, the
    read, one FP8 copy — and the backward both ways, 6 B, against the 6 B of one both-ways cast):
    180 µs of launches + 5/6 × 50.87 µs = 222.4 µs. The step also quantises the attention
    output projection's saved BF16 input [4,096 tokens, 32 heads × 128] again in its weight
    gradient at 2/3 of a cast (Transformer Engine's ``_Linear.backward``: column-wise only),
    22.6 µs a layer and micro-batch, which the layout without these terms leaves out too."""
    fc2 = Op("experts down", OpKind.GEMM, m=2048, n=2048, k=768, batch=16)
    c = _clock("tensorwise")
    assert c.grouped_fp8 is not None
    shares = (2 / 3, 5 / 6)
    saved = replace(
        c, grouped_fp8=replace(c.grouped_fp8, requantised=(False, True), requantise_shares=shares)
    )
    per_layer = 15 * 4 * T_KERNEL + 5 / 6 * FORWARD_CAST_S * 2048 * 768 * 16
    assert round(per_layer * 1e6, 1) == 222.4
    proj = 2 / 3 * FORWARD_CAST_S * 4096 * 4096
    assert round(proj * 1e6, 1) == 22.6
    assert wgrad_seconds(fc2, saved) - wgrad_seconds(fc2, c) == pytest.approx(per_layer)
    assert dgrad_seconds(fc2, saved) == dgrad_seconds(fc2, c)
    fc1 = replace(fc2, name="experts up", n=1536, k=2048)
    assert wgrad_seconds(fc1, saved) == wgrad_seconds(fc1, c)
    calls = [expert_quantise_calls(128, 8, "megatron", "tensorwise", H100, 1, s) for s in (0, 1)]
    assert calls[1] - calls[0] == 16 * 4
    now, before = _pair(
        monkeypatch, model="qwen3-30b-a3b", gpu="H100-SXM", dp=8, ep=8, precision="fp8",
        fp8_recipe="tensorwise", recompute="selective", recompute_modules="moe_act",
        global_batch_size=64, seq_len=4096,
    )  # fmt: skip
    compute = now.time_terms.compute_s - before.time_terms.compute_s
    assert compute == pytest.approx(8 * 48 * (per_layer + proj), rel=1e-6)  # 94.08 ms
    assert 0 < now.step_s - before.step_s <= compute + 1e-12
    assert now.step_s - before.step_s == pytest.approx(compute, rel=1e-3)


def test_expert_fc1_offload_quantises_fc1s_input_again() -> None:
    """Megatron-Core sets ``save_original_input`` on FC1 under the ``expert_fc1`` activation
    offload except under MXFP8 (``experts.py`` ``TEGroupedMLP.__init__``): FC1's weight
    gradient quantises its 2,048 rows × 2,048 inputs of each of 16 experts again, at the forward
    cast's seconds per element, with the forward's 15 × 4 launches of 3 µs. MXFP8 keeps the
    FP8 copy: nothing more. The second cast is 5/6 of a both-ways one (the forward's row-wise
    cast, then both ways in the backward: model.saved_originals.requantise_share)."""
    offload = Offload(activations=("expert_fc1",))
    t = TrainingSpec(seq_len=4096, global_batch_size=64, precision="fp8",
                     fp8_recipe="tensorwise", offload=offload)  # fmt: skip
    assert requantised_inputs(t, "megatron", ()) == (True, False)
    assert requantised_inputs(replace(t, fp8_recipe="mxfp8"), "megatron", ()) == (False, False)
    assert requantised_inputs(t, "fsdp2", ()) == (False, False)
    fc1 = Op("experts up", OpKind.GEMM, m=2048, n=1536, k=2048, batch=16)
    c = _clock("tensorwise")
    assert c.grouped_fp8 is not None
    shares = (2 / 3, 5 / 6)  # model.saved_originals.requantise_share under current scaling
    saved = replace(
        c, grouped_fp8=replace(c.grouped_fp8, requantised=(True, False), requantise_shares=shares)
    )
    gained = wgrad_seconds(fc1, saved) - wgrad_seconds(fc1, c)
    assert gained == pytest.approx(15 * 4 * T_KERNEL + 5 / 6 * FORWARD_CAST_S * 2048 * 2048 * 16)
