"""What each framework profile keeps for backward, per tensor, where the frameworks differ.

Figures held here, each derived in the test from the framework's code:

* ``fsdp2`` with tp > 1 (torchtitan's DTensor plan, ``torchtitan/models/common/
  decoder_sharding.py``): the QKV and FC1 projections keep the all-gathered block input
  ``[S, h]`` whole on every tp rank; Megatron-Core keeps the sequence shard (measured on CPU
  through DTensor in ``tests/fidelity/test_tp_dtensor.py``). Llama 3 70B, s 8192, tp 4, pp 2:
  ``2 × 2·S·h·(1 − 1/4)`` = 201,326,592 B more per layer per micro-batch, 16.1 GB on the first
  stage's 40 layers × 2 micro-batches in flight, and the layout the search used to pick does not
  fit.
"""

from __future__ import annotations

from fractions import Fraction

from trainplan.model.activations import ActivationContext, layer_activations
from trainplan.model.specs import Architecture
from trainplan.optimizer.case import Case

LLAMA70B = {"model": "llama3-70b", "num_gpus": 32, "global_batch_size": 2048, "seq_len": 8192}


def _ctx(**kw) -> ActivationContext:
    base = dict(seq_len=8192, cp=1, micro_batch_size=1, tp=4, sequence_parallel=True,
                flash_attention=True)  # fmt: skip
    return ActivationContext(**{**base, **kw})


def test_fsdp2_keeps_the_gathered_qkv_and_fc1_inputs():
    arch = Architecture(num_layers=80, hidden_size=8192, num_attention_heads=64, num_kv_heads=8,
                        ffn_hidden_size=28672, vocab_size=128256, norm="rmsnorm", mlp="swiglu",
                        position_embedding="rope")  # fmt: skip
    megatron = dict(layer_activations(arch, 0, _ctx()).terms)
    fsdp2 = dict(layer_activations(arch, 0, _ctx(gathered_block_inputs=True)).terms)
    S, h = 8192, 8192
    for name in ("QKV projection input", "FC1 input"):
        assert megatron[name] == 2 * S * h / 4 and fsdp2[name] == 2 * S * h
    # the norms keep their sequence shard under both plans; everything else is equal
    assert fsdp2["attention norm input"] == megatron["attention norm input"] == 2 * S * h / 4
    differ = {n for n in fsdp2 if fsdp2[n] != megatron[n]}
    assert differ == {"QKV projection input", "FC1 input"}
    extra = sum(fsdp2.values()) - sum(megatron.values())
    assert extra == 2 * 2 * S * h * Fraction(3, 4) == 201_326_592


def test_llama3_70b_fsdp2_tp4_pp2_no_longer_fits():
    """The layout ``search --framework megatron --framework fsdp2`` answered on 32 H100s at
    82.61 of 82.68 GB: 16.1 GB more activations on stage 0, so it does not fit. Megatron-Core's
    fused attention and torchtitan's compiled SDPA both keep their FP32 softmax statistics,
    4·64 heads/4·8,192 = 524,288 B a layer (Inductor never recomputes SDPA,
    model.eager_saved), so they are no part of the difference."""
    lay = {**LLAMA70B, "dp": 4, "tp": 4, "pp": 2, "framework": "fsdp2", "zero_stage": 3}
    est = Case.of(**{**lay, "compile": True}).evaluate()  # the eager operators' rows aside
    meg = Case.of(**{**lay, "framework": "megatron", "zero_stage": 1}).evaluate()
    a_f, a_m = est.stages[0].activations, meg.stages[0].activations
    assert a_f.microbatches_in_flight == 2
    assert a_f.layers_bytes - a_m.layers_bytes == 40 * 2 * 201_326_592 == 16_106_127_360
    assert not est.fits


