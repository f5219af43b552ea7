"""The backward working set of one transformer layer: the transient tensors its backward holds
beside what stays saved, per GPU, for the micro-batch whose backward runs.

A layer's backward allocates tensors that live only while it runs: the incoming gradient of the
layer's output (held until the residual adds the block's gradient to it), the gradient a
row-parallel projection all-gathers over the sequence shard, the input gradient (dgrad) each
projection computes, the input a column-parallel projection all-gathers again for its weight
gradient, the activation's input gradient, the attention kernel's dQ, dK, dV and its workspace.
Meanwhile the layer's saved tensors are released as each operator's backward ends (autograd
frees a node's saved tensors after the node runs; Transformer Engine calls
``clear_tensor_data``). :func:`backward_working_bytes` is the largest, over the steps of the
layer's backward, of the transients live at that step less the layer's own saved tensors
released before it (:func:`model.activations.kind_activations`' rows, by name, as they are
kept: FP8 inputs at their FP8 bytes). Notation: ``S = (s/cp)·b`` tokens on this rank, β bytes
per element, ``n = β·S·h`` ÷ tp with sequence parallelism (the layer's output gradient),
``H = β·S·h`` (a whole hidden-state tensor), ``[sp]`` 1 with sequence parallelism at tp > 1.

Steps, in the order backward runs them (each gradient of a column-parallel projection's input
is whole, ``H``, before its reduce-scatter or all-reduce; with sequence parallelism the
reduce-scatter's output ``n`` is allocated while it is live):

* down projection (row-parallel): ``n + [sp]·H + β·S·f/tp`` — the gathered output gradient and
  the dgrad;
* activation: ``n + β·S·f/tp + u·β·S·f/tp`` (u = 2 for a gated MLP), less the down projection's
  input, released;
* up (gate) projection (column-parallel): ``n + u·β·S·f/tp + r·H + c·H + [sp]·n``, less the
  down projection's and the activation's inputs;
* output projection (row-parallel): ``n + [sp]·H + β·S·O/tp``;
* attention core: ``n + β·S·O/tp`` (dO) ``+ β·S·(Q + KV)/tp`` (dQ, dK, dV) plus the kernel's
  workspace (:func:`attention_backward_workspace`); dK, dV at ``a/g`` times KV where the
  framework repeats K and V before the kernel (:func:`model.attention_core.kernel_kv_repeat`);
* QKV projection (column-parallel): ``n + β·S·(Q + KV)/tp + r·H + c·H + [sp]·n``, less the
  output projection's input and Q, K, V.

Q, KV, O are :func:`model.context_parallel.attention_dims`; f the FFN width. ``r`` (the saved
sequence shard gathered again) and ``c`` (input gradients whole at once) are the profile's:

* ``megatron`` (Megatron-Core with Transformer Engine): ``r = [sp]``, ``c = 1``. Transformer
  Engine ``module/layernorm_linear.py`` ``_LayerNormLinear.backward``: ``gather_along_first_dim``
  of the saved ``ln_out`` (async), the dgrad GEMM's ``gemm_out`` ``[S, h]``, its
  ``reduce_scatter_along_first_dim`` (async), then the weight gradient from ``ln_out_total``, and
  only then ``clear_tensor_data(ln_out_total)``; ``module/linear.py`` ``_Linear.backward``: the
  row-parallel projection's ``grad_output`` gathered (``gather_along_first_dim``) for the dgrad
  and the weight gradient; the fused QKV and FC1 are one projection each. Megatron-Core's
  ``megatron/core/fusions/fused_bias_swiglu.py`` ``SwiGLUFunction.backward``: ``swiglu_back``
  returns one ``[S, 2f/tp]`` tensor.
* ``deepspeed`` (Megatron-DeepSpeed's layers): ``r = 0``, ``c = 1``. ``megatron/core/tensor_parallel/
  layers.py`` ``LinearWithGradAccumulationAndAsyncCommunication.backward`` gathers the saved
  input into ``get_global_memory_buffer()``'s ``"mpu"`` tensor, computes ``grad_input`` whole and
  reduce-scatters it into ``sub_grad_input`` while the weight gradient runs (Megatron-LM
  ``megatron/core/tensor_parallel/layers.py``, the same function, for Megatron-Core's local
  layers). That tensor is allocated once and never freed (``GlobalMemoryBuffer``): it is held in
  both phases (:func:`model.terms.persistent_buffers.persistent_buffers_term`), not in this
  working set.
* ``fsdp2`` (torchtitan, plain autograd on DTensor): ``r = 0`` (the block input is kept
  all-gathered, :attr:`model.activations.ActivationContext.gathered_block_inputs`), ``c = 2``:
  the projections are separate modules (``torchtitan/models/common/attention.py``
  ``xq, xk, xv = self.wq(x), self.wk(x), self.wv(x)``; ``feed_forward.py`` ``w1``, ``w3``), so
  autograd's input buffer holds the accumulated gradient of the shared input while the next
  projection's dgrad is made.
* ``textbook``: 0. The reference profile is Korthikanti et al.'s steady-state count (the
  conventions' activation formula); a working set is no part of it.

FP8 under ``fsdp2`` (torchao's ``Float8Linear``): each projection's step also holds the casts
its backward makes of ``grad_output``, the weight and the saved BF16 input
(:func:`torchao_fp8_casts`). FP8 under ``megatron`` (Transformer Engine's layers, which save
their inputs in FP8 already: the activations' rows): each projection's step holds the FP8
copies its backward makes (:mod:`model.te_fp8_backward`, per element ``both``, ``shard``,
``saved_input``, ``interleaved``): a column-parallel projection's ``grad_output`` quantised
for both usages beside the BF16 one, ``both·S·N/tp``, and its saved input gathered again in
FP8, ``(saved_input + interleaved)·S·h`` in place of ``H``; a row-parallel projection's
``grad_output`` quantised (and, with sequence parallelism, gathered in FP8), ``both·S·h`` in
place of the BF16 gather, with the gather's quantised shard and blockwise temporaries
(``shard·S·h/tp + interleaved·S·h``) before its dgrad exists; the routed experts' down and
up projections ``both`` per element of their ``grad_output`` (``_GroupedLinear.backward``).
The layer's FP8 rows are released under their FP8 names. ``deepspeed``'s FP8 layer is
Transformer Engine's ``TransformerLayer`` (Megatron-DeepSpeed ``megatron/model/transformer.py``
``ParallelTransformer.build_layer``; pp 1 only, :func:`model.deepspeed_fp8.check_deepspeed_fp8`):
its ``LayerNormLinear`` and ``Linear`` take the same copies, which gather the saved input again
under sequence parallelism (Megatron-DeepSpeed's ``"mpu"`` buffer is its own layers'), and its
``LayerNormMLP`` runs FC2's and FC1's backward in one function, so the FC1 step also holds what
FC2's left alive (:func:`model.deepspeed_backward.layernorm_mlp_held`). Counted at that
step beside the BF16 activation gradient, which ``LayerNormMLP`` quantises and drops before
the FC1 dgrad exists: conservative by at most the smaller of the two.

MoE layers: the routed experts' steps with ``R = k·S·etp`` ÷ tp (with SP) rows in place of
``S``, no tensor-parallel gather (the experts' own token exchange is the dispatcher's): the
expert output gradient ``[R, h]`` with the down projection's dgrad, the activation, the up
projection's ``[R, h]`` dgrad; then the dispatch's backward holds a second ``[R, h]`` (the
all-to-all's output beside its input); shared experts as a dense MLP of their width.

Under a split-backward schedule run by PyTorch's pipelining (``fsdp2``'s ZB-V and DualPipeV,
the only split schedules a framework profile here runs, :data:`model.schedule_support.
SCHEDULE_SUPPORT`), the input-gradient pass keeps every saved tensor: pytorch/pytorch 00722e6
``torch/distributed/pipelining/_backward.py`` ``stage_backward_input`` calls
``torch.autograd.grad(..., retain_graph=True)``, so no node's saved tensors are freed while it
runs (they go with the weight pass, ``stage_backward_weight``). ``retained`` then subtracts
nothing: each step holds its transients beside the whole layer. (Megatron-Core runs no split
schedule, :mod:`model.schedule_support`; the ``textbook`` profile counts no working set.)

Under ``deepspeed`` each projection's step also holds the weight gradient the projection
returns (Megatron-DeepSpeed ``megatron/core/tensor_parallel/layers.py``,
``grad_output.t().matmul(total_input)``, no fused accumulation), which autograd adds into the
kept ``param.grad`` (``PipelineEngine._exec_backward_pass`` zeroes, not frees, it: ``BF16_Optimizer.
clear_lp_grads``): one weight of the projection per GPU (:func:`model.deepspeed_backward.deepspeed_weight_grads`).

Not counted: the weight gradients kept for the step (the state term's), cuDNN's backward
workspace (its size is the cuDNN graph's, ``mha_graph->get_workspace_size()`` in Transformer
Engine ``common/fused_attn/fused_attn_f16_arbitrary_seqlen.cu``, with no published formula),
the gradient of a norm's input (``n``, below every step's other tensors); RoPE's backward
copies (Transformer Engine ``attention/rope.py`` ``FusedRoPEFunc`` saves only its frequencies,
and its backward's ``grad_input``, one Q- or K-sized tensor beside dQ, dK, dV between the
attention core's step and the QKV step, stays below the QKV step's two whole ``H``).
"""

