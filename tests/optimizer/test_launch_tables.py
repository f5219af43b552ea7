"""The pipeline term's second table (without Megatron's launch order,
:mod:`optimizer.launch_tables`) is tabulated only where a legal candidate reads it, and every
entry a candidate reads is the one tabulating it for every row gave (issue: the search's speed).

Hand derivation (Llama 3 70B on 64 H100s, ``megatron`` only): Megatron-FSDP is ``megatron`` at
ZeRO 3 and :func:`model.frameworks.check_framework` allows it at pp 1 only; before Blackwell it
keeps no launch order (:func:`model.launch_order.launch_order_kept`, Megatron-LM
``megatron/training/arguments.py`` ``validate_args``: "FSDP requires CUDA_DEVICE_MAX_CONNECTIONS >
1 or unset"). So every one of the shapes is unordered at ZeRO 3, but only those of pp 1 have a
legal ZeRO-3 candidate; the second table's groups are then the pp-1 groups alone, and every
other row's second entry is its first."""

from __future__ import annotations

import numpy as np
import pytest

from trainplan.model.estimate import evaluation_context
from trainplan.model.terms import term
from trainplan.optimizer import launch_tables
from trainplan.optimizer.case import Case
from trainplan.optimizer.columns import ShapeColumns, tabulate
from trainplan.optimizer.launch_tables import UNORDERED_ZERO, needs_unordered
from trainplan.optimizer.problem import Job, Problem
from trainplan.optimizer.search import check_against_evaluate, prepare
from trainplan.optimizer.space import SearchSpace


@pytest.fixture(scope="module")
def smoke():
    case = Case.of("llama3-70b", "H100-SXM")
    problem = Problem(jobs=(Job(case, 64, "64"),), space=SearchSpace(num_gpus=64))
    calls: list[tuple[int, str]] = []
    real = launch_tables.tabulate

    def counting(t, c, table, modifiers, read, P, skip=None, fixed=None):
        def noted(scalars, rows):
            skipped = skip is not None and skip(scalars, rows)
            if not skipped:
                calls.append((int(scalars["pp"]), str(scalars["framework"]), fixed["zero_stage"]))
            return skipped

        return real(t, c, table, modifiers, read, P, noted, fixed)

    mp = pytest.MonkeyPatch()
    mp.setattr(launch_tables, "tabulate", counting)
    try:
        tables = prepare(problem)[0]
    finally:
        mp.undo()
    return problem, tables, calls


def test_second_table_only_where_zero3_is_legal(smoke):
    _, tables, calls = smoke
    z3 = tables.zero_stages.index(3)
    pp = np.array([s.pp for s in tables.shapes])
    # every megatron shape loses the order at ZeRO 3 on H100 (Megatron-FSDP) ...
    assert tables.unordered[:, z3].all() and not tables.unordered[:, :z3].any()
    # ... but only pp-1 shapes run ZeRO 3 legally, and they alone read the second table
    need = needs_unordered(tables.unordered, tables.legal)
    assert (need.any(axis=1) == (pp == 1)).all() and (pp == 1).sum() > 0
    second = [(p, fw) for p, fw, z in calls if z == UNORDERED_ZERO]
    first = [(p, fw) for p, fw, z in calls if z != UNORDERED_ZERO]
    assert second and {p for p, _ in second} == {1}
    assert len(first) > 2 * len(second)  # was: every group twice
    # what no legal candidate reads is the first table's figure
    assert np.array_equal(tables.t1_unordered_ns[~need], tables.t1_ns[~need])


def test_read_entries_equal_the_full_tabulation_and_evaluate(smoke):
    problem, tables, _ = smoke
    job = tables.jobs[0]
    case = job.case
    c = evaluation_context(
        case.model, case.training, case.device, case.options, case.vocab_multiple
    )
    table = ShapeColumns(tables.shapes, case.training.global_batch_size, case.links, case.fabric)
    by_r = tables.legal.any(axis=1)
    rs = tables.recomputes
    (full,) = tabulate(
        term("pipeline_time"), c, table, {"recompute": rs}, lambda t: (t.total_s,), 1,
        lambda scalars, rows: not by_r[rows, rs.index(scalars["recompute"])].any(),
        {"zero_stage": UNORDERED_ZERO},
    )  # fmt: skip
    need = needs_unordered(tables.unordered, tables.legal)
    # bit for bit the figure the table held when every row was tabulated twice
    assert np.array_equal(np.rint(full * 1e9).astype(np.int64)[need], tables.t1_unordered_ns[need])
    # and the evaluator's at Megatron-FSDP (tp 8, ZeRO 3, pp 1): the tp overlap not credited
    z3 = tables.zero_stages.index(3)
    s, r = next((int(s), int(r)) for s, r in zip(*np.nonzero(need), strict=True)
                if tables.shapes[s].tp == 8 and tables.legal[s, z3, r])  # fmt: skip
    check_against_evaluate(tables, (s, z3, r))
    assert tables.t1_unordered_ns[s, r] > tables.t1_ns[s, r]
