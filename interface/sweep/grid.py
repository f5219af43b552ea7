"""A sweep grid: a TOML file of the points ``trainplan sweep`` runs, each one search (or one
evaluation) with the inputs of a scenario file (:mod:`interface.scenario`).

A grid file is a scenario file — its keys apply to every point — plus the tables of what varies::

    description = "Llama 3 on three parts"
    command = "search"                 # or "evaluate" (then a [layout] table)
    objective = "time-to-train"        # any scenario key: objective, tokens, [space], [cluster]…
    tokens = 15e12
    gpu_hour_price = { H100-SXM = 2.5, H200 = 3.2 }

    [sweep]                            # every combination of these TOML arrays is one point
    model = ["llama3-8b", "llama3-70b"]
    gpu = ["H100-SXM", "H200"]
    gpus = [64, 128, "256..16384"]     # a range: the powers of two and 1.5× inside it
    seq_len = [8192]                   # also global_batch (or global_batch_tokens), framework, recipe

    [what_if]                          # multipliers of each part's catalogue figures
    hbm_capacity = [1, 1.5]            # topology.what_if.WHAT_IFS names them

    [recipe.fp8]                       # named recipes the recipe axis lists
    precision = "fp8"

    [[point]]                          # single points besides (or instead of) the grid
    model = "llama3-405b"
    gpus = 16384
    what_if = { nvlink_domain = 9 }

Values follow the project's number grammar (``16,384`` is one number, ``15e12``, ``70B``);
lists are TOML arrays, never comma text. Any bad key or value is one line naming the file, the key,
the value and the rule (:class:`~model.errors.ScenarioError`, exit code 2).
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from importlib.metadata import version
from pathlib import Path
from typing import Any

from trainplan.interface.inputs import LAYOUT_KEYS, RECIPE_KEYS, parse_framework
from trainplan.interface.scenario import TOP_KEYS, check_scenario
from trainplan.interface.sweep.names import check_grid_objective, check_models, named, price_notes
from trainplan.model.errors import PlannerError, ScenarioError
from trainplan.model.units import parse_count, parse_counts, parse_number
from trainplan.optimizer.problem import gpu_counts
from trainplan.scenarios.catalogue import catalogue_name, check_model_name
from trainplan.topology.accelerator_file import get_part
from trainplan.topology.accelerators import is_part_file
from trainplan.topology.what_if import WHAT_IFS, what_if_label, what_if_part

__all__ = ["AXES", "COMMANDS", "MAX_POINTS", "Grid", "Point", "load_grid", "parse_grid"]

AXES = ("model", "gpu", "gpus", "seq_len", "global_batch", "global_batch_tokens", "framework")
"""Scenario keys a grid may vary ([sweep] arrays, [[point]] values), besides ``recipe``: each
point takes one value of each."""
COMMANDS = ("search", "evaluate")
MAX_POINTS = 10**7
"""Most points one grid may hold (each point is held in memory while the sweep runs)."""
_GRID_KEYS = {"command", "sweep", "what_if", "recipe", "point", "layout"}
_REFUSED = {
    "per_stage": "a sweep point runs the uniform search (trainplan search without --per-stage)",
    "max_layers": "it belongs to objective params, which a sweep does not run",
}
_LINK_KEYS = {
    "nvlink_domain": "nvlink_domain",
    "nvlink_bandwidth": "nvlink_gbps",
    "scaleout_bandwidth": "scaleout_gbps",
}
"""What-ifs a [cluster] figure would override (build_case applies the cluster's after the part's)."""


@dataclass(frozen=True, slots=True)
class Point:
    """One point of a grid: the values of the axes it sets (the rest are the base's)."""

    index: int
    """Its place in the grid (0-based): results rows and ``--point`` name it."""
    values: tuple[tuple[str, Any], ...]
    """``(axis, value)`` for the :data:`AXES` it sets (counts as int, names as text)."""
    recipe: str | None = None
    """The named recipe (``[recipe.NAME]``) it takes, if any."""
    what_if: tuple[tuple[str, Fraction], ...] = ()
    """``(what-if key, multiplier)`` pairs (:data:`topology.what_if.WHAT_IFS`), ×1 left out."""

    def get(self, axis: str) -> Any:
        return dict(self.values).get(axis)

    def canonical(self) -> dict[str, Any]:
        """Its inputs as plain JSON values (multipliers as text: exact)."""
        out: dict[str, Any] = dict(self.values)
        out["recipe"] = self.recipe
        out["what_if"] = {k: str(m) for k, m in self.what_if}
        return out


@dataclass(frozen=True, slots=True)
class Grid:
    """A parsed grid: the base scenario, the points, and what identifies them."""

    source: str
    """Where it came from (the file's path), for messages."""
    command: str
    """``search`` or ``evaluate``."""
    base: dict[str, Any]
    """The scenario values every point shares (checked by :func:`check_scenario`)."""
    points: tuple[Point, ...]
    recipes: dict[str, dict[str, Any]] = field(default_factory=dict)
    """``[recipe.NAME]`` tables: recipe keys (:data:`interface.inputs.RECIPE_KEYS`)."""
    layout: dict[str, Any] = field(default_factory=dict)
    """``[layout]`` for ``evaluate``: the layout fields (dp derived from the GPU count)."""
    what_ifs: tuple[str, ...] = ()
    """The what-if keys some point sets (the results' multiplier columns)."""
    description: str = ""

    @property
    def fingerprint(self) -> str:
        """SHA-256 of the grid's meaning and the trainplan version: results written by another
        grid or version are never mixed in (``--resume`` checks it)."""
        data = {
            "command": self.command,
            "base": self.base,
            "recipes": self.recipes,
            "layout": self.layout,
            "points": [p.canonical() for p in self.points],
            "version": version("trainplan"),
        }
        text = json.dumps(data, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()

    @property
    def notes(self) -> tuple[str, ...]:
        """What the sweep's summary notes of the grid itself: a price for a part no point runs
        on (:func:`interface.sweep.names.price_notes`)."""
        return price_notes(self.base.get("gpu_hour_price"), {self.gpu(p) for p in self.points})

    def point(self, index: int) -> Point:
        """Point ``index``; an index outside the grid raises :class:`ScenarioError`."""
        if not 0 <= index < len(self.points):
            raise ScenarioError(
                f"point: {index} is not a point of {self.source} (0 to {len(self.points) - 1})"
            )
        return self.points[index]

    def part_name(self, point: Point) -> str:
        """The accelerator the point runs on: its name (a file's part's own), with its what-ifs."""
        return what_if_label(get_part(self.gpu(point)).name, dict(point.what_if))

    def gpu(self, point: Point) -> str:
        """The point's accelerator as the grid writes it: a catalogue name, or a file's path."""
        return str(point.get("gpu") or self.base.get("gpu") or "H100-SXM")

    def model(self, point: Point) -> str:
        return str(point.get("model") or self.base.get("model") or "")

    def group(self, point: Point) -> tuple[str, str]:
        """(model, catalogue part): the points that share cost tables and caches."""
        return self.model(point), self.gpu(point)

    def price(self, point: Point) -> Any:
        """The point's $ per GPU-hour as the grid writes it (its catalogue part's), or None."""
        price = self.base.get("gpu_hour_price")
        return price.get(self.gpu(point)) if isinstance(price, dict) else price

    def scenario(self, point: Point) -> dict[str, Any]:
        """The point as a scenario's values (what ``trainplan search --scenario`` reads), with
        ``gpu`` the what-if :class:`DeviceSpec` when it has what-ifs and ``gpu_hour_price`` the
        catalogue part's price (a what-if part costs what its catalogue part costs); ``tokens``
        only for an objective that uses it (time-to-train, cost).

        Raises
        ------
        PlannerError
            A what-if the part cannot take (no figure to multiply, a domain not whole).
        """
        values = copy.deepcopy(self.base)
        values.pop("description", None)
        values.update(dict(point.values))
        gpu = self.gpu(point)
        values["gpu"] = gpu
        if point.what_if:
            values["gpu"] = what_if_part(get_part(gpu), dict(point.what_if))
        if str(values.get("objective") or "step-time") not in ("time-to-train", "cost"):
            # the sweep's own time-to-train and cost columns read the budget (points.py); the
            # search refuses one its objective does not use
            values.pop("tokens", None)
        values.pop("gpu_hour_price", None)
        if self.price(point) is not None:
            values["gpu_hour_price"] = self.price(point)
        if point.recipe:
            values.setdefault("cluster", {}).update(self.recipes[point.recipe])
        return values


def load_grid(path: str | Path) -> Grid:
    """Read and check a grid file (see the module's docstring).

    Raises
    ------
    ScenarioError
        The file unreadable or not TOML; an unknown key; a value that breaks its rule — one line
        naming the file, the key, the value and the rule.
    """
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise ScenarioError(f"grid {p}: {err}") from None
    return parse_grid(data, str(p))


def parse_grid(
    data: dict[str, Any],
    source: str = "grid",
    check_model: Callable[[str], None] = check_model_name,
) -> Grid:
    """A :class:`Grid` from a grid's TOML values (:func:`load_grid`'s work; the web app passes
    the text it was sent). ``check_model`` refuses a model name before any point runs (default:
    an unknown catalogue name; a path is read when its points run). Raises as
    :func:`load_grid`."""
    try:
        return _parse(data, source, check_model)
    except PlannerError as err:
        raise ScenarioError(f"grid {source}: {err}") from None


def _parse(data: dict[str, Any], source: str, check_model: Callable[[str], None]) -> Grid:
    where = ""  # no context: a message names the key; parse_grid puts the file in front
    unknown = sorted(set(data) - TOP_KEYS - _GRID_KEYS)
    if unknown:
        known = ", ".join(sorted(TOP_KEYS | _GRID_KEYS))
        raise ScenarioError(f"{where}unknown key {unknown[0]!r} (known: {known})")
    for key, why in _REFUSED.items():
        if key in data:
            raise ScenarioError(f"{where}{key}: not taken in a sweep; {why}")
    base = {k: v for k, v in data.items() if k not in _GRID_KEYS}
    check_scenario(base, "")
    for axis in AXES:
        if axis in base:
            base[axis] = _one_value(axis, base[axis], where)
    command = data.get("command", "search")
    if command not in COMMANDS:
        raise ScenarioError(f"{where}command: {command!r} is not one of {', '.join(COMMANDS)}")
    if base.get("objective") == "params":
        raise ScenarioError(
            f"{where}objective: 'params' is not taken in a sweep (one model a point)"
        )
    recipes = _recipes(_table(data, "recipe", where), where)
    sweep = _table(data, "sweep", where)
    what_if = _table(data, "what_if", where)
    points_data = data.get("point", [])
    if not isinstance(points_data, list) or not all(isinstance(x, dict) for x in points_data):
        raise ScenarioError(f"{where}point must be an array of tables, [[point]]")
    if not sweep and not what_if and not points_data:
        raise ScenarioError(f"{where}nothing to sweep; add a [sweep] table or [[point]] entries")
    for axis in (*sweep, *(k for p in points_data for k in p if k in AXES)):
        _check_not_in_base(axis, base, where)
    _check_what_if_keys(what_if, base, where)
    layout = _layout(data, command, base, where)
    points: list[Point] = []
    if sweep or what_if:
        points += _product(sweep, what_if, recipes, base, where)
    for i, entry in enumerate(points_data, 1):
        points.append(_listed(entry, recipes, base, f"point {i}: "))
    check_models(check_model, base, sweep, points_data, where)
    unused = [name for name in recipes if name not in {p.recipe for p in points}]
    if unused:
        raise ScenarioError(f"recipe.{unused[0]} is defined and no point takes it")
    indexed = _numbered(points)
    what_ifs = tuple(
        k for k in WHAT_IFS if any(k in dict(p.what_if) for p in indexed) or k in what_if
    )
    grid = Grid(
        source, command, base, indexed, recipes, layout, what_ifs, str(base.get("description", ""))
    )
    _check_prices(grid, where)
    return grid


def _numbered(points: list[Point]) -> tuple[Point, ...]:
    """The points numbered in order; a point given twice is refused."""
    seen: dict[Point, int] = {}
    for i, p in enumerate(points):
        same = Point(0, p.values, p.recipe, p.what_if)
        if same in seen:
            raise ScenarioError(f"point {i} repeats point {seen[same]} ({p.canonical()})")
        seen[same] = i
    return tuple(Point(i, p.values, p.recipe, p.what_if) for i, p in enumerate(points))


def _table(data: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    table = data.get(key, {})
    if not isinstance(table, dict):
        raise ScenarioError(f"{where}{key} = {table!r} must be a table, [{key}]")
    return table


def _check_not_in_base(axis: str, base: dict[str, Any], where: str) -> None:
    if axis == "recipe":
        return
    if axis not in AXES:
        raise ScenarioError(
            f"{where}sweep.{axis}: not an axis (axes: {', '.join((*AXES, 'recipe'))}; "
            f"what-ifs go under [what_if])"
        )
    if axis in base or (axis == "framework" and "framework" in base.get("space", {})):
        raise ScenarioError(
            f"{where}{axis}: given at the top level and swept; give it in one place"
        )


def _check_what_if_keys(what_if: dict[str, Any], base: dict[str, Any], where: str) -> None:
    for key in what_if:
        if key not in WHAT_IFS:
            raise ScenarioError(f"{where}what_if.{key}: unknown (known: {', '.join(WHAT_IFS)})")
        cluster_key = _LINK_KEYS.get(key)
        if cluster_key and cluster_key in base.get("cluster", {}):
            raise ScenarioError(
                f"{where}what_if.{key}: multiplies the part's figure, and [cluster] "
                f"{cluster_key} replaces it; give one of them"
            )


def _recipes(table: dict[str, Any], where: str) -> dict[str, dict[str, Any]]:
    out = {}
    for name, recipe in table.items():
        if not isinstance(recipe, dict):
            raise ScenarioError(f"{where}recipe.{name} must be a table of recipe keys")
        unknown = sorted(set(recipe) - set(RECIPE_KEYS))
        if unknown:
            raise ScenarioError(
                f"{where}recipe.{name}: unknown key {unknown[0]!r} (known: {', '.join(RECIPE_KEYS)})"
            )
        check_scenario({"cluster": recipe}, f"{where}recipe.{name}")
        out[str(name)] = dict(recipe)
    return out


def _axis_values(axis: str, value: Any, where: str) -> list[Any]:
    """One axis value (a [[point]]'s, or an item of a [sweep] array) as the values it stands
    for: a range of counts, or counts with ``;`` between them (the command line's list grammar,
    :func:`model.units.list_items`), gives several."""
    name = f"{where}{axis}"
    if axis in ("gpus", "global_batch", "global_batch_tokens"):
        if isinstance(value, str):
            return gpu_counts(value, name)
        return [parse_count(value, name)]
    if axis == "seq_len":
        return parse_counts(value, name)
    if not isinstance(value, str) or not value.strip():
        raise ScenarioError(f"{name}: {value!r} must be a name (text)")
    if axis == "gpu":  # a file describing a part is read here, and kept as written
        part = named(get_part, value, name)
        return [value if is_part_file(value) else part.name]
    if axis == "framework":
        return [str(parse_framework(value))]
    return [catalogue_name(value)]  # the model, as the catalogue spells it: rows, repeats


def _one_value(axis: str, value: Any, where: str) -> Any:
    """A value every point of the grid (top level) or one point ([[point]]) takes."""
    found = _axis_values(axis, value, where) if not isinstance(value, list) else []
    if len(found) != 1:
        raise ScenarioError(
            f"{where}{axis}: {value!r} must be one value; several go under [sweep] as an array"
        )
    return found[0]


def _canonical(values: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    """Axis values in :data:`AXES` order (two points with the same values are the same point)."""
    return tuple((a, values[a]) for a in AXES if a in values)


def _multipliers(key: str, values: list[Any], where: str) -> list[Fraction]:
    out = []
    for v in values:
        m = parse_number(v, f"{where}what_if.{key}")
        if m <= 0:
            raise ScenarioError(f"{where}what_if.{key}: {v!r} must be a multiplier above 0")
        out.append(m)
    return out


def _product(
    sweep: dict[str, Any],
    what_if: dict[str, Any],
    recipes: dict[str, dict[str, Any]],
    base: dict[str, Any],
    where: str,
) -> list[Point]:
    axes: list[tuple[str, list[Any]]] = []
    for axis, values in sweep.items():
        if values == []:
            raise ScenarioError(
                f"{where}sweep.{axis}: [] is empty: give the axis at least one value, or leave it "
                "out (one value for every point goes at the top level)"
            )
        if not isinstance(values, list):
            raise ScenarioError(
                f"{where}sweep.{axis}: {values!r} must be a non-empty TOML array, e.g. "
                f"{axis} = [{values!r}]; one value for every point goes at the top level"
            )
        if axis == "recipe":
            axes.append((axis, [_recipe_name(v, recipes, where) for v in values]))
            continue
        axes.append((axis, [x for v in values for x in _axis_values(axis, v, f"{where}sweep.")]))
    factors: list[tuple[str, list[Fraction]]] = []
    for key, values in sorted(what_if.items(), key=lambda kv: list(WHAT_IFS).index(kv[0])):
        if not isinstance(values, list) or not values:
            raise ScenarioError(f"{where}what_if.{key}: {values!r} must be a non-empty TOML array")
        factors.append((key, _multipliers(key, values, where)))
    count = 1
    for _, values in (*axes, *factors):
        count *= len(values)
    if count > MAX_POINTS:
        raise ScenarioError(f"{where}the grid has {count:,} points, over {MAX_POINTS:,}")
    out = []
    names = [a for a, _ in axes]
    keys = [k for k, _ in factors]
    for combo in itertools.product(*(v for _, v in axes), *(m for _, m in factors)):
        given = dict(zip(names, combo[: len(names)], strict=True))
        recipe = given.pop("recipe", None)
        multipliers = tuple(
            (k, m) for k, m in zip(keys, combo[len(names) :], strict=True) if m != 1
        )
        out.append(Point(0, _canonical(given), recipe, multipliers))
    return out


def _recipe_name(value: Any, recipes: dict[str, dict[str, Any]], where: str) -> str:
    if not isinstance(value, str) or value not in recipes:
        known = ", ".join(recipes) or "none defined"
        raise ScenarioError(
            f"{where}recipe: {value!r} is not a [recipe.NAME] table of this grid ({known})"
        )
    return value


def _listed(
    entry: dict[str, Any], recipes: dict[str, dict[str, Any]], base: dict[str, Any], where: str
) -> Point:
    values: dict[str, Any] = {}
    recipe = None
    multipliers: tuple[tuple[str, Fraction], ...] = ()
    for key, value in entry.items():
        if key == "recipe":
            recipe = _recipe_name(value, recipes, where)
        elif key == "what_if":
            if not isinstance(value, dict):
                raise ScenarioError(
                    f"{where}what_if must be a table, e.g. {{ hbm_capacity = 1.5 }}"
                )
            _check_what_if_keys(value, base, where)
            ms = [(k, _multipliers(k, [v], where)[0]) for k, v in value.items()]
            multipliers = tuple((k, m) for k, m in ms if m != 1)
        elif key in AXES:
            values[key] = _one_value(key, value, where)
        else:
            raise ScenarioError(
                f"{where}unknown key {key!r} (known: {', '.join((*AXES, 'recipe', 'what_if'))})"
            )
    order = {k: i for i, k in enumerate(WHAT_IFS)}
    return Point(
        0, _canonical(values), recipe, tuple(sorted(multipliers, key=lambda x: order[x[0]]))
    )


def _layout(data: dict[str, Any], command: str, base: dict[str, Any], where: str) -> dict[str, Any]:
    layout = _table(data, "layout", where)
    if command == "search":
        if layout:
            raise ScenarioError(f'{where}layout: only command = "evaluate" takes a [layout]')
        return {}
    for key in ("space", "constraints", "objective"):
        if key in base:
            raise ScenarioError(
                f"{where}{key}: command evaluate runs one layout; {key} applies to search"
            )
    unknown = sorted(set(layout) - set(LAYOUT_KEYS) - {"dp"})
    if unknown:
        raise ScenarioError(
            f"{where}layout: unknown key {unknown[0]!r} (known: {', '.join(LAYOUT_KEYS)})"
        )
    return dict(layout)


def _check_prices(grid: Grid, where: str) -> None:
    """Refuse a priced name that is no catalogue part (a part no point runs on is a note,
    :attr:`Grid.notes`) and an objective without its tokens or prices (:mod:`.names`)."""
    price_notes(grid.base.get("gpu_hour_price"), {grid.gpu(p) for p in grid.points}, where)
    check_grid_objective(grid, where)
