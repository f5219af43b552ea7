"""The fidelity sweep: layer kinds, modes and dimensions, and the cost model's prediction for each.

Shared by the tests and by ``python -m tests.fidelity.report`` (which writes
``docs/fidelity-layers.md``). Measurements are cached per process, so the tests and the report
check run each layer once.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from fractions import Fraction
from functools import cache

from tests.fidelity import harness as H
from tests.fidelity.harness import Dims
from trainplan.model.activations import ActivationContext, LayerActivations, layer_activations
from trainplan.model.layout import Layout
from trainplan.model.specs import Architecture, MoESpec, TrainingSpec
from trainplan.model.stage_bytes import sqrt_segment
from trainplan.model.terms.activations import stage_activations

EAGER = Layout(framework="textbook")
"""The profile whose per-layer rows are the paper convention's: the harness's eager MoE keeps its
routed outputs for the weighted combine (β per element), as that convention counts; Megatron-Core
keeps none of them (it weights inside the expert activation: :mod:`model.activations`)."""

# (name, harness kind, flash)
KINDS = (
    ("GPT (eager softmax)", "gpt", False),
    ("GPT (SDPA)", "gpt", True),
    ("Llama (eager softmax)", "llama", False),
    ("Llama (SDPA)", "llama", True),
    ("MoE (SDPA)", "moe", True),
    ("MoE + shared expert (SDPA)", "moe-shared", True),
)

GRID = (
    Dims(s=64, b=2, h=64, heads=4, kv_heads=2),
    Dims(s=128, b=1, h=128, heads=8, kv_heads=8),
    Dims(s=32, b=4, h=96, heads=6, kv_heads=1),
    Dims(s=256, b=1, h=64, heads=2, kv_heads=1),
)
"""s, b, h, heads and KV heads (GPT uses a KV heads); FFN: 4h (GPT), 3h (Llama), h per routed
expert (MoE: 4 experts, top-2)."""

MODES = ("none", "selective", "full")

STACKS = (("GPT (eager softmax)", 4), ("Llama (SDPA)", 5), ("MoE (SDPA)", 9), ("GPT (SDPA)", 1))
"""√n checkpointing over a stack of n layers, on GRID[0] (n = 1 is full recomputation)."""

STACK_DIMS = GRID[0]


def _dims(kind: str, dims: Dims) -> Dims:
    if kind == "gpt":
        return Dims(s=dims.s, b=dims.b, h=dims.h, heads=dims.heads)
    if kind == "moe-shared":
        return Dims(
            s=dims.s, b=dims.b, h=dims.h, heads=dims.heads, kv_heads=dims.kv_heads, shared_experts=1
        )
    return dims


def harness_args(kind: str, dims: Dims) -> tuple[str, Dims]:
    """The harness layer kind and dims of a case."""
    return ("moe" if kind == "moe-shared" else kind), _dims(kind, dims)


def architecture(kind: str, dims: Dims, num_layers: int = 1) -> Architecture:
    """The :class:`Architecture` the harness layer of ``kind`` builds."""
    dims = _dims(kind, dims)
    h, a = dims.h, dims.heads
    if kind == "gpt":
        return Architecture(
            num_layers=num_layers, hidden_size=h, num_attention_heads=a, ffn_hidden_size=4 * h,
            vocab_size=256, norm="layernorm", mlp="gelu", position_embedding="learned",
            max_position_embeddings=dims.s, linear_bias=True, dropout=True,
        )  # fmt: skip
    moe = None
    if kind.startswith("moe"):
        moe = MoESpec(
            num_experts=dims.experts, experts_per_token=dims.top_k,
            expert_ffn_hidden_size=dims.expert_ffn or h, num_shared_experts=dims.shared_experts,
        )  # fmt: skip
    return Architecture(
        num_layers=num_layers, hidden_size=h, num_attention_heads=a, num_kv_heads=dims.g,
        ffn_hidden_size=dims.ffn or 3 * h, vocab_size=256, norm="rmsnorm", mlp="swiglu",
        position_embedding="rope", moe=moe,
    )  # fmt: skip


def context(
    dims: Dims, flash: bool, convention: str, memory_efficient_norm: bool = False
) -> ActivationContext:
    return ActivationContext(
        seq_len=dims.s, cp=1, micro_batch_size=dims.b, tp=1, sequence_parallel=False,
        flash_attention=flash, convention=convention, memory_efficient_norm=memory_efficient_norm,
    )  # fmt: skip


def predict_layer(
    kind: str, dims: Dims, flash: bool, convention: str, memory_efficient_norm: bool = False
) -> LayerActivations:
    return layer_activations(
        architecture(kind, dims),
        0,
        context(_dims(kind, dims), flash, convention, memory_efficient_norm),
    )


ME_GRID = (GRID[0], GRID[2])
"""Dimensions swept with memory-efficient norms (every kind and mode)."""

ME_STACKS = (("GPT (eager softmax)", 4), ("Llama (SDPA)", 5))
"""√n stacks measured with memory-efficient norms."""


def full_peak(acts: LayerActivations) -> Fraction:
    """Peak saved bytes while a fully recomputed layer runs backward: the checkpoint plus the
    recomputed layer, less the input the layer itself keeps (the checkpoint's storage)."""
    return acts.checkpoint_bytes + acts.full_bytes - acts.input_bytes


def predicted_kept(acts: LayerActivations, mode: str) -> Fraction:
    """Bytes kept after the forward pass under ``mode``."""
    return {
        "none": acts.full_bytes,
        "selective": acts.selective_bytes,
        "full": acts.checkpoint_bytes,
    }[mode]


def predicted_terms(acts: LayerActivations, mode: str) -> dict[str, Fraction]:
    """``acts``' terms kept under ``mode``, Q, K and V merged when ``merge_qkv``."""
    if mode == "full":
        return {"attention norm input": acts.checkpoint_bytes}
    out: dict[str, Fraction] = {}
    for name, b in acts.terms:
        if mode == "selective" and name in acts.score_names:
            continue
        out[name] = out.get(name, Fraction(0)) + b
    return out


def merge_qkv(terms: dict[str, Fraction]) -> dict[str, Fraction]:
    """Q, K and V as one line (they are views of one buffer in the GPT layer)."""
    out = {n: b for n, b in terms.items() if n not in ("Q", "K", "V")}
    out["Q, K, V"] = out.get("Q, K, V", Fraction(0)) + sum(
        (terms.get(n, Fraction(0)) for n in ("Q", "K", "V")), Fraction(0)
    )
    return out


def stack_prediction(kind: str, dims: Dims, n: int, flash: bool, convention: str) -> Fraction:
    """Peak saved bytes during backward of n layers under √n checkpointing: ``stage_activations``'
    checkpoints plus its transient (paper), plus the pytorch convention's extra terms for each
    layer of the largest segment."""
    arch = architecture(kind, dims, n)
    d = _dims(kind, dims)
    training = TrainingSpec(seq_len=d.s, global_batch_size=d.b, flash_attention=flash)
    layout = EAGER.with_(recompute="sqrt", micro_batch_size=d.b)
    st = stage_activations(arch, tuple(range(n)), 0, layout, training)
    paper = st.layers_bytes + st.recompute_transient_bytes
    if convention == "paper":
        return paper
    k = sqrt_segment(n)
    extra = (
        predict_layer(kind, dims, flash, "pytorch").full_bytes
        - predict_layer(kind, dims, flash, "paper").full_bytes
    )
    return paper + min(k, n) * extra


def stack_walk(kind: str, dims: Dims, n: int, flash: bool, convention: str) -> Fraction:
    """The same peak walked segment by segment as backward runs them, last first: while segment
    j is recomputed, the checkpoints of segments 0..j are held (the later ones were freed with
    their segments) plus segment j's layers less its input, the checkpoint it starts from."""
    return _walk(predict_layer(kind, dims, flash, convention), n)


def _walk(acts: LayerActivations, n: int) -> Fraction:
    k = sqrt_segment(n)
    sizes = [min(k, n - i) for i in range(0, n, k)]
    ckpt = acts.checkpoint_bytes
    return max(
        (j + 1) * ckpt + size * acts.full_bytes - acts.input_bytes for j, size in enumerate(sizes)
    )


def me_stack_walk(kind: str, dims: Dims, n: int, flash: bool) -> Fraction:
    """:func:`stack_walk` with memory-efficient norms, pytorch convention."""
    return _walk(predict_layer(kind, dims, flash, "pytorch", True), n)


def me_stack_prediction(kind: str, dims: Dims, n: int, flash: bool, convention: str) -> Fraction:
    """``stage_activations``' checkpoints plus transient with memory-efficient norms."""
    arch = architecture(kind, dims, n)
    d = _dims(kind, dims)
    training = TrainingSpec(
        seq_len=d.s, global_batch_size=d.b, flash_attention=flash,
        activation_convention=convention, memory_efficient_norm=True,
    )  # fmt: skip
    layout = EAGER.with_(recompute="sqrt", micro_batch_size=d.b)
    st = stage_activations(arch, tuple(range(n)), 0, layout, training)
    return st.layers_bytes + st.recompute_transient_bytes


# ---------------------------------------------------------------------------------------------
# measurements (cached) and the table


@cache
def measure(kind: str, dims: Dims, mode: str, flash: bool, norm: str = "gpu") -> H.Measurement:
    hk, d = harness_args(kind, dims)
    return H.measure_layer(hk, d, mode, flash=flash, norm=norm)


STATE_DIMS = Dims(s=32, b=2, h=64, heads=4, kv_heads=2)
STATE_TENSORS = 9
"""Parameter tensors of the Llama layer measured for model state (2 norms, q, k, v, o, 3 MLP)."""


@cache
def measure_state(fp32_accumulation: bool) -> tuple[int, dict[str, int]]:
    return H.measure_model_state(STATE_DIMS, fp32_grad_accumulation=fp32_accumulation)


@cache
def measure_stack(kind: str, n: int, flash: bool, norm: str = "gpu") -> H.Measurement:
    hk, d = harness_args(kind, STACK_DIMS)
    return H.measure_stack(hk, d, n, sqrt_segment(n), flash=flash, norm=norm)


@dataclass(frozen=True)
class Row:
    kind: str
    mode: str
    dims: str
    measured: int
    paper: Fraction
    pytorch: Fraction

    @property
    def paper_error(self) -> float:
        return float((self.paper - self.measured) / self.measured)

    @property
    def pytorch_error(self) -> float:
        return float((self.pytorch - self.measured) / self.measured)


def _kind(name: str) -> tuple[str, bool]:
    for label, kind, flash in KINDS:
        if label == name:
            return kind, flash
    raise KeyError(name)


def _layer_rows(grid: tuple[Dims, ...], memory_efficient_norm: bool) -> list[Row]:
    """Per layer: kept after forward under each mode and, for full, the peak during backward."""
    norm = "memory-efficient" if memory_efficient_norm else "gpu"
    out: list[Row] = []
    for label, kind, flash in KINDS:
        for dims in grid:
            d = _dims(kind, dims)
            pred = {
                c: predict_layer(kind, dims, flash, c, memory_efficient_norm)
                for c in ("paper", "pytorch")
            }
            for mode in MODES:
                m = measure(kind, dims, mode, flash, norm)
                kept = (predicted_kept(pred[c], mode) for c in pred)
                out.append(Row(label, mode, d.label(), m.kept, *kept))
                if mode == "full":
                    peaks = (full_peak(pred[c]) for c in pred)
                    out.append(Row(label, "full (peak)", d.label(), m.peak, *peaks))
    return out


def rows() -> list[Row]:
    """Every case of the sweep: per layer (kept after forward; full: the checkpoint kept and,
    as "full (peak)", the peak during backward) and the √n stacks (peak during backward)."""
    out = _layer_rows(GRID, False)
    for label, n in STACKS:
        kind, flash = _kind(label)
        m = measure_stack(kind, n, flash)
        d = _dims(kind, STACK_DIMS)
        preds = (stack_prediction(kind, STACK_DIMS, n, flash, c) for c in ("paper", "pytorch"))
        mode = f"√n, n={n}, k={sqrt_segment(n)} (peak)"
        out.append(Row(label, mode, d.label(), m.peak, *preds))
    return out


def me_rows() -> list[Row]:
    """The memory-efficient-norm sweep: ``paper`` and ``pytorch`` columns are both with
    ``memory_efficient_norm``."""
    out = _layer_rows(ME_GRID, True)
    for label, n in ME_STACKS:
        kind, flash = _kind(label)
        m = measure_stack(kind, n, flash, "memory-efficient")
        d = _dims(kind, STACK_DIMS)
        preds = (me_stack_prediction(kind, STACK_DIMS, n, flash, c) for c in ("paper", "pytorch"))
        mode = f"√n, n={n}, k={sqrt_segment(n)} (peak)"
        out.append(Row(label, mode, d.label(), m.peak, *preds))
    return out


def medians(table: list[Row]) -> dict[str, tuple[float, float]]:
    """Median |error| (paper, pytorch) per layer kind and overall."""
    groups: dict[str, list[Row]] = {}
    for r in table:
        groups.setdefault(r.kind, []).append(r)
    groups["all"] = table
    return {
        k: (
            statistics.median(abs(r.paper_error) for r in rs),
            statistics.median(abs(r.pytorch_error) for r in rs),
        )
        for k, rs in groups.items()
    }
