"""The benchmarks, out of the product's import path: the search's speed on published-scale
problems beside a reference loop (:mod:`.search`; ``python -m trainplan.interface.bench``), the
per-stage search (:mod:`.per_stage`; ``python -m trainplan.interface.bench.per_stage``) and the
sweep (:mod:`.sweep`; ``python -m trainplan.interface.bench --sweep``)."""
