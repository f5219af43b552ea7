"""Activation bytes one transformer layer keeps for backward, per GPU, per micro-batch.

Korthikanti et al. 2022 (arXiv 2205.05198) §4, 16-bit activations and 1-byte dropout masks. Each
stored tensor is listed by name with its shape; ``S = (s/cp)·b`` tokens on this rank. A tensor
is divided by tp either always (it has a head or FFN dim split by tp: *tp*) or only with sequence
parallelism (it has the full hidden dim and is sequence-sharded: *sp*).

GPT layer (LayerNorm, MHA, 4h GeLU MLP, dropout) — reduces exactly to Korthikanti's
``34·s·b·h + 5·a·s²·b`` (Table 2):

=============================  ==============  =====  =========================
tensor                         shape           sharded bytes (β = 2)
=============================  ==============  =====  =========================
attention LayerNorm input      [S, h]          sp     2·S·h
QKV projection input           [S, h]          sp     2·S·h
Q, K (for QKᵀ)                 [S, a·d],[S,g·d] tp    2·S·a·d + 2·S·g·d
softmax output                 [b, a, s/cp, s] tp     2·a·s_cp·s·b
attention dropout mask         [b, a, s/cp, s] tp     1·a·s_cp·s·b
attention dropout output       [b, a, s/cp, s] tp     2·a·s_cp·s·b
V (for scores·V)               [S, g·d]        tp     2·S·g·d
output projection input        [S, a·d]        tp     2·S·a·d
attention output dropout mask  [S, h]          sp     1·S·h
MLP LayerNorm input            [S, h]          sp     2·S·h
FC1 input                      [S, h]          sp     2·S·h
GeLU input                     [S, f]          tp     2·S·f
FC2 input (GeLU output)        [S, f]          tp     2·S·f
MLP dropout mask               [S, h]          sp     1·S·h
=============================  ==============  =====  =========================

With a = g, a·d = h, f = 4h: 2+2+4+2+2+1+2+2+8+8+1 = 34 S·h, and 2+1+2 = 5 a·s·S. Without
sequence parallelism the *sp* rows (10·S·h) are not divided by tp: Korthikanti's
``s·b·h·(10 + 24/t + 5·a·s/(h·t))``.

Variants, derived the same way:

* GQA (g < a): K and V are ``[S, g·d]``; Q and the output-projection input stay ``[S, a·d]``.
* SwiGLU (3 matrices, Llama): the activation saves its input, gate and up ``2·[S, f]``
  (Megatron-LM's fused ``bias_swiglu`` recomputes SiLU from it), and the down projection its
  input ``[S, f]``: ``6·S·f`` bytes instead of GeLU's ``4·S·f``. (PyTorch eager also keeps
  SiLU's output: ``8·S·f``; measured in the fidelity suite; Megatron-DeepSpeed's SwiGLU is
  eager, ``ActivationContext.eager_swiglu``. Megatron-Core's clamped GLU keeps its input
  twice, ``ActivationContext.clamp_copies_glu_input``.)
* No dropout (Llama, Mixtral, DeepSeek): no masks and no dropout output; the softmax output is
  what scores·V uses: ``2·a·s_cp·s·b`` instead of ``5·…``.
* FlashAttention: no ``[b, a, s, s]`` tensor is stored (the conventions drop the 5·a term; the kernel's
  per-row softmax statistics, 4·a·S bytes in fp32, are left out by the paper's count and kept
  where a framework profile's kernel keeps them, ``ActivationContext.saves_softmax_lse``).
* Without FlashAttention the score tensors are the whole ``[b, a, s/cp, s]`` whatever the mask:
  eager attention (Hugging Face's ``eager_attention_forward``, Megatron's unfused softmax) adds a
  causal, sliding-window or chunked mask to the full score matrix, so windows and chunks save no
  score memory there (windowed attention in Megatron-Core/Transformer Engine runs only in the
  flash/fused backends, which store none). Attention sinks (gpt-oss) add one column to the
  softmax, ``[b, a, s/cp, s + 1]``; logit soft-capping (Gemma 2) keeps tanh's output, one more
  ``β·a·s_cp·s``.
* QK-norm (Qwen3, Gemma 3): the norms keep their inputs, Q and K before normalisation,
  ``β·S·(a + g)·d`` (*tp*), besides the normalised Q and K.
* Post-norms (Gemma 2/3's norm after the attention and after the FFN): each keeps its input,
  ``β·S·h`` (*sp*).
* MoE FFN (top-k routing, SwiGLU experts): the norm input, the router/dispatch input ``[S, h]``,
  the router's fp32 probabilities ``[S, E]`` (4 B), and per routed copy of a token (k of them):
  the expert input ``[S, h]``, the activation input ``2·[S, f_e]``, the down-projection input
  ``[S, f_e]`` and the expert output ``[S, h]`` kept for the weighted combine
  (``combine_output_bytes`` per element: β in the paper's count, none in Megatron-Core, which
  weights inside the expert activation and keeps the fp32 weights ``4·k·S`` instead, fp32 in
  torchtitan); shared experts as
  a dense SwiGLU of ``n_shared · f_shared``. Expert tensors are counted sequence-sharded, as with
  expert tensor-parallel degree 1 or an all-to-all over tp·ep; with etp > 1 (``expert_tp``) the
  experts' input holds the tokens the etp group all-gathered, ``k·β·S·h·etp/tp`` (the
  activation's and the down projection's inputs, ``[k·S·etp/tp, f_e/etp]``, are unchanged).
  DeepSpeed's native MoE (``deepspeed_gate``) saves its router's FP32 input ``4·S·h`` instead
  of the BF16 one, the FP32 gate weight and its gating function's own routing tensors
  (:func:`model.moe_working_set.deepspeed_gate_rows`).
  The ``k`` routed copies are the balanced dropless count; under a capacity padded to, or
  expert load imbalance (``moe_run``), the tensors on the experts' side (their input, the
  activation's input and output, the down projection's input, the weights kept by the weighted
  activation) hold the busiest expert-parallel rank's received rows and those on the source side
  (the outputs kept for the combine, the permutation indices) the rows the rank sends
  (:meth:`ActivationContext.routed_row_factors`, :func:`model.moe_rows.row_factors`).
* Context parallelism (:mod:`model.context_parallel`): every flavour keeps the local tensors
  above, of ``S = (s/cp)·b`` tokens — the ring keeps the last K/V chunk it received instead of
  its own (the same bytes), Ulysses its Q, K, V after the all-to-all (s tokens of a/cp heads:
  the same bytes) and the output after the all-to-all back, which is the output projection's
  input. Every head all-to-all flavour (Ulysses, verl's, the hybrid) keeps the output twice:
  the attention core keeps its own output before the all-to-all back as well, ``[S, a·d]``
  (*tp*; recomputed with the attention core under selective recomputation;
  :data:`model.activation_rows.PRE_A2A_OUTPUT`, read from Transformer Engine's, DeepSpeed's and
  verl's code). The all-gather flavour (Transformer Engine ``AttnFuncWithCPAndKVAllGather``) also
  keeps the attention output of each of its two query chunks apart from the merged output the
  projection keeps: ``[S, a·d]`` (*tp*; recomputed with the attention core under selective
  recomputation). verl's Ulysses (``ulysses-kv-repeat``) keeps the K/V heads it repeated
  before the all-to-all: (r − 1) more copies of the local K and V, r =
  :func:`model.context_parallel.kv_repeat`. The buffers the exchange holds while a layer runs
  are a transient (:func:`model.context_parallel.cp_transient_bytes`).
* MLA (DeepSeek-V3): both norm inputs ``[S, h]`` and the shared projection input ``[S, h]``, the
  query latent before and after its RMSNorm ``2·[S, q_lora]``, the KV latent with the RoPE key
  ``[S, kv_lora + rope]`` and normalised ``[S, kv_lora]`` (all *sp*); Q and K
  ``[S, a·(nope+rope)]`` each, V and the output-projection input ``[S, a·v_head]`` (*tp*).

Tensor parallelism through PyTorch DTensor (``ActivationContext.gathered_block_inputs``; the
``fsdp2`` profile, torchtitan's plan in ``torchtitan/models/common/decoder_sharding.py``): the
norms are ``SequenceParallel`` and keep their sequence-sharded inputs (*sp*), but the attention
and MLP blocks redistribute their input from the sequence shard to ``Replicate`` before the
column-parallel projections, and autograd keeps that all-gathered tensor: the QKV and FC1 inputs
``[S, h]`` are whole on every tp rank (Megatron-Core's ``LinearWithGradAccumulationAndAsync
Communication.forward`` in ``megatron/core/tensor_parallel/layers.py`` saves the shard and
all-gathers it again in backward). MLA's latents run replicated on the gathered tokens; a MoE
layer with ep = 1 routes the gathered tokens (:data:`model.activation_rows.MOE_ROUTING_ROWS`), with ep > 1 the
sequence shard, its shared experts gathering their own input. Measured on CPU through DTensor
on a gloo group (``tests/fidelity/test_tp_dtensor.py``).

Conventions (``ActivationContext.convention``, from ``TrainingSpec.activation_convention``):
``paper`` (the default) is the count above. ``pytorch`` adds, as named terms, what PyTorch's
kernels keep besides, measured on real layers in ``tests/fidelity`` (docs/fidelity-layers.md):
norm statistics in fp32 per token (LayerNorm mean and rstd ``8·S``, RMSNorm rstd ``4·S``, per
norm, *sp*); FlashAttention's logsumexp ``4·a·S`` (*tp*; a score term, so selective
recomputation drops it); RoPE's cos and sin tables ``2·β·(s/cp)·d`` (not sharded); eager
SwiGLU's SiLU output ``β·S·f`` (*tp*); for MoE, the top-k indices ``8·k·S``, the permutation's
two int64 index vectors ``16·k·S`` and the routing weights ``β·k·S`` (*sp*).

Memory-efficient norms: :data:`model.activation_rows.NORM_INPUTS`.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

from trainplan.model.activation_rows import (
    NORM_INPUTS,
    attention_rows,
    fp8_rows,
    gathered_rows,
    mlp_rows,
)
from trainplan.model.context_parallel import CpKind
from trainplan.model.eager_saved import eager_rows
from trainplan.model.errors import InputError
from trainplan.model.moe_rows import row_factors
from trainplan.model.moe_run import DROPLESS, MoERun
from trainplan.model.op_checkpoint import op_selective_bytes
from trainplan.model.precision import FP8_ACTIVATION_BYTES
from trainplan.model.recompute_modules import recomputed_rows
from trainplan.model.saved_originals import mla_down_saves_original, shared_fc1_saves_original
from trainplan.model.specs import Architecture, AttentionKind

__all__ = [
    "CONVENTIONS",
    "ActivationContext",
    "LayerActivations",
    "layer_activations",
    "kind_activations",
]

CONVENTIONS = ("paper", "pytorch")
"""Activation conventions: ``paper`` (the default) and ``pytorch``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ActivationContext:
    """What the per-layer activation bytes depend on besides the architecture."""

    seq_len: int
    """s, full sequence length (keys each query meets)."""
    cp: int
    """Context-parallel degree; this rank holds s/cp queries."""
    micro_batch_size: int
    """b."""
    tp: int
    sequence_parallel: bool
    flash_attention: bool
    activation_bytes: int = 2
    """β, bytes per activation element."""
    convention: str = "paper"
    """``paper`` (Korthikanti's count, fused Megatron kernels) or ``pytorch`` (adds what PyTorch
    kernels keep besides: norm statistics, FlashAttention's logsumexp, SiLU's output, rotary
    tables, MoE routing indices; measured in ``tests/fidelity``)."""
    memory_efficient_norm: bool = False
    """Norms keep their output instead of their input (Apex ``memory_efficient=True``): no
    "attention norm input" / "MLP norm input" rows; a LayerNorm keeps fp32 rstd only."""
    fp8_linear_inputs: bool = False
    """The linear layers save their inputs in FP8 (``precision = fp8``, Transformer Engine):
    the rows of :data:`model.precision.FP8_LINEAR_INPUTS` hold 1 byte per element instead of
    β. With memory-efficient norms the norm keeps its BF16 output for itself, so the QKV and
    FC1 inputs stay at β and their FP8 copies are added."""
    fp8_input_bytes: Fraction = Fraction(FP8_ACTIVATION_BYTES)
    """Bytes per element of a linear layer's FP8-saved input with its scales
    (:func:`model.precision.fp8_activation_bytes` of the recipe: 1, MXFP8 1 + 1/32)."""
    mla_value_padded: bool = False
    """MLA's value is padded to the query's head dimension and the kernel's output kept apart
    from the output projection's input: Megatron-Core over packed documents (``thd``), the
    rows and their sources in :mod:`model.mla_thd`."""
    attention_output_copy: bool = False
    """The attention's output is kept twice at a micro-batch above one: Megatron-DeepSpeed's
    layer (the ``deepspeed`` profile; 6acc370a ``megatron/model/transformer.py``
    ``ParallelAttention.forward``) calls FlashAttention on ``[b, s, h, d]`` tensors, which saves
    its output for backward, then ``rearrange(context_layer, 'b s h d -> s b (h d)')
    .contiguous()``, a copy once b > 1, which the ``dense`` projection saves as its input."""
    te_linears: bool = False
    """The linear layers are Transformer Engine modules, each quantising its input with its own
    quantizer (``megatron``, ``deepspeed``: :attr:`model.frameworks.Framework.te_layers`): MLA's
    two down-projections keep two FP8 copies of one input
    (:data:`model.activation_rows.MLA_SECOND_DOWN_PROJECTION`)."""
    fp8_proj_saves_original: bool = False
    """The attention's output projection saves its BF16 input, not an FP8 copy: Megatron-Core
    under an FP8 recipe other than ``delayed`` (Megatron-LM d98e8a64dd
    ``megatron/core/transformer/attention.py`` ``Attention.__init__`` and
    ``multi_latent_attention.py`` ``MultiLatentAttention.__init__``: ``set_save_original_input
    (self.linear_proj)`` when ``fp8_recipe != 'delayed'`` and Transformer Engine ≥ 2.6, "the
    output of the fused core_attn is saved by itself")."""
    fp8_expert_fc1_saves_original: bool = False
    """The routed experts' FC1 saves its BF16 input, not an FP8 copy: Megatron-Core with the
    ``expert_fc1`` activation offload under an FP8 recipe other than MXFP8 (Megatron-LM
    d98e8a64dd ``megatron/core/transformer/moe/experts.py`` ``TEGroupedMLP.__init__``, l. 280–284:
    ``set_save_original_input(self.linear_fc1)`` when ``offload_expert_fc1`` and not MXFP8 or
    NVFP4, "to avoid the CPU overhead of multiple d2h copies"; Transformer Engine's
    ``_GroupedLinear.forward`` then saves the input as given and quantises it again in
    backward), so the row "routed expert inputs (top-k copies)" stays at β bytes an element, on
    the GPU and on the host."""
    cp_kind: CpKind = CpKind.RING
    """How the cp ranks exchange attention's inputs (:mod:`model.context_parallel`); with cp > 1
    the all-gather flavour keeps one more tensor (the module docstring)."""
    offload_modules: tuple[str, ...] = ()
    """Megatron-Core modules whose saved tensors go to the host (:mod:`model.activation_offload`):
    :func:`layer_activations` still lists every tensor; :func:`model.stage_bytes.layer_quantities`
    leaves the offloaded ones off the GPU's per-layer figures."""
    gathered_block_inputs: bool = False
    """The tensor-parallel plan all-gathers the sequence-parallel shard into a tensor replicated
    over the tp ranks at the attention and MLP blocks' inputs, and the projections save that
    whole tensor (PyTorch DTensor ``PrepareModuleInput(desired_input_layouts=Replicate())``
    ahead of ``ColwiseParallel``, torchtitan's plan; the ``fsdp2`` profile): the rows of
    :func:`model.activation_rows.gathered_rows` are not divided by tp. Megatron-Core's linear layers save the shard
    and gather it again in backward (Korthikanti's count, False)."""
    expert_tp: int = 1
    """Expert tensor-parallel degree whose group all-gathers the routed tokens before the
    experts (Megatron-Core ``MoEAlltoAllTokenDispatcher.token_dispatch``: after the all-to-all
    over ep, ``gather_from_sequence_parallel_region(global_input_tokens, group=self.tp_group)``
    over the expert-TP group): with sequence parallelism the experts' first linear layer keeps
    etp ranks' routed tokens, ``k·β·S·h·etp/tp``. 1 where the profile gathers none (the
    textbook's convention; ``fsdp2``, whose routed tokens follow ``gathered_block_inputs``)."""
    combine_output_bytes: int | None = None
    """Bytes per element of the routed experts' outputs the weighted combine keeps for the
    routing weights' gradient: None = β (an eager ``output · weight`` product, the paper
    convention); 0 where the weights are applied inside the expert activation and the combine
    is a plain un-permute (Megatron-Core: ``experts.py`` ``TEGroupedMLP.forward`` calls
    ``weighted_bias_swiglu_impl(..., permuted_probs)``, ``MoEAlltoAllTokenDispatcher.
    combine_postprocess`` calls ``unpermute`` without probs), which keeps the fp32 routing
    weights instead; 4 where the combine multiplies an fp32 copy (torchtitan
    ``token_dispatcher.py`` ``combine``: ``routed_output.to(torch.float32) * scores``)."""
    deepspeed_gate: bool = False
    """The MoE layers are DeepSpeed's native ones (the ``deepspeed`` profile): the router's
    saved input is its FP32 copy and the gate keeps its own routing tensors
    (:func:`model.moe_working_set.deepspeed_gate_rows`) instead of the BF16 "router and
    dispatch input"."""
    fp32_router_autocast: bool = False
    """The MoE router runs under an FP32 autocast (torchtitan's ``TokenChoiceTopKRouter``, the
    ``fsdp2`` profile): its saved input and weight are FP32 copies
    (:func:`model.moe_working_set.torchtitan_router_rows`)."""
    router_score_bytes: Fraction = Fraction(4)
    """Bytes per element of ``[S, E]`` the MoE router saves for backward (the row "router
    probabilities (fp32)"): 4, one FP32 ``[S, E]`` tensor (the softmax output the textbook's
    rows, DeepSpeed's gate and torchtitan's router keep); under ``megatron``
    :data:`model.moe_working_set.MEGATRON_ROUTER_SCORE_BYTES`."""
    permute_map_bytes: int = 0
    """Bytes per element of ``[S, 2E + 1]`` the MoE permutation saves for backward: 4 under
    ``megatron`` with the all-to-all dispatcher, whose fused permutation (``moe_permute_fusion``,
    set by Megatron Bridge's MoE recipes) is Transformer Engine's: ``moe_utils.permute(fused=True)``
    → ``transformer_engine/pytorch/permutation.py`` saves ``row_id_map``, an int32
    ``[num_tokens, 2·num_experts + 1]`` (``triton/permutation.py`` ``make_row_id_map``), which the
    unpermute reuses; 0 elsewhere (the flex dispatchers permute the received tokens by local
    expert: not counted)."""
    ep: int = 1
    """Expert-parallel degree (with ``gathered_block_inputs``: torchtitan routes a MoE layer's
    tokens on the gathered tensor when ep = 1 and on the sequence shard when ep > 1)."""
    moe_run: MoERun = DROPLESS
    """How the MoE layers route (:class:`model.moe_run.MoERun`): a capacity padded to, or the
    busiest expert-parallel rank's imbalance, sizes the routed rows (:meth:`routed_row_factors`).
    The default, dropless and balanced, keeps them at ``k·S``."""
    op_selective: bool = False
    """Selective recomputation is torchtitan's op-level policy (the ``fsdp2`` profile,
    :mod:`model.op_checkpoint`): a dense flash-attention layer keeps the block input, every other
    matmul output and the attention kernel's outputs, and ``selective_bytes`` is that sum;
    False is Korthikanti et al.'s (every tensor but the attention core's)."""
    recompute_modules: tuple[str, ...] = ("core_attn",)
    """Megatron-Core's ``--recompute-modules`` under selective recomputation
    (:mod:`model.recompute_modules`): ``selective_bytes`` leaves out the rows they drop. The
    default, the attention core, is Korthikanti's selective recomputation."""
    fp8_activation_storage: str = "linear_inputs"
    """With ``fp8_linear_inputs``: ``deepseek_v3`` keeps the attention output once in E5M6
    and the routed experts' SwiGLU input in FP8 (DeepSeek-V3 §3.3.3;
    :data:`model.precision.FP8_ACTIVATION_STORAGE`)."""
    every_norm: bool = False
    """``recompute_modules``' ``layernorm`` recomputes every norm of the layer, its output kept
    by no one (the ``textbook`` profile: a paper's "all RMSNorm operations", DeepSeek-V3
    §3.2.3); False: only the norms Megatron-Core's Transformer Engine spec builds as modules of
    their own (:func:`model.recompute_modules.recomputed_rows`)."""
    eager_elementwise: bool = False
    """torchtitan runs the elementwise passes eagerly (``fsdp2`` with ``compile`` false,
    :func:`model.elementwise.elementwise_mode`): autograd keeps what each eager operator saves
    (:func:`model.eager_saved.eager_rows`: the RMSNorms' FP32 copies, the repeated K and V,
    SiLU's output). False: fused kernels or Inductor, the paper's rows."""
    clamp_copies_glu_input: bool = False
    """A clamped gated activation (``Architecture.glu_clamp``) in the routed experts keeps its
    input twice, FC1's output (the clamps' saved inputs) and the concatenated clamped copy the
    activation function saves (Megatron-Core, the ``megatron`` profile:
    :data:`model.activation_rows.CLAMPED_GLU_COPY`). False: one ``[k·S, 2·f_e]`` tensor."""
    eager_swiglu: bool = False
    """The gated MLPs (dense, routed and shared experts) run SwiGLU op by op (Megatron-DeepSpeed,
    the ``deepspeed`` profile: deepspeedai/Megatron-DeepSpeed 4efb479d
    ``megatron/model/transformer.py`` ``ParallelMLP``, ``swiglu``: ``torch.chunk`` then
    ``F.silu(x[0]) * x[1]``; DeepSpeed's ``MoE`` copies the same ``ParallelMLP(moe=True)`` for
    every expert): ``silu`` keeps ``x[0]``, a view that holds FC1's whole ``[S, 2f/tp]``
    output, the product keeps SiLU's output and ``x[1]``, ``dense_4h_to_h`` the product: the
    paper's ``3·β·S·f/tp`` and SiLU's output ``β·S·f/tp`` (the row the ``pytorch`` convention
    adds, not added twice)."""
    unfused_glu: bool = False
    """A GeGLU MLP (dense, routed and shared experts) runs Megatron-Core's unfused ``glu``
    (``megatron``: Megatron-Core fuses no GELU-tanh gated activation,
    :mod:`model.unfused_glu`): GELU's output and ``up + glu_linear_offset`` kept beside the
    paper's rows, and the routed experts' product with their probabilities."""
    repeats_kv: bool = False
    """GQA attention keeps K and V repeated to every query head (Megatron-DeepSpeed, the
    ``deepspeed`` profile: :data:`model.activation_rows.REPEATED_KV`)."""
    saves_softmax_lse: bool = False
    """The flash attention kernel keeps its per-row softmax statistics for backward, FP32
    ``[b, a/tp, s/cp]``, ``4·a·S`` (÷ tp; :data:`model.activation_rows.SOFTMAX_LSE`, a score
    row), under the ``paper`` convention too: ``megatron`` (Transformer Engine d0067d0da
    ``attention/dot_product_attention/backends.py`` ``FusedAttnFunc.forward`` saves
    ``*aux_ctx_tensors``, which ``backward`` unpacks as ``softmax_lse, rng_state``;
    ``common/fused_attn/fused_attn_f16_arbitrary_seqlen.cu`` ``fused_attn_arbitrary_seqlen_fwd``
    gives ``output_S`` the shape ``{batch, num_attn_heads, max_seqlen_q, 1}`` in FP32; the
    context-parallel functions of ``context_parallel.py`` save the local queries' ``softmax_lse``,
    or the two query chunks' ``softmax_lse_per_step``, the same bytes) and ``deepspeed``
    (Megatron-DeepSpeed 4efb479d ``megatron/model/transformer.py`` ``FlashSelfAttention``
    calls flash-attn's ``flash_attn_varlen_func`` under ``--use-flash-attn-v2``;
    Dao-AILab/flash-attention 00530025 ``flash_attn/flash_attn_interface.py``
    ``FlashAttnVarlenFunc.forward`` saves ``softmax_lse``, FP32 ``(num_heads, total_q)``). The
    rng state (two int64) is not counted. ``fsdp2`` too, eager and compiled: torchtitan's SDPA
    (``_scaled_dot_product_flash_attention``, ``_efficient_attention`` or ``_cudnn_attention``)
    returns an FP32 ``[b, a/tp, s]`` log-sum-exp its backward reads (torch 2.13
    ``derivatives.yaml``), and Inductor's partitioner never recomputes SDPA
    (``torch/_functorch/partitioners.py`` ``should_ban_recomputation``: a compute-intensive
    op, :mod:`model.eager_saved`); its op-level policy keeps it among SDPA's outputs
    (:mod:`model.op_checkpoint`). False: ``textbook`` (the paper's rows)."""
    kernel_kv_repeated: bool = False
    """The attention kernel is given K and V repeated to every query head, so its backward
    returns dK and dV of ``a`` heads (:func:`model.attention_core.attention_core_step`):
    torchtitan's ``repeat_kv`` before SDPA (``fsdp2``; 9dec370 and 820504e, until ff0829c10)
    and Megatron-DeepSpeed's before FlashAttention (``deepspeed``, :attr:`repeats_kv`)."""
    fp8_gemms: bool = False
    """The linear layers run FP8 GEMMs (``precision = fp8``); with ``op_selective`` every GEMM
    output is kept (``aten._scaled_mm`` is in the save list, outside the every-other-mm count)."""
    saves_scaled_mm: bool = True
    """With ``op_selective`` and ``fp8_gemms``: the save list holds ``aten._scaled_mm`` (today's
    torchtitan); False: the list before torchtitan 114151ad4, which keeps no FP8 GEMM output
    (``TrainingSpec.sac_saves_scaled_mm``; :func:`model.op_checkpoint.op_selective_rows`)."""
    bias_dropout_masks: bool = False
    """Each residual add keeps a 1-byte mask of ``[S, h]`` (*sp*) whatever the dropout rate:
    Megatron-DeepSpeed's TorchScript bias-dropout-add (the ``deepspeed`` profile with
    ``TrainingSpec.bias_dropout_fusion``; :data:`model.activation_rows.BIAS_DROPOUT_MASKS`).
    False: a mask only where the model has dropout (``Architecture.dropout``)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "cp_kind", CpKind(self.cp_kind))
        if self.convention not in CONVENTIONS:
            raise InputError(
                f"activation_convention: {self.convention!r} is not one of {', '.join(CONVENTIONS)}"
            )

    @property
    def tokens(self) -> Fraction:
        """S = (s/cp)·b tokens on this rank per micro-batch."""
        return Fraction(self.seq_len, self.cp) * self.micro_batch_size

    def routed_row_factors(self, experts: int, top_k: int) -> tuple[Fraction, Fraction]:
        """(sent, received): the routed rows the source side and the busiest rank's experts
        hold, each ÷ ``k·S`` (:func:`model.moe_rows.row_factors` for ``S`` ÷ tp with sequence
        parallelism, as the clock routes them, this ep; DeepSpeed's native MoE,
        :attr:`deepspeed_gate`, pads both sides to ``E·C``); (1, 1) dropless and balanced."""
        local = self.tokens / (self.tp if self.sequence_parallel else 1)
        return row_factors(self.moe_run, local, experts, top_k, self.ep, self.deepspeed_gate)

    @property
    def fp8_shared_fc1_saves_original(self) -> bool:
        """The shared experts' FC1 saves its BF16 input (the pre-MLP norm's output, the tensor
        the router keeps), not an FP8 copy: Megatron-Core under the recipes other than
        ``delayed`` (:attr:`fp8_proj_saves_original`'s condition) unless ``shared_experts`` is
        recomputed (Megatron-LM d98e8a64dd ``moe/shared_experts.py`` ``SharedExpertMLP.__init__``,
        l. 151–161: ``set_save_original_input(self.linear_fc1)``, "the output of
        pre_mlp_layernorm is saved by router"; ``MoELayer.set_for_recompute_pre_mlp_layernorm``
        sets the same under ``layernorm``)."""
        return shared_fc1_saves_original(self.fp8_proj_saves_original, self.recompute_modules)

    @property
    def fp8_mla_down_saves_original(self) -> bool:
        """MLA's down-projections save their BF16 input (the attention norm's output, recomputed
        under ``layernorm``): Megatron-Core under the recipes other than ``delayed`` with the
        ``layernorm`` recompute module (``TransformerLayer.__init__``:
        ``self_attention.set_for_recompute_input_layernorm()`` under FP8, Megatron-LM d98e8a64dd
        ``multi_latent_attention.py`` l. 1114–1118; ``delayed`` with it is refused,
        :func:`model.recompute_modules.check_recompute_modules`)."""
        return mla_down_saves_original(self.fp8_proj_saves_original, self.recompute_modules)


@dataclass(frozen=True, slots=True)
class LayerActivations:
    """Bytes of one layer, per GPU, per micro-batch, by named tensor."""

    terms: tuple[tuple[str, Fraction], ...]
    """(tensor name, bytes) for everything kept with no recomputation."""
    score_names: frozenset[str]
    """The tensors the attention core makes and selective recomputation drops: the [b, a, s, s]
    score tensors (absent with FlashAttention), FlashAttention's statistics, the all-gather
    flavour's per-chunk outputs, the head all-to-all flavours' output before the all-to-all
    back."""
    checkpoint_bytes: Fraction
    """The layer input kept by full or √n recomputation: ``β·S·h`` (÷ tp with SP)."""
    full_bytes: Fraction
    """Everything the layer keeps without recomputation (the sum of ``terms``)."""
    selective_bytes: Fraction
    """Kept with selective recomputation (the attention-score tensors recomputed)."""
    input_bytes: Fraction
    """The layer's input among ``terms`` (the attention norm input, ``checkpoint_bytes``; 0 with
    memory-efficient norms): the storage a recomputation checkpoint shares with the layer."""


def _op_selective(arch: Architecture, moe: bool, ctx: ActivationContext) -> Fraction | None:
    """torchtitan's op-level selective bytes of a layer (:func:`model.op_checkpoint.
    op_selective_bytes`) under ``ctx.op_selective``; None otherwise, and where that policy's
    count does not apply (MoE or MLA layers, eager attention, tp without sequence parallelism):
    the caller keeps Korthikanti's count."""
    if not ctx.op_selective or (ctx.tp > 1 and not ctx.sequence_parallel):
        return None
    return op_selective_bytes(
        arch,
        ctx.tokens,
        ctx.tp,
        ctx.activation_bytes,
        ctx.fp8_gemms,
        moe,
        ctx.flash_attention,
        ctx.saves_scaled_mm,
    )


def layer_activations(arch: Architecture, index: int, ctx: ActivationContext) -> LayerActivations:
    """Activation bytes layer ``index`` keeps for backward, per GPU, per micro-batch.

    See the module docstring for every tensor, its shape and its source.

    Examples
    --------
    GPT-3 175B dimensions (s 2048, b 1, h 12288, a 96), tp 8 with sequence parallelism,
    no FlashAttention: Korthikanti's ``s·b·h/t·(34 + 5·a·s/h)``.

    >>> from trainplan.model.specs import Architecture
    >>> gpt3 = Architecture(num_layers=96, hidden_size=12288, num_attention_heads=96,
    ...     ffn_hidden_size=4 * 12288, vocab_size=51200, dropout=True)
    >>> ctx = ActivationContext(seq_len=2048, cp=1, micro_batch_size=1, tp=8,
    ...     sequence_parallel=True, flash_attention=False)
    >>> layer_activations(gpt3, 0, ctx).full_bytes == Fraction(2048 * 12288, 8) * (34 + 5 * 96 * 2048 / 12288)
    True
    """
    return kind_activations(arch, arch.is_moe_layer(index), ctx)


@lru_cache(maxsize=4096)
def kind_activations(arch: Architecture, moe: bool, ctx: ActivationContext) -> LayerActivations:
    """:func:`layer_activations` of the model's first dense (``moe`` False) or MoE layer: every
    layer of a kind keeps the same tensors (cached per kind and context)."""
    index = arch.kind_index(moe)
    assert index is not None, "no layer of this kind"
    rows = attention_rows(arch, ctx) + mlp_rows(arch, index, ctx)
    if ctx.eager_elementwise:
        rows = eager_rows(rows, arch, moe, ctx)
    if ctx.memory_efficient_norm:
        # the norm keeps its output, the next projection's input (the same storage)
        rows = [r for r in rows if r[0] not in NORM_INPUTS]
    if ctx.fp8_linear_inputs:
        rows = fp8_rows(rows, ctx)
    if ctx.gathered_block_inputs:
        rows = gathered_rows(rows, arch, ctx)
    sp = ctx.tp if ctx.sequence_parallel else 1
    tp_div = {"tp": ctx.tp, "score": ctx.tp, "sp": sp, "rep": 1, "gathered": 1}
    terms = tuple((name, Fraction(value) / tp_div[kind]) for name, value, kind in rows)
    scores = frozenset(name for name, _, kind in rows if kind == "score")
    ckpt = Fraction(ctx.activation_bytes) * ctx.tokens * arch.hidden_size / tp_div["sp"]
    full = sum((b for _, b in terms), Fraction(0))
    selective = _op_selective(arch, moe, ctx)
    if selective is None:
        mla = arch.attention is AttentionKind.MLA
        dropped = recomputed_rows(
            dict(terms), scores, ctx.recompute_modules, mla, moe, ctx.every_norm
        )
        selective = sum((b for n, b in terms if n not in dropped), Fraction(0))
    kept_input = ckpt if "attention norm input" in dict(terms) else Fraction(0)
    return LayerActivations(terms, scores, ckpt, full, selective, kept_input)
