"""``trainplan serve``: the planner in the browser (the ``[web]`` extra).

:mod:`~interface.web.app` builds the app; :mod:`~interface.web.api` is the JSON API (each command's
``--json`` object), :mod:`~interface.web.figures` the figures and the CSV, :mod:`~interface.web.stream`
search progress, :mod:`~interface.web.pages` the tabs. Like the CLI, the web layer only parses,
calls the library (:mod:`interface.commands`, :mod:`interface.tabs`, :mod:`interface.render.plots`) and
presents.
"""
