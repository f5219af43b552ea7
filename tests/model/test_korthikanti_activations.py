"""Korthikanti et al. 2022 (arXiv 2205.05198) activation formulas, every entry of
``scenarios/published.toml`` ``korthikanti_activation_formulas``, on GPT-3 175B dimensions
(``get_model("gpt3-175b")``: h 12288, a 96, 96 layers), s = 2048, b = 1, t = 8, FlashAttention off,
dropout on, 16-bit activations. The formula strings are read from the file and evaluated exactly."""

from __future__ import annotations

from fractions import Fraction

import pytest

from trainplan.model.activations import ActivationContext, layer_activations
from trainplan.model.layout import Layout
from trainplan.model.specs import TrainingSpec
from trainplan.model.split import split_layers
from trainplan.model.terms.activations import stage_activations
from trainplan.optimizer.case import Case
from trainplan.scenarios.catalogue import get_model

from ._shared import load

FORMULAS = load("published.toml")["korthikanti_activation_formulas"]
ARCH = get_model("gpt3-175b").model.arch
S, B_MICRO, T = 2048, 1, 8
H, A, L = ARCH.hidden_size, ARCH.num_attention_heads, ARCH.num_layers


def formula(name: str, **extra: int) -> Fraction:
    """Evaluate the file's formula string with exact Fractions (s, b, h, a, t and ``extra``)."""
    env = {"s": S, "b": B_MICRO, "h": H, "a": A, "t": T, **extra}
    return Fraction(
        eval(FORMULAS[name], {"__builtins__": {}}, {k: Fraction(v) for k, v in env.items()})
    )


def ctx(tp: int, sp: bool) -> ActivationContext:
    return ActivationContext(
        seq_len=S,
        cp=1,
        micro_batch_size=B_MICRO,
        tp=tp,
        sequence_parallel=sp,
        flash_attention=False,
    )


def test_gpt3_dimensions():
    assert (L, H, A, ARCH.ffn_hidden_size) == (96, 12288, 96, 4 * 12288) and ARCH.dropout


def test_formulas_evaluate_to_the_known_closed_forms():
    sbh = S * B_MICRO * H
    assert formula("no_parallelism") == 34 * sbh + 5 * A * S * S * B_MICRO
    assert formula("tensor_sequence_parallel") * T == formula("no_parallelism")
    assert formula("full_recompute") == 2 * sbh


# (row, tp, sequence parallel, which bytes)
LAYER_ROWS = [
    ("no_parallelism", 1, False, "full"),
    ("tensor_parallel", T, False, "full"),
    ("tensor_sequence_parallel", T, True, "full"),
    ("tensor_parallel_selective", T, False, "selective"),
    ("tensor_sequence_parallel_selective", T, True, "selective"),
]


@pytest.mark.parametrize(("row", "tp", "sp", "kind"), LAYER_ROWS, ids=[r[0] for r in LAYER_ROWS])
def test_layer_activations(row, tp, sp, kind):
    acts = layer_activations(ARCH, 0, ctx(tp, sp))
    got = acts.full_bytes if kind == "full" else acts.selective_bytes
    assert got == formula(row)
    assert all(isinstance(b, Fraction) for _, b in acts.terms)


@pytest.mark.parametrize(("row", "tp", "sp", "kind"), LAYER_ROWS, ids=[r[0] for r in LAYER_ROWS])
def test_stage_activations_one_layer(row, tp, sp, kind):
    """Through model.memory: one layer, pp 1, one micro-batch in flight."""
    layout = Layout(
        tp=tp, sequence_parallel=sp, recompute="none" if kind == "full" else "selective"
    )
    training = TrainingSpec(seq_len=S, global_batch_size=1, flash_attention=False)
    st = stage_activations(ARCH, (0,), 0, layout, training)
    assert st.microbatches_in_flight == 1
    assert st.layers_bytes == st.per_microbatch_bytes == formula(row)
    # selective: while the layer's backward runs, its recomputed attention core is back — the
    # score tensors, 5·a·s²·b/t (softmax output 2, dropout mask 1, dropout output 2)
    scores = Fraction(5 * A * S * S * B_MICRO, tp) if kind == "selective" else 0
    assert st.recompute_transient_bytes == scores


