"""Issue 11 item 3: sliding-window, chunked and sink attention change FLOPs and, without
FlashAttention, score memory — per layer, from the layer's span (model/attention.py).

Sources: Mistral 7B (arXiv 2310.06825) §2 and Table 1 (window 4,096 on every layer); Gemma 3
report (arXiv 2503.19786) §2 (five local layers of span 1,024 to one global); Llama 4's released
config (attention_chunk_size 8,192 on the RoPE layers, every fourth layer NoPE and global);
gpt-oss model card (arXiv 2508.10925) §2.1 (alternating banded window of 128, learned sinks);
Hugging Face ``masking_utils``: a window keeps keys ``kv > q − W`` on top of the causal mask,
a chunk keeps the causal keys of the query's own chunk.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from trainplan.model.activations import ActivationContext, layer_activations
from trainplan.model.attention import AttentionSpan, attended_pairs
from trainplan.model.errors import InputError, ScenarioError
from trainplan.model.flops import attention_core_forward_flops, layer_forward_flops
from trainplan.model.hf_families import read_hf_config
from trainplan.model.layout import Layout
from trainplan.model.specs import Architecture, TrainingSpec
from trainplan.model.split import split_layers
from trainplan.model.terms.step import stage_core_flops
from trainplan.model.timing import stage_microbatch_flops
from trainplan.scenarios.catalogue import get_model

HF = Path(__file__).parent.parent / "data" / "hf"


def _mistral(window: int | None) -> Architecture:
    """One Mistral-7B-shaped layer: h 4,096, 32 heads of 128, 8 KV heads, SwiGLU of 14,336."""
    arch = get_model("mistral-7b").model.arch
    return replace(arch, sliding_window=window, attention_pattern=())


def test_a_mistral_layer_counts_the_pairs_its_window_keeps():
    # s = 4,096, W = 1,024 (issue 11): query i attends min(i + 1, 1024) keys, so
    #   Σ_{i<4096} min(i+1, 1024) = (1 + 2 + … + 1024) + 3072·1024 = 524,800 + 3,145,728
    assert attended_pairs(AttentionSpan.LOCAL, 4096, 1024, causal=True) == 3_670_528
    # a global causal layer: 1 + 2 + … + 4096 = 4096·4097/2
    assert attended_pairs(AttentionSpan.GLOBAL, 4096, None, causal=True) == 8_390_656
    # a window as long as the sequence changes nothing
    assert attended_pairs(AttentionSpan.LOCAL, 4096, 4096, causal=True) == 8_390_656
    # the attention core's forward FLOPs follow: 2 FLOPs × pairs × a × (d_qk + d_v)
    #   windowed: 2 · 3,670,528 · 32 · 256 = 60,137,930,752
    #   global:   2 · 8,390,656 · 32 · 256 = 137,472,507,904
    windowed, full_mask = _mistral(1024), _mistral(None)
    assert attention_core_forward_flops(windowed, 0, 4096, 1, causal=True) == 60_137_930_752
    assert attention_core_forward_flops(full_mask, 0, 4096, 1, causal=True) == 137_472_507_904
    # and the layer's forward: matmuls 2·s·W with W = 2·h·a·d + 2·h·g·d + 3·h·f
    #   = 33,554,432 + 8,388,608 + 176,160,768 = 218,103,808 → 2·4096·W = 1,786,706,395,136
    assert layer_forward_flops(windowed, 0, 4096, 1, causal=True) == (
        1_786_706_395_136 + 60_137_930_752
    )


def test_the_full_convention_counts_the_whole_score_matrix_window_or_not():
    # Megatron-LM's and PaLM's count (FlashAttention off): the s×s scores an unfused kernel
    # computes and masks — 4096² = 16,777,216 pairs for every layer, windowed or not
    for arch in (_mistral(1024), _mistral(None)):
        assert attention_core_forward_flops(arch, 0, 4096, 1) == 2 * 16_777_216 * 32 * 256


def test_chunks_and_narrow_windows():
    # Llama 4's chunks of C = 8,192 at s = 16,384: two chunks of 8192·8193/2 pairs each,
    # against 16384·16385/2 = 134,225,920 for a global layer
    assert attended_pairs(AttentionSpan.CHUNKED, 16384, 8192, causal=True) == 67_117_056
    # a chunk that does not fill: s = 10,000 = 8192 + 1808 → 33,558,528 + 1808·1809/2
    assert attended_pairs(AttentionSpan.CHUNKED, 10000, 8192, causal=True) == 33_558_528 + 1_635_336
    # gpt-oss's window of 128 at s = 4,096: 128·129/2 + (4096 − 128)·128 = 8,256 + 507,904
    assert attended_pairs(AttentionSpan.LOCAL, 4096, 128, causal=True) == 516_160


def test_gemma3_stages_pay_for_their_own_global_layers():
    # Gemma 3 27B, s 8,192: layer i is global when (i + 1) is a multiple of 6 (5, 11, …, 59).
    # Per layer and sequence the core costs 2 · pairs · a · 2d = pairs · 2·32·256 = 16,384·pairs:
    #   local  (W 1,024): 1024·1025/2 + (8192 − 1024)·1024 = 7,864,832 pairs
    #   global:           8192·8193/2 = 33,558,528 pairs
    # pp 4 splits the 62 layers 15, 16, 16, 15 (one fewer on the end stages):
    #   stage 0, layers 0–14: globals 5, 11        → 2 global + 13 local
    #   stage 1, layers 15–30: globals 17, 23, 29  → 3 global + 13 local
    #   stage 2, layers 31–46: globals 35, 41      → 2 global + 14 local
    #   stage 3, layers 47–61: globals 47, 53, 59  → 3 global + 12 local
    arch = get_model("gemma3-27b").model.arch
    assert [len(s) for s in split_layers(62, 4)] == [15, 16, 16, 15]
    g, loc = 33_558_528, 7_864_832
    assert stage_core_flops(arch, 4, 1, 8192, True) == tuple(
        16_384 * (n_g * g + n_l * loc) for n_g, n_l in ((2, 13), (3, 13), (2, 14), (3, 12))
    )
    # step time reads them: stage 1's micro-batch (b 1, no recomputation) costs 3 × its cores
    # plus 3 × its matmuls; the same stage with every layer global costs 3·16,384·13·(g − loc)
    # more
    layers = split_layers(62, 4)[1]
    t = TrainingSpec(seq_len=8192, global_batch_size=8)
    all_global = replace(arch, sliding_window=None, attention_pattern=())
    fast = stage_microbatch_flops(arch, layers, False, Layout(), t, causal=True)
    slow = stage_microbatch_flops(all_global, layers, False, Layout(), t, causal=True)
    assert slow - fast == 3 * 16_384 * 13 * (g - loc)


def test_eager_attention_stores_the_whole_score_matrix_window_or_not():
    # Without FlashAttention eager attention adds the window's mask to the full [b, a, s, s]
    # scores: a Mistral layer keeps the same bytes with or without its window (b 1, s 4096,
    # tp 1): the softmax output alone is β·a·s·s = 2·32·4096² = 1,073,741,824 bytes
    ctx = ActivationContext(
        seq_len=4096, cp=1, micro_batch_size=1, tp=1, sequence_parallel=False, flash_attention=False
    )
    windowed = layer_activations(_mistral(1024), 0, ctx)
    plain = layer_activations(_mistral(None), 0, ctx)
    assert windowed.full_bytes == plain.full_bytes
    assert dict(windowed.terms)["softmax output"] == 2 * 32 * 4096 * 4096


def test_sinks_and_soft_capping_without_flashattention():
    # gpt-oss: a sink logit per head joins each row's softmax, [b, a, s, s + 1]; at s 2,048,
    # b 1, tp 1: β·a·s·(s + 1) = 2·64·2048·2049 = 537,133,056 bytes. FlashAttention keeps none.
    gpt = get_model("gpt-oss-20b").model.arch
    eager = ActivationContext(
        seq_len=2048, cp=1, micro_batch_size=1, tp=1, sequence_parallel=False, flash_attention=False
    )
    assert dict(layer_activations(gpt, 0, eager).terms)["softmax output"] == 537_133_056
    flash = replace(eager, flash_attention=True)
    assert not layer_activations(gpt, 0, flash).score_names
    # Gemma 2's attention soft-capping keeps tanh's output too: one more β·a·s·s. Gemma 2 9B,
    # s 4,096, tp 2 (16 heads, 8 per rank): 2·8·4096² = 268,435,456 bytes, a score tensor
    # (selective recomputation drops it, as the softmax output)
    gemma2 = read_hf_config(json.loads((HF / "gemma-2-9b" / "config.json").read_text()), "g")[0]
    ctx = replace(eager, seq_len=4096, tp=2, sequence_parallel=True)
    acts = layer_activations(gemma2, 0, ctx)
    assert dict(acts.terms)["soft-capped scores (tanh output)"] == 268_435_456
    assert "soft-capped scores (tanh output)" in acts.score_names


def test_attention_fields_are_checked():
    base = dict(
        num_layers=4, hidden_size=8, num_attention_heads=2, ffn_hidden_size=32, vocab_size=16
    )
    with pytest.raises(InputError, match=r"a 'local' layer needs model\.sliding_window"):
        Architecture(**base, attention_pattern=("local", "global"))
    with pytest.raises(InputError, match=r"sliding_window = 8 is given but no layer .* is 'local'"):
        Architecture(**base, sliding_window=8, attention_pattern=("global",))
    with pytest.raises(InputError, match="not one of global, local, chunked"):
        Architecture(**base, sliding_window=8, attention_pattern=("sliding",))
    with pytest.raises(InputError, match=r"model\.sliding_window: 0 must be a whole number >= 1"):
        Architecture(**base, sliding_window=0)
    # a window alone is every layer local (Mistral); a chunk size alone every layer chunked
    assert Architecture(**base, sliding_window=8).attention_pattern == (AttentionSpan.LOCAL,)
    assert Architecture(**base, attention_chunk_size=8).layer_span(3) is AttentionSpan.CHUNKED


def test_the_importer_reads_windows_and_names_what_it_does_not_understand():
    # Qwen1.5-72B with use_sliding_window true: the window applies from max_window_layers (70)
    config = json.loads((HF / "qwen1.5-72b" / "config.json").read_text())
    arch = read_hf_config({**config, "use_sliding_window": True}, "q")[0]
    assert (
        arch.layer_span(69) is AttentionSpan.GLOBAL and arch.layer_span(70) is AttentionSpan.LOCAL
    )
    assert arch.sliding_window == 32768
    # released as false: no layer is windowed
    assert read_hf_config(config, "q")[0].attention_pattern == ()
    # a key the importer does not know is named in the notes, never dropped silently
    mistral = json.loads((HF / "mistral-7b" / "config.json").read_text())
    _, notes = read_hf_config({**mistral, "sliding_window_stride": 2}, "m.json")
    assert notes == (
        "m.json: key 'sliding_window_stride' = 2 is not understood and was not used; check that "
        "it changes no cost (or write a scenario file with explicit dimensions)",
    )
    # a layer_types list that does not name every layer is refused
    with pytest.raises(ScenarioError, match=r"layer_types = \['full_attention'\]: must list 32"):
        read_hf_config({**mistral, "layer_types": ["full_attention"]}, "m.json")


def test_pairs_are_exact_integers():
    # s = 7 in chunks of 3: [0, 1, 2] → 1 + 2 + 3, [3, 4, 5] → 6, [6] → 1
    assert attended_pairs(AttentionSpan.CHUNKED, 7, 3, True) == 6 + 6 + 1
    assert isinstance(attended_pairs(AttentionSpan.LOCAL, 10**6 + 1, 4097, True), int)
