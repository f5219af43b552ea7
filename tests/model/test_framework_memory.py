"""Memory the frameworks hold beyond the textbook's count, each figure derived here from the
framework's code (the module docstrings cite file and function):

* the loss's working set (:mod:`model.loss_memory`): Megatron's unfused vocab-parallel cross
  entropy holds 6 B per local logit at its peak, torchtitan's 12 B (tp 1, PyTorch's
  ``log_softmax`` + ``nll_loss``) or 16 B (tp > 1, ``loss_parallel``), of which 4 B (the fp32
  softmax) are kept for backward and already counted;
* FSDP2 under a pipeline schedule (:func:`model.mechanisms.mechanism` ``pipelined``): no
  gradient sync until the last micro-batch, so the stage's gradients are whole, in FP32;
* torchtitan's op-level selective checkpointing (:mod:`model.op_checkpoint`): the block input,
  every other matmul output and the attention kernel's outputs.
"""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import pytest

from trainplan.model.activations import ActivationContext, layer_activations
from trainplan.model.loss_memory import loss_peak_bytes_per_element, loss_transient_bytes
from trainplan.model.mechanisms import mechanism
from trainplan.model.op_checkpoint import op_selective_bytes, op_selective_rows
from trainplan.model.specs import Architecture

LLAMA3_8B = Architecture(
    num_layers=32, hidden_size=4096, num_attention_heads=32, num_kv_heads=8,
    ffn_hidden_size=14336, vocab_size=128256, mlp="swiglu", norm="rmsnorm",
)  # fmt: skip


# -- the loss ---------------------------------------------------------------------------------


def test_megatron_unfused_cross_entropy_holds_bf16_and_fp32_logits():
    # calculate_logits_max: .float() beside the caller's BF16 logits; everything else in place
    assert loss_peak_bytes_per_element("megatron", 1) == 2 + 4
    # Megatron-DeepSpeed: the caller's fp32 copy and an out-of-place shift (model.loss_memory)
    assert loss_peak_bytes_per_element("deepspeed", 8) == 2 + 4 + 4
    # Llama 3 at s 8192, tp 8: 2·8,192·128,256/8 B beyond the kept softmax
    assert loss_transient_bytes("megatron", 8192, 128_256, 8) == 2 * 8192 * 16_032


def test_torchtitan_cross_entropy_working_set():
    # tp 1: log-softmax output (kept) + nll_loss_backward's zero-filled gradient
    # + _log_softmax_backward_data's output, all fp32
    assert loss_peak_bytes_per_element("fsdp2", 1) == 4 + 4 + 4
    # loss_parallel: saved log-softmax, grad_input, (grad_input + exp(x)), the product
    assert loss_peak_bytes_per_element("fsdp2", 8) == 4 * 4
    # torchtitan Table 2's Llama 3 8B row at s 32,768 per GPU: 8 B beyond the kept 4 B
    assert loss_transient_bytes("fsdp2", 32_768, 128_256, 1) == 8 * 32_768 * 128_256
    # Table 4's 70B, local batch 16 × 8,192 tokens, tp 8: 12 B beyond the kept 4 B
    assert loss_transient_bytes("fsdp2", 16 * 8192, 128_256, 8) == 12 * 16 * 8192 * 16_032


def test_textbook_counts_no_loss_transient():
    assert loss_transient_bytes("textbook", 4096, 32_000, 1) == 0


def test_loss_transient_over_arrays():
    np = pytest.importorskip("numpy")
    tp = np.array([1, 2, 8])
    got = loss_transient_bytes("fsdp2", 1024, 1024, tp)
    assert list(got) == [8 * 1024 * 1024, 12 * 1024 * 512, 12 * 1024 * 128]


# -- FSDP2 under a pipeline schedule ------------------------------------------------------------


@pytest.mark.parametrize("zero_stage", [2, 3])
def test_fsdp2_pipelined_accumulates_whole_fp32_gradients(zero_stage):
    m = mechanism("fsdp2", zero_stage, 2, 4, 12, pipelined=True)
    P, D = Fraction(6_000_000_000), 8
    w, g, o, gathered, buffers, step = m.memory_terms(P, D, Fraction(100))
    assert w == 2 * P + 4 * P / D  # bf16 weights whole after backward, the FP32 master shard
    assert g == 4 * P  # unsharded_accumulated_grad in reduce_dtype (FP32)
    assert o == 8 * P / D  # Adam's two moments
    assert step == 4 * P / D  # the FP32 sharded gradient, from the reduce-scatter to the step
    assert gathered == 0 and buffers == 2 * 100
    assert not m.reduce_per_microbatch  # one reduce-scatter per step


