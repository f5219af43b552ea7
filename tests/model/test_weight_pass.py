"""The output gradients PyTorch's split backward keeps for the weight pass, derived by hand from
pytorch ``torch/distributed/pipelining/_backward.py`` (``stage_backward_input`` stores, per
parameter group, the gradient reaching each node where a weight joins the input path, in
``param_group["grads"]``, until ``stage_backward_weight``) and torchtitan's tensor-parallel plan
(column-parallel outputs ÷ tp, row-parallel local outputs whole, norms on the sequence shard)."""

from __future__ import annotations

from dataclasses import replace

from trainplan.model.activations import ActivationContext
from trainplan.model.layout import Layout
from trainplan.model.pipeline_zb import w_pending
from trainplan.model.schedule import simulate
from trainplan.model.specs import TrainingSpec
from trainplan.model.split import stage_layers
from trainplan.model.terms.activations import stage_activations
from trainplan.model.weight_pass import weight_pass_grads_bytes
from trainplan.scenarios.catalogue import get_model

LLAMA_8B = get_model("llama3-8b").model.arch
GPT3 = get_model("gpt3-175b").model.arch
MIXTRAL = get_model("mixtral-8x7b").model.arch


def test_llama3_8b_tp1_by_hand():
    """Llama 3 8B (h 4,096, 32 heads and 8 K/V heads of 128, SwiGLU f 14,336), s 8,192, b 1, tp 1,
    BF16: wq 4,096 + wk 1,024 + wv 1,024 + w1 14,336 + w3 14,336 columns, wo and w2 4,096 each,
    the two RMSNorms' outputs 4,096 each:
        2·8,192·(4,096 + 2·1,024 + 2·14,336 + 2·4,096) = 704,643,072
        + 2·2·8,192·4,096 = 134,217,728  → 838,860,800 per layer and micro-batch."""
    ctx = ActivationContext(
        seq_len=8192, cp=1, micro_batch_size=1, tp=1, sequence_parallel=False,
        flash_attention=True,
    )  # fmt: skip
    want = 2 * 8192 * (4096 + 2 * 1024 + 2 * 14336 + 2 * 4096) + 2 * 2 * 8192 * 4096
    assert weight_pass_grads_bytes(LLAMA_8B, False, ctx, "fsdp2") == want == 838_860_800
    assert weight_pass_grads_bytes(LLAMA_8B, False, ctx, "textbook") == 0


def _gpt3_ctx() -> ActivationContext:
    return ActivationContext(
        seq_len=2048, cp=1, micro_batch_size=4, tp=16, sequence_parallel=True,
        flash_attention=True,
    )  # fmt: skip


