"""The eager elementwise rows reach the one activation term under ``fsdp2`` with ``compile``
false only (:func:`model.terms.activation_fields.activation_context`)."""

from trainplan.model.activations import kind_activations
from trainplan.model.context_parallel import CpKind
from trainplan.model.specs import Architecture, TrainingSpec
from trainplan.model.terms.activation_fields import activation_context

LLAMA3_8B = Architecture(
    num_layers=32,
    hidden_size=4096,
    num_attention_heads=32,
    num_kv_heads=8,
    ffn_hidden_size=14336,
    vocab_size=128256,
    mlp="swiglu",
    norm="rmsnorm",
)


def _ctx(framework: str, compile: bool | None):
    t = TrainingSpec(seq_len=8192, global_batch_size=16, compile=compile)
    return activation_context(t, 2, 1, 1, False, CpKind.RING, framework=framework)


def test_only_fsdp2_without_compile_counts_the_eager_operators():
    assert _ctx("fsdp2", None).eager_elementwise
    assert _ctx("fsdp2", False).eager_elementwise
    assert not _ctx("fsdp2", True).eager_elementwise
    assert not _ctx("megatron", None).eager_elementwise


def test_llama3_8b_layer_eager_minus_compiled_by_hand():
    # T = 2·8192 tokens, bf16, tp 1: two RMSNorms' FP32 copies 4·T·h and rstd 4·T beyond the
    # BF16 input they replace by the normalised output; K and V repeated from 8 to 32 heads
    # 2·2·T·24·128; SiLU's output 2·T·14,336: 1,208,090,624 bytes. SDPA's log-sum-exp 4·32·T is
    # kept compiled too (Inductor's partitioner never recomputes SDPA): in both counts
    T = 2 * 8192
    eager = kind_activations(LLAMA3_8B, False, _ctx("fsdp2", False))
    compiled = kind_activations(LLAMA3_8B, False, _ctx("fsdp2", True))
    extra = 2 * (4 * T * 4096 + 4 * T) + 4 * T * 24 * 128 + 2 * T * 14336
    assert eager.full_bytes - compiled.full_bytes == extra == 1_208_090_624
    lse = "softmax statistics (fp32 logsumexp)"
    assert dict(eager.terms)[lse] == dict(compiled.terms)[lse] == 4 * 32 * T == 2_097_152
    # torchtitan's op-level selective policy re-runs the elementwise operators: nothing kept
    assert eager.selective_bytes == compiled.selective_bytes
    assert eager.checkpoint_bytes == compiled.checkpoint_bytes


def test_the_final_norm_is_eager_under_fsdp2_compiled_or_not():
    """torchtitan compiles each TransformerBlock only (apply_compile at 9dec370), so the final
    RMSNorm keeps, in place of nothing beyond its BF16 input: its FP32 copy 4·S·h and rstd 4·S
    (the normalised BF16 tensor replaces the input). Llama 3 8B, one micro-batch of 2 × 8,192
    tokens, tp 1, full recomputation: (4·4,096 + 4)·16,384 = 268,500,992 bytes on the last
    stage, with compile or without; none under megatron (a fused norm keeping its input)."""
    from trainplan.optimizer.case import Case

    def emb(**kw):
        est = Case.of(
            model="llama3-8b",
            device="H100-SXM",
            dp=8,
            seq_len=8192,
            global_batch_size=16,
            micro_batch_size=2,
            recompute="full",
            **kw,
        ).evaluate()
        return est.stages[-1].activations.embedding_bytes

    extra = (4 * 4096 + 4) * 2 * 8192
    assert extra == 268_500_992
    compiled, eager = emb(framework="fsdp2", compile=True), emb(framework="fsdp2", compile=False)
    assert compiled == eager
    # the same layout under megatron keeps the norm's BF16 input (2·S·h) and the output
    # projection's input as fsdp2 does, and the FP32 logits over its own padded vocabulary
    S, h = 2 * 8192, 4096
    megatron = emb(framework="megatron")
    assert compiled - extra == 2 * S * h + 2 * S * h + 4 * S * 128256
    assert megatron != compiled
