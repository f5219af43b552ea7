"""The weights FSDP2 holds whole on a rank under PyTorch's multi-stage pipeline runtime: the
largest window of model chunks (:func:`held_whole_params`), what the model-state term
(:func:`model.terms.state.model_state_term`) counts at :attr:`model.mechanism_record.
Mechanism.weights_full` in place of every parameter of the stage.

Source: PyTorch 2.13.0 (git cf30153c4c) ``torch/distributed/pipelining/schedules.py``
``_add_unshard_reshard`` (``max_active_stages=3``) and ``_PipelineScheduleRuntime.
_step_microbatches`` (``RESHARD`` → ``FSDPModule.reshard``), ``torch/distributed/fsdp/
_fully_shard/_fsdp_param_group.py`` ``FSDPParamGroup.reshard`` → ``_to_sharded`` →
``FSDPParam.free_unsharded_param``: at v ≥ 4 chunks a rank holds at most three chunks' weights
whole; which sets it holds, per pass, is :func:`model.fsdp2_pipeline.held_chunks`' replay of
its order. The unsharded FP32 gradients stay (``unsharded_accumulated_grad`` is not the
parameter's storage): :attr:`~model.mechanism_record.Mechanism.grads_full` is unchanged.

Units: parameter elements on one GPU (after tp, ep; before ZeRO), exact Fractions.
"""

from __future__ import annotations

from fractions import Fraction
from functools import lru_cache
from math import lcm
from typing import Any

from trainplan.model.fsdp2_pipeline import held_chunks, runtime_mechanism
from trainplan.model.mechanism_record import Mechanism
from trainplan.model.params import layer_params
from trainplan.model.split import stage_chunks
from trainplan.model.terms.fields import Context, Fields
from trainplan.model.terms.split_key import CACHE, SPLIT_FIELDS, SplitKey
from trainplan.model.terms.stage_params import non_unit_params, stage_params_per_gpu

__all__ = ["chunk_params", "chunk_weights", "window_params", "held_whole_params"]

Pair = tuple[Fraction, Fraction]


@lru_cache(maxsize=CACHE)
def chunk_params(key: SplitKey) -> tuple[tuple[Pair, ...], ...]:
    """Per pipeline rank, the (dense, routed-expert) parameters on one GPU of each of its v model
    chunks (:func:`model.split.stage_chunks`: its layers' :func:`model.params.layer_params`),
    the parameters outside the layers (:func:`model.terms.stage_params.non_unit_params`: the
    input embedding, the final norm, the output layer, the MTP modules' own) on the chunk that
    runs them: the first rank's first chunk, the output rank's last. They add up to
    :func:`model.terms.stage_params.stage_params_per_gpu`. A size-only model's chunks are equal
    (``1/v`` of the rank's parameters each).

    Llama 3 8B at pp 2, v 4 (torchtitan's split of the 34 units over 8 chunks: layers 4 5 4 4 4 4
    4 3 with the embedding on the first, the norm and output on the last): rank 0's chunks hold
    4 layers of 218,112,000 each, chunk 0 also the embedding (525,336,576); rank 1's first chunk
    5 layers, its last 3 and the norm and output (4,096 + 525,336,576).

    >>> from trainplan.scenarios.catalogue import get_model
    >>> m = get_model("llama3-8b").model
    >>> key = SplitKey.of(m, None, 1, 2, 4, 1, "torchtitan", 1, "fsdp2", None, "interleaved")
    >>> [[int(d) for d, _ in rank] for rank in chunk_params(key)]
    [[1397784576, 872448000, 872448000, 872448000], [1090560000, 872448000, 872448000, 1179676672]]
    """
    arch = key.model.arch
    if arch is None:
        return tuple(
            ((Fraction(d, key.v), Fraction(e, key.v)),) * key.v
            for _, _, d, e in stage_params_per_gpu(key)
        )
    outside, last = non_unit_params(key), key.output_rank()
    out = []
    for stage in range(key.pp):
        chunks = stage_chunks(arch, key.pp, key.v, key.uneven, stage, key.sizes, key.schedule)
        rank = []
        for i, layers in enumerate(chunks):
            counts = [layer_params(arch, j) for j in layers]
            dense = key.dense_per_gpu(
                sum(c.dense for c in counts), sum(c.tp_replicated for c in counts)
            )
            if (stage == 0 and i == 0) or (stage == last and i == len(chunks) - 1 and stage):
                dense += outside[stage]
            rank.append((dense, key.experts_per_gpu(sum(c.experts for c in counts))))
        out.append(tuple(rank))
    return tuple(out)