@pytest.mark.parametrize("sp", [False, True], ids=["tp8", "tp8-sp"])
def test_full_recompute_checkpoint(sp):
    """Full recomputation keeps the layer input, 2sbh (÷ t with sequence parallelism), per layer."""
    want = formula("full_recompute") / (T if sp else 1)
    assert layer_activations(ARCH, 0, ctx(T, sp)).checkpoint_bytes == want
    layout = Layout(tp=T, sequence_parallel=sp, recompute="full")
    training = TrainingSpec(seq_len=S, global_batch_size=1, flash_attention=False)
    layers = tuple(range(12))
    st = stage_activations(ARCH, layers, 0, layout, training)
    assert st.layers_bytes == 12 * want
    # the transient: one layer's full activations less its checkpoint, counted once
    full = formula("tensor_sequence_parallel" if sp else "tensor_parallel")
    assert st.recompute_transient_bytes == full - want


def test_full_recompute_no_parallelism():
    assert layer_activations(ARCH, 0, ctx(1, False)).checkpoint_bytes == formula("full_recompute")


def test_flash_attention_drops_the_score_term():
    """FlashAttention stores no [b, a, s, s] tensor: 34·s·b·h/t with tp and SP (docs/concepts/conventions.md "Activations")."""
    flash = ActivationContext(
        seq_len=S,
        cp=1,
        micro_batch_size=B_MICRO,
        tp=T,
        sequence_parallel=True,
        flash_attention=True,
    )
    assert layer_activations(ARCH, 0, flash).full_bytes == formula(
        "tensor_sequence_parallel_selective"
    )


def _first_stage_layers_bytes(
    pp: int, schedule: str = "1f1b", v: int = 1, recompute: str = "selective"
) -> Fraction:
    case = Case.of(
        **{
            "model": "gpt3-175b",
            "tp": T,
            "pp": pp,
            "dp": 1,
            "seq_len": S,
            "micro_batch_size": 1,
            "global_batch_size": 64,
            "flash_attention": False,
            "recompute": recompute,
            "schedule": schedule,
            "virtual_stages": v,
            "framework": "textbook" if schedule == "gpipe" else "megatron",
        }
    )
    est = case.evaluate()
    first = est.stages[0]
    assert first.num_layers == L // pp
    assert first.activations is not None
    return first.activations.layers_bytes


@pytest.mark.parametrize("pp", [1, 2, 4, 8, 16, 32])
def test_first_stage_holds_L_layers_worth_independent_of_p(pp):
    """1F1B, m ≥ p: p micro-batches × L/p layers = L layers' worth (the file's first_stage)."""
    assert "independent of p" in FORMULAS["first_stage"]
    per_layer = formula("tensor_sequence_parallel_selective")
    assert _first_stage_layers_bytes(pp) == L * per_layer


@pytest.mark.parametrize(("pp", "v"), [(2, 2), (4, 3), (8, 2), (8, 3), (8, 4), (16, 3)])
def test_interleaved_first_stage_factor(pp, v):
    """Interleaved 1F1B: L layers' worth × (1 + (p − 1)/(p·v)) (Korthikanti §4.2.3)."""
    assert L % (pp * v) == 0
    per_layer = formula("tensor_sequence_parallel_selective")
    factor = Fraction(
        eval(
            FORMULAS["interleaved_factor"],
            {"__builtins__": {}},
            {"p": Fraction(pp), "v": Fraction(v)},
        )
    )
    assert factor == 1 + Fraction(pp - 1, pp * v)
    assert len(split_layers(L, pp, v)[0]) == L // pp
    assert _first_stage_layers_bytes(pp, "interleaved", v) == L * per_layer * factor


def test_gpipe_first_stage_holds_all_microbatches():
    """GPipe keeps every one of the m micro-batches: m × L/p layers."""
    per_layer = formula("tensor_sequence_parallel_selective")
    assert _first_stage_layers_bytes(8, "gpipe") == 64 * (L // 8) * per_layer


def test_first_stage_under_full_recompute():
    """Checkpoints: L × 2sbh/t on the first stage, whatever p."""
    for pp in (2, 8):
        assert _first_stage_layers_bytes(pp, recompute="full") == L * formula("full_recompute") / T
