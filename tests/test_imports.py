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
    "ortools": (
        "optimizer/solver.py",
        "optimizer/cpsat.py",
        "optimizer/rlhf/cpsat.py",
        "optimizer/stage_cpsat.py",
    ),
    "pandas": ("interface/render/report.py", "interface/sweep/results.py"),
    "pyarrow": ("interface/sweep/results.py",),  # a sweep's Parquet results
    "ray": ("interface/sweep/engines.py",),  # the sweep's optional engine
    "tqdm": ("interface/cli/",),
    "click": ("interface/cli/",),
    "matplotlib": (
        "interface/render/figure.py",
        "interface/render/plots.py",
        "interface/render/pipeline_plots.py",
    ),
    "networkx": ("topology/",),
    "tabulate": ("interface/render/report.py",),
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
    """The brief's sibling folder (``shared`` beside the checkout) exists only where the project
    was built, never in a user's clone; the project's own copies live in ``scenarios/``. CI also
    runs in a bare clone."""
    if path == Path(__file__):
        return  # the pattern itself
    hits = [line for line in path.read_text().splitlines() if OUTSIDE.search(line)]
    assert not hits, f"{path.relative_to(ROOT)} reads the sibling folder outside the clone: {hits}"


# ------------------------------------------------------------------ the house rules (DESIGN.md
# "Layout of the code"): no cycles and no private names across modules anywhere in the package;
# no imports hidden in functions either, except to delay a heavy dependency (LAZY_IMPORTS); and model/ speaks
# parameter names, not the CLI's flags.

HOUSE_FILES = sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))
"""Every module of the package: the core, the interface and the scenarios' loaders. The CLI's
lazy loading of its command modules (``interface/cli/__init__.py``, ``importlib`` over
``COMMAND_MODULES``) is data, not an import statement, and so not an edge here."""


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return "trainplan." + ".".join(parts)


def _runtime_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement that runs (``if TYPE_CHECKING:`` blocks left out)."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip |= {id(n) for n in ast.walk(node)}
    return [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Import | ast.ImportFrom) and id(n) not in skip
    ]