from __future__ import annotations

from fractions import Fraction
from functools import lru_cache

from trainplan.model.activation_rows import FP8_KEPT_ATTENTION_OUTPUT
from trainplan.model.activations import ActivationContext, kind_activations
from trainplan.model.arch_parts import Mlp
from trainplan.model.attention_core import attention_core_step, mla_down_step
from trainplan.model.context_parallel import attention_dims
from trainplan.model.deepspeed_backward import deepspeed_weight_grads, layernorm_mlp_held
from trainplan.model.frameworks import Framework
from trainplan.model.pipeline import SPLIT_BACKWARD, Schedule
from trainplan.model.specs import Architecture
from trainplan.model.te_fp8_backward import TeFp8Backward
from trainplan.model.torchao_backward import fp8_cast_steps, torchao_fp8_casts

__all__ = [
    "backward_working_bytes",
    "input_pass_retains",
    "shared_fc1_requant",
    "torchao_fp8_casts",
]


def input_pass_retains(schedule: Schedule | str) -> bool:
    """Whether the schedule's input-gradient pass keeps every saved tensor until the weight pass
    (``retained`` of :func:`backward_working_bytes`): the split-backward schedules
    (:data:`model.pipeline.SPLIT_BACKWARD`), as PyTorch's pipelining runs ZB-V and DualPipeV
    (``_backward.py`` ``stage_backward_input``: ``autograd.grad(retain_graph=True)``; module
    docstring). DualPipeV's full backwards (``FULL_BACKWARD`` in ``ScheduleDualPipeV``'s steps 4
    to 6, ``stage_backward``) release as usual, but its ``BACKWARD_INPUT`` passes (step 3 on the
    last stage, the second half of steps 6 and 7) run on every rank, and the peak counts the
    larger.

    >>> input_pass_retains("zb-v"), input_pass_retains("dualpipev"), input_pass_retains("1f1b")
    (True, True, False)
    """
    return Schedule(str(schedule)) in SPLIT_BACKWARD


