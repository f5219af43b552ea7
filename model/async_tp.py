"""torchtitan's async tensor parallelism (``compile.enable_async_tensor_parallel``,
``tp_comm_overlap = async-tp``): which of a layer's sequence-parallel collectives Inductor's
micro-pipeline pass fuses with a GEMM, and what the fused kernels add.

PyTorch 2.13.0 (the installed wheel, git cf30153c4c), ``torch/_inductor/fx_passes/
micro_pipeline_tp.py``:

* ``fuse_all_gather_matmul`` fuses an all-gather with every ``mm`` that reads its result as the
  left operand (``_find_consumer_matmuls``: the forward gather before ``wqkv`` or ``w1`` and
  ``w3`` together; the backward gather of the output gradient before the row-parallel
  input-gradient GEMM).
* ``fuse_matmul_reduce_scatter`` fuses a reduce-scatter only when ``_find_producer_matmul``
  finds an ``mm`` (or ``reshape(mm(reshape))``) producing its input; an ``add`` returns None
  and the reduce-scatter stays a plain NCCL ``reduce_scatter_tensor``, waited for before the
  norm's backward (``reorder_for_compute_comm_overlap`` and
  ``aten_distributed_optimizations.enable_overlap_scheduling`` default False in
  ``torch/_inductor/config.py``; torchtitan b5bcd76c6 ``distributed/compile.py``
  ``_maybe_enable_async_tp`` sets only ``_micro_pipeline_tp``). In backward the gradient of a
  block input that several column-parallel GEMMs read is the sum of their input gradients:
  torchtitan b5bcd76c6 ``models/common/decoder_sharding.py`` ``set_dense_ffn_sharding``
  gathers the FFN input once and feeds it to colwise ``w1`` and ``w3``, so the MLP's backward
  reduce-scatter is not fused; the attention's is (llama3, qwen3 and gpt-oss build one fused
  ``wqkv``: ``fuse_qkv=True`` in ``models/llama3/__init__.py``, ``models/common/
  config_utils.py`` ``make_gqa_config``), MLA's is not (its Q and KV down-projections both
  read the input).
* A fused reduce-scatter (``torch/distributed/_symmetric_memory/__init__.py``
  ``_fused_matmul_reduce_scatter_impl``) writes the tp partial products of the whole output
  into ``stacked_partials`` (``_pipelined_produce_and_all2all``) and ends with
  ``torch.sum`` over the tp chunks on the compute stream: one memory-bound kernel reading the
  M × N output and writing its M/tp × N shard, waited for by the next operation.
"""

from __future__ import annotations

from trainplan.model.op_time import Clock, LayerCompute
from trainplan.model.ops import LayerShape
from trainplan.model.recompute_ops import RepeatedTp
from trainplan.model.roofline import Collective, collective_seconds
from trainplan.model.specs import AttentionKind
from trainplan.model.userbuffers_gemm import partials_sum_seconds

__all__ = ["async_tp_collectives", "fused_input_scatter", "partials_reduction_seconds"]


def fused_input_scatter(x: LayerShape, col: str) -> bool:
    """Whether Inductor fuses the backward reduce-scatter of the input gradient of the
    column-parallel half ``col`` (``attn_in`` or ``mlp_in``) with its GEMM: only when one GEMM
    reads the gathered input (module docstring) — torchtitan's fused ``wqkv``, a GeLU MLP's
    one ``w1``; not MLA's two down-projections, a SwiGLU MLP's ``w1`` and ``w3``, or a MoE
    layer's shared experts (the router's gate reads the same input).

    >>> from trainplan.model.specs import Architecture
    >>> gpt = Architecture(num_layers=1, hidden_size=8, num_attention_heads=2,
    ...                    ffn_hidden_size=32, vocab_size=16)
    >>> x = LayerShape(gpt, False, 4, 1, 2, sequence_parallel=True)
    >>> fused_input_scatter(x, "attn_in"), fused_input_scatter(x, "mlp_in")
    (True, True)
    """
    if col == "attn_in":
        return x.arch.attention is not AttentionKind.MLA
    return not x.moe and not x.arch.mlp.gated


