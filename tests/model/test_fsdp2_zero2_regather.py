"""FSDP2 ZeRO-2 all-gathers the weights once per micro-batch.

torchtitan's ZeRO-2 is ``fully_shard(reshard_after_forward=False)`` alone (``apply_fsdp`` at
9dec370 and 820504e, ``apply_fsdp_to_decoder`` at b5bcd76c): nothing calls
``set_reshard_after_backward(False)`` outside the chunked loss's lm_head, so FSDP2's default
``FSDPParamGroup.reshard_after_backward = True`` holds and ``post_backward`` reshards every unit
after each backward (``torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py`` at 002a76fb).
The next micro-batch's forward gathers every unit again. Under a pipeline schedule PyTorch's
``PipelineStage`` does turn resharding off, so there the weights are gathered once per step.

Llama 3 8B (P = 8,030,261,248 parameters, all on each GPU at tp 1) on dp 8, s 8192, b 1,
B 2048: m = 2048 / (8 · 1) = 256 micro-batches. Ring bytes each GPU sends, ``(D − 1)/D · P`` per
byte per parameter:

* per micro-batch: the FP32 gradient reduce-scatter (4 B) + the bf16 forward all-gather (2 B):
  6 · 7/8 · 8,030,261,248 = 42,158,871,552 B;
* per step: 256 · 42,158,871,552 = 10,792,671,117,312 B = 10,792.67 GB
  (it was 7,209.17 GB with the gather counted once per step: 256 · 4 · 7/8 · P + 2 · 7/8 · P =
  7,195,114,078,208 + 14,052,957,184 = 7,209,167,035,392 B; the difference is
  255 · 2 · 7/8 · P = 3,583,504,081,920 B).
"""

from __future__ import annotations

from fractions import Fraction

from trainplan.model.mechanisms import mechanism
from trainplan.optimizer.case import Case

P_8B = 8_030_261_248


def _dp_row(zero_stage: int, pp: int = 1):
    case = Case.of(
        model="llama3-8b", dp=8, pp=pp, framework="fsdp2", zero_stage=zero_stage,
        micro_batch_size=1, global_batch_size=2048, seq_len=8192,
    )  # fmt: skip
    est = case.evaluate()
    return est, next(r.traffic for r in est.traffic if r.traffic.axis == "dp")


def test_zero2_gathers_once_per_microbatch():
    m = mechanism("fsdp2", 2)
    assert (m.gathers_per_step, m.gathers_per_microbatch) == (0, 1)
    assert m.traffic_terms() == (0, 4 + 2)
    assert "reshard_after_backward=True" in m.name
    assert "set_reshard_after_backward(False)" not in m.name


def test_llama3_8b_dp8_zero2_traffic():
    est, dp = _dp_row(2)
    assert est.peak.dense_params == P_8B
    per_mb = 6 * Fraction(7, 8) * P_8B
    assert per_mb == 42_158_871_552
    assert dp.microbatch_bytes == per_mb
    assert dp.bytes_per_step == 256 * per_mb == 10_792_671_117_312
    assert (
        dp.collective == "reduce-scatter (fp32) per micro-batch + all-gather per micro-batch (fwd)"
    )


def test_pipelined_zero2_still_gathers_once_per_step():
    """PyTorch's pipeline stage calls set_reshard_after_backward(False): one gather per step."""
    m = mechanism("fsdp2", 2, pipelined=True)
    assert (m.gathers_per_step, m.gathers_per_microbatch) == (1, 0)
