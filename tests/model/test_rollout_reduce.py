"""The rollout engine's tensor-parallel collectives (model/rollout_reduce.py), held to hand
derivations: vLLM's RowParallelLinear sums o_proj's and down_proj's outputs over the tp group in
every forward (vllm-project/vllm 9e109c98 linear.py RowParallelLinear.forward), the
VocabParallelEmbedding sums its output once a forward (7f5d141a vocab_parallel_embedding.py
forward) and the LogitsProcessor all-gathers the sampled rows' vocabulary-sharded logits once a
forward (00db1f12 logits_processor.py _gather_logits), timed with the project's NCCL curve
(model.roofline.collective_time), added to every decode step and prefill chunk of the rollout
(model.rollout.rollout_time) that the RLHF evaluator and its search read."""

from __future__ import annotations

import math
from dataclasses import replace
from fractions import Fraction

import pytest

from trainplan.model.errors import InputError
from trainplan.model.rollout import rollout_time
from trainplan.model.rollout_reduce import (
    engine_all_gather,
    engine_all_reduce,
    engine_placement,
    forward_collectives,
    wave_reduce_seconds,
)
from trainplan.scenarios.catalogue import get_model
from trainplan.topology.accelerators import get_accelerator

H100 = get_accelerator("H100-SXM")
QWEN = get_model("qwen2.5-7b").model.arch  # L 28, h 3,584, V 152,064 (= 64 · 2,376)
LLAMA70 = get_model("llama3-70b").model.arch  # L 80, h 8,192, V 128,256 (= 64 · 2,004)

# H100 all-reduce bus bandwidth (model.op_rates, GB/s at 450 GB/s NVLink): 1 MiB 43.70,
# 2 MiB 81.93, 32 MiB 295.53, 64 MiB 361.78; read linearly in log2 of the buffer size.
# The curve is the 8-GPU all-reduce as NCCL ran it, NVLink SHARP (NVLS); a ring collective
# reads it ÷ the NVLS all-reduce's speed-up on H100, 480/370
# (model.nvlink_rates.nvls_allreduce_speedup): an all-gather, each rank receiving (tp − 1)/tp of
# the output, and an all-reduce of 4 GPUs, which NCCL's tuner runs as a ring (NVLS's 240 GB/s of
# bus bandwidth at 4 GPUs against the ring's 360: model.nccl_search, model.nvls.nvls_ring).
NVLS = 480 / 370
LOG2_175 = 0.8073549220576041  # log2(1.75): 1,835,008 = 1.75 · 2^20, 58,720,256 = 1.75 · 2^25
DECODE_AR = 1_835_008 * 1.5 / ((43.70 + LOG2_175 * (81.93 - 43.70)) / NVLS * 1e9)
PREFILL_AR = 58_720_256 * 1.5 / ((295.53 + LOG2_175 * (361.78 - 295.53)) / NVLS * 1e9)
LOG2_116 = math.log2(1.16015625)  # 0.21433;: 77,856,768 = 1.16015625 · 2^26, 2,433,024 = ·2^21
LOG2_196 = math.log2(1.95703125)  # 0.96867;: 65,667,072 = 1.95703125 · 2^25, 2,052,096 = ·2^20
DECODE_AG = 77_856_768 * 0.75 / ((361.78 + LOG2_116 * (400.61 - 361.78)) / NVLS * 1e9)
PREFILL_AG = 2_433_024 * 0.75 / ((81.93 + LOG2_116 * (128.73 - 81.93)) / NVLS * 1e9)


def test_one_all_reduce_on_the_nccl_curve_by_hand():
    """256 decode tokens × h 3,584 × 2 B = 1,835,008 B over tp 4, a ring (NCCL's tuner: NVLS
    only from 6 GPUs of an H100 node): busbw (43.70 + 0.80735 · 38.23) / 1.2973 = 57.477 GB/s,
    each rank sends 2·3/4 of the buffer: 1,835,008 · 1.5 / 57.477e9 = 47.889 µs (36.914 µs at
    the NVLS curve's 74.565 GB/s, read before). A prefill chunk of 8,192 tokens, 58,720,256 B:
    269.03 GB/s, 327.39 µs (252.37). tp 1 sums nothing."""
    ar = engine_all_reduce(H100, 4)
    assert DECODE_AR * 1e6 == pytest.approx(47.889, abs=1e-3)
    assert ar(1_835_008) == pytest.approx(DECODE_AR, rel=1e-9)
    assert PREFILL_AR * 1e6 == pytest.approx(327.395, abs=1e-3)
    assert ar(8192 * 3584 * 2) == pytest.approx(PREFILL_AR, rel=1e-9)
    assert engine_all_reduce(H100, 1)(1_835_008) == 0.0