def _project_imports(path: Path) -> set[str]:
    """The project's modules a file imports when it runs: ``from pkg import name`` is ``pkg``,
    and ``pkg.name`` too when that is a module (``from trainplan.interface.cli import rlhf``)."""
    modules = {_module(p) for p in HOUSE_FILES}
    out = set()
    for node in _runtime_imports(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            names = [n for n in names if n == node.module or n in modules]
        else:
            names = [a.name for a in node.names]
        out |= {n for n in names if n and n.startswith("trainplan.")}
    return out


def test_no_import_cycles():
    """No cycle among the package's modules (model/, topology/, optimizer/, interface/,
    scenarios/), counting imports inside functions (:func:`_project_imports`)."""
    graph = {_module(p): _project_imports(p) for p in HOUSE_FILES}
    state: dict[str, int] = {}
    cycles = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in graph.get(node, ()):
            if state.get(nxt) == 1:
                cycle = path[path.index(nxt) :] + [nxt] if nxt in path else [node, nxt]
                cycles.append(" → ".join(cycle))
            elif nxt in graph and not state.get(nxt):
                visit(nxt, [*path, nxt])
        state[node] = 2

    for node in graph:
        if not state.get(node):
            visit(node, [node])
    assert not cycles, cycles


LAZY_IMPORTS: dict[str, str] = {
    # the command line: `trainplan --help` imports every command module (click lists each
    # command's help), and `trainplan CMD --help` imports the command's module; what a command
    # needs only when it runs is imported in the command's function
    "interface/cli/planner.py": "numpy and the cost model (interface.commands, interface.requests,"
    " interface.render.report with tabulate): `trainplan evaluate --help` loads none of them",
    "interface/cli/common.py": "numpy (interface.commands, for --json only): `trainplan evaluate"
    " --help` and `trainplan calibrate --help` load none",
    "interface/cli/options.py": "numpy (interface.scenario_keys, only when --set is given):"
    " `trainplan evaluate --help` loads none",
    "interface/cli/examples.py": "numpy (interface.scenario_keys, interface.examples):"
    " `trainplan example --help` loads none",
    "interface/cli/calibrate.py": "networkx (interface.calibration → interface.inputs → topology):"
    " `trainplan calibrate --help` loads none",
    "interface/cli/sweep.py": "numpy, multiprocessing and concurrent.futures (interface.sweep: its"
    " engines, results, summary, charts; pyarrow behind results): `trainplan sweep --help` and"
    " `trainplan --help` load none",
    "interface/cli/serve.py": "FastAPI, Starlette and uvicorn (interface.web.app)",
    "interface/cli/interrupt.py": "OR-Tools (optimizer.cpsat), only while a search runs",
    "interface/cli/rlhf.py": "OR-Tools (optimizer.rlhf.search, optimizer.solver; interface.rlhf.text"
    " reads one of its constants), only for rlhf-plan and the tab's text",
    "interface/cli/tabs.py": "matplotlib's wrappers (interface.render.plots; matplotlib itself"
    " behind them), only when a picture is written",
    "interface/cli/frontier.py": "matplotlib's wrappers (interface.render.plots), only with --chart",
    "interface/cli/search.py": "the per-stage report (interface.render.per_stage_report, with"
    " shlex), only with --per-stage: `trainplan --help` does not load it",
    # modules `trainplan --help` loads through the command modules above
    "interface/search_commands.py": "OR-Tools (optimizer.search, optimizer.per_stage,"
    " optimizer.per_stage_frontier); with them the search's own inputs (interface.scenario,"
    " optimizer.tables, optimizer.problem with numpy, interface.launch), which `trainplan"
    " --help` and `trainplan evaluate` do not load",
    "interface/search_notes.py": "OR-Tools (optimizer.search, for SOLVE_FLOOR_S), only when a"
    " search passed its time limit",
    "interface/commands.py": "the RLHF tab (interface.tabs and the RLHF model behind it, 20"
    " modules) and the per-stage frontier's command (interface.per_stage_frontier_command, with"
    " OR-Tools): `trainplan evaluate` does not load them",
    "interface/requests.py": "numpy (optimizer.problem, for the search's Constraints), only when"
    " a search request's constraints are read: `trainplan evaluate` does not load it",
    "interface/examples.py": "numpy (interface.commands, interface.tabs), only when an example"
    " runs: `trainplan example --list` loads none",
    "interface/rlhf/text.py": "OR-Tools (optimizer.rlhf.search, for ALTERNATIVES_WITHIN): the rlhf"
    " tab's text does not load the solver",
}
"""The only modules that import the project's own modules inside functions, each with the heavy
dependency the import delays: start-up (``trainplan --help``, ``trainplan CMD --help``, a command's
run) loads no more than it needs. Measured with ``python -X importtime -m trainplan --help``: an
import that loads nothing new at start-up belongs at the top of its module. The CLI's lazy loading
of its command modules (:data:`trainplan.interface.cli.COMMAND_MODULES`) is ``importlib``, not an
import statement. model/, optimizer/ and topology/ have none."""


def _hidden_imports(path: Path) -> list[str]:
    """``line N`` of each import of a project module inside a function (relative imports count)."""
    tree = ast.parse(path.read_text())
    return [
        f"line {n.lineno}"
        for fn in ast.walk(tree)
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef)
        for n in ast.walk(fn)
        if (isinstance(n, ast.ImportFrom) and (n.level or (n.module or "").startswith("trainplan")))
        or (isinstance(n, ast.Import) and any(a.name.startswith("trainplan") for a in n.names))
    ]


@pytest.mark.parametrize("path", HOUSE_FILES, ids=[str(p.relative_to(ROOT)) for p in HOUSE_FILES])
def test_no_project_imports_inside_functions(path):
    rel = str(path.relative_to(ROOT))
    hidden = _hidden_imports(path)
    if rel in LAZY_IMPORTS:
        assert hidden, f"{rel} imports nothing in functions now: remove it from LAZY_IMPORTS"
    else:
        assert not hidden, f"{rel} imports project modules in functions: {hidden}"


def test_lazy_imports_are_outside_the_core():
    assert all(k.startswith(("interface/", "scenarios/")) for k in LAZY_IMPORTS)
    assert all((ROOT / k).is_file() for k in LAZY_IMPORTS)


@pytest.mark.parametrize("path", HOUSE_FILES, ids=[str(p.relative_to(ROOT)) for p in HOUSE_FILES])
def test_no_private_names_across_modules(path):
    private = [
        f"{n.module}.{a.name}"
        for n in _runtime_imports(ast.parse(path.read_text()))
        if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("trainplan.")
        for a in n.names
        if a.name.startswith("_")
    ]
    assert not private, f"{path.relative_to(ROOT)} imports private names {private}"