def partials_reduction_seconds(x: LayerShape, c: Clock) -> float:
    """Seconds of a fused matmul-reduce-scatter's closing ``torch.sum`` over its tp partial
    products: β·T·h bytes read and β·T·h/tp written (T: the micro-batch's tokens, h: the
    hidden size) through HBM at the rule of every memory-bound pass, one kernel: the sum
    Transformer Engine's ring-exchange reduce-scatter ends with too
    (:func:`model.userbuffers_gemm.partials_sum_seconds`).

    >>> from trainplan.model.roofline import RooflineParams
    >>> from trainplan.model.specs import Architecture
    >>> gpt = Architecture(num_layers=1, hidden_size=8192, num_attention_heads=64,
    ...                    ffn_hidden_size=28672, vocab_size=16)
    >>> x = LayerShape(gpt, False, 8192, 1, 8, sequence_parallel=True)
    >>> c = Clock(989e12, 3.35e12, RooflineParams(gemm_efficiency=0.7))
    >>> round(partials_reduction_seconds(x, c) * 1e6, 1)  # 2·8192²·9/8 B / (0.9·3.35 TB/s) + 3 µs
    53.1
    """
    return partials_sum_seconds(
        x.tokens * x.arch.hidden_size, x.tp, x.beta, c.hbm_bytes_per_s, c.params
    )


def async_tp_collectives(
    x: LayerShape,
    ops: LayerCompute,
    c: Clock,
    again: RepeatedTp,
    halves: tuple[tuple[str, str], ...],
) -> tuple[float, float, float]:
    """(all tp collective seconds, exposed seconds, of those the forward's own: one all-gather
    and one reduce-scatter per half, not the recomputed forward's nor the backward's) of one
    layer and micro-batch under async TP
    with sequence parallelism, the input kept gathered (no re-gather); ``halves``: the
    (column-, row-parallel) GEMM roles around each pair of collectives; ``again``: the forward
    collectives a recomputed forward runs once more. A fused collective waits for what the
    other (tp − 1)/tp of its GEMM does not cover (the local shard is consumed first,
    ``_pipelined_multi_all_gather_and_consume``) and adds the tp − 1 kernels of the
    decomposed GEMM; a fused reduce-scatter adds :func:`partials_reduction_seconds`; the
    backward reduce-scatter :func:`fused_input_scatter` leaves unfused waits whole."""
    tp = x.tp
    assert c.tp_link is not None
    one = (tp - 1) / tp * x.beta * x.tokens * x.arch.hidden_size
    ag = collective_seconds(Collective.ALL_GATHER, tp, one, c.tp_link, c.params)
    rs = collective_seconds(Collective.REDUCE_SCATTER, tp, one, c.tp_link, c.params)
    share, split = (tp - 1) / tp, (tp - 1) * c.params.kernel_overhead_s
    reduction = partials_reduction_seconds(x, c)
    total = exposed = forward = 0.0
    for (col, row), (ag_again, rs_again) in zip(halves, again.halves, strict=False):
        gathers = [(row, "dgrad"), (col, "forward")] + [(col, "forward")] * ag_again
        scatters = [(row, "forward")] * (1 + rs_again)
        if fused_input_scatter(x, col):
            scatters.append((col, "dgrad"))
        else:  # a plain NCCL reduce-scatter, waited for
            total, exposed = total + rs, exposed + rs
        for seconds, fused, extra, first in ((ag, gathers, 0.0, 1), (rs, scatters, reduction, 0)):
            for k, (role, which) in enumerate(fused):
                wait = max(0.0, seconds - share * ops.role(role, which)) + split + extra
                total, exposed = total + seconds, exposed + wait
                forward += wait if k == first else 0.0
    return total, exposed, forward
