"""What torchtitan's op-level selective activation checkpointing keeps of one dense layer.

torchtitan's ``selective`` checkpointing with ``selective_ac_option = "op"`` (the ``fsdp2``
profile's ``selective``) is not Korthikanti et al.'s selective recomputation, which keeps every
tensor but the attention core's. It wraps each transformer block in a non-reentrant checkpoint
whose policy (``torch.utils.checkpoint.create_selective_checkpoint_contexts``) saves the
*outputs* of a list of ops and recomputes everything else in backward
(``torchtitan/distributed/activation_checkpoint.py``: ``SelectiveAC._wrap_block`` and
``_get_default_save_ops``; at 9dec370 ``_apply_ac_to_transformer_block`` and ``_save_list`` in
``torchtitan/parallelisms/parallelize_llama.py``):

* the block's input (the checkpoint's argument, held for the recomputation), ``β·S·h`` (÷ tp:
  torchtitan's plan keeps the residual stream sequence-sharded);
* every *other* matmul output: ``aten.mm`` (and ``aten.linear``) outputs are counted per block
  and the even-numbered ones recomputed (``mm_count % 2 == 0``). In a Llama block the matmuls
  run ``wq, wk, wv, wo, w1, w3, w2``: ``wq``, ``wv``, ``w1`` and ``w2`` are kept, ``wk``,
  ``wo`` and ``w3`` recomputed. Under tensor parallelism the column-parallel outputs are
  ``[S, out/tp]`` (÷ tp, on the gathered sequence) and a row-parallel output is the whole
  ``[S, h]`` partial sum before its reduce-scatter;
* the attention kernel's outputs (``_scaled_dot_product_flash_attention`` /
  ``_efficient_attention``): the output ``β·S·a·d`` and the fp32 log-sum-exp ``4·a·S`` (÷ tp);
* the outputs of ``reduce_scatter_tensor`` (tp > 1: each row-parallel block's sequence-sharded
  output, ``β·S·h/tp``) and of ``max`` (FP8 scales: a scalar, not counted);
* under FP8 (torchao's ``Float8Linear``), each GEMM is ``aten._scaled_mm``, which the mm
  counter does not count: today's ``_get_default_save_ops`` takes PyTorch's
  ``compute_intensive_ops`` (``torch/_functorch/partitioners.py`` ``get_default_op_list``,
  which lists ``aten._scaled_mm``), so *every* FP8 GEMM output is kept. Until torchtitan
  114151ad4 (PR #2357, 2026-03-23: "Centralize selective AC policy", which built the save set
  from ``get_default_op_list().compute_intensive_ops``) each model's ``_save_list`` /
  ``_op_sac_save_list`` named ``aten.mm`` but not ``aten._scaled_mm`` (9dec370:
  ``torchtitan/parallelisms/parallelize_llama.py`` ``_save_list`` and the ``_custom_policy`` of
  ``_apply_ac_to_transformer_block``, whose counter counts ``aten.mm`` only): no FP8 GEMM
  output was saved, every one recomputed. ``saves_scaled_mm`` false
  (``TrainingSpec.sac_saves_scaled_mm``) counts that older list.

Norms, rotary embedding, activations and residual adds are recomputed. Rows are per GPU per
micro-batch, ``S`` the tokens of the micro-batch on this cp rank, ``β`` the
activation bytes: with tp, sequence-sharded tensors hold ``S/tp`` of them and the matmuls run
on all ``S`` (torchtitan's plan gathers the block's input).
Dense layers with flash attention only: a MoE or MLA layer, or eager attention, has its own op
list, and :func:`op_selective_rows` answers None for it (the caller keeps the attention-core
count and says so).
"""

from __future__ import annotations

from fractions import Fraction

from trainplan.model.specs import Architecture, AttentionKind

__all__ = ["op_selective_rows", "op_selective_bytes"]


def _matmuls(arch: Architecture) -> list[tuple[str, int, bool]]:
    """(name, output width, row-parallel) of a dense block's matmuls in the order they run."""
    a, g, d, h, f = (
        arch.num_attention_heads,
        arch.kv_heads,
        arch.dim_per_head,
        arch.hidden_size,
        arch.ffn_hidden_size,
    )
    attention = [("wq", a * d, False), ("wk", g * d, False), ("wv", g * d, False), ("wo", h, True)]
    if arch.mlp.gated:
        mlp = [("w1", f, False), ("w3", f, False), ("w2", h, True)]
    else:
        mlp = [("w1", f, False), ("w2", h, True)]
    return attention + mlp


