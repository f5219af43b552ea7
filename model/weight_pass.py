"""The output gradients a split backward keeps for its weight pass.

Under a split-backward schedule run by PyTorch's pipelining (``fsdp2``'s ZB-V and DualPipeV,
:func:`model.backward_working.input_pass_retains`), the input-gradient pass of a model chunk
(pytorch/pytorch ``torch/distributed/pipelining/_backward.py`` ``stage_backward_input``) finds,
for every parameter, the autograd nodes where the parameter's branch joins the path to the
chunk's input (``get_param_groups``: a linear layer's matmul, a norm's scale multiply, a grouped
expert matmul) and registers a pre-hook on each that stores the gradient reaching the node in
``param_group["grads"]``. ``stage_backward_weight`` replays the weight branches from those
gradients and only then drops them. So from a layer's input-gradient pass to its chunk's weight
pass, every weight's output gradient stays on the GPU, for every layer of the chunk: the
gradients pile up over the chunk's layers and over every chunk micro-batch whose ``W`` is still
pending (:func:`model.pipeline_zb.w_pending`).

Per layer and micro-batch (``S = (s/cp)·b`` tokens on this rank, β bytes per element, torchtitan's
plan, ``torchtitan/models/common/decoder_sharding.py``: the projections that read the
sequence-gathered input are column-parallel, output ``Shard(-1)``, ``1/tp`` of the width; the
output and down projections row-parallel, the local matmul's output whole ``[S, h]`` before its
reduce-scatter; the norms, ``nn_modules.py`` ``RMSNorm`` (``nn.RMSNorm``), on the sequence
shard):

* attention: ``β·S·(Q + KV)/tp`` (``wq``, ``wk``, ``wv``; :func:`model.context_parallel.
  attention_dims`, MLA's expanded widths) + ``β·S·h`` (``wo``);
* dense MLP: ``β·S·u·f/tp`` (``w1``, ``w3``; u = 2 gated, 1 otherwise) + ``β·S·h`` (``w2``);
* two norms: ``2·β·S·h`` ÷ tp with sequence parallelism;
* MoE layer, in place of the dense MLP: the router's logits gradient ``S·E`` at 4 bytes under
  torchtitan's FP32 router autocast (``TokenChoiceTopKRouter``), the grouped experts' matmul
  outputs for ``R = k·S`` routed rows (``models/common/moe.py`` ``GroupedExperts``, ``torch._grouped_mm``: ``w1``, ``w3`` of
  ``R·f_e``, ``w2`` of ``R·h``), the shared experts as a dense MLP of their width.

Not counted: the biases (their gradient comes from the same stored tensor), the embedding (stage
0's inputs need no gradient, so ``PipelineStage.backward_weight_one_chunk`` runs stage 0's whole
backward at its ``W`` and stores nothing), the output projection's gradient (the logits',
:func:`model.terms.activation_fields.output_layer_phase`).
"""

from __future__ import annotations

from fractions import Fraction

from trainplan.model.activations import ActivationContext
from trainplan.model.context_parallel import attention_dims
from trainplan.model.frameworks import Framework
from trainplan.model.specs import Architecture

__all__ = ["weight_pass_grads_bytes"]


def weight_pass_grads_bytes(
    arch: Architecture, moe: bool, ctx: ActivationContext, framework: Framework | str
) -> Fraction:
    """Bytes per GPU one layer of the kind ``moe`` leaves in ``param_groups["grads"]`` for one
    micro-batch, from its input-gradient pass to its chunk's weight pass (module docstring);
    0 under ``textbook`` (no working tensors in the reference profile). Exact.

    Examples
    --------
    Llama 3 8B, s 8,192, b 1, tp 1: ``2·8,192·((4,096 + 2·1,024 + 2·14,336) + 2·4,096)`` for the
    seven projections (704.6 MB) plus ``2·2·8,192·4,096`` for the two norms (134.2 MB).

    >>> from trainplan.scenarios.catalogue import get_model
    >>> ctx = ActivationContext(seq_len=8192, cp=1, micro_batch_size=1, tp=1,
    ...     sequence_parallel=False, flash_attention=True)
    >>> int(weight_pass_grads_bytes(get_model("llama3-8b").model.arch, False, ctx, "fsdp2"))
    838860800
    """
    if Framework(framework) is Framework.TEXTBOOK:
        return Fraction(0)
    beta, S, tp, h = ctx.activation_bytes, ctx.tokens, ctx.tp, arch.hidden_size
    div = tp if ctx.sequence_parallel and tp > 1 else 1
    q, kv, _ = attention_dims(arch)
    u = 2 if arch.mlp.gated else 1
    attention = beta * S * (Fraction(q + kv, tp) + h)
    norms = 2 * beta * S * Fraction(h, div)
    if not moe:
        return attention + norms + _mlp(beta, S, tp, h, u, arch.ffn_hidden_size)
    spec = arch.moe
    assert spec is not None
    k = spec.experts_per_token  # the busiest rank's experts' rows (model.moe_rows.row_factors)
    rows = k * ctx.routed_row_factors(spec.num_experts, k)[1] * S
    router = (4 if ctx.fp32_router_autocast else beta) * S * spec.num_experts
    experts = beta * rows * (u * spec.expert_ffn_hidden_size + h)
    shared = Fraction(0)
    if spec.num_shared_experts:
        shared = _mlp(beta, S, tp, h, u, spec.num_shared_experts * spec.shared_ffn)
    return attention + norms + router + experts + shared


def _mlp(beta: int, S: Fraction, tp: int, h: int, u: int, ffn: int) -> Fraction:
    """A dense MLP of width ``ffn``: the up (and gate) projections' outputs ÷ tp, the down
    projection's whole."""
    return beta * S * (Fraction(u * ffn, tp) + h)
