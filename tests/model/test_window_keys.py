"""How many keys a sliding-window query attends, as each framework hands the window to its
kernel, against the planner's W (``Architecture.sliding_window``: W keys, the query's own
included; :func:`model.attention.attended_pairs`).

Each mask below is the framework's own predicate, written out here and counted pair by pair:

* Transformer Engine ``window_size = (left, right)``: query i attends the keys in
  [i + s_k − s_q − left, i + s_k − s_q + right] inclusive (TransformerEngine d0067d0d
  ``transformer_engine/pytorch/attention/dot_product_attention/dot_product_attention.py``
  ``DotProductAttention`` docstring); the fused cuDNN path sets ``diagonal_band_left_bound`` to
  ``window_size_left + 1`` (``transformer_engine/common/fused_attn/
  fused_attn_f16_arbitrary_seqlen.cu``): keys with i − j < left + 1. FlashAttention's
  ``window_size`` is the same interval. Causal with (W − 1, 0): W keys.
* Megatron Bridge's providers hand TE ``(sliding_window − 1, 0)`` since 5fcab34f8 (2026-03-10,
  #2656, "Fix off-by-one in sliding window size for Gemma2, Gemma3, Mistral, and GPT-OSS";
  067f987d ``models/gpt_oss/gpt_oss_bridge.py`` ``provider_bridge``, ``models/gemma/
  gemma2_bridge.py``, ``gemma3_provider.py`` ``Gemma3TEDotProductAttention``); Megatron-LM's
  gpt-oss examples pass ``--window-size 127,0`` (d98e8a64 ``examples/gptoss/02_train.sh``). Before
  the fix, ``GPTOSSProvider.window_size`` was ``(128, 0)`` (v0.2.0 = the 25.11 container,
  ``models/gpt_oss/gpt_oss_provider.py``): 129 keys. The fix is in v0.4.0 and in 21d102f5e (the
  26.04.01 B300 rows' commit).
* torchtitan ``get_sliding_window_mask_mod(W)``: ``(kv_idx <= q_idx) & (q_idx − kv_idx < W)``
  (b5bcd76c ``torchtitan/models/common/attention.py``), and its varlen path
  ``window_size = (sliding_window_size − 1, 0)`` (``torchtitan/models/gpt_oss/__init__.py``
  ``_make_gptoss_attn_config``): W keys.
* Hugging Face ``sliding_window = W``: ``kv_idx > q_idx − W`` on top of the causal mask
  (``masking_utils.sliding_window_overlay``): W keys. Its FlashAttention path passed
  ``(W, W)`` (W + 1 keys) until the off-by-one reported in huggingface/transformers#39408
  (2025-07) was fixed to ``(W − 1, W − 1)``; OpenRLHF's stack read here runs transformers 5.15.0
  (``model/rlhf/openrlhf.py``), after the fix.
"""

from __future__ import annotations

from trainplan.model.attention import AttentionSpan, attended_pairs
from trainplan.model.band_tiles import key_tiles


def _pairs(s: int, keep) -> int:  # type: ignore[no-untyped-def]
    return sum(1 for q in range(s) for k in range(s) if keep(q, k))


def _te(left: int, right: int):  # type: ignore[no-untyped-def]
    """TE / FlashAttention ``window_size`` under the causal mask (s_q = s_k)."""
    return lambda q, k: k <= q and q - left <= k <= q + right


def test_each_framework_attends_w_keys():
    """s = 384, W = 128: Σ min(i + 1, 128) = 128·129/2 + 256·128 = 8,256 + 32,768 = 41,024
    pairs under every framework's current rule, the planner's count."""
    s, w = 384, 128
    expected = 128 * 129 // 2 + (384 - 128) * 128
    assert expected == 41_024 == attended_pairs(AttentionSpan.LOCAL, s, w, True)
    rules = {
        "TE / FlashAttention (W − 1, 0)": _te(w - 1, 0),
        "cuDNN band left bound W": lambda q, k: k <= q and q - k < (w - 1) + 1,
        "torchtitan mask_mod": lambda q, k: (k <= q) and (q - k < w),
        "Hugging Face overlay": lambda q, k: k <= q and k > q - w,
        "Bridge Gemma 2 flex": lambda q, k: (q >= k) and (q - k <= w - 1),
        "HF flash (W − 1, W − 1)": _te(w - 1, w - 1),
    }
    assert {name: _pairs(s, keep) for name, keep in rules.items()} == dict.fromkeys(rules, expected)


def test_bridge_v0_2_gpt_oss_band_is_129_keys_on_the_same_tiles():
    """Megatron Bridge v0.2.0 (the 25.11 H100, B200 and GB200 gpt-oss rows) hands TE (128, 0):
    min(i + 1, 129) keys, 129·130/2 + 255·129 = 8,385 + 32,895 = 41,280 pairs at s = 384
    (+0.6 %; at s = 4,096: 528,384 + … against 516,160, +0.77 %). On 128 × 128 tiles the
    query tile m ≥ 1 starts at key tile ⌊(128m − left)/128⌋ = m − 1 for left 127 and for 128
    alike (128m − 127 and 128m − 128 share their quotient), so the band runs the same two key
    tiles a query tile and takes the same time; only left ≥ 129 (a 130-key band) reaches a
    third. The planner's band (W = 128) therefore times those rows' kernels as they ran; their
    FLOPs are 0.77 % short on the band layers (half the layers), which the validation compares
    nowhere (it compares step times)."""
    s = 384
    assert _pairs(s, _te(128, 0)) == 129 * 130 // 2 + (384 - 129) * 129 == 41_280
    assert attended_pairs(AttentionSpan.LOCAL, 4096, 129, True) == 129 * 130 // 2 + 3967 * 129
    assert attended_pairs(AttentionSpan.LOCAL, 4096, 129, True) == 520_128
    assert attended_pairs(AttentionSpan.LOCAL, 4096, 128, True) == 516_160
    # key_tiles takes W and uses left = W − 1
    assert key_tiles(8192, 128) == key_tiles(8192, 129) == (1,) + (2,) * 63
    assert key_tiles(8192, 130)[:3] == (1, 2, 3) and sum(key_tiles(8192, 130)) == 1 + 2 + 62 * 3
    for br in (64, 128, 192, 256):  # FlashAttention-3's 192-row local tile included
        assert key_tiles(8192, 128, True, (br, 128)) == key_tiles(8192, 129, True, (br, 128))
