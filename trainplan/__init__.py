"""trainplan: memory, traffic, bubble and MFU of a training layout, and the best layout.

The project's folders install under this namespace (``pyproject.toml`` maps them), so nothing
called ``model`` or ``optimizer`` lands at the top of a user's site-packages:

* :mod:`trainplan.model` — the exact cost model (``model/``);
* :mod:`trainplan.topology` — accelerators and clusters (``topology/``);
* :mod:`trainplan.optimizer` — the CP-SAT search, reports and the CLI (``optimizer/``);
* :mod:`trainplan.scenarios` — published models, tables and examples as package data
  (``scenarios/``).
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("trainplan")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"
