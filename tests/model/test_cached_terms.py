"""The caches and array paths that make the search fast give what the plain computation gives:
each cached function against its uncached body (``__wrapped__``), and the array forms of
:func:`model.comm_layers.tp_bytes`, :func:`model.schedule_cost.in_flight_units` and
:func:`model.xp.elementwise` against the element-by-element computation, bit for bit."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from trainplan.model.comm_layers import Recomputed, recomputed_sends, tp_bytes
from trainplan.model.context_parallel import CpKind
from trainplan.model.frameworks import Framework
from trainplan.model.fsdp2_pipeline import held_chunks
from trainplan.model.layout import Recompute
from trainplan.model.legality import RULES, Setting, _scoped, first_broken, refusal
from trainplan.model.pipeline import Schedule
from trainplan.model.schedule_cost import _simulated_one, in_flight_units, split_span
from trainplan.model.specs import TrainingSpec
from trainplan.model.xp import elementwise, over_arrays
from trainplan.scenarios.catalogue import get_model

DEEPSEEK = get_model("deepseek-v3").model
MIXTRAL = get_model("mixtral-8x7b").model


@settings(max_examples=60, deadline=None)
@given(
    framework=st.sampled_from(list(Framework)),
    zero_stage=st.integers(0, 3),
    pp=st.sampled_from([1, 2, 4, 8, 16]),
    cp=st.sampled_from([1, 2, 4]),
    kind=st.sampled_from(list(CpKind)),
    tp=st.sampled_from([1, 2, 8]),
    schedule=st.sampled_from(list(Schedule)),
    v=st.sampled_from([1, 2, 3]),
)
def test_refusal_cache_is_the_rules(
    framework: Framework, zero_stage: int, pp: int, cp: int, kind: CpKind, tp: int,
    schedule: Schedule, v: int,
) -> None:  # fmt: skip
    """refusal, cached, says what its uncached body says for the questions the search asks
    (optimizer.space: the framework's ZeRO stages with a pipeline, the CP flavours, the split,
    the schedule)."""
    setting = Setting(DEEPSEEK, TrainingSpec(seq_len=4096, global_batch_size=1024), 1024)
    questions = [
        {"framework": framework, "zero_stage": zero_stage, "pp": pp},
        {"cp": cp, "cp_kind": kind, "cp_a2a": None, "tp": tp, "sp": tp > 1,
         "framework": framework, "pp": pp},
        {"pp": pp, "virtual_stages": v, "uneven_stages": True, "stage_layers": None,
         "framework": framework},
        {"pp": pp, "m": 64, "schedule": schedule, "virtual_stages": v, "framework": framework},
    ]  # fmt: skip
    for values in questions:
        assert refusal(setting, **values) == first_broken(setting, values, cached=False)
        assert refusal(setting, **values) == refusal(setting, **values)  # a hit, the same


@given(names=st.sets(st.sampled_from(sorted({n for r in RULES for n in r.scope}))))
def test_scoped_rules_keep_their_order(names: set[str]) -> None:
    """The rules whose whole scope is given, in RULES' order, as a filter of RULES gives."""
    want = [r for r in RULES if set(r.scope) <= names]
    assert list(_scoped(frozenset(names))) == want


def test_held_chunks_cache() -> None:
    """held_chunks, cached, against its body over every rank of small runtimes (v 2 … 6: the
    window of three and past it)."""
    for pp in (2, 4):
        for v in range(2, 7):
            for m in (pp, 2 * pp, 4 * pp):
                for rank in range(pp):
                    for reshard in (False, True):
                        args = (pp, v, m, rank, reshard)
                        assert held_chunks(*args) == held_chunks.__wrapped__(*args)


@settings(max_examples=40, deadline=None)
@given(
    schedule=st.sampled_from(["zb-v", "dualpipe", "dualpipev"]),
    half_pp=st.integers(1, 4),
    extra=st.integers(0, 8),
    f=st.floats(0.5, 1.0),
    b=st.floats(0.75, 2.0),
    w=st.floats(0.75, 1.0),
    block=st.none() | st.floats(1.5, 4.0),
)
def test_simulated_one_cache(
    schedule: str, half_pp: int, extra: int, f: float, b: float, w: float, block: float | None
) -> None:
    """The cached timeline of one layout against its body, and the array form (the search's)
    against each row computed alone, bit for bit."""
    pp = 2 * half_pp
    m = 2 * pp + 2 * extra  # every split schedule's range
    args = (schedule, pp, m, f, b, w, block)
    assert _simulated_one(*args) == _simulated_one.__wrapped__(*args)
    ms = np.array([m, m + 2])
    fs, bs, ws = np.array([f, 1.25 * f]), np.array([b, b]), np.array([w, 0.8 * w])
    fbs = None if block is None else np.array([block, block])
    got = split_span(schedule, pp, ms, fs, bs, ws, fbs)
    for k in range(2):
        fb = None if fbs is None else float(fbs[k])
        one = _simulated_one.__wrapped__(
            schedule, pp, int(ms[k]), float(fs[k]), float(bs[k]), float(ws[k]), fb
        )
        assert got[k] == one  # exact: the same float


