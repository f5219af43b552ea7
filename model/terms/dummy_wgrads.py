"""Transformer Engine's placeholder weight gradients: one tensor per distinct weight shape, held
for the whole run (:func:`dummy_wgrads_term`, part of
:func:`model.terms.persistent_buffers.persistent_buffers_term`).

Megatron-Core accumulates each linear layer's weight gradient inside its GEMM
(``gradient_accumulation_fusion``, on unless ``--no-gradient-accumulation-fusion``:
``megatron/training/arguments.py``): the GEMM writes into the parameter's ``main_grad``, which
Megatron's DDP (``megatron/core/distributed/distributed_data_parallel.py``) and Megatron-FSDP
(``megatron_fsdp.py``) mark with ``grad_added_to_main_grad``. Autograd still needs a tensor of
the weight's shape for the weight's gradient, so the backward hands it a placeholder:

* Transformer Engine's linear modules (NVIDIA/TransformerEngine at d0067d0da,
  ``transformer_engine/pytorch/module/linear.py`` and ``layernorm_linear.py`` ``backward``,
  ``grouped_linear.py`` ``handle_custom_ddp_from_mcore``) call ``get_dummy_wgrad(shape,
  weight.dtype)`` (``module/base.py``), which caches one ``torch.empty`` per ``(shape, dtype)``
  in the module-level dict ``_dummy_wgrads`` and never frees it (since TE 2.3, commit
  ba5dc5dde, PR #1651 "Enable reuse of dummy wgrad tensor"). A grouped GEMM's experts each have
  a weight of the same shape: one tensor for all of them.
* Megatron-Core's output layer (``tensor_parallel.ColumnParallelLinear``,
  ``LinearWithGradAccumulationAndAsyncCommunication.backward`` in
  ``megatron/core/tensor_parallel/layers.py`` at d98e8a64dd) calls the same
  ``get_dummy_wgrad(list(weight.main_grad.shape), input.dtype)`` when Transformer Engine is
  installed (a fresh ``torch.empty`` per call only without it): cached too, in the activations'
  dtype.

So one GPU holds, from its first backward on and in both phases of every step, one tensor per
distinct (tp-split shape, dtype) among the linear weights of the layers it holds
(:func:`layer_weight_shapes`: QKV and output projections or MLA's five projections; FC1 and FC2
of a dense MLP; on a MoE layer the routed experts' FC1 and FC2 at the expert tp degree and the
shared experts' at tp), MTP's ``eh_proj`` where the MTP blocks are (a ``ColumnParallelLinear``
of 2h → h: ``multi_token_prediction.py`` ``MultiTokenPredictionLayer.__init__``) and the output
layer ``[V/tp, h]`` on the rank holding it — not an RLHF critic's or reward model's value head
(:mod:`model.value_head`: verl's ``LinearForLastLayer`` is a plain ``torch.nn.Linear``, whose
weight gradient autograd computes and frees). Not the router (``router_gating_linear``,
``moe/moe_utils.py``: autograd receives a real gradient, added to ``main_grad`` by the DDP
hook and freed) nor the embedding (an ordinary gradient, likewise).

Where it is 0:

* a step without a backward (``TrainingSpec.runs_backward`` False: an RLHF reference or reward
  model's scoring forward; ``forward_only`` runs no weight gradient);
* ``distributed_optimizer = distributed_fused_adam``: Apex's optimizer as NeMo up to 24.x runs
  it, with Transformer Engine 1.x, before the cache: TE < 2.3 allocated the placeholder per call
  (``torch.empty`` in ``backward``), freed with the layer's backward, not held;
* ``fsdp2`` (torchtitan's ``nn.Linear``: autograd's own weight gradients, no ``main_grad``),
  ``deepspeed`` (DeepSpeed's engine owns ``param.grad``; Megatron-DeepSpeed's layers have no
  ``main_grad`` to fuse into) and ``textbook`` (no runtime buffer).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from trainplan.model.arch_parts import AttentionKind
from trainplan.model.frameworks import DistributedOptimizer, Framework
from trainplan.model.pipeline import Schedule
from trainplan.model.specs import Architecture
from trainplan.model.split import stage_layers
from trainplan.model.terms.activation_fields import LAYER_FIELDS, end_stages, padded_vocab_of
from trainplan.model.terms.fields import Context, Fields
from trainplan.model.xp import where

__all__ = ["layer_weight_shapes", "stage_dummy_wgrad_bytes", "dummy_wgrads_term"]


def _attention_shapes(arch: Architecture, tp: int) -> set[tuple[int, int]]:
    """The attention block's linear weights on one tp rank, ``(rows, columns)``: GQA/MHA
    ``linear_qkv`` ``[(a + 2g)·d/tp, h]`` and ``linear_proj`` ``[h, a·d/tp]``; MLA
    (Megatron-Core ``MLASelfAttention``) ``linear_q_down_proj`` ``[q_lora, h]`` and
    ``linear_kv_down_proj`` ``[kv_lora + d_rope, h]`` (duplicated: whole on every rank),
    ``linear_q_up_proj`` ``[a·(d_nope + d_rope)/tp, q_lora]`` (``linear_q_proj`` ``[…, h]``
    without a query latent), ``linear_kv_up_proj`` ``[a·(d_nope + d_v)/tp, kv_lora]`` and
    ``linear_proj`` ``[h, a·d_v/tp]``."""
    h, a = arch.hidden_size, arch.num_attention_heads
    if arch.attention is not AttentionKind.MLA:
        d, g = arch.dim_per_head, arch.kv_heads
        return {((a + 2 * g) * d // tp, h), (h, a * d // tp)}
    assert arch.mla is not None
    m = arch.mla
    qk = m.qk_nope_head_dim + m.qk_rope_head_dim
    shapes = {
        (m.kv_lora_rank + m.qk_rope_head_dim, h),
        (a * (m.qk_nope_head_dim + m.v_head_dim) // tp, m.kv_lora_rank),
        (h, a * m.v_head_dim // tp),
    }
    if m.q_lora_rank is None:
        return shapes | {(a * qk // tp, h)}
    return shapes | {(m.q_lora_rank, h), (a * qk // tp, m.q_lora_rank)}


def _mlp_shapes(arch: Architecture, ffn: int, tp: int) -> set[tuple[int, int]]:
    """An MLP of hidden size ``ffn`` split over ``tp``: ``linear_fc1`` ``[k·ffn/tp, h]`` (k = 2
    gated, gate and up fused) and ``linear_fc2`` ``[h, ffn/tp]`` (``megatron/core/transformer/
    mlp.py``)."""
    k = 2 if arch.mlp.gated else 1
    return {(k * ffn // tp, arch.hidden_size), (arch.hidden_size, ffn // tp)}


def layer_weight_shapes(
    arch: Architecture, tp: int, expert_tp: int, moe: bool
) -> frozenset[tuple[int, int]]:
    """The distinct linear-weight shapes ``(rows, columns)`` (elements) of one transformer layer
    on one GPU: its attention's (:func:`_attention_shapes`) and, dense, its MLP at ``tp``; MoE,
    the routed experts' MLP at ``expert_tp`` (every expert the same shape) and the shared
    experts' (Megatron-Core's ``SharedExpertMLP``: one MLP of all of them, ``num_shared_experts``
    × the shared FFN size) at ``tp``. The router is not a Transformer Engine linear.

    Examples
    --------
    Llama 3 70B at tp 8: QKV (64 + 16)·128/8 = 1,280 rows, proj 8,192 × 1,024, FC1
    2·28,672/8 = 7,168 rows, FC2 8,192 × 3,584.

    >>> from trainplan.scenarios.catalogue import get_model
    >>> sorted(layer_weight_shapes(get_model("llama3-70b").model.arch, 8, 8, False))
    [(1280, 8192), (7168, 8192), (8192, 1024), (8192, 3584)]
    """
    shapes = _attention_shapes(arch, tp)
    if not moe:
        return frozenset(shapes | _mlp_shapes(arch, arch.ffn_hidden_size, tp))
    assert arch.moe is not None
    shapes |= _mlp_shapes(arch, arch.moe.expert_ffn_hidden_size, expert_tp)
    if arch.moe.num_shared_experts:
        shapes |= _mlp_shapes(arch, arch.moe.num_shared_experts * arch.moe.shared_ffn, tp)
    return frozenset(shapes)


@lru_cache(maxsize=4096)
def stage_dummy_wgrad_bytes(
    arch: Architecture,
    weight_bytes: int,
    activation_bytes: int,
    vocab_multiple: int | None,
    tp: int,
    expert_tp: int,
    framework: Any,
    pp: int,
    v: int,
    uneven: bool,
    sizes: tuple[int, ...] | None,
    schedule: Any = None,
) -> tuple[tuple[int, int], ...]:
    """Per pipeline rank, (bytes of its placeholder weight gradients without the output layer,
    with it): the sum over the distinct ``(shape, dtype)`` keys (Transformer Engine's cache key)
    of its layers (:func:`model.split.stage_layers`; under DualPipe a rank holds stage r and
    stage pp − 1 − r) at ``weight_bytes`` per element, MTP's ``eh_proj`` ``[h/tp, 2h]`` where an
    MTP block is, and the output layer ``[V/tp, h]`` (V padded as ``framework`` pads it) at
    ``activation_bytes`` (the output layer keys its placeholder by ``input.dtype``).

    Examples
    --------
    Llama 3 70B, tp 8, pp 2: the four layer shapes, 2·(1,280·8,192 + 8,192·1,024 + 7,168·8,192
    + 8,192·3,584) = 213,909,504 B; with the output layer's 2·16,128·8,192 = 264,241,152 B more
    (V 128,256 padded to a multiple of 128·8: 129,024 rows, 16,128 a rank).

    >>> from trainplan.scenarios.catalogue import get_model
    >>> arch = get_model("llama3-70b").model.arch
    >>> stage_dummy_wgrad_bytes(arch, 2, 2, None, 8, 8, "megatron", 2, 1, True, None)[1]
    (213909504, 478150656)
    """
    split = stage_layers(arch, pp, v, uneven, sizes, schedule)
    if schedule == Schedule.DUALPIPE:
        split = tuple(split[r] + split[pp - 1 - r] for r in range(pp))
    h = arch.hidden_size
    vocab = padded_vocab_of(arch.vocab_size, vocab_multiple, framework, tp)
    output = 0 if arch.value_head else (vocab // tp) * h * activation_bytes  # nn.Linear head
    rows = []
    for layers in split:
        keys: set[tuple[int, int]] = set()
        for j in layers:
            keys |= layer_weight_shapes(arch, tp, expert_tp, arch.is_moe_layer(j))
        if any(j >= arch.num_layers for j in layers):
            keys.add((h // tp, 2 * h))
        plain = sum(r * c for r, c in keys) * weight_bytes
        same = weight_bytes == activation_bytes and (vocab // tp, h) in keys
        rows.append((plain, plain + (0 if same else output)))
    return tuple(rows)


def dummy_wgrads_term(c: Context, f: Fields) -> Any:
    """Bytes of Transformer Engine's cached placeholder weight gradients on one GPU of stage
    ``f.stage`` under ``megatron`` (:func:`stage_dummy_wgrad_bytes`; the output layer's on the
    rank holding it, :func:`model.terms.activation_fields.end_stages`), held in both phases;
    0 without a backward, under Apex's ``distributed_fused_adam``, under the other profiles and
    for a size-only model (the module docstring).

    Scope: tp, etp, pp, virtual_stages, uneven_stages, stage_layers, schedule, framework.
    Control: pp, framework.
    """
    t = c.training
    arch = c.model.arch
    if arch is None or not t.runs_backward or Framework(f.framework) is not Framework.MEGATRON:
        return 0
    if DistributedOptimizer(t.distributed_optimizer) is DistributedOptimizer.APEX:
        return 0
    _, last = end_stages(f)
    args = (arch, t.weight_bytes, t.activation_bytes, c.vocab_multiple)
    plain, ended = f.per_stage(
        stage_dummy_wgrad_bytes, args, "tp", "expert_tp", "framework", *LAYER_FIELDS
    )
    return where(last, ended, plain)