def _row_step(
    ctx: ActivationContext, te: TeFp8Backward, n: Fraction, elements: Fraction, dgrad: Fraction,
    requant: Fraction = Fraction(0),
) -> Fraction:  # fmt: skip
    """A row-parallel projection's step (the output or the down projection) under Transformer
    Engine FP8 (:mod:`model.te_fp8_backward`), for ``n`` the layer's output gradient (the BF16
    ``grad_output``), ``elements`` = ``S·h`` and ``dgrad`` its input gradient's bytes. With
    sequence parallelism at tp > 1 the gather (``grad_output_preprocess``, synchronous) holds
    the quantised shard ``shard·S·h/tp``, the gathered ``both·S·h`` and the blockwise
    temporaries, then the dgrad GEMM the gathered tensor and the dgrad; without, the whole
    ``grad_output`` quantised, ``both·S·h``, beside the dgrad. ``requant``: a saved BF16 input
    quantised again for the weight gradient (:func:`_attention`), made after the gather and
    before the dgrad GEMM, freed after the wgrad: beside the dgrad."""
    gathered = te.both * elements
    if not (ctx.sequence_parallel and ctx.tp > 1):
        return n + gathered + dgrad + requant
    temporaries = te.shard * elements / ctx.tp + (te.interleaved + te.interleaved_scales) * elements
    return n + gathered + max(temporaries, dgrad + requant)