def test_the_logits_all_gather_on_the_nccl_curve_by_hand():
    """A decode step of 256 sequences gathers [256, 152,064] BF16 logits, 77,856,768 B, over tp
    4: busbw (361.78 + 0.21433 · 38.83) / 1.2973 = 285.287 GB/s, each rank receives 3/4 of the
    output: 58,392,576 / 285.287e9 = 204.680 µs. A prefill chunk of 8,192 tokens holds 8
    prompts of 1,024: 8 rows, 2,433,024 B, (81.93 + 0.21433 · 46.80) / 1.2973 = 70.888 GB/s,
    25.742 µs. One forward: 2 · 28 + 1 = 57 all-reduces (o_proj, down_proj, the embedding) and
    the gather."""
    ar, ag = engine_all_reduce(H100, 4), engine_all_gather(H100, 4)
    assert DECODE_AG * 1e6 == pytest.approx(204.680, abs=1e-3)
    assert ag(256 * 152_064 * 2) == pytest.approx(DECODE_AG, rel=1e-9)
    assert PREFILL_AG * 1e6 == pytest.approx(25.742, abs=1e-3)
    assert ag(8 * 152_064 * 2) == pytest.approx(PREFILL_AG, rel=1e-9)
    assert engine_all_gather(H100, 1)(77_856_768) == 0.0
    forward = forward_collectives(28, 3584, 152_064, ar, ag)
    decode = forward(Fraction(256), Fraction(256))
    assert decode == pytest.approx(57 * DECODE_AR + DECODE_AG, rel=1e-9)
    assert decode * 1e6 == pytest.approx(57 * 47.889 + 204.680, abs=0.1)  # 2,934.33 µs
    prefill = forward(Fraction(8192), Fraction(8))
    assert prefill == pytest.approx(57 * PREFILL_AR + PREFILL_AG, rel=1e-9)


def test_the_gather_reads_the_vocabulary_padded_to_64():
    """vLLM pads V to a multiple of 64 (pad_vocab_size, DEFAULT_VOCAB_PADDING_SIZE): V 50,257
    gathers 50,304 columns; a clock of 1 s per byte with no all-reduce: 2 · 50,304 s a row."""
    forward = forward_collectives(1, 1, 50_257, lambda s: 0.0, float)
    assert forward(Fraction(1), Fraction(1)) == 2 * 50_304


def test_wave_chunks_and_steps_by_hand():
    """3 prompts of 6,000 tokens = 18,000 prefill tokens: chunks of 8,192, 8,192 and 1,616,
    sampling min(3, ⌈8,192 / 6,000⌉) = 2, 2 and ⌈1,616 / 6,000⌉ = 1 rows; a clock of 1 s per
    token and 100 s per row gives 18,000 + 500 = 18,500 s. 6,000 decode steps of 3 · 2,000 /
    6,000 = 1 live sequence each, sampling its row (mean completion 2,000, longest 6,000): 6,000
    · 101 = 606,000 s."""
    seen: list[tuple[Fraction, Fraction]] = []

    def clock(tokens: Fraction, rows: Fraction) -> float:
        seen.append((tokens, rows))
        return float(tokens + 100 * rows)

    prefill, decode = wave_reduce_seconds(
        3, forward=clock, prompt_tokens=6000, completion_tokens=2000, steps=6000
    )
    assert (prefill, decode) == (18_500, 606_000)
    # one full chunk's clock × 2, the rest, one decode step
    assert seen == [(8192, 2), (1616, 1), (1, 1)]


