"""One layout's step under the roofline time model: what :func:`model.estimate.evaluate`
reports per axis and per term (the search's tables compute the same from the same functions
over arrays, :mod:`optimizer.batch`).

Per step (``m`` micro-batches, ``v`` model chunks per stage):

* ``t_mb``: the slowest stage's micro-batch — its operations and its exposed tp, cp and ep
  collectives (:func:`model.step_time.stage_part_list`);
* pipeline: ``m·t_mb·(1 + bubble_ratio)`` plus the ``2·m·v`` point-to-point messages
  (:func:`model.step_time.pp_seconds`);
* data parallelism: the mechanism's bytes (:mod:`model.comm`) as collectives with latency,
  exposed by :func:`model.step_time.dp_exposed_seconds`, the window being one micro-batch of the
  slowest stage without recomputation (read from the shape alone, as the search's tables keep
  time terms per (shape, ZeRO stage) and per (shape, recompute));
* the optimizer step over the parameters the busiest stage's GPU updates.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from trainplan.model.comm import AxisTraffic, pp_message_bytes
from trainplan.model.frameworks import mechanism
from trainplan.model.hardware import DeviceSpec
from trainplan.model.layer_time import PARTS, Clock
from trainplan.model.layout import Layout, Recompute
from trainplan.model.memory import optimizer_elements
from trainplan.model.offload import adam_step_bytes
from trainplan.model.op_rates import deployed_params, fp8_linear_speedups
from trainplan.model.roofline import RooflineParams
from trainplan.model.specs import Architecture, TrainingSpec
from trainplan.model.step_time import (
    clock,
    cp_mechanism,
    dp_exposed_seconds,
    dp_seconds,
    link_time,
    optimizer_seconds,
    pp_seconds,
    stage_part_list,
)
from trainplan.model.timing import CostOptions, TimeModel

__all__ = [
    "RooflineStep",
    "uses_roofline",
    "params_of",
    "stage_clock",
    "roofline_step",
    "slowest",
    "totals",
]


def uses_roofline(options: CostOptions, layout: Layout, device: DeviceSpec) -> bool:
    """Whether ``layout`` is timed by the roofline model: asked for (the default), a physical
    framework profile (``textbook`` keeps the single-efficiency model) and an accelerator with
    a known HBM bandwidth."""
    return (
        options.time_model is TimeModel.ROOFLINE
        and layout.framework.physical
        and device.hbm_bytes_per_s is not None
    )


def params_of(options: CostOptions, device: DeviceSpec) -> RooflineParams:
    """The roofline figures in force: the options' or the accelerator's defaults."""
    if options.roofline is not None:
        return options.roofline
    return deployed_params(device.name, options.attention_kernel)


def totals(parts: list[list[Any]]) -> list[Any]:
    """Per stage, its micro-batch seconds: operations plus exposed tp, cp and ep."""
    i = {name: k for k, name in enumerate(PARTS)}
    return [
        p[i["compute"]] + p[i["tp_exposed"]] + p[i["cp_exposed"]] + p[i["ep_exposed"]]
        for p in parts
    ]


def slowest(parts: list[list[float]]) -> int:
    """Index of the stage whose micro-batch takes longest (the first such)."""
    t = totals(parts)
    return max(range(len(t)), key=lambda k: (t[k], -k))


@dataclass(frozen=True, slots=True)
class RooflineStep:
    """The roofline terms of one layout's step (seconds)."""

    microbatch_s: float
    """t_mb: the slowest stage's micro-batch, operations and exposed tp/cp/ep collectives."""
    compute_microbatch_s: float
    """Of it, the operations alone."""
    window_s: float
    """The slowest stage's micro-batch without recomputation (the dp overlap window)."""
    axes: Mapping[str, tuple[float, float]]
    """Per axis: (seconds of its collectives in a step if nothing overlapped them, exposed)."""
    optimizer_s: float
    """The optimizer step."""


