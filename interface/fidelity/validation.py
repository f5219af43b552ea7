"""The validation set: published end-to-end training runs, each evaluated under the framework
profile it ran with through the planner's public entry point, ``trainplan evaluate --json``
(:func:`interface.commands.evaluate_json`).

Published runs validate the cost model; they are never fitted. The data lives in
``scenarios/validation/*.toml`` (package data, read through :mod:`importlib.resources`): one file
per source, each holding ``[[table]]`` entries with a required ``source`` and
``[[table.run]]`` rows. ``models.toml`` holds the architectures of models the catalogue lacks.
Keys are strict: a table or run key that is neither a validation key below nor a planner
parameter (:data:`interface.inputs.KNOWN_KEYS`) is a :class:`~model.errors.ScenarioError` naming
the file, the table and the key.

Table keys: ``source`` (document, table, date or version), ``framework`` (the profile,
:mod:`model.frameworks`), ``framework_as_run`` (what ran, e.g. ``torchtitan``), ``published``
(``tokens_per_s_per_gpu`` or ``step_s``: which figure the rows give), ``convention`` (what that
figure means in the source), ``recipe`` (text), ``memory`` (``reserved``, ``allocated`` or
``unknown``: what a row's ``peak_memory_gib`` is; required with it), ``assumed``,
``unmodelled`` (lists of text), ``cannot_express`` (text), ``params`` (planner parameters every
row shares).

Run keys: ``key`` (unique in its file), the figure the table names, ``peak_memory_gib`` (the
largest GPU's peak, GiB = 2^30 bytes), ``published_tflops_per_gpu`` (the source's own
throughput figure, kept for reference, never converted), ``source`` (what the row adds to its
table's), ``assumed``, ``unmodelled``, ``cannot_express``, and planner parameters (a row's value
replaces its table's). ``num_gpus``, ``seq_len`` and ``global_batch_size`` are required: the
published step time of a throughput row is ``global_batch_size · seq_len / (tokens/s/GPU ·
num_gpus)``.

``unmodelled`` names a mechanism of the run the cost model has no input for whose effect the
model's nearest mechanism stands in for (the row counts in the statistics, the tag says what its
error includes); ``cannot_express`` names one the model cannot stand in for (another framework's sharding): the
row is evaluated under the stated stand-in and listed with its reason, outside the statistics. A
row whose framework profile cannot run its ``schedule`` (:func:`schedule_refusal`) is listed the
same way, with that reason.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from trainplan.interface.commands import evaluate_json
from trainplan.interface.inputs import KNOWN_KEYS
from trainplan.model.errors import LayoutError, PlannerError, ScenarioError
from trainplan.model.hf_config import architecture_from_dict
from trainplan.model.model_spec import ModelSpec
from trainplan.model.schedule_support import check_schedule_framework
from trainplan.scenarios.catalogue import check_keys

__all__ = [
    "ValidationTable",
    "ValidationRun",
    "ValidationResult",
    "FIGURES",
    "MEMORY_KINDS",
    "validation_files",
    "validation_models",
    "validation_runs",
    "runs_from_text",
    "evaluate_run",
    "evaluate_all",
]

PACKAGE = "trainplan.scenarios.validation"
MODELS_FILE = "models"
FIGURES = ("tokens_per_s_per_gpu", "step_s")
"""Published figures a table may name: throughput per GPU (tokens/s) or seconds per step."""
MEMORY_KINDS = ("reserved", "allocated", "unknown")
"""What a published peak is: the caching allocator's reserved bytes (PyTorch
``torch.cuda.max_memory_reserved``), its allocated bytes, or not stated."""
GIB = 2**30

_TEXT_KEYS = ("source", "framework_as_run", "published", "convention", "recipe", "memory")
_LIST_KEYS = ("assumed", "unmodelled")
_TABLE_KEYS = (*_TEXT_KEYS, *_LIST_KEYS, "framework", "cannot_express", "params", "run")
_RUN_META = (
    "key",
    *FIGURES,
    "peak_memory_gib",
    "published_tflops_per_gpu",
    "source",
    "assumed",
    "unmodelled",
    "cannot_express",
)
_PARAMS = tuple(sorted(KNOWN_KEYS - {"model_spec", "training_defaults"}))
"""Planner parameters a table's ``params`` or a run may give (:func:`interface.inputs.build_case`;
a model built in code is not one)."""
_RUN_KEYS = (*_RUN_META, *_PARAMS)
_REQUIRED_PARAMS = ("gpu", "num_gpus", "seq_len", "global_batch_size")


@dataclass(frozen=True, slots=True)
class ValidationTable:
    """One ``[[table]]`` of a source file: where its rows come from and how they ran."""

    file: str
    """The file's stem (``nemo-24.07-h100``)."""
    source: str
    """Document, table, date or version."""
    framework: str
    """The framework profile the rows are evaluated under (``megatron``, ``fsdp2``…)."""
    framework_as_run: str
    """What ran (``NeMo / Megatron Bridge (Megatron-Core)``, ``torchtitan``…)."""
    published: str
    """Which figure the rows give: one of :data:`FIGURES`."""
    convention: str
    recipe: str
    memory_kind: str | None = None
    """One of :data:`MEMORY_KINDS` where the rows publish a peak."""
    assumed: tuple[str, ...] = ()
    unmodelled: tuple[str, ...] = ()
    cannot_express: str | None = None