def test_rollout_adds_them_to_decode_and_prefill_by_hand():
    """The rlhf guide's Qwen2.5 7B engine before these terms: tp 4 × dp 16 on 64 H100s, 16,384
    rollouts of 1,024 + 4,096 tokens, 1,024 per replica, 256 at once: 4 waves.

    Decode: 4 × 4,096 = 16,384 steps × (57 all-reduces × 47.889 µs + the 204.680 µs gather) =
    16,384 × 2,934.33 µs = 48.076 s more (43.938 s of it the layers' 56 all-reduces; 37.827 and
    33.869 s while the 4-GPU all-reduce read the NVLS curve). Prefill: a wave's 256 · 1,024 =
    262,144 prompt tokens are 32 chunks of 8,192 holding 8 prompts each; 4 × 32 × (57 × 327.395
    + 25.742) µs = 2.392 s more (1.845). The roofline parts are unchanged."""
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
    ar, ag = engine_all_reduce(H100, 4), engine_all_gather(H100, 4)
    forward = forward_collectives(QWEN.num_layers, QWEN.hidden_size, QWEN.vocab_size, ar, ag)
    bare, with_ar = rollout_time(**kw), rollout_time(**kw, tp_reduce=forward)
    decode_ar = 16_384 * (57 * DECODE_AR + DECODE_AG)
    prefill_ar = 4 * 32 * (57 * PREFILL_AR + PREFILL_AG)
    assert decode_ar == pytest.approx(48.076, abs=1e-3)
    assert 16_384 * 56 * DECODE_AR == pytest.approx(43.938, abs=1e-3)
    assert prefill_ar == pytest.approx(2.392, abs=1e-3)
    assert with_ar.decode_s - bare.decode_s == pytest.approx(decode_ar, rel=1e-9)
    assert with_ar.prefill_s - bare.prefill_s == pytest.approx(prefill_ar, rel=1e-9)
    assert with_ar.all_reduce_s == pytest.approx(decode_ar + prefill_ar, rel=1e-9)
    assert bare.all_reduce_s == 0.0
    one = rollout_time(**{**kw, "tp": 1}, tp_reduce=forward)  # tp 1: no collective
    assert one.all_reduce_s == 0.0


def test_the_embedding_and_logits_move_the_70b_engine_by_hand():
    """The rlhf guide's Llama 3 70B engine, tp 8 × dp 8 on 64 H100s: 16,384 / 8 = 2,048
    rollouts a replica, 256 at once: 8 waves, 8 × 4,096 = 32,768 decode steps; 8 × 32 prefill
    chunks of 8,192 tokens (8 prompts each).

    Beyond the layers' 2 · 80 all-reduces, each decode step adds the embedding's all-reduce of
    256 · 8,192 · 2 = 4,194,304 B (the curve's 4 MiB point, 128.73 GB/s: 4,194,304 · 7/4 /
    128.73e9 = 57.019 µs) and the gather of 256 · 128,256 · 2 = 65,667,072 B ((295.53 + 0.96867
    · 66.25) / 1.2973 = 277.272 GB/s, 7/8 of it received: 207.229 µs): 32,768 · 264.248 µs =
    8.659 s. Each chunk adds an all-reduce of 8,192 · 8,192 · 2 = 2^27 B (400.61 GB/s:
    586.308 µs) and a gather of 8 rows, 2,052,096 B ((43.70 + 0.96867 · 38.23) / 1.2973 =
    62.231 GB/s: 28.854 µs): 256 · 615.162 µs = 0.157 s. rlhf-plan's decode 786.86 → 795.52 s,
    prefill 96.89 → 97.05 s: 3,350.4 → 3,359.2 s a step."""
    ar, ag = engine_all_reduce(H100, 8), engine_all_gather(H100, 8)
    h, v = LLAMA70.hidden_size, LLAMA70.vocab_size
    layers_only = forward_collectives(LLAMA70.num_layers, h, v, ar, lambda s: 0.0)
    full = forward_collectives(LLAMA70.num_layers, h, v, ar, ag)
    embed_ar = 4_194_304 * 1.75 / 128.73e9
    gather = 65_667_072 * 0.875 / ((295.53 + LOG2_196 * (361.78 - 295.53)) / NVLS * 1e9)
    chunk_ar = 2**27 * 1.75 / 400.61e9
    chunk_gather = 2_052_096 * 0.875 / ((43.70 + LOG2_196 * (81.93 - 43.70)) / NVLS * 1e9)
    assert (embed_ar * 1e6, gather * 1e6) == pytest.approx((57.019, 207.229), abs=1e-3)
    assert (chunk_ar * 1e6, chunk_gather * 1e6) == pytest.approx((586.308, 28.854), abs=1e-3)
    kw = dict(prompt_tokens=1024, completion_tokens=4096, steps=4096)
    pre0, dec0 = wave_reduce_seconds(256, forward=layers_only, **kw)
    pre1, dec1 = wave_reduce_seconds(256, forward=full, **kw)
    # layers_only still sums the embedding (2L + 1): its gather is the one thing it lacks
    assert 8 * float(dec1 - dec0) == pytest.approx(32_768 * gather, rel=1e-9)
    assert 8 * float(pre1 - pre0) == pytest.approx(256 * chunk_gather, rel=1e-9)
    decode = 32_768 * (161 * embed_ar + gather)
    assert 8 * float(dec1) == pytest.approx(decode, rel=1e-9)
    assert 32_768 * (embed_ar + gather) == pytest.approx(8.659, abs=1e-3)
    assert 8 * float(pre1) == pytest.approx(256 * (161 * chunk_ar + chunk_gather), rel=1e-9)
    assert 256 * (chunk_ar + chunk_gather) == pytest.approx(0.157, abs=1e-3)


