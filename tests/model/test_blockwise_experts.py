"""Two charges of Megatron-Core's routed experts under FP8 that do not depend on the GEMM rate
table, hand derived from Transformer Engine v2.9 ``pytorch/module/grouped_linear.py``
``_GroupedLinear.forward`` / ``backward``:

* block scaling on Hopper, whose profile has no kernel-only rows: the per-expert quantise
  launches (``tex.split_quantize`` calls one ``nvte_quantize_v2`` per expert), and a saved BF16
  input's second cast at the recipe's bytes (read 2 B, two FP8 copies 1 B each:
  ``model.saved_originals.cast_bytes``) streamed at the part's bandwidth, are charged as under
  current scaling; the GEMMs keep the linear layers' speed-up;
* FC2's input quantised again for its weight gradient (``ctx.save_original_input`` under the
  ``moe_act`` recompute module) is live during FC2's backward: ``tex.split_quantize(inp_view,
  …)`` after the dgrad GEMM, ``clear_tensor_data(*inputmats)`` after the wgrad GEMM, with
  ``set_usage(rowwise=True, columnwise=True)`` under current scaling (1 B data + 1 B transpose
  on Hopper) and column-wise only under the block-scaled recipes."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

import trainplan
from trainplan.model.estimate import Estimate
from trainplan.model.grouped_gemm import grouped_fp8_rates
from trainplan.model.op_rates import fp8_linear_speedups, params_in_force
from trainplan.model.op_time import Clock, dgrad_seconds, op_seconds, wgrad_seconds
from trainplan.model.ops import Op, OpKind
from trainplan.model.terms import activation_fields, roofline, split_free
from trainplan.topology.accelerators import get_accelerator

H100 = get_accelerator("H100-SXM")
T_KERNEL = 3e-6
"""The H100's deployed ``t_kernel`` (:attr:`model.roofline.RooflineParams.kernel_overhead_s`)."""
BLOCK_CAST_S = 4 / (0.9 * 3.35e12)
"""Block scaling's both-ways cast on an H100, seconds per element: 2 B read + 2 × 1 B written
(``cast_bytes("blockwise", 2)``) at e_HBM 0.9 of 3.35 TB/s, 1.327 ps."""


def _evaluate(**params: Any) -> Estimate:
    split_free.MEMO.clear()
    activation_fields.backward_figures.cache_clear()
    return trainplan.evaluate(**params)


def test_blockwise_on_hopper_pays_its_per_expert_launches() -> None:
    """FC1 of 16 local experts, 2,048 rows of [2,048 → 1,536], on an H100 under block scaling:
    the forward and the input gradient each gain 15 × 1 launches of 3 µs over the grouped GEMM
    run at the linear layers' speed-up alone (the clock as it stood with no grouped rates),
    the weight gradient nothing (no saved BF16 input); a dense GEMM is unchanged."""
    g = grouped_fp8_rates("fp8", "blockwise", H100, "megatron")
    assert g is not None and g.kernel_speedup is None and g.cast_kernels == 1
    p = params_in_force(None, "H100-SXM", None, "megatron")
    assert p.kernel_overhead_s == T_KERNEL
    speedup = fp8_linear_speedups("fp8", "blockwise", H100, True)
    c = Clock(H100.peak_flops_per_s, H100.hbm_bytes_per_s, p, linear_speedup=speedup,
              grouped_fp8=g)  # fmt: skip
    bare = Clock(H100.peak_flops_per_s, H100.hbm_bytes_per_s, p, linear_speedup=speedup)
    fc1 = Op("experts up", OpKind.GEMM, m=2048, n=1536, k=2048, batch=16, weights=True)
    assert op_seconds(fc1, c) - op_seconds(fc1, bare) == pytest.approx(15 * T_KERNEL)
    assert dgrad_seconds(fc1, c) - dgrad_seconds(fc1, bare) == pytest.approx(15 * T_KERNEL)
    assert wgrad_seconds(fc1, c) == wgrad_seconds(fc1, bare)
    qkv = Op("QKV projection", OpKind.GEMM, m=4096, n=5120, k=2048, weights=True)
    assert op_seconds(qkv, c, True) == op_seconds(qkv, bare, True)


