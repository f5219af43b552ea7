"""``python -m trainplan.interface.bench``: :func:`interface.bench.search.main`."""

from trainplan.interface.bench.search import main

main()
