"""MkDocs hooks (mkdocs.yml ``hooks:``): the generated reference pages and the API's sources.

* A page holding ``<!-- generated: cli -->`` or ``<!-- generated: json -->`` gets the command-line
  or JSON reference there (:mod:`trainplan.interface.cli.reference`), so neither can drift from code.
* griffe (mkdocstrings) reads the package statically, but the repository keeps the package's
  folders side by side (``model/`` installs as ``trainplan.model``, as ``pyproject.toml`` maps
  them): ``build/api-src/trainplan`` is laid out as the installed package, links to the folders.
* Docstrings cross-reference in Sphinx's roles (``:class:`x```); rendered, the role's name goes.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
API_SRC = ROOT / "build" / "api-src" / "trainplan"
PACKAGES = ("model", "topology", "optimizer", "interface", "scenarios")


def _lay_out_package() -> None:
    if API_SRC.exists() or API_SRC.is_symlink():
        shutil.rmtree(API_SRC)
    API_SRC.mkdir(parents=True)
    for path in (ROOT / "trainplan").iterdir():
        if path.suffix in (".py", ".typed"):
            (API_SRC / path.name).symlink_to(path)
    for name in PACKAGES:
        (API_SRC / name).symlink_to(ROOT / name, target_is_directory=True)


_lay_out_package()  # at load, before mkdocstrings reads its paths

_ROLE = re.compile(r":(?:py:)?(?:mod|class|func|meth|attr|data|exc|obj|const):(<code>)")


def on_page_markdown(markdown: str, **_: object) -> str:
    if "<!-- generated: cli -->" in markdown:
        from trainplan.interface.cli.reference import cli_markdown

        markdown = markdown.replace("<!-- generated: cli -->", cli_markdown())
    if "<!-- generated: api -->" in markdown:
        from trainplan.interface.web.params import api_markdown

        markdown = markdown.replace("<!-- generated: api -->", api_markdown())
    if "<!-- generated: json -->" in markdown:
        from trainplan.interface.cli.reference import json_markdown

        markdown = markdown.replace("<!-- generated: json -->", json_markdown())
    return markdown


def on_page_content(html: str, **_: object) -> str:
    return _ROLE.sub(r"\1", html)