def test_blockwise_moe_act_step_time_by_hand(monkeypatch: pytest.MonkeyPatch) -> None:
    """Qwen3-30B-A3B (128 experts, h 2,048, expert FFN 768, 48 MoE layers) on 8 H100s, dp 8, ep 8
    (16 local experts, 2,048 rows each), block scaling, selective recomputation of ``moe_act``,
    64 sequences of 4,096 (8 micro-batches a GPU), against the same layout with no grouped
    rates (block scaling on Hopper as it was charged before). Per layer and micro-batch:

    * 4 quantised operands (FC1's and FC2's inputs, their output gradients) × 15 × 1 launches:
      180 µs;
    * FC2's weight gradient quantises its saved BF16 input again: 15 launches (45 µs) and 1/2
      of a both-ways cast (``requantise_share("blockwise", True)``: the forward's row-wise
      3 B + the backward's column-wise 3 B − 4 B) over 16 · 2,048 · 768 elements: 16.69 µs;
    * the attention output projection, which saves its BF16 input under every recipe but
      delayed scaling, quantises [4,096, 4,096] again column-wise: 1/2 · 1.327 ps · 4,096²,
      11.13 µs.

    252.82 µs × 48 layers × 8 micro-batches = 97.08 ms on the compute and the step (nothing
    hides the experts here)."""
    params = dict(
        model="qwen3-30b-a3b", gpu="H100-SXM", dp=8, ep=8, precision="fp8",
        fp8_recipe="blockwise", recompute="selective", recompute_modules="moe_act",
        global_batch_size=64, seq_len=4096,
    )  # fmt: skip
    now = _evaluate(**params)
    monkeypatch.setattr(roofline, "grouped_fp8_rates", lambda *_: None)
    before = _evaluate(**params)
    split_free.MEMO.clear()
    per_layer = 60 * T_KERNEL + 15 * T_KERNEL + 0.5 * BLOCK_CAST_S * 16 * 2048 * 768
    proj = 0.5 * BLOCK_CAST_S * 4096 * 4096
    assert (round(per_layer * 1e6, 2), round(proj * 1e6, 2)) == (241.69, 11.13)
    compute = now.time_terms.compute_s - before.time_terms.compute_s
    assert compute == pytest.approx(8 * 48 * (per_layer + proj), rel=1e-9)  # 97.08 ms
    assert now.step_s - before.step_s == pytest.approx(compute, rel=1e-6)


def test_fc2s_requantised_copy_in_the_backward_peak(monkeypatch: pytest.MonkeyPatch) -> None:
    """Mixtral 8x7B (h 4,096, expert FFN 14,336, top-2, SwiGLU) on 32 H100s (dp 8, pp 4, ep 8),
    current scaling, selective recomputation of ``moe_act``, s 4,096, micro-batch 1. Per MoE
    layer at tp 1, β = 2: n = 2·4,096·4,096 = 33,554,432; the routed rows' ``[R, h]``
    rh = 2·n = 67,108,864 and ``[R, f_e]`` rf = 2·2·4,096·14,336 = 234,881,024 bytes.

    Without FC2's copy the routed experts' largest step is the activation's: n + rf (the
    gradient of FC2's input) + 2·rf (SwiGLU's input gradient) − FC2's FP8 input released
    (rf/2) = 620,756,992; FC2's step n + rh + rf + rh (its ``grad_output`` quantised both
    ways, 2 B an element) = 402,653,184. With it, FC2's step also holds its input quantised
    again both ways, 2 B an element of ``[R, f_e]`` = rf: 637,534,208, now the largest. The
    selective working set adds the recomputed rows (FC2's FP8 input, 117,440,512) to both; the
    busiest stage's peak, in its backward, moves by 637,534,208 − 620,756,992 = 16,777,216 B."""
    params = dict(
        model="mixtral-8x7b", gpu="H100-SXM", dp=8, pp=4, ep=8, precision="fp8",
        fp8_recipe="tensorwise", recompute="selective", recompute_modules="moe_act",
        global_batch_size=64, seq_len=4096,
    )  # fmt: skip
    n, rf = 2 * 4096 * 4096, 2 * 2 * 4096 * 14336
    rh = 2 * n
    activation_step = n + rf + 2 * rf - rf // 2
    fc2_step = n + rh + rf + rh
    assert (activation_step, fc2_step) == (620_756_992, 402_653_184)
    now = _evaluate(**params)
    monkeypatch.setattr(activation_fields, "expert_fc2_saves_original", lambda *_: False)
    before = _evaluate(**params)
    activation_fields.backward_figures.cache_clear()
    split_free.MEMO.clear()
    dropped = rf // 2
    assert now.peak.activations.backward_working_bytes == fc2_step + rf + dropped
    assert before.peak.activations.backward_working_bytes == activation_step + dropped
    assert now.peak.peak_phase == "forward-backward"
    assert now.total_bytes - before.total_bytes == Fraction(16_777_216)