@dataclass(frozen=True, slots=True)
class ValidationRun:
    """One published run: its table, the planner parameters that describe it, its figures."""

    key: str
    """``<file>/<row key>``, unique in the set."""
    table: ValidationTable
    params: Mapping[str, Any]
    """Planner parameters (:func:`interface.inputs.build_case`), the framework profile
    included; ``model`` names the catalogue entry or the ``models.toml`` one (then given as
    ``model_spec`` when evaluated)."""
    published_step_s: float
    """Seconds per optimizer step, as published or from the published throughput."""
    published_figure: str
    """The figure as the source gives it, with its unit."""
    row_source: str | None = None
    """What the row adds to its table's source (a table number, a column)."""
    published_memory_bytes: int | None = None
    """The largest GPU's published peak, bytes (GiB × 2^30); None when not published."""
    published_tflops_per_gpu: float | None = None
    assumed: tuple[str, ...] = ()
    """The row's own assumptions (its table's are in :attr:`table`)."""
    unmodelled: tuple[str, ...] = ()
    """The row's own unmodelled mechanisms, besides its table's."""
    cannot_express: str | None = None
    """Why the model cannot stand in for the run (the row's, else its table's); None if it can."""

    @property
    def counted(self) -> bool:
        """Whether the row enters the error statistics (nothing it cannot express)."""
        return self.cannot_express is None

    @property
    def source(self) -> str:
        return self.table.source + (f"; {self.row_source}" if self.row_source else "")

    @property
    def all_unmodelled(self) -> tuple[str, ...]:
        return self.table.unmodelled + self.unmodelled


@dataclass(frozen=True, slots=True)
class ValidationResult:
    """A run and what ``trainplan evaluate --json`` says about it (or the one-line error)."""

    run: ValidationRun
    report: Mapping[str, Any] | None
    error: str | None = None

    def value(self, *path: str) -> Any:
        """The field at ``path`` of the evaluate report (``value("time", "step_s")``)."""
        node: Any = self.report
        for part in path:
            node = node[part]
        return node

    @property
    def step_s(self) -> float:
        """Predicted seconds per step."""
        return float(self.value("time", "step_s"))

    @property
    def time_error(self) -> float:
        """Predicted / published step time − 1 (positive: predicted too slow)."""
        return self.step_s / self.run.published_step_s - 1

    @property
    def memory_bytes(self) -> int:
        """Predicted peak bytes per GPU on the busiest stage as PyTorch's allocator counts them,
        the counter the row publishes: ``memory.reserved_bytes`` for a reserved peak, else
        ``memory.allocated_bytes`` (NCCL's communicators are outside both counters)."""
        kind = "reserved" if self.run.table.memory_kind == "reserved" else "allocated"
        return int(self.value("memory", f"{kind}_bytes"))

    @property
    def memory_error(self) -> float | None:
        """Predicted / published peak − 1; None when no peak is published."""
        published = self.run.published_memory_bytes
        return None if published is None else self.memory_bytes / published - 1

    @property
    def fits(self) -> bool:
        return bool(self.value("memory", "fits"))

    @property
    def family(self) -> str:
        """``moe`` when fewer parameters are active than exist, else ``dense``."""
        model = self.value("model")
        return "moe" if model["num_active_params"] < model["num_params"] else "dense"

    @property
    def part(self) -> str:
        return str(self.value("gpu", "name"))

    def share(self, term: str) -> float:
        """A term of the predicted step (``compute_s``, ``bubble_s``, ``exposed_comm_s``,
        ``optimizer_s``, …) as a fraction of it."""
        return float(self.value("time", term)) / self.step_s


