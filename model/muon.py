"""Muon's orthogonalisation step: the Newton–Schulz iteration's FLOPs and the bytes it holds
live, and what each framework gathers so that Muon sees whole matrices (tensor-parallel blocks,
data-parallel shards).

Muon (Jordan et al., github.com/KellerJordan/Muon ``muon.py``; Megatron-Core ``--optimizer
muon`` through Emerging-Optimizers; torchtitan ``DistMuon``) keeps one FP32 momentum per hidden
matrix — its resident state is :mod:`model.optimizers`' (:func:`model.optimizers.element_bytes`)
— and orthogonalises each matrix's update by :data:`NS_STEPS` Newton–Schulz iterations. This
module holds that step's work (FLOPs), its transient bytes and its extra traffic, per matrix and
per GPU; the terms that sum them over a stage's matrices are :mod:`model.terms.state`'s
(:func:`model.terms.state.optimizer_transient_term`, :func:`model.terms.state.busiest_muon_work`)
and :mod:`model.terms.roofline`'s.
"""

from __future__ import annotations

from typing import Any

from trainplan.model.errors import LayoutError
from trainplan.model.xp import exact

__all__ = [
    "NS_STEPS",
    "newton_schulz_flops",
    "newton_schulz_bytes",
    "muon_tp_gathers",
    "muon_gathers_over_dp",
    "muon_gather_bytes",
]

NS_STEPS = 5
"""Newton–Schulz iterations per Muon update (``muon_update(..., ns_steps=5)``; Megatron-LM
``--muon-num-ns-steps`` default 5)."""


def newton_schulz_flops(rows: int, cols: int, steps: int = NS_STEPS) -> int:
    """FLOPs of Muon's orthogonalisation of one ``rows`` × ``cols`` matrix
    (``zeropower_via_newtonschulz5``: X transposed so that m = min(rows, cols); per iteration
    A = X·Xᵀ (2·m²·n), B = b·A + c·A·A (2·m³), X = a·X + B·X (2·m²·n)):
    ``steps · (4·m²·n + 2·m³)``.

    >>> newton_schulz_flops(4096, 4096) == 5 * 6 * 4096**3
    True
    """
    m, n = min(rows, cols), max(rows, cols)
    return steps * (4 * m * m * n + 2 * m**3)


def newton_schulz_bytes(rows: int, cols: int, framework: str, gathered: bool) -> int:
    """Bytes one GPU holds at most while Muon orthogonalises one whole ``rows`` × ``cols``
    matrix (m = min, n = max; X is transposed to m × n first), beyond its resident state: the
    gathered whole matrix where the GPU held only a shard (``gathered``) and the iteration's live
    tensors, in the dtypes the framework's implementation uses. A transient of the optimizer
    step, for the largest matrix a GPU orthogonalises (:func:`model.terms.state.optimizer_transient_term`).

    * ``megatron`` — Emerging-Optimizers (``emerging_optimizers/orthogonalized_optimizers/
      muon_utils.py``), which Megatron-Core's Muon calls. ``newton_schulz_tp(mode="duplicated")``
      all-gathers the FP32 shards into a list (``torch.distributed.all_gather(x_shards, x)``,
      4·m·n) and concatenates them (``torch.cat``, 4·m·n more), both alive while
      ``newton_schulz`` runs: 8·m·n when ``gathered``. ``newton_schulz`` normalises in FP32
      (``torch.nn.functional.normalize``: 4·m·n) and casts to BF16 (2·m·n) under
      ``fp32_matmul_prec="medium"`` (``TensorParallelMuon``'s default); each
      ``newton_schulz_step`` holds the old X, A = X·Xᵀ, B = ``addmm(A, A, A)`` and the new
      X = ``addmm(X, B, X)``: 2·(2·m·n + 2·m²); the FP32 result (4·m·n) beside the last BF16 X.
      So ``max(6·m·n, 4·m·n + 4·m²)`` + 8·m·n if gathered.
    * ``textbook`` and ``fsdp2`` — KellerJordan/Muon ``muon.py`` ``zeropower_via_newtonschulz5``
      run eagerly: ``X = G.bfloat16()``; per iteration ``A = X @ X.mT``,
      ``B = b * A + c * A @ A``, ``X = a * X + B @ X``, whose last line holds X, a·X, B·X and
      their sum beside A and B: 2·(4·m·n + 2·m²) = ``8·m·n + 4·m²`` (the largest line for
      n ≥ m); the FP32 whole matrix (4·m·n) where it was gathered (the all-gather over the data
      -parallel ranks of Moonlight's Distributed Muon, Liu et al. 2025, arXiv 2502.16982,
      Algorithm 1, and of an owner rank under torchtitan's ``DistMuon``). Where nothing is
      gathered, the reference orthogonalises the gradient in place (``muon_update``'s
      ``grad.lerp_``): no FP32 copy.

    Examples
    --------
    Llama 3 8B's fc1 (28,672 × 4,096; m = 4,096, n = 28,672) gathered over tp under Megatron:
    8·m·n + max(6·m·n, 4·m·n + 4·m²) = 14·m·n = 1,644,167,168 B.

    >>> newton_schulz_bytes(28672, 4096, "megatron", True)
    1644167168
    >>> newton_schulz_bytes(4096, 4096, "megatron", False) == 8 * 4096**2
    True
    >>> newton_schulz_bytes(4096, 4096, "textbook", True) == 16 * 4096**2
    True
    """
    m, n = min(rows, cols), max(rows, cols)
    if framework == "megatron":
        return max(6 * m * n, 4 * m * n + 4 * m * m) + (8 * m * n if gathered else 0)
    return 8 * m * n + 4 * m * m + (4 * m * n if gathered else 0)