def test_fsdp2_pipelined_with_bf16_reduction_keeps_bf16_gradients():
    m = mechanism("fsdp2", 2, 2, 2, 12, pipelined=True)
    assert m.grads_full == 2  # no upcast: reduce_dtype equals the gradient's dtype


def test_pipelined_leaves_other_profiles_alone():
    for fw, z in (("megatron", 1), ("deepspeed", 1), ("textbook", 3)):
        assert mechanism(fw, z, pipelined=True) == mechanism(fw, z)


# -- torchtitan's op-level selective checkpointing ----------------------------------------------


def test_op_selective_llama_block_tp1():
    S = Fraction(16_384)  # local batch 2 × 8,192 (torchtitan Table 1)
    rows = dict(op_selective_rows(LLAMA3_8B, S, 1, 2))
    # mm order wq, wk, wv, wo, w1, w3, w2: the odd-numbered are kept
    assert rows["wq output"] == 2 * S * 4096
    assert rows["wv output"] == 2 * S * 1024
    assert rows["w1 output"] == 2 * S * 14336
    assert rows["w2 output"] == 2 * S * 4096
    assert "wk output" not in rows and "wo output" not in rows and "w3 output" not in rows
    assert rows["block input"] == 2 * S * 4096
    assert rows["attention output"] == 2 * S * 4096
    assert rows["attention log-sum-exp (fp32)"] == 4 * 32 * S
    total = 2 * S * (4096 * 4 + 1024 + 14336) + 4 * 32 * S
    assert op_selective_bytes(LLAMA3_8B, S, 1, 2) == total


def test_op_selective_under_tp_keeps_row_parallel_partials_whole():
    S, tp = Fraction(8192), 4
    rows = dict(op_selective_rows(LLAMA3_8B, S, tp, 2))
    assert rows["block input"] == 2 * S * 4096 / tp  # sequence-sharded residual stream
    assert rows["wq output"] == 2 * S * 4096 / tp  # column-parallel on the gathered sequence
    assert rows["w2 output"] == 2 * S * 4096  # the partial sum before its reduce-scatter
    assert rows["attention reduce-scatter output"] == 2 * S * 4096 / tp
    assert rows["MLP reduce-scatter output"] == 2 * S * 4096 / tp


def test_op_selective_fp8_keeps_every_scaled_mm_output():
    S = Fraction(1024)
    rows = dict(op_selective_rows(LLAMA3_8B, S, 1, 2, fp8_gemms=True))
    for name in ("wq", "wk", "wv", "wo", "w1", "w3", "w2"):
        assert f"{name} output" in rows


def test_op_selective_applies_to_dense_flash_layers_only():
    S = Fraction(1024)
    assert op_selective_rows(LLAMA3_8B, S, 1, 2, moe_layer=True) is None
    assert op_selective_rows(LLAMA3_8B, S, 1, 2, flash_attention=False) is None


def test_fsdp2_selective_figure_is_the_op_policy():
    ctx = dict(seq_len=8192, cp=1, micro_batch_size=2, tp=1, sequence_parallel=False,
               flash_attention=True)  # fmt: skip
    korthikanti = layer_activations(LLAMA3_8B, 0, ActivationContext(**ctx))
    op = layer_activations(LLAMA3_8B, 0, ActivationContext(**ctx, op_selective=True))
    assert op.full_bytes == korthikanti.full_bytes
    assert op.selective_bytes == op_selective_bytes(LLAMA3_8B, Fraction(16_384), 1, 2)
    assert op.selective_bytes < korthikanti.selective_bytes


# -- Megatron-Core's per-module recomputation ---------------------------------------------------


def _deepseek_ctx(**extra):
    from trainplan.scenarios.catalogue import get_model

    arch = get_model("deepseek-v3").model.arch
    ctx = ActivationContext(seq_len=4096, cp=1, micro_batch_size=1, tp=1,
                            sequence_parallel=False, flash_attention=True, **extra)  # fmt: skip
    return arch, ctx


