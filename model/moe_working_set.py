"""What a MoE layer keeps beyond the textbook's rows: DeepSpeed's gate rows
(:func:`deepspeed_gate_rows`, saved tensors its native MoE keeps that the textbook's rows do
not).

Shapes are per rank and per micro-batch: ``S`` tokens (``(s/cp)·b``, ÷ tp with sequence
parallelism), ``k`` routed copies a token, ``E`` experts, ``h`` the hidden size, β the
activation bytes. The routed tensors are counted at ``k·S`` rows, the balanced dropless figure
the saved rows use (:func:`model.activation_rows.mlp_rows`); a capacity-padded run's ``E·C``
rows are ``capacity_factor·k·S``, skewed routing more on the busiest rank.
"""

from __future__ import annotations

from fractions import Fraction

from trainplan.model.specs import Architecture

__all__ = ["deepspeed_gate_rows"]


def deepspeed_gate_rows(
    arch: Architecture, S: Fraction, beta: int
) -> list[tuple[str, Fraction, str]]:
    """The routing tensors DeepSpeed's native MoE saves for backward, per micro-batch
    (DeepSpeed edaa72212 ``deepspeed/moe/sharded_moe.py``), as (name, bytes, how the row
    shards) rows in place of the textbook's "router and dispatch input" (β·S·h):

    * ``TopKGate.forward`` casts its input to FP32 (``input_fp32 = input.float()``) and runs
      ``F.linear(input_fp32, self.wg.weight.float())``, whose matmul saves the FP32 input
      ``4·S·h`` and the FP32 copy of the gate weight ``4·E·h`` (one per layer and micro-batch,
      not sharded). Nothing saves the BF16 norm output (``_sparse_encode`` only ``cat``\\ s and
      ``index_select``\\ s it: their backward reads shapes and indices).
    * The gating function's own saved ``[S, E]`` tensors beside the softmax output the rows
      already count: ``top1gating`` (k = 1) multiplies the gates by the int64 one-hot
      ``mask1`` (``gates1_s = (gates * mask1).sum(dim=1)``): ``8·S·E``; ``top2gating`` (k = 2)
      contracts the gates with two FP32 one-hot masks (``einsum("se,se->s", gates,
      mask1_float)``, the same with ``mask2_float``): ``8·S·E``; ``topkgating`` (k > 2) keeps
      the bool mask of ``gates * mask`` (``S·E``), the masked gates the normalising division
      saves (``gates_masked / denom_s``: ``4·S·E``) and ``torch.topk``'s int64 indices
      (``8·k·S``).
    * The sparse routes' int64 slot indices: ``_sparse_encode``'s ``index_select`` saves the
      source index of the ``E·C`` slots, ``_sparse_decode``'s the ``[k, S]`` slots
      (``_route_slots``: ``indices.long() * capacity + locations.long()``): ``16·k·S``.
    * ``_sparse_decode``'s ``routed * gates.unsqueeze(-1)`` saves the FP32 gates ``[k, S]``
      (``4·k·S``) beside ``routed``, the rows' "routed expert outputs for the combine".

    Examples
    --------
    gpt-oss-120b's dimensions (h 2,880, E 128, k 4), S = 4,096: the FP32 input is twice the
    textbook's β·S·h.

    >>> from trainplan.model.specs import Architecture
    >>> from trainplan.model.arch_parts import MoESpec
    >>> arch = Architecture(num_layers=1, hidden_size=2880, num_attention_heads=64,
    ...     ffn_hidden_size=2880, vocab_size=8, moe=MoESpec(num_experts=128, experts_per_token=4,
    ...     expert_ffn_hidden_size=2880))
    >>> rows = dict((n, v) for n, v, _ in deepspeed_gate_rows(arch, Fraction(4096), 2))
    >>> rows["router input (FP32 copy)"] == 4 * 4096 * 2880
    True
    >>> rows["top-k gating: masked gates (FP32) and mask (bool)"] == 5 * 4096 * 128
    True
    """
    moe = arch.moe
    assert moe is not None
    h, E, k = arch.hidden_size, moe.num_experts, moe.experts_per_token
    rows = [
        ("router input (FP32 copy)", 4 * S * h, "sp"),
        ("router weight (FP32 copy)", Fraction(4 * E * h), "rep"),
    ]
    if k == 1:
        rows.append(("top-1 gating: one-hot mask (int64)", 8 * S * E, "sp"))
    elif k == 2:
        rows.append(("top-2 gating: one-hot masks (FP32)", 8 * S * E, "sp"))
    else:
        rows += [
            ("top-k gating: masked gates (FP32) and mask (bool)", 5 * S * E, "sp"),
            ("top-k gating: indices (int64)", 8 * k * S, "sp"),
        ]
    return rows + [
        ("route slot indices (int64, encode and decode)", 16 * k * S, "sp"),
        ("routing weights for the combine (FP32)", 4 * k * S, "sp"),
    ]
