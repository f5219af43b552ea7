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
    # 2·2·T·24·128; SDPA's log-sum-exp 4·32·T; SiLU's output 2·T·14,336: 1,210,187,776 bytes
    T = 2 * 8192
    eager = kind_activations(LLAMA3_8B, False, _ctx("fsdp2", False))
    compiled = kind_activations(LLAMA3_8B, False, _ctx("fsdp2", True))
    extra = 2 * (4 * T * 4096 + 4 * T) + 4 * T * 24 * 128 + 4 * 32 * T + 2 * T * 14336
    assert eager.full_bytes - compiled.full_bytes == extra == 1_210_187_776
    # torchtitan's op-level selective policy re-runs the elementwise operators: nothing kept
    assert eager.selective_bytes == compiled.selective_bytes
    assert eager.checkpoint_bytes == compiled.checkpoint_bytes
