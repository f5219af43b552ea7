"""The roofline time model over arrays of layouts: ``t1`` and ``t2`` of every physical shape of a
job, from the cost model's own functions (:mod:`model.step_time`, :mod:`model.roofline_step`).

* per-layer figures per distinct (micro-batch, tp, cp, ep, links of tp/cp/ep, recompute):
  :func:`model.step_time.kind_parts`, computed once each and cached by the model;
* per stage ``n_dense·dense + n_moe·moe + [first]·embedding + [last]·output``
  (:func:`model.layer_time.stage_parts`) over [N, P] arrays, the slowest stage's micro-batch;
* ``t1 = m·t_mb·(1 + bubble_ratio) + pp`` (:func:`model.step_time.pp_seconds`);
* ``t2 = exposed dp + optimizer step`` (:func:`model.step_time.dp_seconds`,
  :func:`model.step_time.dp_exposed_seconds`, :func:`model.step_time.optimizer_seconds`).

The same operations in the same order as :func:`model.roofline_step.roofline_step`, so the
tables meet the exact evaluation within a nanosecond (``tests/optimizer/test_tables_exact.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from trainplan.model.comm import dp_bytes, pp_message_bytes
from trainplan.model.estimate import host_rates
from trainplan.model.frameworks import Framework, mechanism
from trainplan.model.layer_time import PARTS, Clock, stage_parts
from trainplan.model.layout import Recompute
from trainplan.model.memory import optimizer_elements
from trainplan.model.offload import adam_step_bytes, offload_seconds
from trainplan.model.op_rates import fp8_linear_speedups
from trainplan.model.params import padded_vocab, shares_embedding_with_last_stage
from trainplan.model.pipeline import bubble_ratio
from trainplan.model.roofline import LinkTime
from trainplan.model.roofline_step import params_of
from trainplan.model.step_time import (
    all_to_all_bandwidth,
    dp_exposed_seconds,
    dp_seconds,
    kind_parts,
    optimizer_seconds,
    pp_seconds,
    rings_bandwidth,
)
from trainplan.model.timing import TimeModel
from trainplan.model.vocab import vocab_multiple_for

__all__ = ["roofline_rows", "roofline_times", "offload_figures", "activation_offload_arrays"]


def offload_figures(job: Any, sa: Any, mode: Recompute) -> list[np.ndarray] | None:
    """The eight per-layer figures of :func:`model.stage_bytes.offload_quantities` for every
    shape ([N] each), under recompute ``mode``; None without activation offload."""
    from trainplan.model.memory import _context
    from trainplan.model.stage_bytes import offload_quantities

    case = job.case
    arch, t = case.model.arch, case.training
    if not t.offload.activations:
        return None
    keys = [
        (s.micro_batch_size, s.cp, s.tp, s.cp > 1 and s.cp_kind, s.ep, s.framework)
        for s in sa.shapes
    ]
    distinct = list(dict.fromkeys(keys))
    table = np.array(
        [
            [
                float(x)
                for x in offload_quantities(
                    arch, _context(arch, sa.shapes[keys.index(k)].layout(1, mode), t)
                )
            ]
            for k in distinct
        ]
    )
    index = np.array([distinct.index(k) for k in keys], dtype=np.int64)
    return [table[index, i] for i in range(8)]


def activation_offload_arrays(
    job: Any, sa: Any, mode: Recompute, n_dense: Any, n_moe: Any, t_mb: np.ndarray
) -> Any:
    """[N] :func:`model.activation_offload.activation_offload_seconds` of every shape: the
    stage with the most layers (``n_dense``, ``n_moe``: [N, P]), its micro-batch ``t_mb`` —
    what :func:`model.estimate.stage_activation_offload_seconds` gives one layout. 0 without
    activation offload."""
    from trainplan.model.activation_offload import activation_offload_seconds

    q = offload_figures(job, sa, mode)
    if q is None:
        return 0.0
    link, _ = host_rates(job.case.device, need_memory=False)
    i = 1 if mode is Recompute.SELECTIVE else 0
    most = np.where(sa.valid, n_dense + n_moe, 0).max(axis=1)
    most_moe = np.where(sa.valid, n_moe, 0).max(axis=1)
    return activation_offload_seconds(q[i], q[4 + i], most - most_moe, most_moe, t_mb, sa.m, link)


def roofline_rows(job: Any, sa: Any) -> np.ndarray:
    """[N] whether each shape is timed by the roofline model
    (:func:`model.roofline_step.uses_roofline`)."""
    case = job.case
    if case.options.time_model is not TimeModel.ROOFLINE or case.device.hbm_bytes_per_s is None:
        return np.zeros(len(sa.shapes), dtype=bool)
    return np.asarray(sa.physical, dtype=bool)


def _links(job: Any, sa: Any) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per axis (tp cp ep pp dp): [N] bandwidth per GPU for its collectives, [N] whether it is
    the scale-up tier and [N] whether the axis has more than one rank, as
    :func:`model.step_time.link_time` reads the evaluator's links."""
    from trainplan.optimizer.case import links_for
    from trainplan.topology.placement import axis_spans

    case = job.case
    L = case.links
    N = len(sa.shapes)
    sizes = {
        "tp": sa.tp, "cp": sa.cp, "ep": sa.ep, "pp": sa.pp, "dp": sa.dp * sa.cp,
    }  # fmt: skip
    bw = {a: np.zeros(N) for a in sizes}
    up = {a: np.zeros(N, dtype=bool) for a in sizes}
    if case.fabric:  # a cluster graph: each shape's links from the graph (no closed form)
        from trainplan.model.step_time import link_time

        for n, s in enumerate(sa.shapes):
            links = links_for(s.layout(1, Recompute.NONE), L, case.fabric)
            for axis in sizes:
                a2a = axis == "ep" or (axis == "cp" and sa.cp_ring[n] == 1 and sa.cp_a2a[n] > 1)
                lt = link_time(
                    links["dp_cp" if axis == "dp" else axis], L.nvlink_bytes_per_s,
                    L.nvlink_domain, all_to_all=bool(a2a),
                )  # fmt: skip
                if lt is not None:
                    bw[axis][n], up[axis][n] = lt.bandwidth_bytes_per_s, lt.scaleup
    else:
        orders = [s.rank_order for s in sa.shapes]
        for order in dict.fromkeys(orders):
            rows = np.array([o == order for o in orders])
            degrees = {a: getattr(sa, a)[rows] for a in ("tp", "cp", "ep", "dp", "pp")}
            spans = axis_spans(degrees, order, ("tp", "cp", "ep", "dp_cp", "pp"))
            for axis, size in sizes.items():
                span = spans["dp_cp" if axis == "dp" else axis]
                inside = span <= L.nvlink_domain
                args = (float(L.scaleout_bytes_per_s), size[rows], span, L.nvlink_domain,
                        L.nvlink_bytes_per_s)  # fmt: skip
                out = rings_bandwidth(*args)
                if axis == "ep":
                    out = all_to_all_bandwidth(*args)
                elif axis == "cp":  # pure Ulysses: all-to-alls only (model.step_time.clock)
                    ulysses = (sa.cp_ring[rows] == 1) & (sa.cp_a2a[rows] > 1)
                    out = np.where(ulysses, all_to_all_bandwidth(*args), out)
                bw[axis][rows] = np.where(inside, float(L.nvlink_bytes_per_s), out)
                up[axis][rows] = inside
    return {axis: (bw[axis], up[axis], sizes[axis] > 1) for axis in sizes}


