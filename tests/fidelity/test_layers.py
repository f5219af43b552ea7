"""Real PyTorch layers (bf16, CPU) against the cost model's per-layer activation bytes.

For every layer kind, mode and point of the grid, the ``pytorch`` convention predicts the
measured bytes exactly, term by term; the ``paper`` convention differs by exactly the terms the
``pytorch`` convention adds, each named (see docs/fidelity-layers.md)."""

from fractions import Fraction

import pytest

pytest.importorskip("torch")

from tests.fidelity import cases as C  # noqa: E402
from tests.fidelity import report  # noqa: E402
from trainplan.model.layout import Layout  # noqa: E402
from trainplan.model.specs import TrainingSpec  # noqa: E402
from trainplan.model.terms.activations import stage_activations  # noqa: E402

CASES = [
    pytest.param(label, kind, flash, dims, mode, id=f"{kind}{'-sdpa' if flash else ''}-{dims.label()}-{mode}".replace(" ", ","))
    for label, kind, flash in C.KINDS
    for dims in C.GRID
    for mode in C.MODES
]  # fmt: skip

PYTORCH_TERMS = {
    "attention norm statistics (fp32 mean, rstd)",
    "MLP norm statistics (fp32 mean, rstd)",
    "attention norm statistics (fp32 rstd)",
    "MLP norm statistics (fp32 rstd)",
    "softmax statistics (fp32 logsumexp)",
    "rotary cos and sin tables",
    "MLP SiLU output (eager SwiGLU)",
    "routed expert SiLU output (eager SwiGLU)",
    "shared expert SiLU output (eager SwiGLU)",
    "router top-k indices (int64)",
    "token permutation indices (int64, dispatch and combine)",
    "routing weights for the combine",
}
"""Every term the ``pytorch`` convention adds to the paper's count, by name."""


@pytest.mark.parametrize(("label", "kind", "flash", "dims", "mode"), CASES)
def test_layer_kept_bytes_match_pytorch_convention(label, kind, flash, dims, mode):
    m = C.measure(kind, dims, mode, flash)
    acts = C.predict_layer(kind, dims, flash, "pytorch")
    assert m.kept == C.predicted_kept(acts, mode)
    assert abs(C.predicted_kept(acts, mode) - m.kept) <= Fraction(1, 100) * m.kept
    # term by term (Q, K and V are views of one buffer in the GPT layer: one line)
    want = C.merge_qkv(C.predicted_terms(acts, mode))
    got = C.merge_qkv({n: Fraction(b) for n, b in m.terms})
    assert {n: b for n, b in got.items() if b} == {n: b for n, b in want.items() if b}
    if mode == "full":  # backward: the checkpoint plus the recomputed layer, less its input
        assert m.peak == acts.full_bytes


@pytest.mark.parametrize(("label", "kind", "flash"), C.KINDS)
def test_paper_convention_differs_by_named_terms_only(label, kind, flash):
    for dims in C.GRID:
        paper = C.predict_layer(kind, dims, flash, "paper")
        torch_ = C.predict_layer(kind, dims, flash, "pytorch")
        assert dict(paper.terms).items() <= dict(torch_.terms).items()
        extra = {n for n, _ in torch_.terms} - {n for n, _ in paper.terms}
        assert extra <= PYTORCH_TERMS
        assert torch_.full_bytes - paper.full_bytes == sum(b for n, b in torch_.terms if n in extra)
        assert torch_.checkpoint_bytes == paper.checkpoint_bytes


@pytest.mark.parametrize(("label", "n"), C.STACKS)
def test_sqrt_checkpointing_stack_peak(label, n):
    """Peak saved bytes during backward of n layers in segments of k = round(√n): the walk
    (checkpoints held so far + the segment recomputed − its input) is exact, and so is
    stage_activations, whose transient frees the later segments' checkpoints (a shorter last
    segment's checkpoint is gone before a full segment is recomputed; this test found that)."""
    kind, flash = C._kind(label)
    dims = C.STACK_DIMS
    m = C.measure_stack(kind, n, flash)
    assert m.peak == C.stack_walk(kind, dims, n, flash, "pytorch")
    for convention in ("paper", "pytorch"):
        model = C.stack_prediction(kind, dims, n, flash, convention)
        assert model == C.stack_walk(kind, dims, n, flash, convention)
    assert C.stack_prediction(kind, dims, n, flash, "pytorch") == m.peak