def _cli_flags() -> set[str]:
    """Every option the ``trainplan`` command line takes (``--seq-len``…)."""
    click = pytest.importorskip("click")
    from trainplan.interface.cli import cli

    ctx = click.Context(cli)
    flags: set[str] = set()
    stack: list[click.Command] = [cli]
    while stack:
        command = stack.pop()
        flags |= {o for p in command.params for o in getattr(p, "opts", ()) if o.startswith("--")}
        if isinstance(command, click.Group):  # the lazy group loads each command when asked
            names = command.list_commands(ctx)
            stack += [c for c in (command.get_command(ctx, n) for n in names) if c is not None]
    return flags - {"--help", "--version"}


def _messages(path: Path) -> list[tuple[int, str]]:
    """The string constants of a module that are not docstrings (messages, notes)."""
    tree = ast.parse(path.read_text())
    docs = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.FunctionDef | ast.ClassDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    docs |= {  # attribute docstrings: a bare string after an assignment
        id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr)
    }
    return [
        (n.lineno, n.value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs
    ]


MODEL_FILES = sorted((ROOT / "model").rglob("*.py"))
"""Every module of model/, model/rlhf/ included (the rlhf tab's ``--rollout-engine`` is
``rollout_engine`` there too)."""


def test_model_messages_name_parameters_not_flags():
    """model/ speaks parameter names (``micro_batch_size``); the interface maps them to the
    flags a user typed (``interface/flags.py``). Framework flags cited as sources (Megatron-LM's
    ``--recompute-num-layers``) are not trainplan's and may appear."""
    flags = _cli_flags()
    found = [
        f"{p.relative_to(ROOT)}:{line} {flag}"
        for p in MODEL_FILES
        for line, text in _messages(p)
        for flag in re.findall(r"--[a-z][a-z0-9-]*", text)
        if flag in flags
    ]
    assert not found, found


# ------------------------------------------------------------------ sizes: modules under about
# 500 lines, functions under about 60 (docs/design.md "Layout of the code"). The sets below are
# today's exceptions: a module or function newly over its limit fails, and one that comes under
# it must leave its set, so the sets only shrink.

MODULE_LINES = 500
FUNCTION_LINES = 60
LONG_MODULES: set[str] = set()
LONG_FUNCTIONS: set[str] = set()


def _sizes() -> tuple[set[str], set[str]]:
    """(modules over :data:`MODULE_LINES`, ``path::function`` over :data:`FUNCTION_LINES`)."""
    modules, functions = set(), set()
    for path in FILES:
        rel = str(path.relative_to(ROOT))
        text = path.read_text()
        if len(text.splitlines()) > MODULE_LINES:
            modules.add(rel)
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert node.end_lineno is not None
                if node.end_lineno - node.lineno + 1 > FUNCTION_LINES:
                    functions.add(f"{rel}::{node.name}")
    return modules, functions


def test_no_new_long_modules_or_functions():
    modules, functions = _sizes()
    assert not modules - LONG_MODULES, (
        f"over {MODULE_LINES} lines: {sorted(modules - LONG_MODULES)}"
    )
    assert not functions - LONG_FUNCTIONS, (
        f"over {FUNCTION_LINES} lines: {sorted(functions - LONG_FUNCTIONS)}"
    )
    shorter = (LONG_MODULES - modules) | (LONG_FUNCTIONS - functions)
    assert not shorter, f"now within the limit: remove {sorted(shorter)} from the exceptions"


# ------------------------------------------------------------------ the cost model's and the
# search's tests build their inputs directly (Case.of, Layout.of, the model/ and topology/
# constructors, the catalogue), not through the interface they sit below; the command line's,
# the web's and the JSON form's tests live in tests/interface/.


def test_core_tests_build_their_inputs_directly():
    """No file under tests/model or tests/optimizer imports trainplan.interface (at the top or
    inside a function)."""
    tests = [ROOT / "tests" / "model", ROOT / "tests" / "optimizer"]
    through = sorted(
        str(p.relative_to(ROOT))
        for folder in tests
        for p in sorted(folder.rglob("*.py"))
        if any(m.split(".")[:2] == ["trainplan", "interface"] for m in _modules(p))
    )
    assert not through, f"import the interface (move the test to tests/interface): {through}"
