"""Megatron-Core over packed documents (``thd``) pads MLA's value to the query's head dimension
and keeps the attention kernel's padded output apart from the output projection's input
(model.mla_thd, read from Megatron-LM d98e8a64dd ``multi_latent_attention.py``
``_prepare_mla_core_attention_value`` / ``_trim_mla_core_attention_output`` and Transformer
Engine d0067d0da ``FusedAttnFunc.forward``)."""

from trainplan.model.activations import kind_activations
from trainplan.model.context_parallel import CpKind
from trainplan.model.mla_thd import KERNEL_OUTPUT, VALUE_PADDING
from trainplan.model.packing import Documents
from trainplan.model.precision import Precision
from trainplan.model.specs import TrainingSpec
from trainplan.model.terms.activation_fields import activation_context
from trainplan.scenarios.catalogue import get_model

ARCH = get_model("deepseek-v3").model.arch
DOCS = Documents.histogram([(1024, 1)])


def _layer(framework: str = "megatron", tp: int = 1, **training):
    t = TrainingSpec(seq_len=4096, global_batch_size=8, **training)
    ctx = activation_context(t, 1, 1, tp, tp > 1, CpKind.RING, 8, 1, framework)
    return kind_activations(ARCH, True, ctx)


def test_deepseek_v3_rows_by_hand():
    """S 4,096 tokens, a 128 heads, d_q = 128 + 64 = 192, d_v 128, β 2, tp 1: the value's
    padding 2 · 4,096 · 128 · 64 = 67,108,864 B and the kernel's BF16 output
    2 · 4,096 · 128 · 192 = 201,326,592 B, 268,435,456 B a layer more than without documents
    (switched off, the old figure comes back); at tp 2 each half."""
    packed, plain = _layer(documents=DOCS), _layer()
    terms = dict(packed.terms)
    assert terms[VALUE_PADDING] == 2 * 4096 * 128 * 64 == 67_108_864
    assert terms[KERNEL_OUTPUT] == 2 * 4096 * 128 * 192 == 201_326_592
    assert packed.full_bytes - plain.full_bytes == 268_435_456
    assert VALUE_PADDING not in dict(plain.terms)
    halves = dict(_layer(tp=2, documents=DOCS).terms)
    assert (halves[VALUE_PADDING], halves[KERNEL_OUTPUT]) == (33_554_432, 100_663_296)


def test_fp8_keeps_only_the_padding_beside_the_kept_output():
    """Under FP8 ``delayed`` the projection keeps an FP8 copy and the kernel's 128 columns are
    the kept BF16 output row already: its padding 2 · 4,096 · 128 · 64 = 67,108,864 B more.
    Under ``tensorwise`` the projection saves its BF16 input (the copy): the whole padded
    output, 201,326,592 B."""
    delayed = dict(_layer(documents=DOCS, precision=Precision.FP8).terms)
    assert delayed[KERNEL_OUTPUT] == 67_108_864 == delayed[VALUE_PADDING]
    tensorwise = _layer(documents=DOCS, precision=Precision.FP8, fp8_recipe="tensorwise")
    assert dict(tensorwise.terms)[KERNEL_OUTPUT] == 201_326_592


def test_selective_recomputation_holds_neither_and_other_profiles_pad_nothing():
    """Both rows are score rows: the ``core_attn`` checkpoint runs the padding inside, so the
    selective figure is the one without documents; torchtitan (``fsdp2``) and the textbook
    profile run no such padding."""
    packed, plain = _layer(documents=DOCS), _layer()
    assert {VALUE_PADDING, KERNEL_OUTPUT} <= packed.score_names
    assert packed.selective_bytes == plain.selective_bytes
    for framework in ("fsdp2", "textbook"):
        assert VALUE_PADDING not in dict(_layer(framework, documents=DOCS).terms)
