"""torchtitan's routed experts and expert-parallel dispatcher as torchtitan runs them (the
``fsdp2`` profile), read from pytorch/torchtitan b5bcd76c6 and PyTorch's autograd formulas, and
timed from one H200 measurement of the kernel.

* **One grouped kernel per pass.** ``GroupedExperts.forward``
  (``torchtitan/models/common/moe.py``, ``GroupedExperts._grouped_mm``, line 120) runs each
  expert projection as one ``torch._grouped_mm(x, w.transpose(-2, -1), offs=offsets)`` over all local experts (``w1``,
  ``w3``, then ``w2``), not Transformer Engine's one cuBLAS GEMM per expert over four streams
  (Megatron-Core, :func:`model.op_time.expert_loop_of` and the wave rule of
  :mod:`model.grouped_gemm`). Its backward is two more ``_grouped_mm`` calls (PyTorch
  ``torch/csrc/autograd/FunctionsManual.cpp`` at 002ca6715b, ``_grouped_mm_mat1_backward``:
  the input gradient, offsets on the rows as in the forward; ``_grouped_mm_mat2_backward``: the
  weight gradient, ``_grouped_mm(x.T, grad, offs)``, offsets on the reduction).
* **The rate.** :data:`GROUPED_MM_OVER_DENSE` is ``torch._grouped_mm``'s time over one dense
  GEMM of the same FLOPs (the experts' rows stacked, ``x @ w[0].T``), measured on one H200 by
  rows per expert; a grouped pass is that ratio times the dense GEMM as the step time's GEMM
  rule times it (:func:`model.roofline.gemm_seconds` with
  :func:`model.op_rates.dense_wave_efficiency`), never under the grouped GEMM's own bytes
  (:func:`grouped_mm_seconds`).
  The ratio is read linearly in log2 of the rows between measured points and held at the end
  points outside them (flagged; below 128 rows per expert it is understated: the measured
  ratio still grows there). The measurement is the forward only; the input-gradient and
  weight-gradient passes take the forward's ratio at the same rows per expert — an
  assumption (the weight gradient is a different kernel shape: per expert an ``[k, n]``
  output over a reduction of the rows). The ratio is applied on every part: it is a property
  of the kernel's shape and launch measured on the H200 alone, an assumption elsewhere.
* **The dispatcher's per-layer wait.** ``AllToAllTokenDispatcher.dispatch``
  (``torchtitan/models/common/token_dispatcher.py`` at b5bcd76c6, lines 245–314) exchanges
  each rank's token count per expert first (``_token_count_exchange``: ``all_to_all_single`` of
  ``E`` int64 values viewed ``[ep, E/ep]``; :func:`counts_sent_bytes`) and copies the summed
  splits to the host with ``.to("cpu", non_blocking=False)`` (``_sync_token_count_exchange``,
  "this would incur a device-to-host sync") before the tokens' all-to-all, once per layer
  forward (again in a recomputed forward; the backward reuses the splits). After that wait the
  GPU's queue is empty until the host issues the next kernel: :data:`HOST_SYNC_S`.
"""

from __future__ import annotations

from trainplan.model.kernels import Interpolated, interpolate_log2
from trainplan.model.moe_kernels import DispatchMetadata
from trainplan.model.op_rates import dense_wave_efficiency
from trainplan.model.roofline import (
    Collective,
    LinkTime,
    RooflineParams,
    collective_seconds,
    gemm_seconds,
)

__all__ = [
    "GROUPED_MM_MEASURED_ON",
    "GROUPED_MM_MEASUREMENT",
    "GROUPED_MM_OVER_DENSE",
    "HOST_SYNC_S",
    "counts_sent_bytes",
    "grouped_mm_of",
    "grouped_mm_ratio",
    "grouped_mm_seconds",
    "torchtitan_dispatch_seconds",
]

GROUPED_MM_MEASURED_ON = "H200"
"""The accelerator (:mod:`topology` name) :data:`GROUPED_MM_OVER_DENSE` was measured on; on
every other part the ratio is an assumption."""

