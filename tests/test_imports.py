"""The dependency rule (docs/development.md "Design"): model ← topology ← optimizer ← interface (scenarios: data,
below the interfaces); each third-party library in one place; the project's own modules imported
by their installed names (``trainplan.model``…), never by the bare folder names a user's
site-packages would collide on. Read from the source with ast, so a stray import fails here, not
in a user's environment."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FILES = sorted(
    p
    for pkg in ("model", "topology", "optimizer", "interface", "scenarios")
    for p in (ROOT / pkg).rglob("*.py")
)


PACKAGES = ("model", "topology", "optimizer", "interface", "scenarios")


def _modules(path: Path) -> set[str]:
    """Every absolute module name the file imports."""
    tree = ast.parse(path.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
    return out


def _imports(path: Path) -> set[str]:
    """Top-level names imported, with the project's packages by their folder name (``model``
    for ``trainplan.model.memory``) and third-party libraries by theirs."""
    out = set()
    for name in _modules(path):
        parts = name.split(".")
        out.add(parts[1] if parts[0] == "trainplan" and len(parts) > 1 else parts[0])
    return out


ALL_FILES = FILES + sorted((ROOT / "tests").rglob("*.py"))


@pytest.mark.parametrize("path", ALL_FILES, ids=[str(p.relative_to(ROOT)) for p in ALL_FILES])
def test_project_imported_by_installed_name(path):
    bare = {n for n in _modules(path) if n.split(".")[0] in PACKAGES}
    assert not bare, f"{path.relative_to(ROOT)} imports {sorted(bare)}: use trainplan.<package>"


# library -> the only places (path prefixes, relative to the repo) allowed to import it
OWNERS = {
    # the layout search's model and the RLHF placement search's model (issue 12)
    "ortools": ("optimizer/cpsat.py", "optimizer/rlhf_cpsat.py", "optimizer/stage_cpsat.py"),
    "pandas": ("interface/report.py", "interface/sweep/results.py"),
    "pyarrow": ("interface/sweep/results.py",),  # a sweep's Parquet results
    "ray": ("interface/sweep/engines.py",),  # the sweep's optional engine
    "tqdm": ("interface/cli/",),
    "click": ("interface/cli/",),
    "matplotlib": ("interface/plots.py",),
    "networkx": ("topology/",),
    "tabulate": ("interface/report.py",),
    "fastapi": ("interface/web/",),
    "starlette": ("interface/web/",),
    "uvicorn": ("interface/web/",),
    "swagger_ui_bundle": ("interface/web/",),
    "mkdocs": ("interface/web/manual.py",),
    "torch": (),
}


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(ROOT)) for p in FILES])
def test_dependency_rule(path):
    rel = str(path.relative_to(ROOT))
    names = _imports(path)
    if rel.startswith("model/"):
        banned = {"topology", "optimizer", "interface", "numpy", *OWNERS}
        assert not names & banned, f"{rel} imports {names}"
    if rel.startswith("topology/"):
        assert not names & {"optimizer", "interface"}, rel
    if rel.startswith(("optimizer/", "scenarios/")):  # the interfaces sit above the search
        assert "interface" not in names, f"{rel} imports the interface layer"
    for lib, owners in OWNERS.items():
        if lib in names:
            assert rel.startswith(owners) if owners else False, (
                f"{rel} imports {lib}; only {owners} may"
            )


OUTSIDE = re.compile(r"""["']shared["']|\.\./shared|parents\[\d\]\s*/\s*["']shared""")


@pytest.mark.parametrize("path", ALL_FILES, ids=[str(p.relative_to(ROOT)) for p in ALL_FILES])
def test_reads_nothing_outside_the_repository(path):
    """The brief's ``../shared`` folder sits beside the repository only where it was built; the
    project's own copies live in ``scenarios/`` (issue 15). CI also runs in a bare clone."""
    if path == Path(__file__):
        return  # the pattern itself
    hits = [line for line in path.read_text().splitlines() if OUTSIDE.search(line)]
    assert not hits, f"{path.relative_to(ROOT)} reads ../shared: {hits}"