def test_layernorm_and_mla_up_proj_drop_the_norm_outputs_and_q_k_v():
    """DeepSeek-V3's recipe (§3.2.3: RMSNorm and MLA up-projections recomputed) as Megatron-Core's
    --recompute-modules layernorm mla_up_proj, on a MoE layer (index 3): the layer no longer
    keeps MLA's attention-projection input (its input norm's output), Q, K, V, the latents' norm
    outputs (the up-projections' inputs: Megatron-Core fuses q_layernorm / kv_layernorm into
    linear_q_up_proj / linear_kv_up_proj, inside qkv_up_checkpoint), nor the router input (the
    pre-MLP norm's output); the latents themselves stay (the checkpoint's inputs)."""
    arch, base = _deepseek_ctx()
    _, ctx = _deepseek_ctx(recompute_modules=("layernorm", "mla_up_proj"))
    default = layer_activations(arch, 3, base)
    modules = layer_activations(arch, 3, ctx)
    rows = dict(default.terms)
    S, a, h = 4096, 128, 7168
    assert rows["Q"] == rows["K"] == 2 * S * a * (128 + 64)
    assert rows["V"] == 2 * S * a * 128
    assert rows["attention projection input"] == rows["router and dispatch input"] == 2 * S * h
    assert rows["query latent"] == rows["query latent norm output"] == 2 * S * 1536
    assert rows["kv latent norm output"] == 2 * S * 512
    dropped = sum(rows[n] for n in ("Q", "K", "V", "attention projection input",
                                    "router and dispatch input", "query latent norm output",
                                    "kv latent norm output"))  # fmt: skip
    # the default recomputes the attention core, whose scores FlashAttention does not keep
    assert default.selective_bytes == default.full_bytes
    assert modules.selective_bytes == default.full_bytes - dropped


def test_deepseek_recipe_under_textbook_recomputes_every_norm_and_the_moe_swiglu():
    """DeepSeek's stack (the textbook profile, FP8 with ``fp8_activation_storage = deepseek_v3``,
    recompute modules layernorm, mla_up_proj, moe_act), by hand, bytes per token (β = 2, FP8
    1 B per element with one FP32 scale per 128, 1.03125 B): §3.2.3 "all RMSNorm operations"
    takes a dense layer's pre-MLP norm output too (its FC1 input, FP8 7168 · 1.03125 = 7392);
    §3.3.3 (2) "Inputs of the SwiGLU operator in MoE" caches the shared expert's SwiGLU input
    in FP8 (2 · 2048 · 1.03125 = 4224, BF16 8192) and recomputes its output (its down projection
    input, FP8 2048 · 1.03125 = 2112, goes); the pre-MLP norm's recomputation takes the shared
    expert's FP8 FC1 input with it (7392)."""
    fp8 = dict(fp8_linear_inputs=True, fp8_input_bytes=Fraction(33, 32), fp8_gemms=True)
    mods = ("layernorm", "mla_up_proj", "moe_act")
    arch, megatron = _deepseek_ctx(recompute_modules=mods, **fp8)
    _, textbook = _deepseek_ctx(recompute_modules=mods, every_norm=True, **fp8)
    _, deepseek = _deepseek_ctx(recompute_modules=mods, every_norm=True,
                                fp8_activation_storage="deepseek_v3", **fp8)  # fmt: skip
    S = 4096
    m0, t0 = layer_activations(arch, 0, megatron), layer_activations(arch, 0, textbook)
    assert m0.selective_bytes - t0.selective_bytes == 7392 * S  # the dense FC1 input
    m3, t3 = layer_activations(arch, 3, megatron), layer_activations(arch, 3, textbook)
    assert m3.selective_bytes == t3.selective_bytes  # a MoE layer's norms are modules already
    d3 = layer_activations(arch, 3, deepseek)
    # §3.3.3: the attention output once in E5M6 (128 · 128 · (1.5 + 4/128) = 25088) for the
    # kernel's BF16 copy (32768) and the projection's FP8 one (16896); the routed experts'
    # SwiGLU input in FP8 (8 · 2 · 2048 · (2 − 1.03125) = 31744 less); the shared expert's
    assert (
        t3.selective_bytes - d3.selective_bytes
        == ((32768 + 16896 - 25088) + 31744 + (8192 - 4224 + 2112)) * S
    )
    rows = dict(d3.terms)
    assert rows["shared expert SwiGLU input (gate, up) (FP8)"] == 4224 * S
    assert "shared expert down projection input (FP8)" not in rows
    # what the three modules drop: the norm outputs (FP8 attention-projection input 7392, FP8
    # latent norm outputs 1536 · 1.03125 = 1584 and 528, BF16 router input 14336, the shared
    # expert's FP8 FC1 input 7392), Q, K, V and the routed experts' FP8 down-projection input
    # (8 · 2048 · 1.03125 = 16896)
    qkv = 2 * S * 128 * (192 + 192 + 128)
    assert rows["Q"] + rows["K"] + rows["V"] == qkv
    none = layer_activations(arch, 3, replace(deepseek, recompute_modules=()))
    assert none.selective_bytes - d3.selective_bytes == (
        (7392 + 1584 + 528 + 14336 + 7392 + 16896) * S + qkv
    )


