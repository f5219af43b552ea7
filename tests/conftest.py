"""Hypothesis runs without its per-example deadline: a deadline is a timing assertion, and timings
belong to the benchmark (``python -m trainplan.interface.bench``), not to tests that must pass on a
loaded machine.

The longest test files run first. pytest-xdist (``--dist loadfile``) hands whole files to its
workers in the order they were collected, so a long file collected last runs alone at the end
while the other workers sit idle; started first, the long files share the workers and the many
short ones fill in around them. Only the order changes: every file still runs, each in one worker.
"""

from __future__ import annotations

import pytest
from hypothesis import settings

settings.register_profile("trainplan", deadline=None)
settings.load_profile("trainplan")

LONGEST_FIRST = (
    "tests/optimizer/test_tables_exact.py",
    "tests/interface/test_per_stage_cli.py",
    "tests/model/test_term_scopes.py",
    "tests/web/test_browser.py",
    "tests/test_cli_first_hour.py",
    "tests/interface/test_per_stage_frontier_cli.py",
    "tests/optimizer/test_rlhf_search.py",
    "tests/web/test_api.py",
    "tests/test_transcripts.py",
    "tests/web/test_browser_ways_in.py",
    "tests/test_cli_interrupt.py",
    "tests/test_cli_new_user.py",
    "tests/optimizer/test_oracle.py",
    "tests/optimizer/test_search.py",
    "tests/optimizer/test_per_stage.py",
    "tests/interface/test_allocator_retries_search.py",
)
"""The files whose tests took longest, longest first: the per-file sums of ``python -m pytest -m
'not exhaustive' --durations=0`` on 2 cores (2026-12-04, 628 s down to 120 s of a 5,674 s total).
A file missing here only runs later; a renamed file is not an error."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Put the files of :data:`LONGEST_FIRST` first, in its order; the rest keep theirs."""
    del config
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.partition("::")[0], len(rank)))