def _kept_matmuls(arch: Architecture, fp8_gemms: bool) -> list[tuple[str, int, bool]]:
    """The matmuls of :func:`_matmuls` whose outputs the list keeps: every other ``aten.mm``
    (the odd-numbered), or every ``aten._scaled_mm`` (outside the count)."""
    matmuls = _matmuls(arch)
    return matmuls if fp8_gemms else matmuls[::2]


def op_selective_rows(
    arch: Architecture,
    tokens: Fraction,
    tp: int,
    activation_bytes: int,
    fp8_gemms: bool = False,
    moe_layer: bool = False,
    flash_attention: bool = True,
    saves_scaled_mm: bool = True,
) -> tuple[tuple[str, Fraction], ...] | None:
    """(tensor, bytes per GPU per micro-batch) that torchtitan's op-level selective
    checkpointing keeps of one dense layer (the module docstring), or None where the op list
    differs from a dense flash-attention block's (MoE or MLA layers, eager attention).
    ``fp8_gemms`` with ``saves_scaled_mm`` false: the save list before torchtitan 114151ad4,
    without ``aten._scaled_mm``, keeps no GEMM output at all.

    Examples
    --------
    Llama 3 8B dimensions (h 4096, 32 heads, 8 KV heads, f 14,336), S = 4 tokens, tp 1, bf16:
    input 2·4·4096, wq 2·4·4096, wv 2·4·1024, attention output 2·4·4096 and its fp32
    log-sum-exp 4·32·4, w1 2·4·14,336, w2 2·4·4096.

    >>> from trainplan.model.specs import Architecture
    >>> llama = Architecture(num_layers=32, hidden_size=4096, num_attention_heads=32,
    ...     num_kv_heads=8, ffn_hidden_size=14336, vocab_size=128256, mlp="swiglu")
    >>> rows = dict(op_selective_rows(llama, Fraction(4), 1, 2))
    >>> sorted(rows)
    ['attention log-sum-exp (fp32)', 'attention output', 'block input', 'w1 output', 'w2 output', 'wq output', 'wv output']
    >>> sum(rows.values()) == 2 * 4 * (4096 + 4096 + 1024 + 4096 + 14336 + 4096) + 4 * 32 * 4
    True

    FP8 GEMMs under the older list: the block input, the attention output and log-sum-exp only.

    >>> old = dict(op_selective_rows(llama, Fraction(4), 1, 2, True, saves_scaled_mm=False))
    >>> sorted(old)
    ['attention log-sum-exp (fp32)', 'attention output', 'block input']
    """
    if moe_layer or arch.attention is AttentionKind.MLA or not flash_attention:
        return None
    beta, h, a, S = activation_bytes, arch.hidden_size, arch.num_attention_heads, tokens
    rows: list[tuple[str, Fraction]] = [("block input", beta * S * h / tp)]
    if not fp8_gemms or saves_scaled_mm:  # aten._scaled_mm not in the list: none kept
        for name, width, row_parallel in _kept_matmuls(arch, fp8_gemms):
            # column-parallel: [S, width/tp]; row-parallel: the whole [S, h] partial sum
            rows.append((f"{name} output", beta * S * width / (1 if row_parallel else tp)))
    rows += [
        ("attention output", beta * S * a * arch.dim_per_head / tp),
        ("attention log-sum-exp (fp32)", 4 * a * S / tp),
    ]
    if tp > 1:
        rows += [
            ("attention reduce-scatter output", beta * S * h / tp),
            ("MLP reduce-scatter output", beta * S * h / tp),
        ]
    return tuple(rows)


def op_selective_bytes(
    arch: Architecture,
    tokens: Fraction,
    tp: int,
    activation_bytes: int,
    fp8_gemms: bool = False,
    moe_layer: bool = False,
    flash_attention: bool = True,
    saves_scaled_mm: bool = True,
) -> Fraction | None:
    """The sum of :func:`op_selective_rows` (None where it answers None)."""
    rows = op_selective_rows(
        arch, tokens, tp, activation_bytes, fp8_gemms, moe_layer, flash_attention, saves_scaled_mm
    )
    return None if rows is None else sum((b for _, b in rows), Fraction(0))