def _vocab_multiples(case: Any, sa: Any) -> np.ndarray:
    """[N] each shape's vocabulary padding multiple (its framework's unless given;
    :func:`model.vocab.vocab_multiple_for`)."""
    return np.array(
        [vocab_multiple_for(s.framework, case.vocab_multiple) for s in sa.shapes], dtype=np.int64
    )


def _distinct(sa: Any, links: dict[str, Any], vm: np.ndarray) -> tuple[list[tuple], np.ndarray]:
    """The distinct (b, tp, cp, ep, CP mechanism (K/V ranks, all-to-all ranks, all-gather),
    vocabulary padding multiple, tp link, cp link, ep link) of the shapes, each link a
    :class:`LinkTime` or None at degree 1, and [N] each shape's index among them."""
    cols = [sa.b, sa.tp, sa.cp, sa.ep, sa.cp_ring, sa.cp_a2a, sa.cp_gather, vm]
    for axis in ("tp", "cp", "ep"):
        bw, up, used = links[axis]
        cols += [np.where(used, bw, 0.0), np.where(used, up, False)]
    table = np.column_stack([np.asarray(c, dtype=float) for c in cols])
    unique, inverse = np.unique(table, axis=0, return_inverse=True)
    keys = []
    for row in unique:
        b, tp, cp, ep, r, u = (int(x) for x in row[:6])
        link = [
            LinkTime(float(row[8 + 2 * k]), bool(row[9 + 2 * k])) if row[8 + 2 * k] else None
            for k in range(3)
        ]
        keys.append((b, tp, cp, ep, (r, u, bool(row[6])), int(row[7]), *link))
    return keys, np.asarray(inverse).reshape(-1)