GROUPED_MM_MEASUREMENT = (
    "one H200 SXM (132 SMs), PyTorch 2.11.0+cu130, 2026-12-04: tests/data/device/"
    "h200-2026-12-04/kernels.json, section grouped_gemm, by tests/fidelity/device/"
    "measure_kernels.py (_grouped_row): BF16 forward, n 1,536, k 2,048 (Qwen3-30B-A3B's gated "
    "FC1)"
)
"""Where :data:`GROUPED_MM_OVER_DENSE` and :data:`HOST_SYNC_S` were measured."""

GROUPED_MM_OVER_DENSE: tuple[tuple[int, float], ...] = (
    (128, 2.195),
    (512, 1.186),
    (2048, 1.108),
    (4096, 1.023),
)
"""(rows per expert, ``torch._grouped_mm`` seconds over the same-FLOPs dense GEMM's), each the
ratio of two timed calls of :data:`GROUPED_MM_MEASUREMENT`: 16 experts at 128, 512 and 2,048
rows (43.45 / 19.80 µs, 86.32 / 72.81 µs, 296.5 / 267.6 µs) and the one row above 2,048, 8
experts of 4,096 rows (288.3 / 281.8 µs). Its fifth row, 4 experts of 2,048 rows, gave 1.142
(against 1.108 at 16 experts): not in the table, a check on how much the expert count moves
the ratio. ``tests/fidelity/test_device_h200.py`` derives each figure from the file."""

HOST_SYNC_S = 6.84e-6
"""Seconds the GPU idles after the dispatcher's device-to-host wait, at least: the host's time
to issue one eager PyTorch kernel while the GPU waits on the host (``x.add_(1)`` on 64 × 64,
6.841 µs per call over 2,000 calls; ``kernels.json`` section ``host``, ``add_s``, of
:data:`GROUPED_MM_MEASUREMENT`'s machine, an Intel Xeon host). The copy's own latency and
the host's time to issue the tokens' all-to-all (a c10d collective, more than one eager
kernel) are not measured here and not counted: a floor, on that host."""


def grouped_mm_of(framework: str) -> bool:
    """Whether the framework profile runs its routed experts as ``torch._grouped_mm``
    (:attr:`model.op_time.Clock.grouped_mm`): ``fsdp2`` (torchtitan's ``GroupedExperts``).

    >>> grouped_mm_of("fsdp2"), grouped_mm_of("megatron"), grouped_mm_of("deepspeed")
    (True, False, False)
    """
    return str(framework) == "fsdp2"


def grouped_mm_ratio(rows: float) -> Interpolated:
    """:data:`GROUPED_MM_OVER_DENSE` at ``rows`` rows per expert (fractional: the mean of
    balanced routing): linear in log2 between measured points, the end value outside them,
    flagged ``"below"`` or ``"above"``; no rows: 1.

    Examples
    --------
    1,024 rows lie half-way in log2 between 512 (1.186) and 2,048 (1.108):

    >>> round(grouped_mm_ratio(1024).value, 4)
    1.147
    >>> grouped_mm_ratio(64)
    Interpolated(value=2.195, clamped='below')
    """
    if rows <= 0:
        return Interpolated(1.0)
    xs = [float(r) for r, _ in GROUPED_MM_OVER_DENSE]
    return interpolate_log2(xs, [y for _, y in GROUPED_MM_OVER_DENSE], rows)