def _column_extra(
    te: TeFp8Backward, elements: Fraction, out_elements: Fraction, regather: int, H: Fraction
) -> Fraction:
    """What a column-parallel projection's step (QKV, FC1) holds under Transformer Engine FP8
    beyond its BF16 count: the ``grad_output`` of ``out_elements`` (``S·N/tp``) quantised for
    both usages, and, where the saved input is gathered again (``regather``), that input in FP8
    (``saved_input`` and the blockwise temporary per element of ``elements`` = ``S·h``: the
    asynchronous gather is finished only before the weight gradient) in place of the BF16
    ``H``."""
    gathered = (te.saved_input + te.interleaved) * elements
    return te.both * out_elements + regather * (gathered - H)


Pairs = tuple[tuple[Fraction, Fraction], tuple[Fraction, Fraction]]


def _step_additions(
    ctx: ActivationContext, arch: Architecture, framework: Framework, ffn: int,
    te: TeFp8Backward | None = None,
) -> Pairs:  # fmt: skip
    """((attention row, column), (MLP row, column)): what each projection's step holds beyond
    the BF16 count, :func:`model.torchao_backward.fp8_cast_steps` plus
    :func:`model.deepspeed_backward.deepspeed_weight_grads`, and under
    ``deepspeed`` with Transformer Engine's FP8 (``te``) what ``LayerNormMLP`` still holds at
    its FC1 step (:func:`model.deepspeed_backward.layernorm_mlp_held`)."""
    a = fp8_cast_steps(ctx, arch, framework, ffn)
    b = deepspeed_weight_grads(ctx, arch, framework, ffn)
    held = layernorm_mlp_held(ctx, arch, te, ffn) if te and framework is Framework.DEEPSPEED else 0
    return (a[0][0] + b[0][0], a[0][1] + b[0][1]), (a[1][0] + b[1][0], a[1][1] + b[1][1] + held)


def _plan(framework: Framework, ctx: ActivationContext) -> tuple[int, int]:
    """(r, c) of the module docstring: whether the column-parallel projections gather their
    saved input again, and how many whole input gradients they hold at once."""
    sp = ctx.sequence_parallel and ctx.tp > 1
    # the "mpu" buffer (held in both phases) under Megatron-DeepSpeed's own layers; its FP8
    # layer is Transformer Engine's, which gathers the saved input again like Megatron-Core's
    persistent = framework is Framework.DEEPSPEED and not ctx.fp8_gemms
    regather = 1 if sp and not ctx.gathered_block_inputs and not persistent else 0
    return regather, 2 if framework is Framework.FSDP2 else 1


def _released(rows: dict[str, Fraction], *names: str) -> Fraction:
    """The bytes of the named rows the layer keeps, each in whatever form it is kept (the
    name, or the name with its form in parentheses: ``"MLP down projection input (FP8)"``,
    :func:`model.activation_rows.fp8_rows`); 0 for a row it does not keep; ``rows`` empty where
    the pass releases none, ``retained``."""
    return sum(
        (v for k, v in rows.items() if any(k == n or k.startswith(f"{n} (") for n in names)),
        Fraction(0),
    )


def _mlp_names(arch: Architecture, prefix: str) -> tuple[str, str]:
    """(the activation's input, the down projection's input): the names
    :mod:`model.activation_rows` gives the rows of an MLP ``prefix``."""
    if arch.mlp.gated:
        unit = "SwiGLU" if arch.mlp is Mlp.SWIGLU else "GeGLU"
        return f"{prefix} {unit} input (gate, up)", f"{prefix} down projection input"
    return f"{prefix} GeLU input", f"{prefix} FC2 input"