def _stage_totals(job, sa, distinct, mode: Recompute, kinds) -> np.ndarray:
    """[N, P] seconds of one micro-batch on each stage (operations + exposed tp/cp/ep); stages
    beyond a shape's pp hold −inf."""
    case = job.case
    arch, t, o = case.model.arch, case.training, case.options
    p = params_of(o, case.device)
    dev = case.device
    keys, rows = distinct
    speedup = fp8_linear_speedups(t.precision, t.fp8_recipe, dev)
    table = []
    for b, tp, cp, ep, mech, vm, tpl, cpl, epl in keys:
        ring, a2a, gather = mech
        clock = Clock(
            dev.peak_flops_per_s, dev.hbm_bytes_per_s, p, tpl, cpl, epl, o.tp_comm_overlap,
            cp_ring=ring, cp_a2a=a2a, cp_gather=gather, linear_speedup=speedup,
        )  # fmt: skip
        vocab = padded_vocab(arch.vocab_size, vm, tp)
        table.append(
            kind_parts(
                arch, t, b, tp, cp, ep, tp, tp > 1, o.causal_attention_flops, mode, vocab, clock
            )
        )
    n_dense, n_moe, last, first = kinds
    parts = []
    for kind in range(4):
        per_key = np.array([entry[kind] for entry in table])  # [K, 7]
        parts.append(tuple(per_key[rows, j][:, None] for j in range(len(PARTS))))
    dense, moe, embedding, output = parts
    staged = stage_parts(dense, moe, embedding, output, n_dense, n_moe, first, last)
    i = {name: j for j, name in enumerate(PARTS)}
    total = staged[i["compute"]] + staged[i["tp_exposed"]] + staged[i["cp_exposed"]]
    total = total + staged[i["ep_exposed"]]
    return np.where(sa.valid, total, -np.inf)


