"""DeepSpeed's gradient accumulation inside each backward, derived by hand from
``deepspeed/runtime/bf16_optimizer.py`` (``clear_lp_grads``, ``_update_hp_grad``),
``runtime/pipe/engine.py`` (``_exec_backward_pass``), ``runtime/zero/stage_1_and_2.py`` and the
code of 2021 (MT-NLG) and 2022 (BLOOM): model/deepspeed_accumulate.py and
model/terms/dp_time.py ``grad_accumulation_term`` (the validation rows:
tests/interface/test_deepspeed_validation_rows.py)."""

from __future__ import annotations

import pytest

from trainplan.model.deepspeed_accumulate import accumulate_bytes
from trainplan.model.mechanisms import mechanism
from trainplan.model.op_rates import stream_triad_fraction
from trainplan.optimizer.case import Case


def test_bytes_per_element_by_hand() -> None:
    """Per parameter element and backward, BF16 weights:

    * BF16_Optimizer (FP32 gradients): ``hp_grad.add_(lp.grad.to(fp32))`` casts (read 2, write
      4) and adds (read 4 + 4, write 4): 18; today's ``clear_lp_grads`` zeroes the BF16 gradient
      (write 2) and autograd adds the new one into it (read 2 + 2, write 2): 8 more, but not in
      a step's first backward, whose gradients ``zero_grad(set_to_none=True)`` freed; the code of
      2022-04 to 2025-03 freed them before every backward: 18 each time;
    * the ZeRO optimizer at ZeRO-1, BF16 gradients: autograd's add only, 6, from the second
      backward; ZeRO-2: the copy into the IPG bucket, 4, every backward; ZeRO-3: 0 on the
      compute stream (its copies run on the reduce stream)."""
    assert accumulate_bytes(1, 2, 4, True) == (2 + 4 + 8 + 4, 18 + 2 + 6)
    assert accumulate_bytes(1, 2, 4, True, lp_grads_set_to_none=True) == (18, 18)
    assert accumulate_bytes(1, 2, 2, False) == (0, 6)
    assert accumulate_bytes(2, 2, 2, False) == (4, 4)
    assert accumulate_bytes(3, 2, 2, False) == (0, 0)
    m = mechanism("deepspeed", 1, 2, 4)
    assert "BF16_Optimizer" in m.name and (m.accumulate_first_bytes, m.accumulate_bytes) == (18, 26)
    old = mechanism("deepspeed", 1, 2, 4, lp_grads_set_to_none=True)
    assert (old.accumulate_first_bytes, old.accumulate_bytes) == (18, 18)
    mech = mechanism("megatron", 1, 2, 4)  # FSDP2's copies: tests/model/test_fsdp2_copies.py
    assert (mech.accumulate_first_bytes, mech.accumulate_bytes) == (0, 0)


def test_pp1_zero_stages_by_hand() -> None:
    """Llama 3 8B on 8 H100s, dp 8, b 1, B 64 (m 8), pp 1: every GPU holds all 8,030,261,248
    parameters. ZeRO-1, BF16 gradients: 7 adds of 6 B; ZeRO-2: 8 copies of 4 B; ZeRO-3: none;
    the Megatron profile fuses its accumulation into the weight-gradient GEMM: none. At the
    H100's triad (3.35 TB/s · 0.887)."""
    base = dict(model="llama3-8b", device="H100-SXM", num_gpus=8, dp=8, tp=1, pp=1,
                global_batch_size=64, seq_len=4096, framework="deepspeed")  # fmt: skip
    n = 8_030_261_248
    h100 = 3.35e12 * stream_triad_fraction("H100-SXM")  # type: ignore[operator]
    for zero, moved in ((1, 7 * 6), (2, 8 * 4), (3, 0)):
        terms = Case.of(**base, zero_stage=zero).evaluate().time_terms
        assert terms is not None
        assert terms.grad_accumulation_s == pytest.approx(moved * n / h100), zero
    megatron = Case.of(**{**base, "framework": "megatron"}, zero_stage=1).evaluate().time_terms
    assert megatron is not None and megatron.grad_accumulation_s == 0.0


def test_lp_grads_set_to_none_is_refused_outside_deepspeed_in_its_own_process() -> None:
    """``--set lp_grads_set_to_none=true`` is DeepSpeed's BF16_Optimizer's (2022–2025); under
    megatron it was accepted and read by nothing. Now one line, exit 2; a search over megatron
    and deepspeed keeps deepspeed's layouts."""
    from tests.cli_runs import refusal, trainplan

    base = ("--model", "llama3-70b", "--gpus", "64", "--set", "lp_grads_set_to_none=true")
    assert refusal(trainplan("evaluate", *base, "--framework", "megatron")) == (
        "--set lp_grads_set_to_none: true is read by deepspeed only (its BF16_Optimizer's "
        "gradient accumulation in each backward), not megatron"
    )
    done = trainplan("search", *base, "--framework", "megatron", "--framework", "deepspeed")
    assert done.returncode == 0, done.stderr[-2000:]
    assert ", deepspeed ZeRO-" in done.stdout
