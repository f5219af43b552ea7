"""model.pipeline.interleaved_peak on arrays of layouts (the search's tables) takes every
candidate state at once and must choose what the scalar loop (evaluate()'s) chooses: the same
peak and the same micro-batches held per chunk, ties to the earliest state."""

from __future__ import annotations

import itertools

import numpy as np

from trainplan.model.pipeline import interleaved_chunks_held_simulated, interleaved_peak


def test_the_worked_example_as_arrays() -> None:
    """pp 4, m 8, v 2, stage 0, chunks of one layer: warm-up 2·3 + 4 = 10 forwards, then the
    11th before the first backward: 7 micro-batches of chunk 0 and 4 of chunk 1, peak 11 —
    the scalar form's docstring, here for a column of two layouts (m 8 and 16)."""
    peak, held = interleaved_peak(4, np.array([[8], [16]]), 2, 0, (1, 1))
    assert peak.tolist() == [[11.0], [11.0]]
    assert [h.tolist() for h in held] == [[[7], [7]], [[4], [4]]]


def test_arrays_choose_what_the_scalar_loop_chooses() -> None:
    """Every stage of pp 2…8, v 2…10 and m of 1…4 groups, chunk weights with ties (equal
    chunks, empty ones): one [m, stage] array call against each scalar call, and the scalar
    call against the walked schedule."""
    weights = [(1, 1, 1), (2, 3, 3), (0, 2, 1), (3, 2, 2.5), (1, 0, 1, 1, 2)]
    for pp, w in itertools.product((2, 3, 4, 8), weights):
        v = len(w)
        ms = np.array([[g * pp] for g in (1, 2, 3, 4)])
        peak, held = interleaved_peak(pp, ms, v, np.arange(pp)[None, :], w)
        for (r, m), stage in itertools.product(enumerate(ms[:, 0].tolist()), range(pp)):
            one, counts = interleaved_peak(pp, m, v, stage, w)
            assert peak[r, stage] == one
            assert [int(h[r, stage]) for h in held] == counts
            if m <= 2 * pp:
                assert tuple(counts) == interleaved_chunks_held_simulated(pp, m, v, stage, w)