def roofline_times(
    job, sa, zero_stages, recomputes, legal, kinds, busiest
) -> dict[str, np.ndarray]:
    """t1 [N, R] and t2 [N, Z] in whole nanoseconds of every shape under the roofline model
    (rows of shapes the model does not time are left 0). ``kinds``: the [N, P] dense layers,
    MoE layers, last and first flags of each stage; ``busiest``: [N] dense and expert parameters
    on one GPU of each shape's stage with the most."""
    case = job.case
    arch, t, o = case.model.arch, case.training, case.options
    p = params_of(o, case.device)
    N, Z, R = len(sa.shapes), len(zero_stages), len(recomputes)
    out = {"t1": np.zeros((N, R), dtype=np.int64), "t2": np.zeros((N, Z), dtype=np.int64)}
    links = _links(job, sa)
    m, v = sa.m, sa.v
    ratio = bubble_ratio(sa.pp, m, v)
    split = (sa.tp > 1) | ~sa.physical  # the roofline rows are physical: sp with tp > 1
    message = pp_message_bytes(
        arch.hidden_size, sa.tp, sa.cp, sa.b, np.float64(t.seq_len), t.activation_bytes, split
    )
    tied = np.zeros(N)
    if shares_embedding_with_last_stage(arch):
        vocab = padded_vocab(arch.vocab_size, _vocab_multiples(case, sa), sa.tp)
        tied_params = np.where(sa.pp > 1, vocab * arch.hidden_size / sa.tp, 0)
        tied = (
            np.array([_reduce_bytes(s.framework, t, zero_stages) for s in sa.shapes]) * tied_params
        )
    pp = np.where(
        sa.pp > 1,
        pp_seconds(message, 2 * m * v, tied, links["pp"][0], links["pp"][1], p),
        0.0,
    )
    distinct = _distinct(sa, links, _vocab_multiples(case, sa))
    window = _stage_totals(job, sa, distinct, Recompute.NONE, kinds).max(axis=1)
    for ri, mode in enumerate(recomputes):
        mode = Recompute(mode)
        t_mb = (
            window
            if mode is Recompute.NONE
            else _stage_totals(job, sa, distinct, mode, kinds).max(axis=1)
        )
        act = activation_offload_arrays(job, sa, mode, kinds[0], kinds[1], t_mb)
        out["t1"][:, ri] = np.rint((m * t_mb * (1 + ratio) + pp + act) * 1e9)
    most_layers = np.maximum(1, np.where(sa.valid, kinds[0] + kinds[1], 0).max(axis=1))
    dense, experts = busiest
    frameworks = [s.framework for s in sa.shapes]
    for fw in dict.fromkeys(frameworks):
        rows = np.array([f is fw for f in frameworks])
        for zi, z in enumerate(zero_stages):
            if not legal[rows, zi].any():
                continue
            mech = mechanism(
                fw, z, t.weight_bytes, t.gradient_bytes, t.optimizer_bytes, o.zero3_regather
            )
            shard = sa.dp[rows] * sa.cp[rows]
            expert_shard = shard // sa.ep[rows]
            total, per_mb = dp_bytes(mech, dense[rows], experts[rows], shard, expert_shard, m[rows])
            step_bytes = total - m[rows] * per_mb
            bw, up, _ = links["dp"]
            step_s, mb_s = dp_seconds(
                mech, step_bytes, per_mb, shard, most_layers[rows], bw[rows], up[rows], p
            )
            step_s = np.where(shard > 1, step_s, 0.0)
            mb_s = np.where(shard > 1, mb_s, 0.0)
            exposed = dp_exposed_seconds(
                step_s, mb_s, m[rows], window[rows], o.grad_reduce_overlap, 1 / most_layers[rows]
            )
            owned = optimizer_elements(mech, dense[rows], experts[rows], shard, expert_shard)
            owned = owned * (1 - float(t.offload.optimizer))
            step_bytes = adam_step_bytes(t.optimizer_bytes, t.weight_bytes)
            seconds = exposed + optimizer_seconds(owned, case.device.hbm_bytes_per_s, p, step_bytes)
            seconds = seconds + offload_arrays(
                case, mech, dense[rows], experts[rows], shard, expert_shard, m[rows]
            )
            out["t2"][rows, zi] = np.where(legal[rows, zi], np.rint(seconds * 1e9), 0)
    return out


def offload_arrays(case: Any, mech: Any, dense, experts, shard, expert_shard, m) -> Any:
    """[n] :func:`model.offload.offload_seconds` of the busiest stage of each shape (0 without
    offload): what :func:`model.estimate.stage_offload_seconds` gives one layout."""
    t = case.training
    if not t.offload.active:
        return 0.0
    link, memory = host_rates(case.device)
    elements = optimizer_elements(mech, dense, experts, shard, expert_shard)
    return offload_seconds(mech, t.offload, elements, m, t.optimizer_bytes, link, memory)


def _reduce_bytes(fw: Framework, t, zero_stages) -> int:
    """Bytes per gradient element the framework reduces (the tied embedding's all-reduce)."""
    from trainplan.model.frameworks import ZERO_STAGES

    z = next((z for z in zero_stages if z in ZERO_STAGES[fw]), ZERO_STAGES[fw][0])
    return mechanism(fw, z, t.weight_bytes, t.gradient_bytes, t.optimizer_bytes).reduce_bytes