def test_stack_prediction_uses_stage_activations():
    kind, flash = "gpt", False
    d = C.STACK_DIMS
    arch = C.architecture(kind, d, 4)
    t = TrainingSpec(seq_len=d.s, global_batch_size=d.b, flash_attention=flash)
    st = stage_activations(arch, (0, 1, 2, 3), 0, Layout(recompute="sqrt", micro_batch_size=d.b), t)
    acts = C.predict_layer(kind, d, flash, "paper")
    assert st.layers_bytes == 2 * acts.checkpoint_bytes
    assert st.recompute_transient_bytes == 2 * acts.full_bytes - acts.checkpoint_bytes


def test_unknown_convention_is_an_input_error():
    from trainplan.model.activations import ActivationContext
    from trainplan.model.errors import InputError

    with pytest.raises(InputError):
        TrainingSpec(seq_len=8, global_batch_size=1, activation_convention="tf")
    with pytest.raises(InputError):
        ActivationContext(
            seq_len=8, cp=1, micro_batch_size=1, tp=1, sequence_parallel=False,
            flash_attention=True, convention="tf",
        )  # fmt: skip
    assert TrainingSpec(seq_len=8, global_batch_size=1).activation_convention == "paper"


ME_CASES = [
    pytest.param(label, kind, flash, dims, mode, id=f"me-{kind}{'-sdpa' * flash}-{dims.label()}-{mode}".replace(" ", ","))
    for label, kind, flash in C.KINDS
    for dims in C.ME_GRID
    for mode in C.MODES
]  # fmt: skip


@pytest.mark.parametrize(("label", "kind", "flash", "dims", "mode"), ME_CASES)
def test_memory_efficient_norm_layer_matches(label, kind, flash, dims, mode):
    """Norms that keep their output and fp32 rstd (Apex ``memory_efficient=True``): the
    ``memory_efficient_norm`` prediction equals the measurement term by term, and differs from
    the stock count by exactly the two norm inputs (and a LayerNorm's fp32 mean)."""
    m = C.measure(kind, dims, mode, flash, "memory-efficient")
    acts = C.predict_layer(kind, dims, flash, "pytorch", True)
    assert m.kept == C.predicted_kept(acts, mode)
    want = C.merge_qkv(C.predicted_terms(acts, mode))
    got = C.merge_qkv({n: Fraction(b) for n, b in m.terms})
    assert {n: b for n, b in got.items() if b} == {n: b for n, b in want.items() if b}
    if mode == "full":
        assert m.peak == C.full_peak(acts) == acts.checkpoint_bytes + acts.full_bytes
    stock = C.predict_layer(kind, dims, flash, "paper")
    lean = C.predict_layer(kind, dims, flash, "paper", True)
    assert stock.full_bytes - lean.full_bytes == 2 * acts.checkpoint_bytes  # 2·β·S·h
    assert lean.input_bytes == 0 and stock.input_bytes == stock.checkpoint_bytes


@pytest.mark.parametrize(("label", "n"), C.ME_STACKS)
def test_memory_efficient_norm_sqrt_stack(label, n):
    """√n checkpointing with memory-efficient norms: the recomputed segment's first layer keeps
    no copy of the checkpoint, so the transient no longer subtracts it (measured)."""
    kind, flash = C._kind(label)
    m = C.measure_stack(kind, n, flash, "memory-efficient")
    assert m.peak == C.me_stack_walk(kind, C.STACK_DIMS, n, flash)
    assert m.peak == C.me_stack_prediction(kind, C.STACK_DIMS, n, flash, "pytorch")


def test_fidelity_doc_is_current():
    """docs/fidelity-layers.md is what ``python -m tests.fidelity.report`` writes from this sweep.
    Last in this file, so it reads the measurements the tests above made (cached per process)
    rather than measuring every layer a second time in another worker."""
    assert report.DOC.read_text() == report.render(), (
        "docs/fidelity-layers.md is out of date: run python -m tests.fidelity.report"
    )