def test_recompute_modules_rules():
    from trainplan.model.errors import LayoutError
    from trainplan.model.recompute_modules import check_recompute_modules

    check_recompute_modules("megatron", "selective", ("layernorm",), False, False)
    for args in (
        ("fsdp2", "selective", ("layernorm",), True, True),
        ("megatron", "full", ("layernorm",), True, True),
        ("megatron", "selective", ("moe_act",), False, True),
        ("megatron", "selective", ("mla_up_proj",), True, False),
    ):
        with pytest.raises(LayoutError):
            check_recompute_modules(*args)


# -- FP8 primary weights ------------------------------------------------------------------------


def test_fp8_param_gather_keeps_one_byte_weights_and_the_transpose():
    from trainplan.model.layout import Layout
    from trainplan.model.memory import model_state
    from trainplan.model.specs import TrainingSpec

    P, linear = Fraction(1_000_000), Fraction(900_000)  # 100,000 norm and embedding weights
    lay = Layout(dp=8, framework="megatron", zero_stage=1)
    plain = TrainingSpec(seq_len=1, global_batch_size=8, precision="fp8", gradient_bytes=2)
    fp8w = TrainingSpec(seq_len=1, global_batch_size=8, precision="fp8", gradient_bytes=2,
                        fp8_param_gather=True)  # fmt: skip
    a = model_state(P, Fraction(0), lay, plain, linear=(linear, linear))
    b = model_state(P, Fraction(0), lay, fp8w, linear=(linear, linear))
    # BF16 weights 2·P and an FP8 weight + transpose 2·linear, against FP8 linear weights
    # (1 B), BF16 for the rest, and the transpose alone (1 B)
    assert a.weights_bytes == 2 * P and a.weight_cache_bytes == 2 * linear
    assert b.weights_bytes == 2 * P - linear and b.weight_cache_bytes == linear
    assert a.optimizer_bytes == b.optimizer_bytes == 12 * P / 8


def test_fp8_param_gather_needs_fp8():
    from trainplan.model.errors import InputError
    from trainplan.model.specs import TrainingSpec

    with pytest.raises(InputError, match="fp8_param_gather"):
        TrainingSpec(seq_len=1, global_batch_size=1, fp8_param_gather=True)


# -- the mechanisms in the one cost model -------------------------------------------------------


def test_evaluate_counts_torchtitans_loss_and_fsdp2_pipeline_gradients():
    """Through Case.of(**).evaluate(): torchtitan Table 2's Llama 3 8B at s 32,768 on one GPU's
    sequence keeps the loss's 8 B per logit beyond the kept fp32 softmax on its one stage (full
    recomputation's transient is smaller); under pp > 1 the stage's gradients are whole in FP32
    (4 B per parameter on the GPU) instead of FP32 shards."""
    from trainplan.optimizer.case import Case

    base = {"model": "llama3-8b", "device": "H100-SXM", "framework": "fsdp2", "recompute": "full",
            "seq_len": 32768, "micro_batch_size": 1}  # fmt: skip
    est = Case.of(**{**base, "dp": 8, "global_batch_size": 8}).evaluate()
    acts = est.stages[0].activations
    assert acts.loss_transient_bytes == 8 * 32768 * 128_256
    assert acts.recompute_transient_bytes < acts.loss_transient_bytes
    piped = Case.of(
        **{**base, "dp": 4, "pp": 2, "zero_stage": 2, "global_batch_size": 8}
    ).evaluate()
    for st in piped.stages:
        assert st.state.gradients_bytes == 4 * (st.dense_params + st.expert_params)


