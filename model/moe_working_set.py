"""What a MoE layer holds besides the tensors it saves for backward: DeepSpeed's gate rows
(:func:`deepspeed_gate_rows`, saved tensors its native MoE keeps that the textbook's rows do
not) and the forward working set of the routed tokens (:func:`moe_forward_working_set`: copies
of the routed tokens alive together while the experts and the combine run, per framework and
dispatcher).

Shapes are per rank and per micro-batch: ``S`` tokens (``(s/cp)·b``, ÷ tp with sequence
parallelism), ``k`` routed copies a token, ``E`` experts, ``h`` the hidden size, β the
activation bytes. The routed tensors are counted at ``k·S`` rows dropless and balanced; a
capacity padded to (``E·C`` rows on both sides of the all-to-all) and the busiest
expert-parallel rank's imbalance (on its experts' side) scale them, as they scale the saved
rows (:func:`model.moe_rows.row_factors`, :func:`model.activation_rows.mlp_rows`).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from trainplan.model.specs import Architecture

__all__ = [
    "ExpertMlp",
    "MEGATRON_ROUTER_SCORE_BYTES",
    "deepspeed_gate_rows",
    "megatron_forward_working_set",
    "moe_forward_working_set",
    "torchtitan_router_rows",
]

MEGATRON_ROUTER_SCORE_BYTES = Fraction(9)
"""Bytes per element of ``[S, E]`` (S tokens of the rank's sequence shard, E experts) that
Megatron-Core's router saves for backward per MoE layer and micro-batch, as the ``megatron``
profile runs it: Megatron Bridge's performance recipes (``moe_router_fusion = True``,
``perf_recipes/*``, the anchors of :mod:`model.moe_kernels`) with an auxiliary loss (its
bridges set ``moe_aux_loss_coeff`` from the model's ``router_aux_loss_coef``/
``aux_loss_alpha``). Megatron-LM d98e8a64dd ``megatron/core/transformer/moe/router.py``
``TopKRouter.routing`` calls ``moe_utils.topk_routing_with_score_function`` and, with an
auxiliary loss, ``compute_routing_scores_for_aux_loss`` once for every loss type; fused, they
are Transformer Engine d0067d0da ``pytorch/router.py`` ``FusedTopkScoreFunction``, whose
``save_for_backward(routing_output, intermediate_output)`` keeps the routing map (1 B,
``csrc/extensions/router.cpp``: ``kBool``/``kByte``) and an FP32 intermediate, and
``FusedComputeScoresForMoEAuxLoss``, which keeps one more FP32 intermediate (its FP32 scores
feed ``FusedAuxLoss``, which saves only its constants and the token counts): 1 + 4 + 4. The
score function does not change the fused figure. Unfused (``moe_router_fusion`` false,
Megatron-Core's default) a softmax after top-k saves ``[S, k]`` only, a softmax before top-k or
a sigmoid one FP32 ``[S, E]`` output, and the auxiliary loss's softmax or sigmoid one more: 0
to 8 per element, below this figure; without an auxiliary loss (Megatron-Core's default
coefficient 0) the fused path keeps 5."""


def deepspeed_gate_rows(
    arch: Architecture, S: Fraction, beta: int, slots: Fraction | None = None
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
      already count (:func:`_gating_rows`).
    * The sparse routes' int64 slot indices: ``_sparse_encode``'s ``index_select`` saves the
      source index of the ``E·C`` slots (``source[:-1]``, ``8·E·C``; the one scratch slot past
      them, 8 bytes a layer, is left out), ``_sparse_decode``'s the ``[k, S]`` slots
      (``_route_slots``: ``indices.long() * capacity + locations.long()``, ``8·k·S``). ``E·C``
      is ``slots`` rows a token (:func:`model.moe_rows.row_factors` with ``padded``; ``k``
      dropless and balanced, ``E·ceil(S·k·cf/E)/S`` under a capacity factor, DeepSpeed's
      ``_capacity``): ``8·(slots + k)·S``. At this commit ``MOELayer.forward`` asks the gate for
      these sparse routes (``self.gate(reshaped_input, input[1], True, ...)``: ``sparse_routes``),
      so the dense ``[S, E, C]`` ``combine_weights`` and ``dispatch_mask`` that ``top1gating``,
      ``top2gating`` and ``topkgating`` build otherwise are never made.
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
    >>> rows["route slot indices (int64, encode and decode)"] == 16 * 4 * 4096
    True
    >>> # capacity factor 1.5: C = ceil(4,096·4/128 × 1.5) = 192, E·C = 24,576 = 6 rows a token
    >>> padded = deepspeed_gate_rows(arch, Fraction(4096), 2, Fraction(6))
    >>> dict((n, v) for n, v, _ in padded)["route slot indices (int64, encode and decode)"]
    Fraction(327680, 1)
    """
    moe = arch.moe
    assert moe is not None
    h, E, k = arch.hidden_size, moe.num_experts, moe.experts_per_token
    slots = Fraction(k) if slots is None else slots
    return [
        ("router input (FP32 copy)", 4 * S * h, "sp"),
        ("router weight (FP32 copy)", Fraction(4 * E * h), "rep"),
        *_gating_rows(S, E, k),
        ("route slot indices (int64, encode and decode)", 8 * (slots + k) * S, "sp"),
        ("routing weights for the combine (FP32)", 4 * k * S, "sp"),
    ]


def torchtitan_router_rows(
    arch: Architecture, S: Fraction, beta: int
) -> list[tuple[str, Fraction, str]]:
    """The router tensors torchtitan's MoE saves for backward, per micro-batch, in place of the
    textbook's "router and dispatch input" (β·S·h): ``TokenChoiceTopKRouter.forward``
    (pytorch/torchtitan b5bcd76c6 ``torchtitan/models/common/moe.py``) runs ``self.gate(x)``
    under ``torch.autocast(dtype=torch.float32)``, which CUDA honours (PyTorch
    ``torch/amp/autocast_mode.py`` refuses only BF16 on parts without it), so the linear casts
    its input and weight to FP32 and its matmul saves both: ``4·S·h`` and ``4·E·h``. The BF16
    input is kept too where shared experts read it (their first GEMM saves it); otherwise only
    index gathers read it, which save indices.

    >>> from trainplan.model.specs import Architecture
    >>> from trainplan.model.arch_parts import MoESpec
    >>> arch = Architecture(num_layers=1, hidden_size=2880, num_attention_heads=64,
    ...     ffn_hidden_size=2880, vocab_size=8, moe=MoESpec(num_experts=128, experts_per_token=4,
    ...     expert_ffn_hidden_size=2880))
    >>> [v for _, v, _ in torchtitan_router_rows(arch, Fraction(4096), 2)] == [
    ...     4 * 4096 * 2880, 4 * 128 * 2880]
    True
    """
    moe = arch.moe
    assert moe is not None
    h, E = arch.hidden_size, moe.num_experts
    rows = [
        ("router input (FP32 copy, autocast)", 4 * S * h, "sp"),
        ("router weight (FP32 copy, autocast)", Fraction(4 * E * h), "rep"),
    ]
    if moe.num_shared_experts:
        rows.append(("shared experts' input", beta * S * h, "sp"))
    return rows


def _gating_rows(S: Fraction, E: int, k: int) -> list[tuple[str, Fraction, str]]:
    """The ``[S, E]`` tensors DeepSpeed's gating function saves beside the softmax output:
    ``top1gating`` (k = 1) multiplies the gates by the int64 one-hot ``mask1``
    (``gates1_s = (gates * mask1).sum(dim=1)``): ``8·S·E``; ``top2gating`` (k = 2) contracts
    the gates with two FP32 one-hot masks (``einsum("se,se->s", gates, mask1_float)``, the same
    with ``mask2_float``): ``8·S·E``; ``topkgating`` (k > 2) keeps the bool mask of
    ``gates * mask`` (``S·E``), the masked gates the normalising division saves
    (``gates_masked / denom_s``: ``4·S·E``) and ``torch.topk``'s int64 indices (``8·k·S``)."""
    rows = []
    if k == 1:
        rows.append(("top-1 gating: one-hot mask (int64)", 8 * S * E, "sp"))
    elif k == 2:
        rows.append(("top-2 gating: one-hot masks (FP32)", 8 * S * E, "sp"))
    else:
        rows += [
            ("top-k gating: masked gates (FP32) and mask (bool)", 5 * S * E, "sp"),
            ("top-k gating: indices (int64)", 8 * k * S, "sp"),
        ]
    return rows


def _deepspeed_forward(h: int, k: int, slots: Fraction, S: Fraction, beta: int) -> Fraction:
    """DeepSpeed's MoE forward working set at ``_sparse_decode`` (``sharded_moe.py``): the
    caller's BF16 norm output (``MOELayer.forward``'s input, which nothing saves, β·S·h), the
    experts' output after the second all-to-all (``expert_output``, held by
    ``MOELayer.forward`` through the decode, β·E·C·h), its zero-padded copy (``padded_output``,
    a local of ``_sparse_decode``, β·E·C·h), the FP32 product ``routed * gates`` (gates are
    FP32: ``4·k·S·h``) and its FP32 sum over the routes (``4·S·h``). The two ``[E·C, h]``
    buffers hold ``slots`` rows per token (:func:`model.moe_rows.row_factors` with ``padded``:
    ``E·C``, ``k·S`` dropless and balanced); ``routed`` (``padded_output.index_select`` of the
    ``[k, S]`` slots) and the product hold ``k`` rows a token whatever the capacity: a route the
    capacity evicted reads the zero scratch row (``_route_slots``)."""
    return beta * S * h + 2 * beta * slots * S * h + 4 * k * S * h + 4 * S * h


def _torchtitan_forward(
    h: int, k: tuple[Fraction, Fraction], S: Fraction, beta: int, ep: int
) -> Fraction:
    """torchtitan's MoE forward working set at the combine (pytorch/torchtitan b5bcd76c6
    ``torchtitan/models/common/moe.py`` ``RoutedExperts.forward``, ``token_dispatcher.py``
    ``AllToAllTokenDispatcher.combine``, eager): ``RoutedExperts.forward`` holds the experts'
    output (``routed_output_RD``, β·k·S·h) through the combine, which un-permutes it
    (``_unpermute``: freed after the all-to-all) into the all-to-all's output (β·k·S·h; none at
    ep = 1, ``LocalTokenDispatcher.combine``), then multiplies its FP32 copy (saved: the rows'
    "routed expert outputs for the combine" at 4 B) by the scores into an FP32 product
    (``4·k·S·h``) cast back to BF16 (β·k·S·h) while the product is alive. The dispatch's
    reorder and received copy are freed before the experts run (``dispatch`` returns only the
    permuted tokens, which the grouped GEMM saves). ``k``: (sent, received) rows per token
    (:func:`model.moe_rows.row_factors`): the experts' output is the busiest rank's, the rest
    is back on the source side."""
    sent, received = k
    a2a = beta * sent * S * h if ep > 1 else 0
    return beta * received * S * h + a2a + 4 * sent * S * h + beta * sent * S * h


@dataclass(frozen=True)
class ExpertMlp:
    """The routed experts' MLP as Megatron-Core runs it (Megatron-LM d98e8a64dd
    ``megatron/core/transformer/moe/experts.py`` ``TEGroupedMLP.forward``), for the tensors it
    holds of its own while FC2 and what follows run (:func:`_experts_peak`). The default (every
    field empty) counts FC2's output alone."""

    ffn: int = 0
    """The activation output's width on a rank: ``f_e / expert_tp`` (FC1 is column-parallel
    over the expert-TP group, and the gated linear unit halves FC1's output)."""
    fp8_rowwise_bytes: Fraction = Fraction(0)
    """Bytes per element of the row-wise FP8 copy of the activation output that FC2 (Transformer
    Engine d0067d0da ``module/grouped_linear.py`` ``_GroupedLinear.forward``) quantises for its
    GEMM and drops after it (``update_usage(rowwise_usage=False, columnwise_usage=True)``,
    keeping the column-wise copy the saved rows count): 1 B plus the recipe's scales; 0 where
    one copy serves both uses and is saved (the per-tensor recipes on Blackwell,
    :func:`model.precision.keeps_fp8_transpose`)."""
    pad_align: int = 0
    """Transformer Engine's ``Fp8Padding`` alignment (``quantization.py``
    ``get_align_size_for_quantization``: 32 under MXFP8, 16 otherwise); 0 where no padded
    copies are made (BF16, or a dispatcher that pads itself)."""
    act_recompute: bool = False
    """Megatron-Core's ``moe_act`` recompute module: ``CheckpointWithoutOutput`` releases the
    activation output's storage right after FC2 (``discard_output_and_register_recompute``)."""
    bias: bool = False
    """Expert biases (``add_bias_linear``): FC2 returns its bias unadded and
    ``TEGroupedMLP._apply_bias`` adds it scaled by the FP32 probabilities per expert."""


def _experts_peak(
    h: int, rows: Fraction, beta: int, held: Fraction, fp8: bool, local: int, mlp: ExpertMlp
) -> Fraction:
    """The largest of ``TEGroupedMLP.forward``'s points past FC1, ``rows`` routed copies on the
    experts' side, beside ``held`` (what the caller keeps that no backward saves):

    * under FP8 the input's padded copy (``self.quantization_padding``, TE
      ``module/fp8_padding.py`` ``_Fp8Padding.forward``: ``torch.empty([sum(padded_m_splits),
      h])`` unless every expert's count is already a multiple of the alignment, which real
      routing is not: counted always, each expert's count rounded up), a local of the forward
      until it returns (FC1 saves its FP8 copy);
    * at FC2: the BF16 activation output (``bias_act_output``, ``[rows, ffn]``), a local until
      the forward returns where FC2 saves an FP8 copy instead (FP8) or released after FC2
      (``moe_act``), saved otherwise (not transient); FC2's row-wise FP8 copy of it
      (:attr:`ExpertMlp.fp8_rowwise_bytes`); FC2's output;
    * with expert biases, ``_apply_bias``' per-expert FP32 sums ``t + b * p`` (probabilities
      FP32) and their FP32 ``torch.cat`` beside FC2's output: ``8·rows·h``;
    * with padding, ``self.quantization_unpadding``' unpadded copy of the output
      (``fp8_unpadding.py`` ``_Fp8Unpadding.forward``) beside the padded one.
    """
    R = rows + local * (mlp.pad_align - 1) if mlp.pad_align else rows
    pad = beta * R * h if mlp.pad_align else 0
    act = beta * R * mlp.ffn if fp8 or mlp.act_recompute else 0
    quant = mlp.fp8_rowwise_bytes * R * mlp.ffn if fp8 else 0
    out = beta * R * h
    fc2 = held + pad + act + quant + out
    after = held + pad + (0 if mlp.act_recompute else act) + out
    bias = after + 8 * R * h if mlp.bias else 0
    unpad = after + beta * rows * h if mlp.pad_align else 0
    return Fraction(max(fc2, bias, unpad))


def _flex_working_set(copy: Fraction, fp8: bool) -> tuple[Fraction, Fraction]:
    """Megatron-Core's ``flex`` dispatcher (``MoEFlexTokenDispatcher``, DeepEP or HybridEP),
    ``copy`` bytes a routed-token tensor on the experts' side: the router's input is dispatched
    unpermuted (``dispatch_preprocess`` returns it); ``custom_forward`` keeps the fused
    dispatch's output (``dispatched_input``), ``get_permuted_hidden_states_by_experts``
    permutes it into the experts' input (saved in BF16), and
    ``get_restored_hidden_states_by_experts`` un-permutes the experts' output while both are
    alive: dispatch output, experts' output and un-permuted copy (the dispatch's per-rank
    deduplication making the first and the last smaller), plus the BF16 input under FP8.
    (held while the experts run, the combine's peak)."""
    held = copy + (copy if fp8 else 0)
    return held, held + 2 * copy


def _alltoall_working_set(
    Us: Fraction, U: Fraction, G: int, ep: int, local_experts: int, fp8: bool,
    fp32_copy: Fraction,
) -> tuple[Fraction, Fraction]:  # fmt: skip
    """(held while the experts run, the combine's peak) under ``alltoall``
    (:func:`megatron_forward_working_set`); ``Us``: the permuted tokens the rank sends and the
    combine's all-to-all output (the source side), ``U``: the rows its experts receive,
    ``fp32_copy``: ``4·k·S·h`` of them."""
    zero = Fraction(0)
    permuted: Fraction = Us
    a2a = U if ep > 1 else zero
    if local_experts > 1 or G > 1:
        # the experts' input is a tensor of its own (sorted, or gathered over the expert-TP
        # group): transient only where FC1 saves an FP8 copy instead
        expert_input = G * U if fp8 else zero
    else:
        # the experts read the all-to-all's output (or the permuted tokens at ep = 1): saved
        # in BF16, so not transient then
        expert_input = zero
        if not fp8:
            a2a, permuted = (zero, permuted) if ep > 1 else (zero, zero)
    held = permuted + a2a + expert_input
    unsorted = G * U if local_experts > 1 else 0
    if G > 1:  # the experts' output, its un-sorted copy, the FP32 copy and reduce-scatter output
        peak = held + G * U + unsorted + fp32_copy * G + fp32_copy
    elif local_experts > 1:
        peak = held + G * U + unsorted  # the experts' output and its un-sorted copy
    else:  # the experts' output and the combine's all-to-all output
        peak = held + G * U + (Us if ep > 1 else 0)
    return held, Fraction(peak)


def megatron_forward_working_set(
    h: int,
    k: int,
    S: Fraction,
    beta: int,
    ep: int,
    etp: int,
    local_experts: int,
    fp8: bool,
    flex: bool,
    mlp: ExpertMlp = ExpertMlp(),
    rows: tuple[Fraction, Fraction] = (Fraction(1), Fraction(1)),
) -> Fraction:
    """Megatron-Core's MoE forward working set (Megatron-LM d98e8a64dd
    ``megatron/core/transformer/moe/moe_layer.py`` ``MoELayer.forward``'s ``custom_forward`` and
    ``routed_experts_compute``; ``token_dispatcher.py``): the routed-token tensors alive at
    once that no backward keeps, for ``S`` tokens a rank, ``etp`` ranks' routed tokens on the
    experts' side (``U = β·k·S·h``; the expert side ``G·U``, G = ``etp``): the larger of the
    combine's peak and the experts' own (:func:`_experts_peak`, ``mlp``).

    ``alltoall`` (``MoEAlltoAllTokenDispatcher``): ``custom_forward`` keeps ``hidden_states``,
    rebound to the permuted tokens (``dispatch_preprocess``' ``permute``, U) and
    ``dispatched_input``, the all-to-all's output (``token_dispatch``, U; the same tensor at
    ep = 1, where ``_AllToAll`` returns its input), both alive until it returns.
    ``dispatch_postprocess`` gathers over the expert-TP group (G > 1) and sorts by local expert
    (``sort_chunks_by_idxs``, more than one local expert): the experts' input (GU), which
    Transformer Engine's grouped FC1 saves in BF16 (the rows' "routed expert inputs") and
    quantizes under FP8 (the BF16 copy then held by ``routed_experts_compute`` until it
    returns). The experts' output (``expert_output``, GU) and ``combine_preprocess``' un-sorted
    copy (GU) are made while all of these are alive: the combine's peak. With G > 1
    ``combine_preprocess`` then reduce-scatters an FP32 copy (``hidden_states.to(self.probs.
    dtype)``: ``4·k·S·h·G``) into an FP32 result (``4·k·S·h``). With one local expert there is
    no sort: the combine's peak is its all-to-all output (U) beside the permuted tokens and
    the experts' output.

    ``flex``: :func:`_flex_working_set`. The ``[k·S]`` FP32 probabilities are left out.

    ``rows``: (sent, received) routed rows ÷ ``k·S`` (:func:`model.moe_rows.row_factors`): the
    permuted tokens and the combine's all-to-all output hold the rows the rank sends, every
    tensor on the experts' side (the dispatch's output onwards, the expert-TP gathers and the
    FP32 reduce-scatter) the busiest rank's received rows. (1, 1) dropless and balanced.
    """
    kr = k * rows[1]
    U, Us = beta * kr * S * h, beta * k * rows[0] * S * h
    G = etp
    if flex:
        held, peak = _flex_working_set(G * U, fp8)
    else:
        held, peak = _alltoall_working_set(Us, U, G, ep, local_experts, fp8, 4 * kr * S * h)
    experts = _experts_peak(h, G * kr * S, beta, held, fp8, local_experts, mlp)
    return max(peak, experts)


def moe_forward_working_set(
    arch: Architecture,
    framework: str,
    S: Fraction,
    beta: int,
    ep: int,
    etp: int,
    fp8: bool,
    flex: bool,
    mlp: ExpertMlp = ExpertMlp(),
    rows: tuple[Fraction, Fraction] = (Fraction(1), Fraction(1)),
) -> Fraction:
    """The forward working set of one MoE layer of ``arch`` under ``framework``, bytes per GPU
    per micro-batch, beside the tensors it saves (:func:`megatron_forward_working_set` for
    ``megatron``, DeepSpeed's ``_sparse_decode`` for ``deepspeed``, torchtitan's combine for
    ``fsdp2``). 0 for ``textbook`` (the convention counts what is kept) and for a model without
    MoE layers. ``S``: the tokens of a rank's routed rows (÷ tp with sequence parallelism);
    ``mlp``: Megatron-Core's expert MLP (:class:`ExpertMlp`); ``rows``: (sent, received) routed
    rows ÷ ``k·S`` (:func:`model.moe_rows.row_factors`: capacity padding on both sides, the
    busiest expert-parallel rank's imbalance on the experts' side; (1, 1) dropless and balanced).

    Examples
    --------
    >>> from trainplan.model.specs import Architecture
    >>> from trainplan.model.arch_parts import MoESpec
    >>> arch = Architecture(num_layers=1, hidden_size=2880, num_attention_heads=64,
    ...     ffn_hidden_size=2880, vocab_size=8, moe=MoESpec(num_experts=128, experts_per_token=4,
    ...     expert_ffn_hidden_size=2880))
    >>> S, h = 4096, 2880
    >>> moe_forward_working_set(arch, "deepspeed", Fraction(S), 2, 8, 1, False, False) == (
    ...     2 * S * h + 2 * 2 * 4 * S * h + 4 * 4 * S * h + 4 * S * h)
    True
    >>> moe_forward_working_set(arch, "fsdp2", Fraction(S), 2, 8, 1, False, False) == (
    ...     2 * 4 * S * h * 3 + 4 * 4 * S * h)
    True
    >>> moe_forward_working_set(arch, "textbook", Fraction(S), 2, 8, 1, False, False)
    Fraction(0, 1)
    """
    moe = arch.moe
    if moe is None or framework == "textbook":
        return Fraction(0)
    h, k = arch.hidden_size, moe.experts_per_token
    if framework == "deepspeed":
        return _deepspeed_forward(h, k, k * rows[0], S, beta)
    if framework == "fsdp2":
        return Fraction(_torchtitan_forward(h, (k * rows[0], k * rows[1]), S, beta, ep))
    local = moe.num_experts // ep
    return megatron_forward_working_set(h, k, S, beta, ep, etp, local, fp8, flex, mlp, rows)