def muon_tp_gathers(framework: str, muon_tp_mode: str | None = None) -> bool:
    """Whether Muon orthogonalises a tensor-parallel matrix whole, all-gathered over tp, rather
    than block by block. Megatron-Core: ``OptimizerConfig.muon_tp_mode`` (``--muon-tp-mode``)
    defaults to ``duplicated`` since bb47df5416 (2026-08-21; ``optimizer_config.py``,
    ``arguments.py``; at d98e8a64dd), which all-gathers; under ``blockwise``
    ``orthogonalize`` (``megatron/core/optimizer/emerging_optimizers.py``) passes
    ``partition_dim=None``, so ``newton_schulz_tp`` iterates the local block with no
    collective. Its third mode, ``distributed`` (Newton–Schulz on the shards with collectives
    in every iteration), is refused by :class:`model.specs.TrainingSpec`: its per-iteration
    traffic and working set are not modelled. The other profiles orthogonalise the whole
    matrix (Muon's definition).

    Raises
    ------
    LayoutError
        ``muon_tp_mode`` set under a framework other than ``megatron``.

    >>> muon_tp_gathers("megatron"), muon_tp_gathers("megatron", "blockwise")
    (True, False)
    >>> muon_tp_gathers("fsdp2")
    True
    """
    if framework == "megatron":
        return muon_tp_mode != "blockwise"
    if muon_tp_mode is not None:
        raise LayoutError(
            f"muon_tp_mode: {muon_tp_mode} is Megatron-Core's option; {framework} orthogonalises "
            "whole matrices"
        )
    return True


def muon_gathers_over_dp(framework: str, zero_stage: int) -> bool:
    """Whether Muon gathers whole matrices over the data-parallel shard group: torchtitan's
    ``DistMuon`` under FSDP (``fsdp2`` at ZeRO 2 or 3: each matrix's shards go to the rank that
    orthogonalises it). Megatron-Core's ``LayerWiseDistributedOptimizer`` (ZeRO 1) gives each
    rank whole matrices, so it gathers nothing over dp for the iteration (its extra all-reduce is
    of gradients: :func:`muon_gather_bytes`).

    >>> muon_gathers_over_dp("fsdp2", 3), muon_gathers_over_dp("megatron", 1)
    (True, False)
    """
    return framework == "fsdp2" and zero_stage >= 2


def muon_gather_bytes(
    framework: str,
    zero_stage: int,
    shard: Any,
    tp: Any,
    matrix_elements: Any,
    tp_gathers: bool = True,
) -> tuple[Any, Any]:
    """(bytes one GPU sends over tp, over the data-parallel shard group) per step so that Muon
    sees whole matrices, for ``matrix_elements`` hidden-matrix elements on the GPU (after tp,
    before ZeRO); the update is FP32 (4 B). Exact for numbers; element-wise for arrays.

    * tp, where Muon orthogonalises tp matrices whole (``tp_gathers``,
      :func:`muon_tp_gathers`: Megatron-Core's ``--muon-tp-mode duplicated``; Emerging-Optimizers'
      ``newton_schulz_tp`` all-gathers each matrix over tp and every tp rank iterates it
      whole): ``(tp − 1) · 4 · elements``; 0 under ``blockwise``.
    * ``megatron`` at ZeRO 1 (``LayerWiseDistributedOptimizer``): gradients are all-reduced, not
      reduce-scattered — ``(D − 1)/D · elements · 4`` more than the distributed optimizer's
      reduce-scatter (its all-gather of the parameters stays).
    * ``fsdp2`` (torchtitan ``DistMuon``, ``Owned`` compute layout): each matrix's shards go to
      the rank that owns it and the update comes back: ``2 · (D − 1)/D · elements/D · 4``.

    >>> muon_gather_bytes("megatron", 1, 8, 4, 1000)
    (Fraction(12000, 1), Fraction(3500, 1))
    >>> muon_gather_bytes("megatron", 1, 8, 4, 1000, tp_gathers=False)
    (Fraction(0, 1), Fraction(3500, 1))
    >>> muon_gather_bytes("fsdp2", 3, 8, 1, 8000)
    (Fraction(0, 1), Fraction(7000, 1))
    """
    e = exact(matrix_elements)
    over_tp = (tp - 1) * 4 * e * (1 if tp_gathers else 0)
    d = exact(shard)
    if framework == "megatron" and zero_stage == 1:
        return over_tp, (d - 1) / d * e * 4
    if muon_gathers_over_dp(framework, zero_stage):
        return over_tp, 2 * (d - 1) / d * e / d * 4
    return over_tp, 0 * over_tp