def grouped_mm_seconds(
    mnk: tuple[float, float, float],
    groups: float,
    which: int,
    peak_flops_per_s: float,
    hbm_bytes_per_s: float,
    p: RooflineParams,
    extra_bytes: float = 0.0,
) -> float:
    """Seconds of pass ``which`` (0 forward, 1 input gradient, 2 weight gradient) of a
    ``torch._grouped_mm`` over ``groups`` experts, in BF16 (torchtitan's experts never run FP8,
    :func:`model.moe_kernels.experts_stay_bf16`). ``mnk`` is one expert's GEMM of the pass as
    :func:`model.op_time.dgrad_seconds` and :func:`model.op_time.wgrad_seconds` pass it —
    ``(r, n, k)``, ``(r, k, n)``, ``(k, n, r)`` for ``r`` rows per expert — so the experts stack
    along the rows (forward, input gradient) or the reduction (weight gradient) into the dense
    GEMM of the same FLOPs. The pass takes :func:`grouped_mm_ratio` of ``r`` times that dense
    GEMM's seconds under the step time's rule (:func:`model.roofline.gemm_seconds` at its own
    depth and :func:`model.op_rates.dense_wave_efficiency`, ``t_kernel`` included: the
    measured ratio is of two kernels' whole times), and never less than the grouped GEMM's own
    roofline — the same FLOPs at the dense rate, its own bytes (``groups`` weights or weight
    gradients, ``2·(groups − 1)`` bytes per weight element more than the dense GEMM moves) plus
    ``extra_bytes`` (the weight gradient's FP32 accumulation), one ``t_kernel``.
    ``peak_flops_per_s`` is the sustained peak (the clock's fraction applied).

    Examples
    --------
    The measured forward, 16 experts of 128 rows, n 1,536, k 2,048, on a part with no sourced
    SM count (no wave share): 2.195 × the dense ``[2,048 × 2,048] × [2,048 × 1,536]`` GEMM,
    above the grouped GEMM's own roofline:

    >>> p = RooflineParams(gemm_efficiency=0.5725)
    >>> t = grouped_mm_seconds((128, 1536, 2048), 16, 0, 989.4e12, 4.8e12, p)
    >>> round(t / gemm_seconds(2048, 1536, 2048, 1, 989.4e12, 4.8e12, p), 3)
    2.195
    """
    m, n, k = mnk
    rows = k if which == 2 else m
    weight = m * n if which == 2 else n * k
    dm, dk = (m, groups * k) if which == 2 else (groups * m, k)
    w = dense_wave_efficiency(p.part, dm, n, 1)

    def dense(extra: float) -> float:
        return gemm_seconds(dm, n, dk, 1, peak_flops_per_s, hbm_bytes_per_s, p, 2, extra, w)

    measured = grouped_mm_ratio(rows).value * dense(0.0)
    return max(measured, dense(extra_bytes + 2 * (groups - 1) * weight))


def counts_sent_bytes(num_experts: int, ep: int) -> float:
    """Bytes each rank sends in torchtitan's all-to-all of the token counts per expert
    (``_token_count_exchange``: ``E`` int64 values viewed ``[ep, E/ep]``, one row to each rank):
    ``(ep − 1)/ep · 8·E``; 0 at ep 1.

    >>> counts_sent_bytes(128, 8)  # 7 ranks × 16 counts × 8 B
    896.0
    """
    return 0.0 if ep <= 1 else (ep - 1) / ep * 8.0 * num_experts


def torchtitan_dispatch_seconds(
    meta: DispatchMetadata, num_experts: int, ep: int, link: LinkTime | None, p: RooflineParams
) -> float:
    """Forward seconds of one MoE layer and micro-batch that torchtitan's dispatcher adds to the
    tokens' all-to-alls (:attr:`model.moe_kernels.DispatchMetadata.counts_all_to_alls` and
    ``host_syncs``; 0 for every other dispatcher): the counts' all-to-all at the collective rule
    the tokens' all-to-all takes (:func:`model.roofline.collective_seconds`: NCCL's base latency
    and one hop, plus :func:`counts_sent_bytes` at the link's rate) and :data:`HOST_SYNC_S` per
    wait. Both wait: the counts gate the tokens' all-to-all, and the GPU has nothing queued.

    Examples
    --------
    128 experts over 8 NVLink ranks (900 GB/s), one all-to-all and one wait:

    >>> p = RooflineParams(gemm_efficiency=0.5725)
    >>> meta = DispatchMetadata(counts_all_to_alls=1, host_syncs=1)
    >>> t = torchtitan_dispatch_seconds(meta, 128, 8, LinkTime(900e9, True), p)
    >>> a2a = collective_seconds(Collective.ALL_TO_ALL, 8, 896.0, LinkTime(900e9, True), p)
    >>> round((t - a2a) * 1e6, 2)
    6.84
    """
    if link is None or ep <= 1:
        return 0.0
    sent = counts_sent_bytes(num_experts, ep)
    counts = collective_seconds(Collective.ALL_TO_ALL, ep, sent, link, p)
    return meta.counts_all_to_alls * counts + meta.host_syncs * HOST_SYNC_S