def test_fsdp2_fp8_keeps_the_bf16_linear_inputs():
    """torchao's ``Float8Linear`` (torchtitan's float8) saves ``input_hp``, the BF16 input, so
    FP8 changes nothing a layer keeps under ``fsdp2``; Transformer Engine (``megatron``) saves
    the QKV, FC1 and down-projection inputs in FP8, 1 B per element (the output projection's FP8
    copy beside the attention kernel's BF16 output). Megatron-Core's fused attention and
    torchtitan's compiled SDPA both keep their FP32 softmax statistics, 4·32 heads·8,192 =
    1,048,576 B a layer: in BF16 the two profiles keep the same bytes."""
    base = {"model": "llama3-8b", "num_gpus": 8, "dp": 8, "global_batch_size": 64,
            "seq_len": 8192, "device": "H100-SXM"}  # fmt: skip
    acts = {}
    for fw, zero in (("fsdp2", 3), ("megatron", 1)):
        for precision in ("bf16", "fp8"):
            eager_aside = {"compile": True} if fw == "fsdp2" else {}  # model.eager_saved's rows
            case = Case.of(
                **{
                    **base,
                    "framework": fw,
                    "zero_stage": zero,
                    "precision": precision,
                    **eager_aside,
                }
            )
            acts[fw, precision] = case.evaluate().stages[0].activations.per_microbatch_bytes
    S, h, f, q, layers = 8192, 4096, 14336, 4096, 32
    assert acts["fsdp2", "fp8"] == acts["fsdp2", "bf16"]
    assert acts["megatron", "bf16"] == acts["fsdp2", "bf16"]
    # Megatron: QKV, FC1 (h each) and down projection (f) inputs at 1 B; the output projection
    # keeps an FP8 copy (a·d = h, 1 B) beside the attention kernel's BF16 output (2 B)
    saved = (h + h + f - q) * S * layers
    assert acts["megatron", "bf16"] - acts["megatron", "fp8"] == saved


def test_fsdp2_fp8_caches_no_weight_copies():
    """torchao casts each weight inside its GEMM (forward and again in backward): no FP8 weight
    copy is held under ``fsdp2``, ZeRO-2 (weights whole) or ZeRO-3 (gathered units); Transformer
    Engine caches the FP8 weight and its transpose, 2 B per linear weight element."""
    base = {"model": "llama3-8b", "num_gpus": 8, "dp": 8, "global_batch_size": 64,
            "seq_len": 8192, "device": "H100-SXM", "precision": "fp8"}  # fmt: skip
    for zero in (2, 3):
        fp8 = Case.of(**{**base, "framework": "fsdp2", "zero_stage": zero}).evaluate()
        bf16 = Case.of(**{**base, "framework": "fsdp2", "zero_stage": zero,
                           "precision": "bf16"}).evaluate()  # fmt: skip
        assert fp8.stages[0].state.weight_cache_bytes == 0
        assert fp8.stages[0].state.backward_bytes == bf16.stages[0].state.backward_bytes
    meg = Case.of(**{**base, "framework": "megatron", "zero_stage": 1}).evaluate()
    # 32 layers × (q, k, v, o, gate, up, down) = 32 × (4096·6144 + 4096² + 3·4096·14336)
    linear = 32 * (4096 * 6144 + 4096 * 4096 + 3 * 4096 * 14336)
    assert meg.stages[0].state.weight_cache_bytes == 2 * linear


def test_expert_tp_gathers_the_experts_input():
    """Megatron-Core's all-to-all dispatcher all-gathers the routed tokens over the expert-TP
    group after the all-to-all (``token_dispatcher.py`` ``MoEAlltoAllTokenDispatcher.
    token_dispatch``), so the experts' first linear layer keeps etp ranks' tokens. Mixtral 8x7B
    (k 2, h 4096, 32 MoE layers), s 4096, tp 2 with sequence parallelism, one micro-batch:
    etp 2 keeps ``k·2·S·h·(2 − 1)/2`` = 33,554,432 B more per layer than etp 1, and the gathered
    tokens' fp32 routing weights in the weighted activation ``4·k·S·(2 − 1)/2`` = 16,384 B:
    1,074,266,112 B on the stage; the SwiGLU inputs ``[k·S·etp/tp, f/etp]`` are the same."""
    base = {"model": "mixtral-8x7b", "tp": 2, "dp": 4, "ep": 2, "num_gpus": 8,
            "global_batch_size": 4, "seq_len": 4096}  # fmt: skip
    etp2 = Case.of(**base).evaluate().stages[0].activations
    etp1 = Case.of(**{**base, "etp": 1}).evaluate().stages[0].activations
    per_layer = 2 * 2 * 4096 * 4096 // 2 + 4 * 2 * 4096 // 2
    assert etp2.layers_bytes - etp1.layers_bytes == 32 * per_layer == 1_074_266_112
    # the textbook keeps the seed's sequence-sharded count
    tb = {**base, "framework": "textbook", "zero_stage": 1}
    assert (Case.of(**tb).evaluate().stages[0].activations.layers_bytes
            == Case.of(**{**tb, "etp": 1}).evaluate().stages[0].activations.layers_bytes)  # fmt: skip


