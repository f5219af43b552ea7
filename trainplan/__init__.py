"""trainplan: memory, traffic, bubble and MFU of a training layout, and the best layout.

The project's folders install under this namespace (``pyproject.toml`` maps them), so nothing
called ``model`` or ``optimizer`` lands at the top of a user's site-packages:

* :mod:`trainplan.model` — the exact cost model (``model/``);
* :mod:`trainplan.topology` — accelerators and clusters (``topology/``);
* :mod:`trainplan.optimizer` — the CP-SAT search over the cost model's tables (``optimizer/``);
* :mod:`trainplan.interface` — the command line, the web page, reports, pictures and scenario
  files (``interface/``);
* :mod:`trainplan.scenarios` — published models, tables and examples as package data
  (``scenarios/``).

For Python users, five names here (:mod:`trainplan.api`, imported on first use so
``import trainplan`` loads neither numpy nor OR-Tools): :func:`~trainplan.api.evaluate` (one
layout's estimate), :func:`~trainplan.api.search` (the best layout),
:class:`~trainplan.api.Layout`, :class:`~trainplan.api.Case` (a model, recipe, layout and
accelerator to evaluate) and :class:`~trainplan.api.Scenario` (a scenario file read into its
typed form: ``Scenario.from_name("deepseek-v3-dualpipe").search()`` is ``trainplan search
--scenario scenarios/deepseek-v3-dualpipe.toml``).
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainplan.api import Case, Layout, Scenario, evaluate, search

__all__ = ["evaluate", "search", "Layout", "Case", "Scenario", "__version__"]


def __getattr__(name: str) -> Any:
    """The facade's names (:mod:`trainplan.api`) and ``__version__`` (the installed
    distribution's, ``0+unknown`` in a source tree never installed), computed when first asked
    for (PEP 562): ``importlib.metadata`` costs a command that never reads it a tenth of a
    second."""
    if name in ("evaluate", "search", "Layout", "Case", "Scenario"):
        from trainplan import api

        return getattr(api, name)
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            found = version("trainplan")
        except PackageNotFoundError:  # running from a source tree that was never installed
            found = "0+unknown"
        globals()["__version__"] = found
        return found
    raise AttributeError(f"module 'trainplan' has no attribute {name!r}")
