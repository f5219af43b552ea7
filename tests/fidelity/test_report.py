"""docs/fidelity-layers.md is what ``python -m tests.fidelity.report`` writes from this sweep."""

import pytest

pytest.importorskip("torch")

from tests.fidelity import report  # noqa: E402


def test_fidelity_doc_is_current():
    assert report.DOC.read_text() == report.render(), (
        "docs/fidelity-layers.md is out of date: run python -m tests.fidelity.report"
    )