@lru_cache(maxsize=CACHE)
def chunk_weights(key: SplitKey) -> tuple[tuple[int, ...], ...]:
    """Per pipeline rank, each chunk's parameters (dense + routed-expert, :func:`chunk_params`)
    times one positive whole scale of the rank (the least common multiple of their
    denominators): whole numbers, so a sum over any set of the rank's chunks is that scale times
    the Fractions' sum, exactly, and sets compare (and tie) as their Fractions do.
    :func:`window_params` weighs every held set of every ``m`` with them, once per key instead
    of a greatest common divisor at each Fraction addition (DeepSeek-V3 on 1,024 GPUs under
    fsdp2: 6,746 windows over 595 keys).

    >>> from trainplan.scenarios.catalogue import get_model
    >>> key = SplitKey.of(get_model("llama3-8b").model, None, 1, 2, 4, 1, "torchtitan", 1,
    ...                   "fsdp2", None, "interleaved")
    >>> chunk_weights(key)[0]
    (1397784576, 872448000, 872448000, 872448000)
    """
    out = []
    for rank in chunk_params(key):
        totals = [d + e for d, e in rank]
        scale = lcm(*(Fraction(t).denominator for t in totals))
        out.append(tuple(int(t * scale) for t in totals))
    return tuple(out)


@lru_cache(maxsize=CACHE)
def window_params(key: SplitKey, m: int, reshard_after_forward: bool) -> tuple[Pair, ...]:
    """Per pipeline rank, the (dense, routed-expert) parameters on one GPU held whole at once at
    the most under ``ScheduleInterleaved1F1B`` on the runtime with ``m`` micro-batches: the set of
    :func:`model.fsdp2_pipeline.held_chunks` with the most parameters (:func:`chunk_params`),
    every chunk where v ≤ 3 or the schedule is not ``interleaved`` (nothing freed before the
    step's end).

    Llama 3 8B at pp 2, v 4, m 4, ZeRO-2 (:func:`chunk_params`' split): rank 0 holds its
    embedding chunk and two others at the most, 1,397,784,576 + 2 · 872,448,000 =
    3,142,680,576 of its 4,015,128,576; rank 1 its chunks 0, 2 and 3 (sets {0, 2, 3} and {1, 2,
    3} both come), 1,090,560,000 + 872,448,000 + 1,179,676,672 = 3,142,684,672.

    >>> from trainplan.scenarios.catalogue import get_model
    >>> m = get_model("llama3-8b").model
    >>> key = SplitKey.of(m, None, 1, 2, 4, 1, "torchtitan", 1, "fsdp2", None, "interleaved")
    >>> [int(d) for d, _ in window_params(key, 4, False)]
    [3142680576, 3142684672]
    """
    chunks = chunk_params(key)
    if str(key.schedule) != "interleaved" or key.v <= 3:
        zero = Fraction(0)
        return tuple((sum((d for d, _ in c), zero), sum((e for _, e in c), zero)) for c in chunks)
    out = []
    for stage, (rank, weight) in enumerate(zip(chunks, chunk_weights(key), strict=True)):
        sets = held_chunks(key.pp, key.v, m, stage, reshard_after_forward)
        best = max(sets, key=lambda s: (sum(weight[i] for i in s), sorted(s)))
        out.append(
            (
                sum((rank[i][0] for i in best), Fraction(0)),
                sum((rank[i][1] for i in best), Fraction(0)),
            )
        )
    return tuple(out)


def _window(model: Any, given: Any, reshard_after_forward: bool, *fields: Any) -> Any:
    """:func:`window_params` of the layout whose :data:`SPLIT_FIELDS` and ``m`` are ``fields``."""
    *split, m = fields
    return window_params(SplitKey.of(model, given, *split), int(m), reshard_after_forward)


def held_whole_params(c: Context, f: Fields, mech: Mechanism) -> tuple[Any, Any] | None:
    """(dense, expert) parameters on one GPU of stage ``f.stage`` whose working weights ``mech``
    holds whole at the peak where the recipe's pipeline runtime frees some
    (:func:`window_params`: FSDP2 under PyTorch's multi-stage runtime,
    :attr:`~model.mechanism_record.Mechanism.torch_pipelining`, ``interleaved``; not with
    ``pipeline_frees_stage_tensors``, Meta's runtime: :func:`model.fsdp2_pipeline.
    runtime_mechanism`); None where every parameter's are (the mechanism's own rule).
    Element-wise over the search's columns (``[n, P]``)."""
    run = runtime_mechanism(mech, c.training.pipeline_frees_stage_tensors)
    if not run.torch_pipelining or str(f.schedule) != "interleaved":
        return None
    args = (c.model, c.vocab_multiple, mech.regathers_after_forward)
    return f.per_stage(_window, args, *SPLIT_FIELDS, "m")  # type: ignore[no-any-return]
