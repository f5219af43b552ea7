"""PyTorch's ring attention (``torch.distributed.tensor.experimental._attention``,
``_templated_ring_attention`` and its backward) timed per layer and micro-batch: its K/V
exchange and dK/dV sends (:func:`templated_collectives`) and its merges outside the SDPA
kernels (:func:`templated_merge_seconds`); what :func:`model.layer_time.layer_time` adds for a
``templated`` context-parallel layout."""

from __future__ import annotations

from trainplan.model.context_parallel import (
    cp_tensor_bytes,
    templated_dkv_sends,
    templated_kv_repeat,
    templated_merge_bytes,
)
from trainplan.model.op_time import Clock
from trainplan.model.ops import LayerShape
from trainplan.model.roofline import Collective, collective_seconds, memory_seconds

__all__ = ["templated_collectives", "templated_merge_seconds"]


def _coll(kind: Collective, n: int, sent: float, c: Clock) -> float:
    """Seconds of one collective over the clock's cp link (0 without one)."""
    return 0.0 if c.cp_link is None else collective_seconds(kind, n, sent, c.cp_link, c.params)


def templated_collectives(
    kv: float, r: int, core: tuple[float, float], c: Clock, recomputed: bool
) -> tuple[float, float, float]:
    """(cp seconds, exposed, the forward's own exposed) of PyTorch's ring attention (:func:`model.context_parallel.
    torch_rotate_method`; ``_templated_ring_attention`` and its backward): a pass runs r SDPA calls
    of equal work under the head-tail load balance (``_RoundRobinLoadBalancer``: a causal call
    on the local chunks, then the r − 1 others on half the keys or half the queries), so one
    call takes 1/r of the core. K/V: the all-gather rotater issues one all-gather of
    (r − 1)·KV before the first call and waits for it before the second; the all-to-all rotater
    sends KV to the next rank r − 1 times, each under one call. Backward: the same K/V exchange,
    and dK/dV in FP32 sent to the next rank after every call (``dkv_rotater``, an all-to-all
    rotater: :func:`model.context_parallel.templated_dkv_sends`, the sends the traffic table
    counts), each under the next call but the last, which is waited for. ``kv``: the K + V
    bytes of the heads SDPA sees (the grouped heads repeated:
    :func:`model.context_parallel.templated_kv_repeat`)."""
    if c.cp_templated == "allgather":
        kv_pass = [(_coll(Collective.ALL_GATHER, r, (r - 1) * kv, c), 1)]
    else:
        kv_pass = [(_coll(Collective.SEND_RECV, 2, kv, c), r - 1)]
    sends, dkv_bytes = templated_dkv_sends(kv, r)
    dkv = _coll(Collective.SEND_RECV, 2, dkv_bytes, c)
    total = exposed = 0.0
    for core_s, times in ((core[0], 1 + int(recomputed)), (core[1], 1)):
        for t, n in kv_pass:
            total += t * n * times
            exposed += max(0.0, t - core_s / r) * n * times
    own = sum(max(0.0, t - core[0] / r) * n for t, n in kv_pass)
    total += sends * dkv
    exposed += (sends - 1) * max(0.0, dkv - core[1] / r) + dkv
    return total, exposed, own


def templated_merge_seconds(x: LayerShape, c: Clock) -> tuple[float, float]:
    """(forward, backward) seconds of PyTorch's ring-attention merges and FP32 gradient
    accumulation outside the SDPA kernels (:func:`model.context_parallel.
    templated_merge_bytes`) on the HBM roofline, one kernel launch per elementwise step
    (6 per forward call, 7 per backward call), the K/V and dK/dV terms over the heads SDPA
    sees (:func:`model.context_parallel.templated_kv_repeat`); (0, 0) unless the clock runs it."""
    r = c.cp_ring
    if not c.cp_templated or r == 1 or x.cp == 1:
        return 0.0, 0.0
    q, kv, o = (float(v) for v in cp_tensor_bytes(x.arch, x.tp, x.tokens, x.beta))
    forward, backward = templated_merge_bytes(q, kv * templated_kv_repeat(x.arch), o, r)
    launch = c.params.kernel_overhead_s
    return (
        memory_seconds(forward, c.hbm_bytes_per_s, c.params) + 6 * r * launch,
        memory_seconds(backward, c.hbm_bytes_per_s, c.params) + 7 * r * launch,
    )
