"""Every docstring example of the installed package, run as a test.

The modules are imported by their installed names (``trainplan.model.memory``, …) rather than
collected from the folders by path, so each example runs against the same module objects a user
imports, and nothing imports the folders under their bare names.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

PACKAGES = ("trainplan.model", "trainplan.topology", "trainplan.optimizer", "trainplan.scenarios")
FACADE = ("trainplan.api",)
"""The Python facade (:mod:`trainplan.api`): a module, not a package, so listed by itself."""
"""The subpackages (each mapped to its folder by ``pyproject.toml``; an editable install finds
them through its import hook, so they are walked one by one from their own ``__path__``)."""


def _modules() -> list[str]:
    out = []
    for pkg in PACKAGES:
        out.append(pkg)
        path = importlib.import_module(pkg).__path__
        out += [i.name for i in pkgutil.walk_packages(path, pkg + ".")]
    return sorted([*(n for n in out if not n.endswith("__main__")), *FACADE])


MODULES = _modules()


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in finder.find(module, name):
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"
