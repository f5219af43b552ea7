"""The dependency rule (DESIGN.md): model ← topology ← optimizer; each third-party library in one
place. Read from the source with ast, so a stray import fails here, not in a user's environment."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FILES = sorted(
    p for pkg in ("model", "topology", "optimizer", "scenarios") for p in (ROOT / pkg).rglob("*.py")
)


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module.split(".")[0])
    return out


# library -> the only places (path prefixes, relative to the repo) allowed to import it
OWNERS = {
    "ortools": ("optimizer/cpsat.py",),
    "pandas": ("optimizer/report.py",),
    "click": ("optimizer/cli/",),
    "matplotlib": ("optimizer/plots.py",),
    "networkx": ("topology/",),
    "tabulate": ("optimizer/report.py",),
    "torch": (),
}


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(ROOT)) for p in FILES])
def test_dependency_rule(path):
    rel = str(path.relative_to(ROOT))
    names = _imports(path)
    if rel.startswith("model/"):
        assert not names & {"topology", "optimizer", "numpy", *OWNERS}, f"{rel} imports {names}"
    if rel.startswith("topology/"):
        assert "optimizer" not in names, rel
    for lib, owners in OWNERS.items():
        if lib in names:
            assert rel.startswith(owners) if owners else False, (
                f"{rel} imports {lib}; only {owners} may"
            )
