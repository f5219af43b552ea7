"""K and V repeated to every query head before the attention kernel (torchtitan's ``repeat_kv``
under ``fsdp2``, Megatron-DeepSpeed's under ``deepspeed``): the kernel's backward returns dK and
dV of the query heads, at the attention core's step of the working set
(model.attention_core.attention_core_step)."""

from __future__ import annotations

from fractions import Fraction

from trainplan.model.activations import ActivationContext
from trainplan.model.attention_core import attention_core_step, kernel_kv_repeat
from trainplan.model.backward_working import backward_working_bytes
from trainplan.model.context_parallel import CpKind
from trainplan.model.specs import TrainingSpec
from trainplan.model.terms.activation_fields import activation_context
from trainplan.scenarios.catalogue import get_model

LLAMA_70B = get_model("llama3-70b").model.arch
DEEPSEEK_V3 = get_model("deepseek-v3").model.arch


def _ctx(b: int, repeated: bool, eager: bool = False) -> ActivationContext:
    return ActivationContext(
        seq_len=8192, cp=1, micro_batch_size=b, tp=8, sequence_parallel=True,
        flash_attention=True, gathered_block_inputs=True, kernel_kv_repeated=repeated,
        eager_elementwise=eager,
    )  # fmt: skip


def test_repeated_kv_at_the_attention_core_step_by_hand():
    """Llama 3 70B (64 query heads, 8 K/V heads of 128, h 8,192), s 8,192, tp 8 with SP: a rank
    runs 8 query heads and 1 K/V head, r = a/g = 8. b 1, S = 8,192 tokens:

    n = 2·8,192·8,192/8 = 16,777,216 (the layer's output gradient); dO = dQ = 2·8,192·1,024
    = 16,777,216; grouped dK + dV = 2·2·8,192·128 = 4,194,304; repeated 8× = 33,554,432.

    grouped (Megatron-Core: TE's cuDNN attention takes g heads): n + dO + dQ + KV = 54,525,952
    repeated, kept (fsdp2 eager: SDPA saved the repeated K, V, rows of model.eager_saved):
        n + dO + dQ + 8·KV = 50,331,648 + 33,554,432 = 83,886,080
    repeated, rebuilt (fsdp2 compiled: the repeat recomputed in backward is the kernel's input):
        83,886,080 + 33,554,432 = 117,440,512
    FlashAttention-2 (A100; and Megatron-DeepSpeed's flash-attn): grouped it held dq_accum
    4·8,192·8·128 = 33,554,432, softmax_d 4·8·8,192 = 262,144 and dK/dV expanded to 8 heads
    33,554,432 beside KV: 121,896,960; given 8 K/V heads it expands nothing:
        83,886,080 + 33,554,432 + 262,144 = 117,702,656 (4,194,304 = KV less)
    """
    assert kernel_kv_repeat(_ctx(1, True), LLAMA_70B) == 8
    assert kernel_kv_repeat(_ctx(1, False), LLAMA_70B) == 1
    assert attention_core_step(_ctx(1, False), LLAMA_70B, "cudnn") == 54_525_952
    assert attention_core_step(_ctx(1, True, eager=True), LLAMA_70B, "cudnn") == 83_886_080
    assert attention_core_step(_ctx(1, True), LLAMA_70B, "cudnn") == 117_440_512
    fa2 = "flash-attention-2"
    assert attention_core_step(_ctx(1, False), LLAMA_70B, fa2) == 121_896_960
    assert attention_core_step(_ctx(1, True, eager=True), LLAMA_70B, fa2) == 117_702_656


def test_brief_example_b16_and_whether_it_sets_the_peak():
    """b 16 (131,072 tokens): the repeated dK + dV are 2·131,072·8·128·2 = 536,870,912 B where
    the grouped ones were 67,108,864; the core step 872,415,232 → 1,879,048,192 B compiled.
    The layer's working set stays the wq/wk/wv step's under torchtitan's plan (r = 0, c = 2,
    module docstring of model.backward_working), with n = 2·131,072·8,192/8 = 268,435,456,
    H = 8·n = 2,147,483,648, Q = 268,435,456, K = V = 33,554,432 (the grouped rows kept):
    n + Q + K + V + 2·H + n − (Q + K + V + O) = 2n + 2H − O = 536,870,912 + 4,294,967,296
    − 268,435,456 = 4,563,402,752 B, above the MLP's steps (w1/w3: n + 2f + 2H + n − 3f = 3,892,314,112,
    f = 939,524,096): the repeated dK/dV do not set this layer's peak."""
    assert attention_core_step(_ctx(16, False), LLAMA_70B, "cudnn") == 872_415_232
    assert attention_core_step(_ctx(16, True), LLAMA_70B, "cudnn") == 1_879_048_192
    before = backward_working_bytes(LLAMA_70B, False, _ctx(16, False), "fsdp2", "cudnn")
    after = backward_working_bytes(LLAMA_70B, False, _ctx(16, True), "fsdp2", "cudnn")
    assert before == after == 4_563_402_752


def test_which_profiles_repeat():
    """fsdp2 (torchtitan 9dec370/820504e) and deepspeed (Megatron-DeepSpeed 6acc370a) repeat;
    Megatron-Core's TE attention takes the grouped heads; MLA has a heads already (r = 1)."""
    training = TrainingSpec(seq_len=8192, global_batch_size=64)
    flags = {
        fw: activation_context(training, 1, 1, 8, True, CpKind.RING, framework=fw)
        for fw in ("fsdp2", "deepspeed", "megatron", "textbook")
    }
    assert [flags[fw].kernel_kv_repeated for fw in flags] == [True, True, False, False]
    assert kernel_kv_repeat(_ctx(1, True), DEEPSEEK_V3) == 1
    assert Fraction(kernel_kv_repeat(flags["fsdp2"], LLAMA_70B)) == 8