@given(
    a=st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=1, max_size=12),
    b=st.floats(allow_nan=False, allow_infinity=False),
)
def test_elementwise_is_each_element(a: list[float], b: float) -> None:
    """elementwise over an array (a broadcast scalar, a None passed through) calls the function
    with each element as a Python float, in order: the loop it replaces, written out."""
    array = np.array(a)[:, None]
    calls: list[tuple[float, float, None]] = []

    def record(x: float, y: float, z: None) -> float:
        assert type(x) is float and type(y) is float and z is None
        calls.append((x, y, z))
        return x * 2 - y

    got = elementwise(record, array, b, None)
    assert got.shape == array.shape and got.dtype == np.float64
    want = [(float(array.reshape(-1)[k]), float(b), None) for k in range(len(a))]
    assert [(np.float64(x).tobytes(), np.float64(y).tobytes()) for x, y, _ in calls] == [
        (np.float64(x).tobytes(), np.float64(y).tobytes()) for x, y, _ in want
    ]
    assert got.reshape(-1).tolist() == [x * 2 - y for x, y, _ in want]


def _tp_columns(arch, again: Recomputed, gather: int | None, beta: int = 2):  # type: ignore[no-untyped-def]
    """tp_bytes over three layouts as the search's columns, and each layout alone exactly."""
    layers = np.array([[31.0], [15.0], [8.0]])
    moe = np.array([[28.0], [15.0], [4.0]])
    first, last = np.array([[True], [False], [True]]), np.array([[True], [True], [False]])
    tp, etp = np.array([[4], [8], [2]]), np.array([[1], [2], [1]])
    cp, b, m = np.array([[1], [2], [1]]), np.array([[1], [2], [4]]), np.array([[120], [8], [3]])
    sp = np.array([[True], [True], [False]])
    with over_arrays():
        cols = tp_bytes(
            arch, layers, moe, first, last, tp, etp, cp, b, m, 4096, beta, sp, True, again,
            False, gather,
        )  # fmt: skip
    rows = [
        tp_bytes(
            arch,
            int(layers[k, 0]),
            int(moe[k, 0]),
            bool(first[k, 0]),
            bool(last[k, 0]),
            int(tp[k, 0]),
            int(etp[k, 0]),
            int(cp[k, 0]),
            int(b[k, 0]),
            int(m[k, 0]),
            4096,
            beta,
            bool(sp[k, 0]),
            True,
            again,
            False,
            gather,
        )  # fmt: skip
        for k in range(3)
    ]
    return cols, rows


def test_tp_bytes_columns_are_floats() -> None:
    """With the gathers at β (gather_bytes = β, as without FP8 gathers) the columns are float64,
    not arrays of Python objects, and the same bits as gather_bytes None; each row is the exact
    figure, to the float."""
    t = TrainingSpec(seq_len=4096, global_batch_size=1024)
    for model in (DEEPSEEK, MIXTRAL):
        arch = model.arch
        for mode in (Recompute.NONE, Recompute.FULL, Recompute.SELECTIVE):
            again = recomputed_sends(arch, Framework.MEGATRON, mode, t)
            (total, hidden), rows = _tp_columns(arch, again, 2)
            (total_none, hidden_none), rows_none = _tp_columns(arch, again, None)
            assert total.dtype == np.float64 and hidden.dtype == np.float64
            assert total.tobytes() == total_none.tobytes()
            assert hidden.tobytes() == hidden_none.tobytes()
            assert rows == rows_none
            assert isinstance(rows[0][0], Fraction)
            for k, (row_total, _) in enumerate(rows):
                assert abs(total[k, 0] - float(row_total)) <= 1e-9 * float(row_total)


def test_in_flight_units_floats_over_arrays() -> None:
    """in_flight_units: Fractions for one layout, the same values as floats (whole numbers and
    halves, exact) for the search's arrays."""
    for schedule in ("zb-h1", "zb-h2", "zb-v", "dualpipe", "dualpipev"):
        for pp in (2, 4, 16):
            exact = in_flight_units(schedule, pp, 64)
            assert isinstance(exact, Fraction)
            with over_arrays():
                floats = in_flight_units(schedule, pp, 64)
            assert type(floats) is float and floats == exact
