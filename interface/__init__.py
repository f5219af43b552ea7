"""What people use: the ``trainplan`` command line (:mod:`trainplan.interface.cli`), text tables
and CSV (:mod:`~trainplan.interface.render.report`), pictures (:mod:`~trainplan.interface.render.plots`), the
tabs (pipeline, MFU, checkpointing, RLHF) and 20 worked examples (:mod:`~trainplan.interface.tabs`,
:mod:`~trainplan.interface.examples`), parameters and scenario files parsed into cases and search
problems (:mod:`~trainplan.interface.inputs`, :mod:`~trainplan.interface.scenario`), the
published-runs report (:mod:`~trainplan.interface.fidelity`) and the benchmark
(:mod:`~trainplan.interface.bench`). It sits one layer above the cost model (``model``), the
cluster (``topology``) and the search (``optimizer``): they never import it."""