def shared_fc1_requant(ctx: ActivationContext, te: TeFp8Backward | None, h: int) -> Fraction:
    """Bytes of the shared experts' FC1 input quantised again in its backward where FC1 saved
    the BF16 input (``ActivationContext.fp8_shared_fc1_saves_original``), for the weight
    gradient: Transformer Engine d0067d0da ``module/linear.py`` ``_Linear.backward``, the
    ``requires_wgrad`` and FP8 block, before the dgrad GEMM: the quantizer set row-wise only
    where the input is gathered again and ``supports_only_rowwise_all_gather`` (tensorwise),
    else column-wise (blockwise, MXFP8), or both usages without a gather (tensorwise); the
    quantised tensor (``inputmat``) lives until the function returns. With sequence parallelism
    at tp > 1 that is the local shard, ``min(shard, saved_input)·S·h/tp`` (the FP8 gather that
    follows is :func:`_column_extra`'s, as for a saved FP8 input), else ``saved_input·S·h``."""
    if te is None or not ctx.fp8_shared_fc1_saves_original:
        return Fraction(0)
    if ctx.sequence_parallel and ctx.tp > 1:
        return min(te.shard, te.saved_input) * ctx.tokens * h / ctx.tp
    return te.saved_input * ctx.tokens * h


def _dense_mlp(
    ctx: ActivationContext, arch: Architecture, ffn: int, prefix: str, rows: dict[str, Fraction],
    plan: tuple[int, int], casts: tuple[Fraction, Fraction] = (Fraction(0), Fraction(0)),
    te: TeFp8Backward | None = None, requant: Fraction = Fraction(0),
) -> Fraction:  # fmt: skip
    """The dense MLP's steps (down projection, activation, up projection), their largest; the
    projections' steps with their FP8 ``casts`` (:func:`model.torchao_backward.fp8_cast_steps`),
    or Transformer Engine's FP8 copies under ``te`` (:func:`_row_step`, :func:`_column_extra`) and, at the up
    projection's, a saved BF16 input quantised again (``requant``, :func:`shared_fc1_requant`)."""
    beta, S, tp, h = ctx.activation_bytes, ctx.tokens, ctx.tp, arch.hidden_size
    sp = 1 if ctx.sequence_parallel and tp > 1 else 0
    n, H, f = beta * S * h / (tp if sp else 1), beta * S * h, beta * S * Fraction(ffn, tp)
    u = 2 if arch.mlp.gated else 1
    names = _mlp_names(arch, prefix)
    down = _released(rows, names[1])
    both = _released(rows, *names)
    r, c = plan
    up = n + u * f + r * H + c * H + sp * n - both + casts[1]
    return max(
        _row_step(ctx, te, n, S * h, f) if te else n + sp * H + f + casts[0],
        n + f + u * f - down,
        up + _column_extra(te, S * h, u * f / beta, r, H) + requant if te else up,
    )


def _routed_experts(
    ctx: ActivationContext, arch: Architecture, rows: dict[str, Fraction],
    te: TeFp8Backward | None = None, fc2_requant: bool = False,
) -> Fraction:  # fmt: skip
    """The routed experts' steps (module docstring), their largest; under ``te`` the down and
    up projections' steps also hold Transformer Engine's FP8 copies of their ``grad_output``
    (``_GroupedLinear.backward``, :mod:`model.te_fp8_backward`): ``both`` per element of the
    ``[R, h]`` and ``[R, u·f_e]`` gradients; and where FC1 saved its BF16 input (the
    ``expert_fc1`` offload: ``ActivationContext.fp8_expert_fc1_saves_original``) the up
    projection's step holds that input quantised again for the weight gradient,
    ``saved_input`` per element of ``[R, h]``: Transformer Engine d0067d0da
    ``module/grouped_linear.py`` ``_GroupedLinear.backward``, after the dgrad GEMM, ``if
    ctx.save_original_input``: ``_split_quantize`` of the reloaded input with the input
    quantizers set to both usages (``Float8CurrentScalingQuantizer``, tensorwise: the row-wise
    data and, where kept, its transpose) or the column-wise one (blockwise), freed by
    ``clear_tensor_data(*inputmats)`` after the wgrad GEMM (Megatron-Core's default
    ``moe_use_grouped_tensor = False`` takes this path). FC2 under ``fc2_requant`` (it saved its
    BF16 input: the ``moe_act`` recompute module) by the same rule at its down step, per element
    of ``[R, f_e/etp]``, made after its dgrad and freed after its wgrad GEMM. ``R``: the busiest
    rank's rows (``routed_row_factors``: ``k·S`` dropless and balanced, model.moe_rows.row_factors)."""
    moe = arch.moe
    assert moe is not None
    beta, S, h = ctx.activation_bytes, ctx.tokens, arch.hidden_size
    div = ctx.tp if ctx.sequence_parallel else 1
    gathered = ctx.expert_tp if ctx.sequence_parallel else 1
    k = moe.experts_per_token * ctx.routed_row_factors(moe.num_experts, moe.experts_per_token)[1]
    n = beta * S * h / div
    rh = k * beta * S * h * gathered / div
    rf = k * beta * S * moe.expert_ffn_hidden_size / div
    u = 2 if arch.mlp.gated else 1
    names = _mlp_names(arch, "routed expert")
    down = _released(rows, names[1])
    both = _released(rows, *names)
    q8 = te.both / beta if te else 0
    requant = te.saved_input / beta * rh if te and ctx.fp8_expert_fc1_saves_original else 0
    requant2 = te.saved_input / beta * rf if te and fc2_requant else 0
    return max(
        n + rh + rf + q8 * rh + requant2,
        n + rf + u * rf - down,
        n + u * rf + rh - both + q8 * u * rf + requant,
        n + 2 * rh - both,
    )


