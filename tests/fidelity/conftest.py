"""Without PyTorch (the ``fidelity`` extra) the suite's modules are not imported for doctests;
the test files skip themselves with ``pytest.importorskip`` so a developer sees why."""

import importlib.util

collect_ignore = []
if importlib.util.find_spec("torch") is None:
    collect_ignore = ["harness.py", "cases.py", "report.py"]
