"""The flash attention kernel's FP32 softmax statistics (log-sum-exp), kept for backward under the
``megatron``, ``deepspeed`` and ``fsdp2`` profiles whatever the activation convention.

* megatron: Transformer Engine d0067d0da ``attention/dot_product_attention/backends.py``
  ``FusedAttnFunc.forward`` saves ``*aux_ctx_tensors``, which ``backward`` unpacks as
  ``softmax_lse, rng_state``; ``common/fused_attn/fused_attn_f16_arbitrary_seqlen.cu`` gives
  ``output_S`` the shape ``{batch, num_attn_heads, max_seqlen_q, 1}``, FP32.
* deepspeed: Megatron-DeepSpeed 4efb479d ``FlashSelfAttention`` calls flash-attn's
  ``flash_attn_varlen_func``, whose ``FlashAttnVarlenFunc.forward`` saves ``softmax_lse``, FP32
  ``(num_heads, total_q)``.
* fsdp2, eager or compiled: torchtitan calls SDPA, whose flash / efficient / cuDNN kernels return
  an FP32 ``logsumexp`` that their backward reads (torch 2.13 ``derivatives.yaml``
  ``_scaled_dot_product_flash_attention``: ``_scaled_dot_product_flash_attention_backward(grad,
  query, key, value, output, logsumexp, …)``); under ``torch.compile`` Inductor's partitioner
  never recomputes SDPA (``torch/_functorch/partitioners.py`` ``should_ban_recomputation``:
  ``get_default_op_list().compute_intensive_ops`` lists ``aten._scaled_dot_product_flash_attention``
  and ``_efficient_attention``), so the compiled block saves it as the eager one does.

Per layer and micro-batch, on a tp rank: ``4 B × (a/tp) × b × s/cp``. A *score* row: selective
recomputation of the core (``core_attn``) drops it. ``textbook`` (the paper's count) keeps no
such row.
"""

from __future__ import annotations

import pytest

from trainplan.model.activation_rows import SOFTMAX_LSE
from trainplan.model.activations import kind_activations
from trainplan.model.context_parallel import CpKind
from trainplan.model.specs import TrainingSpec
from trainplan.model.terms.activation_fields import activation_context
from trainplan.scenarios.catalogue import get_model

LLAMA405 = get_model("llama3-405b").model.arch  # a 128 heads, h 16384, 126 layers


def _layer(framework, tp=4, cp=1, b=1, seq=8192, **training):
    t = TrainingSpec(seq_len=seq, global_batch_size=8, **training)
    ctx = activation_context(t, b, cp, tp, tp > 1, CpKind.RING, 1, 1, framework)
    return kind_activations(LLAMA405, False, ctx)


@pytest.mark.parametrize(
    ("framework", "training"),
    [("megatron", {}), ("deepspeed", {}), ("fsdp2", {"compile": True}), ("fsdp2", {})],
)
def test_the_kernel_keeps_its_softmax_statistics(framework, training):
    # Llama 3 405B, s 8,192, b 1, tp 4: 4 B × 128/4 heads × 8,192 = 1,048,576 B a layer; the
    # search's answer on 1,024 B200 (dp 16 × tp 4 × pp 16, v 8, MXFP8) holds 141 layer chunks
    # of one layer in flight on stage 1: 141 × 1,048,576 = 147,849,216 B (126.15 → 126.30 GB)
    layer = _layer(framework, **training)
    terms = dict(layer.terms)
    assert terms[SOFTMAX_LSE] == 4 * (128 // 4) * 8192 == 1_048_576
    assert SOFTMAX_LSE in layer.score_names
    assert 141 * terms[SOFTMAX_LSE] == 147_849_216
    # b 2 and cp 2 (the ring keeps the local queries' statistics): 4 × 32 × 2 × 8,192/2
    assert dict(_layer(framework, cp=2, b=2, **training).terms)[SOFTMAX_LSE] == 4 * 32 * 2 * 4096


def test_selective_recomputation_of_the_core_drops_it():
    # megatron's core_attn re-runs the kernel; with flash attention at cp 1 the row is all that
    # selective recomputation of the core drops (no [b, a, s, s] scores are kept)
    for framework in ("megatron", "textbook"):
        layer = _layer(framework, recompute_modules=("core_attn",))
        dropped = layer.full_bytes - layer.selective_bytes
        assert dropped == (1_048_576 if framework == "megatron" else 0)


def test_counted_once_and_not_by_the_paper():
    assert SOFTMAX_LSE not in dict(_layer("textbook").terms)
    assert SOFTMAX_LSE not in dict(_layer("megatron", flash_attention=False).terms)
    for framework in ("megatron", "deepspeed", "fsdp2", "textbook"):
        for convention in ("paper", "pytorch"):
            layer = _layer(framework, activation_convention=convention)
            names = [n for n, _ in layer.terms]
            expected = 1 if framework != "textbook" or convention == "pytorch" else 0
            assert names.count(SOFTMAX_LSE) == expected, (framework, convention)
