"""The routed experts' FLOPs the busiest expert-parallel rank computes beyond the balanced,
dropless ``k·T`` rows, for the single-efficiency time model (:func:`model.terms.step.
single_microbatch_seconds`), which counts a MoE layer by its model FLOPs
(:func:`model.timing.microbatch_flop_terms`: every token through ``k`` experts). The rows are
the one rule the roofline model's expert GEMMs read (:func:`model.moe_rows.row_factors`'
received side, :func:`model.moe_rows.rank_rows`): every rank waits for the busiest one's grouped
GEMMs at the combine's all-to-all, under every framework, and padded rows are computed
(Megatron-LM d98e8a64dd ``experts.py`` ``TEGroupedMLP.forward`` runs ``tokens_per_expert`` rows,
``capacity × tp × ep`` of them padded; DeepSpeed edaa72212 ``sharded_moe.py`` ``MOELayer.forward``
runs its ``[E, C, h]`` buffer). Model FLOPs (MFU) do not change: padding and imbalance are not
model work."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from trainplan.model.moe_rows import row_factors
from trainplan.model.moe_run import DROPLESS, MoERun
from trainplan.model.specs import Architecture

__all__ = ["BUSIEST_SCOPE", "busiest_expert_flops"]

BUSIEST_SCOPE = ("micro_batch_size", "cp", "tp", "sp", "ep", "framework")
"""The layout fields :func:`busiest_expert_flops` reads after its fixed arguments."""


def busiest_expert_flops(
    arch: Architecture,
    seq_len: int,
    run: MoERun,
    recomputed: bool,
    b: Any,
    cp: Any,
    tp: Any,
    sp: Any,
    ep: Any,
    framework: Any,
) -> tuple[float, float]:
    """(forward, recomputed forward) FLOPs one MoE layer's routed experts add on the busiest
    expert-parallel rank for a micro-batch of ``b`` sequences of ``seq_len`` tokens, whole layer
    over its tp·cp ranks (the convention of :func:`model.timing.microbatch_flop_terms`, ÷ tp·cp
    for one GPU): ``(ρ − 1) · 2·s·b·k·w``, ``w`` one expert's matmul weights (``3·h·f`` gated,
    ``2·h·f`` otherwise), ``ρ`` the received rows ÷ ``k·T`` of :func:`model.moe_rows.row_factors`
    for the tokens a rank routes, ``T = s·b/cp`` ÷ tp with sequence parallelism (``sp``), as
    the memory and the roofline clock take them, and DeepSpeed's ``E·C`` buffers under
    ``framework`` ``deepspeed``. The recomputed part is the same when the backward runs the
    experts' forward again (``recomputed``: full or √n recomputation, or the ``moe`` module under
    selective), else 0. Floats (the same arithmetic for the evaluator and the search's tables).

    Examples
    --------
    A layer of E = 256 experts (GeLU, two matrices), top-8, h = 7,168, f = 2,048 at T = 4,096
    tokens, ep 8, imbalance 1.5: ρ = ceil(1.5 × 32,768)/32,768 = 1.5, so (ρ − 1) = half of
    ``2·4,096·8·2·7,168·2,048`` (1,924,145,348,608): 962,072,674,304 FLOPs more:

    >>> from trainplan.model.specs import Architecture, MoESpec
    >>> arch = Architecture(num_layers=1, hidden_size=7168, num_attention_heads=8,
    ...     ffn_hidden_size=2048, vocab_size=16,
    ...     moe=MoESpec(num_experts=256, experts_per_token=8, expert_ffn_hidden_size=2048))
    >>> busiest_expert_flops(arch, 4096, MoERun(imbalance=Fraction(3, 2)), False, 1, 1, 1, False,
    ...                      8, "textbook")
    (962072674304.0, 0.0)
    >>> busiest_expert_flops(arch, 4096, MoERun(imbalance=Fraction(3, 2)), True, 1, 1, 1, False,
    ...                      1, "textbook")  # ep 1: the rank computes its own k·T
    (0.0, 0.0)
    """
    moe = arch.moe
    if moe is None or run == DROPLESS:
        return 0.0, 0.0
    tokens = Fraction(int(seq_len) * int(b), int(cp) * (int(tp) if bool(sp) else 1))
    E, k = moe.num_experts, moe.experts_per_token
    padded = str(framework) == "deepspeed"
    rho = row_factors(run, tokens, E, k, int(ep), padded)[1]
    weights = (3 if arch.mlp.gated else 2) * arch.hidden_size * moe.expert_ffn_hidden_size
    extra = float((rho - 1) * 2 * int(seq_len) * int(b) * k * weights)
    return extra, extra if recomputed else 0.0