def test_moe_layers_send_no_mlp_tp_collectives_without_shared_experts():
    """Megatron-Core's MoE layer: the routed experts' tokens move over the expert-TP group only
    (``MoEAlltoAllTokenDispatcher``); only shared experts (``SharedExpertMLP``, over the tp
    group) gather and scatter like a dense MLP. Mixtral 8x7B (no shared experts), tp 2 with
    sequence parallelism, etp 1, s 4096, b 1, m 1: ``one`` = (1/2)·2·4096·4096 = 16,777,216 B;
    per layer the attention half's 5·one (forward all-gather and reduce-scatter; backward the
    gradient's all-gather, the input's re-gather and the reduce-scatter), × 32 layers =
    2,684,354,560; the embedding's 2·one and the output layer's 3·one + cross-entropy's
    3 × 2 × (1/2) × 4 × 4096: 2,768,289,792 B (the dense MLP half used to double the layers'
    share, 5,452,644,352 B)."""
    base = {"model": "mixtral-8x7b", "tp": 2, "dp": 4, "ep": 2, "etp": 1, "num_gpus": 8,
            "global_batch_size": 4, "seq_len": 4096}  # fmt: skip
    est = Case.of(**base).evaluate()
    tp = next(r.traffic for r in est.traffic if r.traffic.axis == "tp")
    one = 16_777_216
    assert tp.bytes_per_step == 32 * 5 * one + 2 * one + 3 * one + 3 * 2 * 4 * 4096 // 2
    assert tp.bytes_per_step == 2_768_289_792


def test_moe_combine_keeps_what_each_framework_multiplies():
    """The routed experts' outputs kept for the routing weights' gradient, Mixtral 8x7B (k 2,
    h 4096), s 4096, tp 1, per MoE layer and micro-batch:

    * megatron: none — ``TEGroupedMLP.forward`` weights inside the activation
      (``weighted_bias_swiglu_impl``), and the combine's ``unpermute`` gets no probs; the
      activation keeps the fp32 weights, 4·k·S = 32,768 B;
    * fsdp2: torchtitan's ``combine`` multiplies an fp32 copy, 4·k·S·h = 134,217,728 B;
    * textbook (the paper's count): β·k·S·h = 67,108,864 B.

    fsdp2's router also runs under an FP32 autocast (torchtitan ``TokenChoiceTopKRouter``): it
    keeps the FP32 input 4·S·h and gate weight 4·E·h in place of the BF16 input β·S·h,
    (4 − 2)·S·h + 4·8·h = 33,685,504 B more per layer (:func:`model.moe_working_set.
    torchtitan_router_rows`).

    megatron's router also keeps 9 B per element of ``[S, E]`` (Transformer Engine's fused
    top-k: the routing map and an FP32 intermediate; the fused auxiliary-loss scores' FP32
    intermediate) where the others keep one FP32 copy: (9 − 4)·S·8 = 163,840 B more per layer
    (:data:`model.moe_working_set.MEGATRON_ROUTER_SCORE_BYTES`), and its fused permutation
    Transformer Engine's int32 row map ``[S, 2E + 1]``: 4·S·17 = 278,528 B more per layer; its
    fused attention keeps the FP32 softmax statistics, 4·32 heads·S = 524,288 B more per layer
    (the paper's count leaves them out)."""
    base = {"model": "mixtral-8x7b", "dp": 8, "num_gpus": 8, "global_batch_size": 8,
            "seq_len": 4096}  # fmt: skip
    per_mb = {}
    for fw, zero in (("megatron", 1), ("fsdp2", 3), ("textbook", 1)):
        eager_aside = {"compile": True} if fw == "fsdp2" else {}  # model.eager_saved's rows
        est = Case.of(**{**base, "framework": fw, "zero_stage": zero, **eager_aside}).evaluate()
        per_mb[fw] = est.stages[0].activations.per_microbatch_bytes
    k, S, h, layers = 2, 4096, 4096, 32
    fused_router = (9 - 4) * S * 8
    assert fused_router == 163_840
    row_map = 4 * S * (2 * 8 + 1)
    assert row_map == 278_528
    lse = 4 * 32 * S
    assert per_mb["textbook"] - per_mb["megatron"] == layers * (
        2 * k * S * h - 4 * k * S - fused_router - row_map - lse
    )
    router = (4 - 2) * S * h + 4 * 8 * h
    assert router == 33_685_504
    # fsdp2's compiled SDPA keeps its log-sum-exp too (model.eager_saved), as megatron's kernel
    assert per_mb["fsdp2"] - per_mb["textbook"] == layers * (2 * k * S * h + router + lse)
