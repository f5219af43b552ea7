"""Hypothesis runs without its per-example deadline: a deadline is a timing assertion, and timings
belong to the benchmark (``python -m trainplan.interface.bench``), not to tests that must pass on a
loaded machine."""

from hypothesis import settings

settings.register_profile("trainplan", deadline=None)
settings.load_profile("trainplan")
