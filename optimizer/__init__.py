"""The search, and only the search: legal shapes (``space``), the cost model over arrays of
them (``batch``, ``tables``), CP-SAT (``cpsat``), the exhaustive oracle (``enumerate``), search
problems and their jobs (``problem``, ``case``) and the searches themselves (``search``)."""
