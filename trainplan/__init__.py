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

from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainplan.api import Case, Layout, Scenario, evaluate, search

__all__ = ["evaluate", "search", "Layout", "Case", "Scenario", "__version__"]

try:
    __version__ = version("trainplan")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"


def __getattr__(name: str) -> Any:
    """The facade's names (:mod:`trainplan.api`), imported when first asked for (PEP 562)."""
    if name in ("evaluate", "search", "Layout", "Case", "Scenario"):
        from trainplan import api

        return getattr(api, name)
    raise AttributeError(f"module 'trainplan' has no attribute {name!r}")
