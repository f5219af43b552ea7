"""Megatron-Core's fused MoE permutation (``moe_permute_fusion``, which Megatron Bridge's MoE
recipes set) is Transformer Engine's: ``moe_utils.permute(fused=True)`` →
``transformer_engine/pytorch/permutation.py`` saves ``row_id_map``, an int32
``[num_tokens, 2·num_experts + 1]`` (``triton/permutation.py`` ``make_row_id_map``), once per MoE
layer and micro-batch (model.activations.ActivationContext.permute_map_bytes)."""

from trainplan.model.activations import kind_activations
from trainplan.model.context_parallel import CpKind
from trainplan.model.moe_run import MoERun
from trainplan.model.specs import TrainingSpec
from trainplan.model.terms.activation_fields import activation_context
from trainplan.scenarios.catalogue import get_model

ROW = "token permutation row map (int32, fused)"
ARCH = get_model("deepseek-v3").model.arch


def _terms(framework: str, **training) -> dict:
    t = TrainingSpec(seq_len=4096, global_batch_size=8, **training)
    ctx = activation_context(t, 1, 1, 1, False, CpKind.RING, 8, 1, framework)
    return dict(kind_activations(ARCH, True, ctx).terms)


def test_deepseek_v3_map_by_hand():
    """E 256, S 4,096 tokens: 4 B × 4,096 × (2·256 + 1) = 8,404,992 B per MoE layer; none in a
    dense layer, none under the flex (DeepEP) dispatcher or another profile."""
    assert _terms("megatron")[ROW] == 4 * 4096 * 513 == 8_404_992
    assert ROW not in _terms("megatron", moe_run=MoERun(dispatcher="deepep"))
    assert ROW not in _terms("fsdp2")
