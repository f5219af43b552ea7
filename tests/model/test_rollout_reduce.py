"""The rollout engine's tensor-parallel all-reduces (model/rollout_reduce.py), held to hand
derivations: vLLM's RowParallelLinear sums o_proj's and down_proj's outputs over the tp group in
every forward (vllm-project/vllm 9e109c98 linear.py RowParallelLinear.forward), timed with the
project's NCCL curve (model.roofline.collective_time), added to every decode step and prefill
chunk of the rollout (model.rollout.rollout_time) that the RLHF evaluator and its search read."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import pytest

from trainplan.model.errors import InputError
from trainplan.model.rollout import rollout_time
from trainplan.model.rollout_reduce import engine_all_reduce, forward_reduce, wave_reduce_seconds
from trainplan.scenarios.catalogue import get_model
from trainplan.topology.accelerators import get_accelerator

H100 = get_accelerator("H100-SXM")
QWEN = get_model("qwen2.5-7b").model.arch  # L 28, h 3,584

# H100 all-reduce bus bandwidth (model.op_rates, GB/s at 450 GB/s NVLink): 1 MiB 43.70,
# 2 MiB 81.93, 32 MiB 295.53, 64 MiB 361.78; read linearly in log2 of the buffer size.
LOG2_175 = 0.8073549220576041  # log2(1.75): 1,835,008 = 1.75 · 2^20, 58,720,256 = 1.75 · 2^25
DECODE_AR = 1_835_008 * 1.5 / ((43.70 + LOG2_175 * (81.93 - 43.70)) * 1e9)
PREFILL_AR = 58_720_256 * 1.5 / ((295.53 + LOG2_175 * (361.78 - 295.53)) * 1e9)


def test_one_all_reduce_on_the_nccl_curve_by_hand():
    """256 decode tokens × h 3,584 × 2 B = 1,835,008 B over tp 4: busbw 43.70 + 0.80735 ·
    38.23 = 74.565 GB/s, each rank sends 2·3/4 of the buffer: 1,835,008 · 1.5 / 74.565e9 =
    36.914 µs. A prefill chunk of 8,192 tokens, 58,720,256 B: 349.02 GB/s, 252.37 µs. tp 1 sums
    nothing."""
    ar = engine_all_reduce(H100, 4)
    assert DECODE_AR * 1e6 == pytest.approx(36.914, abs=1e-3)
    assert ar(1_835_008) == pytest.approx(DECODE_AR, rel=1e-9)
    assert PREFILL_AR * 1e6 == pytest.approx(252.367, abs=1e-3)
    assert ar(8192 * 3584 * 2) == pytest.approx(PREFILL_AR, rel=1e-9)
    assert engine_all_reduce(H100, 1)(1_835_008) == 0.0
    # one forward: 2 · 28 = 56 of them
    assert forward_reduce(28, 3584, ar)(Fraction(256)) == pytest.approx(56 * DECODE_AR)


def test_wave_chunks_and_steps_by_hand():
    """3 prompts of 6,000 tokens = 18,000 prefill tokens: chunks of 8,192, 8,192 and 1,616; a
    clock of 1 s per token gives 18,000 s. 6,000 decode steps of 3 · 2,000 / 6,000 = 1 live
    sequence each (mean completion 2,000, longest 6,000): 6,000 s."""
    seen: list[Fraction] = []

    def clock(tokens: Fraction) -> float:
        seen.append(tokens)
        return float(tokens)

    prefill, decode = wave_reduce_seconds(
        3, forward=clock, prompt_tokens=6000, completion_tokens=2000, steps=6000
    )
    assert (prefill, decode) == (18_000, 6_000)
    assert seen == [8192, 1616, 1]  # one full chunk's clock × 2, the rest, one decode step


def test_rollout_adds_them_to_decode_and_prefill_by_hand():
    """The rlhf guide's Qwen2.5 7B engine before this term: tp 4 × dp 16 on 64 H100s, 16,384
    rollouts of 1,024 + 4,096 tokens, 1,024 per replica, 256 at once: 4 waves.

    Decode: 4 × 4,096 = 16,384 steps × 56 all-reduces × 36.914 µs = 33.869 s more.
    Prefill: a wave's 256 · 1,024 = 262,144 prompt tokens are 32 chunks of 8,192; 4 × 32 × 56
    × 252.367 µs = 1.809 s more. The roofline parts are unchanged."""
    kw = dict(
        active_params=7_615_616_512,
        weights_bytes=Fraction(15_231_233_024, 4),
        kv_per_token_bytes=14_336,
        sequences_per_replica=1024,
        concurrent=256,
        prompt_tokens=1024,
        completion_tokens=4096,
        tp=4,
        peak_flops_per_s=989.4e12,
        kernel_efficiency=0.5,
        hbm_bytes_per_s=3.35e12,
        bandwidth_efficiency=1.0,
    )
    reduce = forward_reduce(QWEN.num_layers, QWEN.hidden_size, engine_all_reduce(H100, 4))
    bare, with_ar = rollout_time(**kw), rollout_time(**kw, tp_reduce=reduce)
    decode_ar, prefill_ar = 16_384 * 56 * DECODE_AR, 4 * 32 * 56 * PREFILL_AR
    assert decode_ar == pytest.approx(33.869, abs=1e-3)
    assert prefill_ar == pytest.approx(1.809, abs=1e-3)
    assert with_ar.decode_s - bare.decode_s == pytest.approx(decode_ar, rel=1e-9)
    assert with_ar.prefill_s - bare.prefill_s == pytest.approx(prefill_ar, rel=1e-9)
    assert with_ar.all_reduce_s == pytest.approx(decode_ar + prefill_ar, rel=1e-9)
    assert bare.all_reduce_s == 0.0
    one = rollout_time(**{**kw, "tp": 1}, tp_reduce=reduce)  # tp 1: no all-reduce
    assert one.all_reduce_s == 0.0


def test_a_part_without_the_link_is_refused():
    """tp 2 on a part whose table has no NVLink bandwidth: one line naming the rollout tp."""
    bare = replace(H100, nvlink_bytes_per_s=None)
    with pytest.raises(InputError, match="rollout tp: 2 needs the NVLink bandwidth"):
        engine_all_reduce(bare, 2)