def test_a_part_without_the_link_is_refused():
    """tp 2 on a part whose table has no NVLink bandwidth: one line naming the rollout tp."""
    bare = replace(H100, nvlink_bytes_per_s=None)
    with pytest.raises(InputError, match="rollout tp: 2 needs the NVLink bandwidth"):
        engine_all_reduce(bare, 2)


def test_an_engine_of_16_over_two_h100_nodes_rides_their_8_nics_and_crosses_once():
    """A vLLM engine of tp 16 on H100 nodes of 8: vLLM's tp group is 16 consecutive ranks
    (``initialize_model_parallel``: ``all_ranks.view(-1, tensor_model_parallel_size)``), 8 on
    each of 2 nodes, so NCCL counts 2 nodes and its ring leaves a node through 8 NICs:
    min(8 × 50, 450) = 400 GB/s at 0.96. An all-reduce of 256 × 3,584 × 2 B = 1,835,008 B,
    each rank sending 2 × 15/16 of it = 3,440,640 B. NCCL's tuner (model.nccl_tuner; the ring
    graph's 8 channels) runs it as the tree in LL128: 14 + 2 × ((16/2 − 1) × 1.25 + ⌊log₂ 2⌋
    × 8.5) = 48.5 µs and the buffer at min(min(0.92 × 384, 8 × 41.4) × 120/128, 8 × 36.7) × 0.5
    × 0.6 (``treeCorrectionFactor`` at 2^14 × 64 B) = 88.08 GB/s, 20.834 µs: 69.334 µs (the ring
    in LL128 86.92, the tree in Simple 114.56). In Simple alone, the tree's latency 8.4 + 2 ×
    ((16/2 − 1) × 4 + 1 × 14) = 92.4 µs with the ring's 8.96 µs of bytes, it was 101.36 µs;
    charged as one NIC with every step over the network, 3,440,640 B ∕ 48 GB/s = 71.68 µs + the
    tree over 16 one-rank nodes, 8.4 + 2 × 4 × 14 = 120.4 µs: 192.08 µs."""
    assert engine_placement(16, 8) == (8, 2)
    assert engine_placement(8, 8) == (8, 1)
    buffer = 256 * 3584 * 2
    sent = 2 * 15 / 16 * buffer
    assert sent == 3_440_640
    assert 92.4 + sent / (400e9 * 0.96) * 1e6 == pytest.approx(101.36)
    expected = 48.5 + buffer / 88.08e9 * 1e6
    assert expected == pytest.approx(69.334, abs=1e-3)
    seconds = engine_all_reduce(get_accelerator("H100-SXM"), 16)(buffer)
    assert seconds * 1e6 == pytest.approx(expected)