def test_gpt3_175b_tp16_b4_by_hand():
    """GPT-3 175B (h 12,288, 96 heads of 128, GeLU f 49,152), s 2,048, b 4 (S = 8,192), tp 16 with
    sequence parallelism: the QKV and FC1 outputs ÷ 16, the output projection's and FC2's
    local outputs whole, the two LayerNorms' outputs on the sequence shard:
        2·8,192·((3·12,288 + 49,152)/16 + 2·12,288) = 16,384·29,952 = 490,733,568
        + 2·2·8,192·12,288/16 = 25,165,824  → 515,899,392."""
    want = 2 * 8192 * ((3 * 12288 + 49152) // 16 + 2 * 12288) + 2 * 2 * 8192 * 12288 // 16
    assert weight_pass_grads_bytes(GPT3, False, _gpt3_ctx(), "fsdp2") == want == 515_899_392


def test_gpt3_pp4_zb_v_rank3_holds_seven_chunks_of_twelve_layers():
    """GPT-3 175B, tp 16, pp 4, ZB-V (v 2: 8 stages; torchtitan's split of 96 layers is 12, 13,
    12 × 5, 11, so rank 3's stages 3 and 4 hold 12 layers each), b 4, fsdp2, no recomputation
    (the split schedules refuse any: model.schedule_support.split_recompute_rule; the gradients
    a W waits on are the layer's output gradients whatever it saved): rank 3 has at most
    2·3 + 1 = 7 chunk micro-batches between their I and their W (PyTorch's order, simulated), each
    of 12 layers: 7·12·515,899,392 = 43,335,548,928 bytes beside the kept layers; 1F1B keeps
    none."""
    assert w_pending("zb-v", 4, 16, 3) == simulate(4, 16, "zb-v").peak_w_pending(3) == 7
    training = TrainingSpec(seq_len=2048, global_batch_size=1536)
    layout = Layout(
        tp=16, pp=4, recompute="none", framework="fsdp2", schedule="zb-v",
        virtual_stages=2, sequence_parallel=True, micro_batch_size=4,
    )  # fmt: skip
    own = stage_layers(GPT3, 4, 2, layout.split_rule, None, "zb-v")[3]
    assert len(own) == 24
    acts = stage_activations(GPT3, own, 3, layout, training)
    extra = acts.layers_bytes - 4 * acts.per_microbatch_bytes  # ZB-V holds pp = 4 rank-units
    assert extra == 7 * 12 * 515_899_392 == 43_335_548_928
    flat = replace(layout, schedule="1f1b", virtual_stages=1)
    own1 = stage_layers(GPT3, 4, 1, flat.split_rule, None, "1f1b")[3]
    one = stage_activations(GPT3, own1, 3, flat, training)
    assert one.layers_bytes == one.per_microbatch_bytes * one.microbatches_in_flight


def test_dualpipev_rank_r_holds_r_plus_one_chunks():
    """DualPipeV, Llama 3 8B, pp 2 (4 stages), tp 1, s 8,192, b 1, no recomputation (the split
    schedules refuse any, model.schedule_support.split_recompute_rule), fsdp2:
    torchtitan's split of 32 layers over 4 stages is 8, 9, 8, 7 (34 effective layers, the first
    two stages one more, the ends one back), so rank 1 holds stage 1 (9 layers) and stage 2 (8).
    It has at most 2 chunk micro-batches between I and W (PyTorch's ScheduleDualPipeV order,
    simulated), one of each of its chunks: (9 + 8)·838,860,800 = 14,260,633,600 (with an even
    split of 8 per stage it was 2·8·838,860,800)."""
    assert w_pending("dualpipev", 2, 8, 1) == simulate(2, 8, "dualpipev").peak_w_pending(1) == 2
    training = TrainingSpec(seq_len=8192, global_batch_size=64)
    layout = Layout(
        tp=1, pp=2, dp=4, recompute="none", framework="fsdp2", schedule="dualpipev",
        virtual_stages=2,
    )  # fmt: skip
    own = stage_layers(LLAMA_8B, 2, 2, layout.split_rule, None, "dualpipev")[1]
    acts = stage_activations(LLAMA_8B, own, 1, layout, training)
    held = acts.per_microbatch_bytes * acts.microbatches_in_flight
    assert len(own) == 17
    assert acts.layers_bytes - held == (9 + 8) * 838_860_800 == 14_260_633_600


def test_mixtral_moe_layer_by_hand():
    """Mixtral 8x7B (h 4,096, 32 heads and 8 K/V heads of 128, 8 experts of SwiGLU 14,336, top 2),
    s 4,096, b 1, tp 1, torchtitan's FP32 router: attention 2·4,096·(4,096 + 2,048 + 4,096), norms
    2·2·4,096·4,096, router logits 4·4,096·8, the grouped experts on R = 2·4,096 rows
    2·8,192·(2·14,336 + 4,096)."""
    ctx = ActivationContext(
        seq_len=4096, cp=1, micro_batch_size=1, tp=1, sequence_parallel=False,
        flash_attention=True, fp32_router_autocast=True,
    )  # fmt: skip
    S = 4096
    want = (
        2 * S * (4096 + 2048 + 4096) + 2 * 2 * S * 4096 + 4 * S * 8
        + 2 * 2 * S * (2 * 14336 + 4096)
    )  # fmt: skip
    assert weight_pass_grads_bytes(MIXTRAL, True, ctx, "fsdp2") == want == 687_996_928