MLA_LATENT_ROWS = ("query latent", "query latent norm output", "kv latent with rope key",
                   "kv latent norm output")  # fmt: skip
"""MLA's rows released before its down-projections' step (the up-projections' inputs and the
latent norms' inputs: :func:`model.attention_core.mla_down_step`)."""


def _attention(
    ctx: ActivationContext, arch: Architecture, kernel: str | None, rows: dict[str, Fraction],
    plan: tuple[int, int], casts: tuple[Fraction, Fraction] = (Fraction(0), Fraction(0)),
    te: TeFp8Backward | None = None,
) -> Fraction:  # fmt: skip
    """The attention block's steps (output projection, core: :func:`attention_core_step`, QKV
    projection), their largest; the projections' steps with their FP8 ``casts``
    (:func:`model.torchao_backward.fp8_cast_steps`), or Transformer Engine's FP8 copies under
    ``te`` (:func:`_row_step`, :func:`_column_extra`). Where the output projection saved its BF16 input
    (``ActivationContext.fp8_proj_saves_original``) its step also holds that input quantised
    again, ``saved_input`` per element of ``[S, O/tp]``: Transformer Engine d0067d0da
    ``module/linear.py`` ``_Linear.backward``, after ``grad_output_preprocess``, ``if
    bwd_args.requires_wgrad`` and FP8: the input quantizer set to both usages where it
    ``supports_only_rowwise_all_gather`` (``Float8CurrentScalingQuantizer``, tensorwise; a
    row-parallel input is not gathered) or the column-wise one (blockwise, MXFP8), freed by
    ``clear_tensor_data(inputmat_total)`` after the wgrad GEMM."""
    beta, S, tp, h = ctx.activation_bytes, ctx.tokens, ctx.tp, arch.hidden_size
    sp = 1 if ctx.sequence_parallel and tp > 1 else 0
    n, H = beta * S * h / (tp if sp else 1), beta * S * h
    q, kv, o = (beta * S * Fraction(x, tp) for x in attention_dims(arch))
    r, c = plan
    # the attention output: one tensor in BF16; under FP8 the projection's FP8 copy and the
    # BF16 output the attention kernel keeps (model.activation_rows.fp8_rows), both released
    qkv = ("Q", "K", "V", "output projection input", FP8_KEPT_ATTENTION_OUTPUT)
    released = _released(rows, *qkv)
    qkv_step = n + q + kv + r * H + c * H + sp * n - released + casts[1]
    requant = te.saved_input * o / beta if te and ctx.fp8_proj_saves_original else Fraction(0)
    latents = _released(rows, *MLA_LATENT_ROWS)
    return max(
        _row_step(ctx, te, n, S * h, o, requant) if te else n + sp * H + o + casts[0],
        attention_core_step(ctx, arch, kernel),
        qkv_step + _column_extra(te, S * h, (q + kv) / beta, r, H) if te else qkv_step,
        mla_down_step(ctx, arch, te, released + latents),
    )


