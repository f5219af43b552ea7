"""trainplan: memory, traffic, bubble and MFU of a training layout, and the best layout.

The project's folders install under this namespace (``pyproject.toml`` maps them), so nothing
called ``model`` or ``optimizer`` lands at the top of a user's site-packages:

* :mod:`trainplan.model` — the exact cost model (``model/``);
* :mod:`trainplan.topology` — accelerators and clusters (``topology/``);
* :mod:`trainplan.optimizer` — the CP-SAT search, reports and the CLI (``optimizer/``);
* :mod:`trainplan.scenarios` — published models, tables and examples as package data
  (``scenarios/``).

For Python users, four names here (:mod:`trainplan.api`, imported on first use so
``import trainplan`` loads neither numpy nor OR-Tools): :func:`~trainplan.api.evaluate`,
:func:`~trainplan.api.search`, :class:`~trainplan.api.Layout`, :class:`~trainplan.api.Case`.
"""

from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainplan.api import Case, Layout, evaluate, search

__all__ = ["evaluate", "search", "Layout", "Case", "__version__"]

try:
    __version__ = version("trainplan")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"


def __getattr__(name: str) -> Any:
    """The facade's names (:mod:`trainplan.api`), imported when first asked for (PEP 562)."""
    if name in ("evaluate", "search", "Layout", "Case"):
        from trainplan import api

        return getattr(api, name)
    raise AttributeError(f"module 'trainplan' has no attribute {name!r}")