def test_pytorch_pipeline_keeps_every_microbatchs_logits_on_the_last_stage():
    """torch/distributed/pipelining/stage.py ``forward_one_chunk`` appends each micro-batch's
    output to ``output_chunks`` (emptied when the next step begins): under fsdp2 with pp 2 the
    last stage of Llama 3 8B at s 32,768 holds m BF16 logits, 2·32,768·128,256 B each; 1F1B
    keeps one micro-batch in flight there whatever m is, so m 2 → 4 adds two of them. Megatron's
    schedules keep the loss, not the logits: nothing moves."""
    from trainplan.optimizer.case import Case

    base = {"model": "llama3-8b", "device": "H100-SXM", "recompute": "full", "seq_len": 32768,
            "micro_batch_size": 1, "dp": 4, "pp": 2}  # fmt: skip

    def last(framework: str, batch: int, keeps: bool = True) -> Fraction:
        case = {**base, "framework": framework, "global_batch_size": batch}
        if framework == "fsdp2":
            case |= {"zero_stage": 2, "pipeline_keeps_outputs": keeps}
        return Case.of(**case).evaluate().stages[-1].activations.embedding_bytes

    assert last("fsdp2", 16) - last("fsdp2", 8) == 2 * 2 * 32768 * 128_256
    assert last("megatron", 16) == last("megatron", 8)
    # torchtitan since e5ef99aab (2025-10-22) passes return_outputs=False: no logits kept
    assert last("fsdp2", 16, keeps=False) == last("fsdp2", 8, keeps=False)
    assert last("fsdp2", 8) - last("fsdp2", 8, keeps=False) == 2 * 2 * 32768 * 128_256  # m 2


def test_fsdp2_all_gather_outputs_stay_reserved_in_the_copy_in_streams_pool():
    """FSDP2 allocates each unit's all-gather output on its copy-in stream and keeps one until
    the next unit's is allocated (``wait_for_unshard``'s ``all_gather_state``); the caching
    allocator serves a stream's cached blocks to that stream only. Llama 3 8B at dp 8: the
    largest unit is the embedding, 128,256 × 4,096 elements, so 2 · 2 B · 525,336,576 is
    reserved beyond the allocated peak, and the next unit's copy-in buffer beside them
    (``foreach_all_gather``'s flat cast of the shard, 2 B · 525,336,576 / 8): 2,101,346,304 +
    131,334,144 = 2,232,680,448 B; Megatron and a single rank reserve nothing more."""
    from trainplan.optimizer.case import Case

    base = {"model": "llama3-8b", "device": "H100-SXM", "recompute": "full", "seq_len": 8192,
            "micro_batch_size": 1}  # fmt: skip
    st = Case.of(**{**base, "framework": "fsdp2", "dp": 8, "global_batch_size": 8}).evaluate()
    one = st.stages[0]
    pool = 2 * 2 * 128_256 * 4096 + 2 * 128_256 * 4096 // 8
    assert one.stream_pool_bytes == pool == 2_232_680_448
    assert one.reserved_bytes == one.allocated_bytes + pool
    mega = Case.of(**{**base, "framework": "megatron", "dp": 8, "global_batch_size": 8})
    single = Case.of(**{**base, "framework": "fsdp2", "dp": 1, "global_batch_size": 1})
    assert mega.evaluate().stages[0].stream_pool_bytes == 0
    assert single.evaluate().stages[0].stream_pool_bytes == 0


def test_pytorch_pipeline_stage_keeps_its_outputs_and_receive_buffers():
    """torch/distributed/pipelining/stage.py: ``fwd_cache`` keeps each chunk's output until its
    backward, and ``PipelineStage`` allocates one activation receive buffer per micro-batch on
    every stage but the first and one gradient receive buffer per micro-batch on every stage but
    the last. Llama 3 8B under fsdp2, pp 2, m 2, s 32,768, tp 1: a stage boundary tensor is
    2·32,768·4,096 B; stage 0 keeps 2 outputs (1F1B: both micro-batches in flight) and 2
    gradient buffers; stage 1 sends nothing and keeps 2 activation buffers. A runtime that frees
    stage tensors (Llama 3 §3.3.2) and Megatron keep none."""
    from trainplan.optimizer.case import Case

    base = {"model": "llama3-8b", "device": "H100-SXM", "recompute": "full", "seq_len": 32768,
            "micro_batch_size": 1, "dp": 4, "pp": 2, "global_batch_size": 8}  # fmt: skip
    one = 2 * 32768 * 4096

    def kept(**extra: object) -> list[Fraction]:
        est = Case.of(**{**base, **extra}).evaluate()
        return [st.activations.pipeline_output_bytes for st in est.stages]

    assert kept(framework="fsdp2", zero_stage=2) == [4 * one, 2 * one]
    assert kept(framework="fsdp2", zero_stage=2, pipeline_frees_stage_tensors=True) == [0, 0]
    assert kept(framework="megatron") == [0, 0]