def _shared_experts(
    ctx: ActivationContext, arch: Architecture, framework: Framework, rows: dict[str, Fraction],
    plan: tuple[int, int], te: TeFp8Backward | None,
) -> Fraction:  # fmt: skip
    """The shared experts' steps: a dense MLP of their width (:func:`_dense_mlp`), FC1's step
    with its saved BF16 input quantised again (:func:`shared_fc1_requant`)."""
    assert arch.moe is not None
    ffn = arch.moe.num_shared_experts * arch.moe.shared_ffn
    casts = _step_additions(ctx, arch, framework, ffn)[1]
    requant = shared_fc1_requant(ctx, te, arch.hidden_size)
    return _dense_mlp(ctx, arch, ffn, "shared expert", rows, plan, casts, te, requant)


@lru_cache(maxsize=4096)
def backward_working_bytes(
    arch: Architecture,
    moe: bool,
    ctx: ActivationContext,
    framework: Framework | str,
    kernel: str | None = None,
    retained: bool = False,
    te_fp8: TeFp8Backward | None = None,
    fc2_requant: bool = False,
) -> Fraction:
    """Bytes per GPU the backward of one layer of the kind ``moe`` holds beyond the saved
    activations, for one micro-batch, at its largest step (module docstring), with the
    attention ``kernel`` (:data:`model.attention_rates.ATTENTION_KERNELS`; None: outputs only);
    ``retained``: the pass keeps the layer's saved tensors (PyTorch's input-gradient pass,
    ``retain_graph=True``: nothing released, module docstring); ``te_fp8``: Transformer
    Engine's FP8 copies (:mod:`model.te_fp8_backward`, read under ``megatron`` and ``deepspeed``
    with FP8 GEMMs); ``fc2_requant``: the routed experts' FC2 saved its BF16 input
    (:func:`model.expert_saved_inputs.expert_fc2_saves_original`). 0 under ``textbook``. Exact.

    Examples
    --------
    Llama 3 70B, s 8,192, b 1, tp 8 with sequence parallelism under Megatron-Core: the QKV
    projection's backward holds the layer's output gradient ``n`` (16.8 MB), dQ, dK, dV
    (``2·8,192·(8,192 + 2·1,024)/8``, 21.0 MB), the re-gathered norm output and the dgrad
    (134.2 MB each) and the reduce-scatter's output (16.8 MB), less Q, K, V and the output
    projection's input, released (16.8 + 2.1 + 2.1 + 16.8 MB): 285.2 MB. (The FC1 projection's
    step: 16.8 + 117.4 + 2·134.2 + 16.8 − 58.7 − 117.4 = 243.3 MB.)

    >>> from trainplan.scenarios.catalogue import get_model
    >>> ctx = ActivationContext(seq_len=8192, cp=1, micro_batch_size=1, tp=8,
    ...     sequence_parallel=True, flash_attention=True)
    >>> llama = get_model("llama3-70b").model.arch
    >>> int(backward_working_bytes(llama, False, ctx, "megatron", "cudnn"))
    285212672

    Nothing released (an input-gradient pass that retains the graph): the FC1 step,
    ``16.8 + 117.4 + 2·134.2 + 16.8 = 419.4 MB`` (243.3 MB plus the down projection's and the
    SwiGLU's inputs, 58.7 + 117.4 MB, no longer released), above the QKV step's 285.2 + 37.7.

    >>> int(backward_working_bytes(llama, False, ctx, "megatron", "cudnn", retained=True))
    419430400
    """
    framework = Framework(framework)
    if framework is Framework.TEXTBOOK:
        return Fraction(0)
    rows = {} if retained else dict(kind_activations(arch, moe, ctx).terms)
    plan = _plan(framework, ctx)
    te = te_fp8 if framework.te_layers and ctx.fp8_gemms else None
    att_casts, mlp_casts = _step_additions(ctx, arch, framework, arch.ffn_hidden_size, te)
    att = _attention(ctx, arch, kernel, rows, plan, att_casts, te)
    if not moe:
        mlp = _dense_mlp(ctx, arch, arch.ffn_hidden_size, "MLP", rows, plan, mlp_casts, te)
        return max(att, mlp)
    assert arch.moe is not None
    mlp = _routed_experts(ctx, arch, rows, te, fc2_requant)
    if arch.moe.num_shared_experts:
        mlp = max(mlp, _shared_experts(ctx, arch, framework, rows, plan, te))
    return max(att, mlp)