def stage_clock(
    training: TrainingSpec,
    layout: Layout,
    device: DeviceSpec,
    links: Mapping[str, Any],
    options: CostOptions,
) -> Clock:
    """The :class:`model.layer_time.Clock` the layout's stages are timed on: the accelerator's
    peaks, the roofline figures in force (:func:`params_of`), each axis's link, the tp overlap,
    the CP flavour and the precision's linear speed-up."""
    p = params_of(options, device)
    cp = cp_mechanism(layout.cp_kind, layout.cp, layout.cp_a2a)
    speedup = fp8_linear_speedups(training.precision, training.fp8_recipe, device)
    return clock(device, p, links, options.tp_comm_overlap, cp, speedup)


def roofline_step(
    arch: Architecture,
    training: TrainingSpec,
    layout: Layout,
    device: DeviceSpec,
    links: Mapping[str, Any],
    options: CostOptions,
    vocab: int,
    traffic: list[AxisTraffic],
    busiest: tuple[Fraction, Fraction, int],
) -> RooflineStep:
    """The roofline terms of ``layout``: ``traffic`` is its bytes per axis
    (:func:`model.estimate.traffic_rows`' own), ``busiest`` the (dense, expert) parameters on
    one GPU of the stage with the most and the most layers on a stage."""
    p = params_of(options, device)
    c = stage_clock(training, layout, device, links, options)
    causal = options.causal_attention_flops
    parts = stage_part_list(arch, training, layout, c, vocab, causal)
    k = slowest(parts)
    bare = totals(stage_part_list(arch, training, layout, c, vocab, causal, Recompute.NONE))
    window = max(bare)
    m = layout.num_microbatches(training.global_batch_size)
    i = {name: j for j, name in enumerate(PARTS)}
    axes = {a: (m * parts[k][i[a]], m * parts[k][i[f"{a}_exposed"]]) for a in ("tp", "cp", "ep")}
    by_axis = {t.axis: t for t in traffic}
    up, domain = device.nvlink_bytes_per_s, device.nvlink_domain
    pp_link = link_time(links.get("pp"), up, domain)
    pp = 0.0
    if layout.pp > 1 and pp_link is not None:
        message = pp_message_bytes(
            arch.hidden_size, layout.tp, layout.cp, layout.micro_batch_size, training.seq_len,
            training.activation_bytes,
            layout.sp or not layout.framework.physical or layout.pipeline_scatter_gather,
        )  # fmt: skip
        messages = 2 * m * layout.virtual_stages
        tied = by_axis["pp"].bytes_per_step - 2 * message * m * layout.virtual_stages
        pp = pp_seconds(
            float(message), messages, float(tied), pp_link.bandwidth_bytes_per_s,
            pp_link.scaleup, p,
        )  # fmt: skip
    axes["pp"] = (pp, pp)
    dense, experts, most_layers = busiest
    mech = mechanism(
        layout.framework, layout.zero_stage, training.weight_bytes, training.gradient_bytes,
        training.optimizer_bytes, options.zero3_regather,
    )  # fmt: skip
    dp = by_axis["dp"]
    dp_link = link_time(links.get("dp_cp"), up, domain)
    step_s = mb_s = 0.0
    if dp_link is not None and dp.group_size > 1:
        step_bytes = float(dp.bytes_per_step - m * dp.microbatch_bytes)
        step_s, mb_s = dp_seconds(
            mech, step_bytes, float(dp.microbatch_bytes), dp.group_size, most_layers,
            dp_link.bandwidth_bytes_per_s, dp_link.scaleup, p,
        )  # fmt: skip
    exposed = dp_exposed_seconds(
        step_s, mb_s, m, window, options.grad_reduce_overlap, 1 / most_layers
    )
    axes["dp"] = (step_s + m * mb_s, exposed)
    owned = optimizer_elements(
        mech, dense, experts, layout.shard_degree, layout.expert_shard_degree
    ) * (1 - training.offload.optimizer)
    step_bytes = adam_step_bytes(training.optimizer_bytes, training.weight_bytes)
    optimizer = optimizer_seconds(float(owned), c.hbm_bytes_per_s, p, step_bytes)
    return RooflineStep(totals(parts)[k], parts[k][i["compute"]], window, axes, optimizer)
