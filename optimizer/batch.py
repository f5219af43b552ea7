"""The cost model over arrays of layouts: every term of every candidate of one job at once.

The search's tables (:mod:`optimizer.tables`) need, for thousands of shapes, each stage's model
state per ZeRO stage, activations per recompute mode, and the step-time terms. This module calls
the cost model's *own* functions — written once for exact numbers and for arrays
(:mod:`model.xp`) — with numpy arrays holding every shape (issue 10):

* exact per-*scope* figures, computed once per distinct argument and cached by the model: stage
  parameters per (tp, pp, v, ep, framework kind) (:func:`model.estimate.stage_params_per_gpu`),
  per-layer activation figures per (b, cp, tp, CP flavour)
  (:func:`model.stage_bytes.layer_quantities`),
  per-micro-batch FLOPs per b (:func:`model.timing.microbatch_flop_terms`), the stage's
  recompute forms per layer kinds (:func:`model.stage_bytes.stage_forms`);
* then the formulas over arrays: :func:`model.memory.state_terms`,
  :func:`model.stage_bytes.apply_form`, :func:`model.pipeline.flat_in_flight`,
  :func:`model.stage_bytes.chunk_peak` (the interleaved schedule's closed form),
  :func:`model.timing.stage_peak_seconds`, the traffic of :mod:`model.comm`
  (``*_bytes``), the CP flavour's buffers (:func:`model.context_parallel.cp_transient_bytes`),
  the links of :func:`topology.placement.two_tier_bandwidth` and
  :func:`model.timing.exposed_seconds`.

Arrays are float64; bytes are exact to within a byte and times to a nanosecond of the exact
evaluation (:mod:`tests.optimizer.test_tables_exact` draws random candidates to hold that), and
fit verdicts near the capacity are re-decided exactly by :mod:`optimizer.tables`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from trainplan.model.activation_offload import offload_buffer_bytes
from trainplan.model.comm import cp_bytes, dp_bytes, ep_bytes, pp_bytes, tp_bytes
from trainplan.model.context_parallel import CpKind, cp_degrees, cp_transient_bytes
from trainplan.model.errors import LayoutError
from trainplan.model.estimate import (
    gather_units,
    stage_core_flops,
    stage_kinds,
    stage_linear_per_gpu,
    stage_params_per_gpu,
)
from trainplan.model.frameworks import ZERO_STAGES, Framework, check_framework, mechanism
from trainplan.model.layout import Recompute
from trainplan.model.memory import (
    _context,
    cache_bytes_per_element,
    keeps_gathered_inputs,
    local_chunks,
    state_terms,
)
from trainplan.model.offload import check_offload
from trainplan.model.params import padded_vocab, shares_embedding_with_last_stage, stage_layers
from trainplan.model.pipeline import Schedule, bubble_ratio, flat_in_flight, interleaved_in_flight
from trainplan.model.precision import linear_speedup
from trainplan.model.stage_bytes import (
    apply_form,
    chunk_form,
    chunk_peak,
    embedding_bytes,
    layer_quantities,
    peak_transient,
    stage_forms,
)
from trainplan.model.timing import (
    core_passes,
    exposed_seconds,
    microbatch_flop_terms,
    stage_peak_seconds,
)
from trainplan.model.vocab import vocab_multiple_for
from trainplan.optimizer.batch_roofline import (
    activation_offload_arrays,
    offload_arrays,
    offload_figures,
    roofline_rows,
    roofline_times,
)
from trainplan.optimizer.space import Shape

__all__ = ["ShapeArrays", "shape_arrays", "memory_arrays", "time_arrays"]

_AXES = ("tp", "cp", "ep", "pp")
"""The axes whose exposed time is part of t1 (dp's is t2)."""


@dataclass(frozen=True, slots=True, eq=False)
class ShapeArrays:
    """One job's shapes as arrays ([N] each; [N, 1] where they meet stage arrays)."""

    shapes: tuple[Shape, ...]
    dp: np.ndarray
    tp: np.ndarray
    pp: np.ndarray
    cp: np.ndarray
    ep: np.ndarray
    b: np.ndarray
    v: np.ndarray
    m: np.ndarray
    gpipe: np.ndarray
    interleaved: np.ndarray
    physical: np.ndarray
    cp_ring: np.ndarray
    """Ranks of the K/V exchange (ring or all-gather) of each shape's CP flavour
    (:func:`model.context_parallel.cp_degrees`)."""
    cp_a2a: np.ndarray
    """Ranks of the head all-to-all of each shape's CP flavour."""
    cp_gather: np.ndarray
    """Whether the K/V exchange is an all-gather."""
    P: int
    """The most pipeline stages of any shape (stage arrays are [N, P], padded)."""

    @property
    def stage(self) -> np.ndarray:
        """[1, P] stage indices."""
        return np.arange(self.P)[None, :]

    @property
    def valid(self) -> np.ndarray:
        """[N, P] whether the stage exists (i < pp)."""
        return self.stage < self.pp[:, None]

    def col(self, name: str) -> np.ndarray:
        """[N, 1] of a field."""
        return getattr(self, name)[:, None]

    def groups(self):
        """(rows, sub-arrays) for each pipeline degree: stage arrays sized to that degree, not
        padded to the largest (most of the work is per stage)."""
        for pp in sorted(set(self.pp.tolist())):
            rows = self.pp == pp
            yield rows, self.subset(rows, pp)

    def subset(self, rows: np.ndarray, P: int | None = None) -> ShapeArrays:
        """The shapes of ``rows`` (a boolean [N] mask), stage arrays [n, P]."""
        fields = (
            *("dp", "tp", "pp", "cp", "ep", "b", "v", "m", "gpipe", "interleaved", "physical"),
            *("cp_ring", "cp_a2a", "cp_gather"),
        )
        return ShapeArrays(
            shapes=tuple(s for s, r in zip(self.shapes, rows, strict=True) if r),
            **{f: getattr(self, f)[rows] for f in fields},
            P=self.P if P is None else P,
        )


def shape_arrays(shapes: tuple[Shape, ...], global_batch_size: int) -> ShapeArrays:
    """The shapes' fields as int64 arrays (m = B/(b·dp))."""

    def arr(f) -> np.ndarray:
        return np.array([f(s) for s in shapes], dtype=np.int64)

    dp, b = arr(lambda s: s.dp), arr(lambda s: s.micro_batch_size)
    pp = arr(lambda s: s.pp)
    degrees = [cp_degrees(s.cp_kind, s.cp, s.cp_a2a) for s in shapes]
    return ShapeArrays(
        shapes=shapes,
        dp=dp,
        tp=arr(lambda s: s.tp),
        pp=pp,
        cp=arr(lambda s: s.cp),
        ep=arr(lambda s: s.ep),
        b=b,
        v=arr(lambda s: s.virtual_stages),
        m=global_batch_size // (b * dp),
        gpipe=np.array([s.schedule is Schedule.GPIPE for s in shapes]),
        interleaved=np.array(
            [s.schedule is Schedule.INTERLEAVED and s.virtual_stages > 1 for s in shapes]
        ),
        physical=np.array([s.framework.physical for s in shapes]),
        cp_ring=np.array([r for r, _ in degrees], dtype=np.int64),
        cp_a2a=np.array([u for _, u in degrees], dtype=np.int64),
        cp_gather=np.array([s.cp_kind is CpKind.ALL_GATHER for s in shapes]),
        P=int(pp.max()) if len(shapes) else 1,
    )


def _gather(keys: list[Any], table: dict[Any, Any], P: int | None = None) -> np.ndarray:
    """Rows of ``table`` (one per distinct key, each a number or a [≤ P] sequence) for every
    shape's key: [N] or [N, P] (padded with 0) float64."""
    distinct = list(dict.fromkeys(keys))
    index = {k: i for i, k in enumerate(distinct)}
    if P is None:
        rows = np.array([float(table[k]) for k in distinct], dtype=float)
    else:
        rows = np.zeros((len(distinct), P))
        for i, k in enumerate(distinct):
            values = [float(x) for x in table[k]]
            rows[i, : len(values)] = values
    return rows[np.array([index[k] for k in keys], dtype=np.int64)]


# ------------------------------------------------------------------------------ memory


def _structure_key(s: Shape, vocab_multiple: int | None) -> tuple:
    """What :func:`model.estimate.stage_params_per_gpu` reads of a shape (its
    :func:`model.estimate._split_key`: the default split, as the search keeps even splits and
    explicit ``stage_layers`` are evaluated, not searched), the vocabulary's padding multiple
    (the framework's unless given) last."""
    vm = vocab_multiple_for(s.framework, vocab_multiple)
    return (s.tp, s.pp, s.virtual_stages, s.ep, True, s.tp, s.framework.physical, None, vm)


def memory_arrays(job, sa: ShapeArrays, zero_stages, recomputes) -> dict[str, np.ndarray]:
    """Forward/backward state [N, Z, P], optimizer-step state [N, Z, P], activations
    [N, R, P], legality [N, Z], and the host's share per GPU of the offloaded state
    (``host`` [N, Z, P]) and activations (``act_host`` [N, R, P]) of every shape of ``job``,
    from the cost model's terms."""
    N, P, Z, R = len(sa.shapes), sa.P, len(zero_stages), len(recomputes)
    out = {
        "state": np.zeros((N, Z, P)),
        "step": np.zeros((N, Z, P)),
        "act": np.zeros((N, R, P)),
        "legal": np.zeros((N, Z), dtype=bool),
        "host": np.zeros((N, Z, P)),
        "act_host": np.zeros((N, R, P)),
    }
    for rows, sub in sa.groups():
        part = _memory_group(job, sub, zero_stages, recomputes)
        for key, value in part.items():
            if value.ndim == 3:
                out[key][rows, :, : sub.P] = value
            else:
                out[key][rows] = value
    return out


def _memory_group(job, sa: ShapeArrays, zero_stages, recomputes) -> dict[str, np.ndarray]:
    """:func:`memory_arrays` for shapes of one pipeline degree."""
    case = job.case
    model, t = case.model, case.training
    arch = model.arch
    assert arch is not None
    N, P, Z, R = len(sa.shapes), sa.P, len(zero_stages), len(recomputes)
    keys = [_structure_key(s, case.vocab_multiple) for s in sa.shapes]
    params = {k: stage_params_per_gpu(model, *k) for k in dict.fromkeys(keys)}
    units = {k: gather_units(model, *k) for k in dict.fromkeys(keys)}
    dense = _gather(keys, {k: [p[2] for p in v] for k, v in params.items()}, P)
    experts = _gather(keys, {k: [p[3] for p in v] for k, v in params.items()}, P)
    dense_u = _gather(keys, {k: [u[0] for u in v] for k, v in units.items()}, P)
    expert_u = _gather(keys, {k: [u[1] for u in v] for k, v in units.items()}, P)
    cache_bytes = max(cache_bytes_per_element(t, s.framework) for s in sa.shapes)
    uniq = list(dict.fromkeys(keys))
    linear, layer_linear = (
        (
            _gather(
                keys, {k: [x[i] for x in stage_linear_per_gpu(model, *k[:-1])] for k in uniq}, P
            )
            for i in (0, 1)
        )
        if cache_bytes
        else (np.zeros((N, P)), np.zeros((N, P)))
    )
    shard = sa.col("dp") * sa.col("cp")
    expert_shard = shard // sa.col("ep")
    valid = sa.valid
    state = np.zeros((N, Z, P))
    step = np.zeros((N, Z, P))
    host_state = np.zeros((N, Z, P))
    legal = np.zeros((N, Z), dtype=bool)
    frameworks = np.array([s.framework.value for s in sa.shapes])
    for fw_name in dict.fromkeys(frameworks.tolist()):
        fw = Framework(fw_name)
        rows = frameworks == fw_name
        for zi, z in enumerate(zero_stages):
            if z not in ZERO_STAGES[fw]:
                continue
            try:
                check_offload(fw, z, t.offload)
            except LayoutError:
                continue
            ok = rows & ~((fw is Framework.DEEPSPEED) & (z >= 2) & (sa.pp > 1))
            check_framework(fw, z, 1)
            mech = mechanism(fw, z, t.weight_bytes, t.gradient_bytes, t.optimizer_bytes)
            w, g, o, gathered, buffers, extra, cache, host = state_terms(
                mech, dense[ok], experts[ok], shard[ok], expert_shard[ok], dense_u[ok],
                expert_u[ok], linear[ok], layer_linear[ok], cache_bytes_per_element(t, fw),
                t.offload, (sa.m[ok] > 1)[:, None],
            )  # fmt: skip
            total = w + g + o
            state[ok, zi] = np.where(valid[ok], total + gathered + cache + buffers, 0)
            step[ok, zi] = np.where(valid[ok], total + extra + cache, 0)
            host_state[ok, zi] = np.where(valid[ok], host, 0)
            # the host's share fits its memory (model.estimate.Estimate.host_fits)
            host_cap = case.device.host_memory_bytes
            host_ok = (
                np.ones(int(ok.sum()), dtype=bool)
                if not t.offload.active or host_cap is None
                else (np.where(valid[ok], host, 0).max(axis=1) <= host_cap)
            )
            legal[ok, zi] = host_ok
    act = np.zeros((N, R, P))
    act_host = np.zeros((N, R, P))
    for ri, mode in enumerate(recomputes):
        gpu, on_host = _activations(job, sa, Recompute(mode))
        act[:, ri] = np.where(valid, gpu, 0)
        act_host[:, ri] = np.where(valid, on_host, 0)
    return {
        "state": state,
        "step": step,
        "act": act,
        "legal": legal,
        "host": host_state,
        "act_host": act_host,
    }


def _activations(job, sa: ShapeArrays, mode: Recompute) -> tuple[np.ndarray, Any]:
    """([N, P] activation bytes of every stage under ``mode`` (layers in flight, the recompute
    transient, the embedding/output layer and activation offload's GPU buffer; pipeline outputs
    are deallocated), [N, P] activation offload's host bytes or 0):
    :func:`model.memory.stage_activations` over arrays."""
    case = job.case
    arch, t = case.model.arch, case.training
    assert arch is not None
    N, P = len(sa.shapes), sa.P
    # per-layer figures per activation context (b, cp, tp, CP flavour)
    # (the flavour only where cp > 1: a plain key hashes faster than an enum)
    ctx_keys = [
        (s.micro_batch_size, s.cp, s.tp, s.cp > 1 and s.cp_kind, s.ep, s.framework)
        for s in sa.shapes
    ]
    figures = {
        k: layer_quantities(arch, _context(arch, sa.shapes[ctx_keys.index(k)].layout(1, mode), t))
        for k in dict.fromkeys(ctx_keys)
    }
    q = [_gather(ctx_keys, {k: f[i] for k, f in figures.items()})[:, None] for i in range(8)]
    # each stage's forms: what it keeps per micro-batch and its transient candidates
    struct = [(s.pp, s.virtual_stages) for s in sa.shapes]
    per_mb_c, trans_c = _stage_form_arrays(arch, struct, mode, P)
    per_mb = apply_form(per_mb_c, q)
    transient = peak_transient(trans_c, q) if trans_c else np.zeros((N, P))
    stage = sa.stage
    vocab = padded_vocab(arch.vocab_size, _vocab_multiples(case, sa)[:, None], sa.col("tp"))
    tokens = t.seq_len / sa.col("cp") * sa.col("b")
    emb = embedding_bytes(
        arch,
        stage == 0,
        stage == sa.col("pp") - 1,
        tokens,
        sa.col("tp"),
        sa.col("tp") > 1,
        t.activation_bytes,
        vocab,
        np.array([keeps_gathered_inputs(s.framework, t) for s in sa.shapes])[:, None],
    )
    flight = flat_in_flight(sa.col("pp"), sa.col("m"), stage, sa.col("gpipe"))
    kept, emb_total = per_mb * flight, emb * flight
    cp_buffers: Any = 0  # none without context parallelism (cp_transient_bytes is 0 there)
    if (sa.cp > 1).any():
        n_dense, n_moe, _, _, _ = _stage_kind_arrays(job, sa)
        cp_buffers = cp_transient_bytes(
            arch, sa.col("cp_ring"), sa.col("cp_a2a"), sa.col("cp_gather"), sa.col("tp"), tokens,
            t.activation_bytes,
        ) * (n_dense + n_moe > 0)  # fmt: skip
    off = offload_figures(job, sa, mode)
    q_off = None if off is None else [x[:, None] for x in off]
    offloaded = None if q_off is None else apply_form(per_mb_c, q_off) * flight
    for v in sorted(set(sa.v[sa.interleaved].tolist())):
        rows = sa.interleaved & (sa.v == v)
        sub_off = None if q_off is None else [x[rows] for x in q_off]
        k, e, o = _interleaved(
            arch, sa, rows, v, mode, [x[rows] for x in q], per_mb[rows], emb[rows], sub_off
        )
        kept[rows], emb_total[rows] = k, e
        if offloaded is not None:
            offloaded[rows] = o
    buffer: Any = 0
    host: Any = 0
    if q_off is not None and offloaded is not None:
        n_dense, n_moe, _, _, _ = _stage_kind_arrays(job, sa)
        i = 1 if mode is Recompute.SELECTIVE else 0
        per_layer = np.maximum(
            np.where(n_dense > 0, q_off[i], 0), np.where(n_moe > 0, q_off[4 + i], 0)
        )
        buffer = np.minimum(offload_buffer_bytes(per_layer, (n_dense + n_moe) * flight), offloaded)
        host = offloaded - np.minimum(per_layer, offloaded)
    return kept + transient + emb_total + cp_buffers + buffer, host


def _stage_form_arrays(arch, struct, mode: Recompute, P: int):
    """Coefficient arrays of every shape's stages: ([8] of [N, P], [T] of [8] of [N, P])."""
    distinct = list(dict.fromkeys(struct))
    forms = {}
    T = 0
    for pp, v in distinct:
        split = stage_layers(arch, pp, v)
        per_stage = [stage_forms(tuple(map(arch.is_moe_layer, layers)), mode) for layers in split]
        forms[(pp, v)] = per_stage
        T = max(T, *(len(f[1]) for f in per_stage))
    index = np.array([distinct.index(k) for k in struct], dtype=np.int64)
    per_mb = np.zeros((len(distinct), 8, P))
    trans = np.zeros((len(distinct), T, 8, P))
    for d, key in enumerate(distinct):
        for i, (pm, tr) in enumerate(forms[key]):
            per_mb[d, :, i] = pm
            for j, form in enumerate(tr):
                trans[d, j, :, i] = form
    per_mb_c = [per_mb[index, c] for c in range(8)]
    trans_c = [[trans[index, j, c] for c in range(8)] for j in range(T)]
    return per_mb_c, trans_c


def _interleaved(arch, sa, rows, v, mode, q, per_mb, emb, q_off=None):
    """(kept, embedding/output-layer bytes, offloaded activations) [n, P] of interleaved shapes
    with v chunks (offloaded: the chunks' :func:`model.stage_bytes.offload_quantities` figures
    ``q_off`` times the micro-batches each holds at the peak; 0 without)."""
    shapes = [s for s, r in zip(sa.shapes, rows, strict=True) if r]
    P = sa.P
    pp, m = sa.pp[rows][:, None], sa.m[rows][:, None]
    stage = np.minimum(sa.stage, pp - 1)  # padded stages: any valid index (masked later)
    coeff = np.zeros((len(shapes), v, 8, P))
    counts = np.zeros((len(shapes), v, P))
    cache: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
    for n, s in enumerate(shapes):
        key = (s.pp, v)
        if key not in cache:
            c = np.zeros((v, 8, P))
            k = np.zeros((v, P))
            for i in range(s.pp):
                for j, kinds in enumerate(local_chunks(arch, s.pp, v, True, i)):
                    c[j, :, i] = chunk_form(kinds, mode)
                    k[j, i] = len(kinds)
            cache[key] = (c, k)
        coeff[n], counts[n] = cache[key]
    if mode is Recompute.SQRT:
        _, end_held = chunk_peak(pp, m, v, stage, [counts[:, j] for j in range(v)], 0)
        return per_mb * interleaved_in_flight(pp, m, v, stage), emb * end_held, 0
    chunk_bytes = [apply_form([coeff[:, j, c] for c in range(8)], q) for j in range(v)]
    held, end_held = chunk_peak(pp, m, v, stage, chunk_bytes, emb)
    kept = sum(h * cb for h, cb in zip(held, chunk_bytes, strict=True))
    offloaded: Any = 0
    if q_off is not None:
        offloaded = sum(
            h * apply_form([coeff[:, j, c] for c in range(8)], q_off) for j, h in enumerate(held)
        )
    return kept, emb * end_held, offloaded


# ------------------------------------------------------------------------------ time


def _vocab_multiples(case, sa: ShapeArrays) -> np.ndarray:
    """[N] the vocabulary padding multiple of each shape (its framework's unless given)."""
    return np.array(
        [vocab_multiple_for(s.framework, case.vocab_multiple) for s in sa.shapes], dtype=np.int64
    )


def _stage_kind_arrays(job, sa: ShapeArrays):
    """[N, P] dense layers, MoE layers, last-stage flag, first-stage flag, and the attention
    cores' forward FLOPs for one micro-batch of every stage."""
    case = job.case
    arch, t = case.model.arch, case.training
    keys = [(s.pp, s.virtual_stages) for s in sa.shapes]
    kinds = {k: stage_kinds(arch, *k) for k in dict.fromkeys(keys)}
    n_dense = _gather(keys, {k: [x[0] for x in v] for k, v in kinds.items()}, sa.P)
    n_moe = _gather(keys, {k: [x[1] for x in v] for k, v in kinds.items()}, sa.P)
    causal = case.options.causal_attention_flops
    cores = {k: stage_core_flops(arch, *k, t.seq_len, causal) for k in dict.fromkeys(keys)}
    core = _gather(keys, cores, sa.P) * sa.col("b")
    last = sa.stage == sa.col("pp") - 1
    return n_dense, n_moe, last, sa.stage == 0, core


def _microbatch_seconds(job, sa, mode: Recompute, n_dense, n_moe, last, core) -> np.ndarray:
    """[N] seconds of one micro-batch on the slowest stage, on one GPU."""
    case = job.case
    arch, t, o = case.model.arch, case.training, case.options
    keys = [s.micro_batch_size for s in sa.shapes]
    terms = {
        b: microbatch_flop_terms(arch, t.seq_len, b, mode, o.causal_attention_flops)
        for b in dict.fromkeys(keys)
    }
    cols = [_gather(keys, {b: f[i] for b, f in terms.items()})[:, None] for i in range(5)]
    separate = o.attention_efficiency if t.flash_attention else None
    speedup = linear_speedup(t.precision, case.device)
    cost = stage_peak_seconds(
        cols, n_dense, n_moe, last, core, core_passes(mode), o.kernel_efficiency, separate, speedup
    )
    cost = np.where(sa.valid, cost, 0).max(axis=1)
    return cost / (sa.tp * sa.cp) / case.device.peak_flops_per_s


def _bandwidths(job, sa: ShapeArrays) -> dict[str, np.ndarray]:
    """[N] ring bandwidth of each axis (dp: the dp·cp gradient group) for every shape."""
    from trainplan.optimizer.case import links_for
    from trainplan.topology.placement import axis_spans, two_tier_bandwidth

    case = job.case
    N = len(sa.shapes)
    out = {a: np.zeros(N) for a in (*_AXES, "dp")}
    if case.fabric:  # a cluster graph: each shape's links from the graph (no closed form)
        for n, s in enumerate(sa.shapes):
            links = links_for(s.layout(1, Recompute.NONE), case.links, case.fabric)
            for axis in out:
                bw = links["dp_cp" if axis == "dp" else axis].bandwidth_bytes_per_s
                out[axis][n] = bw or np.inf
        return out
    orders = [s.rank_order for s in sa.shapes]
    for order in dict.fromkeys(orders):
        rows = np.array([o == order for o in orders])
        degrees = {a: getattr(sa, a)[rows] for a in ("tp", "cp", "ep", "dp", "pp")}
        spans = axis_spans(degrees, order, ("tp", "cp", "ep", "dp_cp", "pp"))
        for axis in out:
            span = spans["dp_cp" if axis == "dp" else axis]
            out[axis][rows] = two_tier_bandwidth(span, case.links)
    return out


def time_arrays(job, sa: ShapeArrays, zero_stages, recomputes, legal) -> dict[str, np.ndarray]:
    """t1 [N, R] (compute × (1 + bubble) + exposed tp, cp, ep, pp) and t2 [N, Z] (exposed dp),
    in whole nanoseconds, as :func:`model.estimate.time_terms` and
    :func:`model.estimate.objective_ns` give them."""
    N, Z, R = len(sa.shapes), len(zero_stages), len(recomputes)
    out = {"t1": np.zeros((N, R), dtype=np.int64), "t2": np.zeros((N, Z), dtype=np.int64)}
    for rows, sub in sa.groups():
        part = _time_group(job, sub, zero_stages, recomputes, legal[rows])
        out["t1"][rows], out["t2"][rows] = part["t1"], part["t2"]
    return out


def _time_group(job, sa: ShapeArrays, zero_stages, recomputes, legal) -> dict[str, np.ndarray]:
    """:func:`time_arrays` for shapes of one pipeline degree: the roofline model's rows
    (:mod:`optimizer.batch_roofline`) and the single model's."""
    N, Z, R = len(sa.shapes), len(zero_stages), len(recomputes)
    out = {"t1": np.zeros((N, R), dtype=np.int64), "t2": np.zeros((N, Z), dtype=np.int64)}
    roof = roofline_rows(job, sa)
    for rows, compute in ((roof, _roofline_group), (~roof, _single_group)):
        if rows.any():
            part = compute(job, sa.subset(rows), zero_stages, recomputes, legal[rows])
            out["t1"][rows], out["t2"][rows] = part["t1"], part["t2"]
    return out


def _roofline_group(job, sa: ShapeArrays, zero_stages, recomputes, legal) -> dict[str, np.ndarray]:
    """The roofline model's t1 and t2 of shapes of one pipeline degree."""
    n_dense, n_moe, last, first, _ = _stage_kind_arrays(job, sa)
    shape = (len(sa.shapes), sa.P)
    kinds = tuple(np.broadcast_to(k, shape) for k in (n_dense, n_moe, last, first))
    return roofline_times(job, sa, zero_stages, recomputes, legal, kinds, _busiest_params(job, sa))


def _single_group(job, sa: ShapeArrays, zero_stages, recomputes, legal) -> dict[str, np.ndarray]:
    """The single model's t1 and t2 of shapes of one pipeline degree."""
    case = job.case
    arch, t, o = case.model.arch, case.training, case.options
    assert arch is not None
    N, Z, R = len(sa.shapes), len(zero_stages), len(recomputes)
    n_dense, n_moe, last, first, core = _stage_kind_arrays(job, sa)
    valid = sa.valid
    bw = _bandwidths(job, sa)
    m, tp, cp, b = sa.m, sa.tp, sa.cp, sa.b
    sp = tp > 1
    s, beta = np.float64(t.seq_len), t.activation_bytes  # a float: the terms stay arrays
    most_layers = np.where(valid, n_dense + n_moe, 0).max(axis=1)
    most_moe = np.where(valid, n_moe, 0).max(axis=1)
    window = _microbatch_seconds(job, sa, Recompute.NONE, n_dense, n_moe, last, core)
    t1 = np.zeros((N, R), dtype=np.int64)
    physical = sa.col("physical")
    tied = np.zeros(N)
    if shares_embedding_with_last_stage(arch):
        vocab = padded_vocab(arch.vocab_size, _vocab_multiples(case, sa), tp)
        tied = np.where(sa.physical & (sa.pp > 1), vocab * arch.hidden_size / tp, 0)
    frameworks = [sh.framework for sh in sa.shapes]
    reduce_bytes = np.array([_reduce_bytes(fw, t, zero_stages) for fw in frameworks], dtype=float)
    pp_total = np.where(
        sa.pp > 1,
        pp_bytes(
            arch.hidden_size, tp, cp, b, m, sa.v, s, beta, sp | ~sa.physical, tied, reduce_bytes
        ),
        0,
    )
    for ri, mode in enumerate(recomputes):
        mode = Recompute(mode)
        t_mb = _microbatch_seconds(job, sa, mode, n_dense, n_moe, last, core)
        compute = m * t_mb
        full = mode in (Recompute.FULL, Recompute.SQRT)
        tp_all, tp_hidden = tp_bytes(
            arch, n_dense + n_moe, n_moe, first, last, sa.col("tp"), sa.col("tp"), sa.col("cp"),
            sa.col("b"), sa.col("m"), s, beta, sa.col("tp") > 1, physical, full,
        )  # fmt: skip
        tp_all = np.where(valid, tp_all, -1)
        pick = tp_all.argmax(axis=1)
        rows = np.arange(N)
        traffic = {
            "tp": (tp_all[rows, pick], tp_hidden[rows, pick]),
            "cp": (
                cp_bytes(
                    arch,
                    most_layers,
                    cp,
                    sa.cp_ring,
                    sa.cp_a2a,
                    tp,
                    b,
                    m,
                    s,
                    beta,
                    mode != Recompute.NONE,
                ),  # fmt: skip
                0,
            ),
            "ep": (ep_bytes(arch, most_moe, sa.ep, tp, cp, b, m, s, beta, sp, full), 0),
            "pp": (pp_total, 0),
        }
        exposed: Any = 0.0
        for axis, (total, hidden) in traffic.items():
            exposed = exposed + exposed_seconds(
                (total - hidden) / bw[axis], 0.0, m, o.overlap[axis], window
            )
        seconds = compute * (1 + bubble_ratio(sa.pp, m, sa.v)) + exposed
        seconds = seconds + activation_offload_arrays(job, sa, mode, n_dense, n_moe, t_mb)
        t1[:, ri] = np.rint(seconds * 1e9)
    t2 = np.zeros((N, Z), dtype=np.int64)
    busiest = _busiest_params(job, sa)
    for fw in dict.fromkeys(frameworks):
        rows = np.array([f is fw for f in frameworks])
        for zi, z in enumerate(zero_stages):
            if not (legal[rows, zi]).any():
                continue
            mech = mechanism(
                fw, z, t.weight_bytes, t.gradient_bytes, t.optimizer_bytes, o.zero3_regather
            )
            dense, experts = busiest[0][rows], busiest[1][rows]
            shard = sa.dp[rows] * sa.cp[rows]
            total, per_mb = dp_bytes(mech, dense, experts, shard, shard // sa.ep[rows], m[rows])
            exposed = exposed_seconds(
                total / bw["dp"][rows],
                per_mb / bw["dp"][rows],
                m[rows],
                o.overlap["dp"],
                window[rows],
            )
            exposed = exposed + offload_arrays(
                case, mech, dense, experts, shard, shard // sa.ep[rows], m[rows]
            )
            t2[rows, zi] = np.where(legal[rows, zi], np.rint(exposed * 1e9), 0)
    roof = roofline_rows(job, sa)
    if roof.any():
        sub = sa.subset(roof)
        shape = (len(sa.shapes), sa.P)
        kinds = tuple(np.broadcast_to(k, shape)[roof] for k in (n_dense, n_moe, last, first))
        part = roofline_times(
            job,
            sub,
            zero_stages,
            recomputes,
            legal[roof],
            kinds,
            (busiest[0][roof], busiest[1][roof]),
        )
        t1[roof], t2[roof] = part["t1"], part["t2"]
    return {"t1": t1, "t2": t2}


def _reduce_bytes(fw: Framework, t, zero_stages) -> int:
    """Bytes per gradient element the framework reduces (the tied embedding's all-reduce)."""
    z = next((z for z in zero_stages if z in ZERO_STAGES[fw]), ZERO_STAGES[fw][0])
    return mechanism(fw, z, t.weight_bytes, t.gradient_bytes, t.optimizer_bytes).reduce_bytes


def _busiest_params(job, sa: ShapeArrays) -> tuple[np.ndarray, np.ndarray]:
    """[N] dense and expert parameters on one GPU of each shape's stage with the most."""
    case = job.case
    keys = [_structure_key(s, case.vocab_multiple) for s in sa.shapes]
    table = {}
    for k in dict.fromkeys(keys):
        params = stage_params_per_gpu(case.model, *k)
        _, _, dense, experts = max(params, key=lambda p: (p[2] + p[3], -p[0]))
        table[k] = (dense, experts)
    return (
        _gather(keys, {k: v[0] for k, v in table.items()}),
        _gather(keys, {k: v[1] for k, v in table.items()}),
    )