def _where(file: str, table: int, key: str | None = None) -> str:
    return f"scenarios/validation/{file}.toml [[table]] {table}" + (f" run {key!r}" if key else "")


def _text(d: Mapping[str, Any], key: str, where: str, required: bool = True) -> str | None:
    value = d.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ScenarioError(f"{where}: '{key}' must be a non-empty string, got {value!r}")
    return value


def _texts(d: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = d.get(key, ())
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not all(isinstance(v, str) and v for v in items):
        raise ScenarioError(f"{where}: '{key}' must be text or a list of text, got {value!r}")
    return tuple(items)


def _positive(value: Any, key: str, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ScenarioError(f"{where}: '{key}' must be a positive number, got {value!r}")
    return float(value)


def _run(
    table: ValidationTable, defaults: Mapping[str, Any], row: Any, index: int
) -> ValidationRun:
    if not isinstance(row, dict):
        raise ScenarioError(f"{_where(table.file, index)}: a run must be a table, got {row!r}")
    key = _text(row, "key", _where(table.file, index))
    assert key is not None
    where = _where(table.file, index, key)
    check_keys(row, _RUN_KEYS, where)
    other = [f for f in FIGURES if f != table.published and f in row]
    if other:
        raise ScenarioError(
            f"{where}: '{other[0]}' given, but the table publishes {table.published}"
        )
    params = (
        {"framework": table.framework}
        | dict(defaults)
        | {k: v for k, v in row.items() if k not in _RUN_META}
    )
    for name in _REQUIRED_PARAMS:
        if name not in params:
            raise ScenarioError(f"{where}: planner parameter '{name}' is required")
    if ("model" in params) == ("params" in params):
        raise ScenarioError(f"{where}: give the planner parameter 'model' or 'params' (with dims)")
    value = _positive(row.get(table.published), table.published, where)
    if table.published == "step_s":
        step, shown = value, f"{value:,g} s/step"
    else:
        tokens = params["global_batch_size"] * params["seq_len"]
        step, shown = tokens / (value * params["num_gpus"]), f"{value:,g} tokens/s/GPU"
    memory = row.get("peak_memory_gib")
    if memory is not None and table.memory_kind is None:
        raise ScenarioError(f"{where}: 'peak_memory_gib' needs the table's 'memory' kind")
    tflops = row.get("published_tflops_per_gpu")
    return ValidationRun(
        key=f"{table.file}/{key}",
        table=table,
        params=params,
        published_step_s=step,
        published_figure=shown,
        row_source=_text(row, "source", where, required=False),
        published_memory_bytes=None
        if memory is None
        else round(_positive(memory, "peak_memory_gib", where) * GIB),
        published_tflops_per_gpu=None
        if tflops is None
        else _positive(tflops, "published_tflops_per_gpu", where),
        assumed=_texts(row, "assumed", where),
        unmodelled=_texts(row, "unmodelled", where),
        cannot_express=_joined(
            schedule_refusal(params),
            _text(row, "cannot_express", where, required=False) or table.cannot_express,
        ),
    )


def _joined(*reasons: str | None) -> str | None:
    said = [r for r in reasons if r]
    return "; ".join(said) if said else None


def schedule_refusal(params: Mapping[str, Any]) -> str | None:
    """Why the run's framework profile cannot run its pipeline schedule
    (:func:`model.schedule_support.check_schedule_framework`: ``schedule: dualpipe does not run
    under framework megatron …``), or None. Such a run is listed with that reason, outside the
    statistics, never evaluated under another schedule."""
    pp = int(params.get("pp", 1))
    tp, cp, b = (int(params.get(k, 1)) for k in ("tp", "cp", "micro_batch_size"))
    dp = int(params.get("dp") or max(1, int(params["num_gpus"]) // (tp * pp * cp)))
    m = max(1, int(params["global_batch_size"]) // (b * dp))
    try:
        check_schedule_framework(str(params.get("schedule", "1f1b")), params["framework"], pp, m)
    except LayoutError as err:
        return str(err)
    return None


def _table(table: Any, file: str, index: int) -> list[ValidationRun]:
    where = _where(file, index)
    check_keys(table, _TABLE_KEYS, where)
    for key in ("source", "framework", "framework_as_run", "published", "convention", "recipe"):
        _text(table, key, where)
    _text(table, "cannot_express", where, required=False)
    if table["published"] not in FIGURES:
        raise ScenarioError(f"{where}: 'published' must be one of {', '.join(FIGURES)}")
    if table.get("memory") not in (None, *MEMORY_KINDS):
        raise ScenarioError(f"{where}: 'memory' must be one of {', '.join(MEMORY_KINDS)}")
    params = check_keys(table.get("params", {}), _PARAMS, f"{where} [params]")
    rows = table.get("run")
    if not isinstance(rows, list) or not rows:
        raise ScenarioError(f"{where}: no [[table.run]] rows")
    spec = ValidationTable(
        file=file,
        source=table["source"],
        framework=table["framework"],
        framework_as_run=table["framework_as_run"],
        published=table["published"],
        convention=table["convention"],
        recipe=table["recipe"],
        memory_kind=table.get("memory"),
        assumed=_texts(table, "assumed", where),
        unmodelled=_texts(table, "unmodelled", where),
        cannot_express=table.get("cannot_express"),
    )
    return [_run(spec, params, row, index) for row in rows]


def runs_from_text(text: str, file: str) -> list[ValidationRun]:
    """The runs of one validation file's text (``file`` is its stem, named in errors and keys).

    Raises
    ------
    ScenarioError
        Invalid TOML, an unknown key (file, table and key named), a missing source, figure or
        required planner parameter, two rows with one key.
    """
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ScenarioError(f"scenarios/validation/{file}.toml: invalid TOML: {err}") from None
    extra = sorted(set(data) - {"table"})
    if extra:
        raise ScenarioError(
            f"scenarios/validation/{file}.toml: unknown top-level key {extra[0]!r} (only [[table]])"
        )
    tables = data.get("table")
    if not isinstance(tables, list) or not tables:
        raise ScenarioError(f"scenarios/validation/{file}.toml: no [[table]] entries")
    runs = [run for i, t in enumerate(tables, start=1) for run in _table(t, file, i)]
    keys = [r.key for r in runs]
    dup = next((k for k in keys if keys.count(k) > 1), None)
    if dup:
        raise ScenarioError(f"scenarios/validation/{file}.toml: two rows with key {dup!r}")
    return runs


def _read(name: str) -> str:
    return resources.files(PACKAGE).joinpath(f"{name}.toml").read_text(encoding="utf-8")


def validation_files() -> list[str]:
    """Stems of the source files (every ``scenarios/validation/*.toml`` but ``models``)."""
    return sorted(
        e.name.removesuffix(".toml")
        for e in resources.files(PACKAGE).iterdir()
        if e.name.endswith(".toml") and e.name != f"{MODELS_FILE}.toml"
    )


@cache
def validation_models() -> dict[str, ModelSpec]:
    """The models of ``scenarios/validation/models.toml`` by name, each with its source.

    Raises
    ------
    ScenarioError
        An unknown key, a missing name or source, or dimensions the model rejects.
    """
    data = tomllib.loads(_read(MODELS_FILE))
    out: dict[str, ModelSpec] = {}
    for i, entry in enumerate(data.get("model", []), start=1):
        where = f"scenarios/validation/{MODELS_FILE}.toml [[model]] {i}"
        check_keys(entry, ("name", "source", "architecture"), where)
        name = _text(entry, "name", where)
        source = _text(entry, "source", where)
        assert name is not None and source is not None
        arch = architecture_from_dict(entry.get("architecture", {}), f"{where} [architecture]")
        out[name] = ModelSpec(name=name, source=source, arch=arch)
    return out


@cache
def validation_runs() -> tuple[ValidationRun, ...]:
    """Every run of every validation file, in file order."""
    return tuple(run for f in validation_files() for run in runs_from_text(_read(f), f))


def evaluate_run(run: ValidationRun) -> ValidationResult:
    """``trainplan evaluate --json`` of the run's parameters (a ``models.toml`` model given as
    ``model_spec``); a planner error becomes the result's one-line ``error``."""
    params = dict(run.params)
    spec = validation_models().get(params.get("model", ""))
    if spec is not None:
        params["model_spec"] = spec
        del params["model"]
    try:
        # the table's settings apply to every run; each run reads those its layout reads
        return ValidationResult(run, evaluate_json(params, layout_keys=False))
    except PlannerError as err:
        return ValidationResult(run, None, str(err))


def evaluate_all(runs: Sequence[ValidationRun] | None = None) -> tuple[ValidationResult, ...]:
    """Every run of the set (or ``runs``) evaluated."""
    return tuple(evaluate_run(r) for r in (validation_runs() if runs is None else runs))
