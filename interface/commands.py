"""What each command computes, as the JSON object its ``--json`` prints: one function per command,
called by the command line (:mod:`interface.cli`) and the web app (:mod:`interface.web`) alike, so
both answer the same inputs with the same object and refuse the same bad input with the same line.

Search, frontier and the per-stage search live in :mod:`interface.search_commands` (re-exported
here). Parameters arrive as the command's request (:mod:`interface.requests`), or as the CLI's
options parse them (click's names: ``model``, ``tp``,
``seq_len``…; numbers already exact or still text, which the model's parsers read). Nothing here
prints or writes files: the callers present the object.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from trainplan.interface.inputs import build_case
from trainplan.interface.render.report_dict import estimate_to_dict
from trainplan.interface.requests import (
    PER_STAGE_SHAPES,
    EvaluateRequest,
    evaluate_request,
    parse_overlap,
    per_stage_shapes,
)
from trainplan.interface.search_commands import (
    SearchRun,
    frontier_json,
    infeasible_json,
    per_stage_json,
    search_json,
    search_problem,
    time_limit_note,
)
from trainplan.model.errors import InputError, PlannerError, ScenarioError
from trainplan.model.estimate import Estimate
from trainplan.model.hf_config import parse_config_json
from trainplan.model.hf_families import architecture_from_hf
from trainplan.model.key_rules import (
    check_flat_parameters,
    check_grad_stats_group,
    check_layout_reads_options,
    check_sac_scaled_mm,
    options_given,
)
from trainplan.model.model_spec import ModelSpec
from trainplan.model.params import count_params
from trainplan.model.step_setting_rules import check_megatron_step_settings
from trainplan.scenarios.catalogue import get_model, model_names, spelling_key
from trainplan.topology.accelerators import accelerator_rows

__all__ = [
    "named_like",
    "evaluate_json",
    "check_layout_keys",
    "models_json",
    "gpus_json",
    "search_problem",
    "search_json",
    "frontier_json",
    "infeasible_json",
    "SearchRun",
    "to_json",
    "parse_overlap",
    "uploaded_model",
    "PER_STAGE_SHAPES",
    "per_stage_shapes",
    "per_stage_json",
    "time_limit_note",
]


def _default(obj: Any) -> Any:
    if isinstance(obj, Fraction):
        return int(obj) if obj.denominator == 1 else float(obj)
    if isinstance(obj, Estimate):
        return estimate_to_dict(obj)
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    raise TypeError(f"cannot serialise {type(obj).__name__}")


def to_json(data: Any, indent: int | None = 2) -> str:
    """``data`` as the JSON text every ``--json`` prints: exact Fractions become int when whole,
    else float (bytes stay exact integers; times in seconds; rates as 0–1 fractions)."""
    return json.dumps(data, indent=indent, default=_default)


def evaluate_json(
    request: EvaluateRequest | Mapping[str, Any],
    per_stage: bool = False,
    *,
    layout_keys: bool = True,
) -> dict[str, Any]:
    """The planner (``trainplan evaluate --json``): memory, ZeRO table, traffic, bubble, step time
    and MFU of one layout, with ``defaults_used`` (and ``stages`` with ``per_stage``, or the
    request's).

    ``request`` is evaluate's request (:func:`interface.requests.evaluate_request`), or its
    options by their parameter names (bytes, seconds and 0–1 rates out;
    docs/concepts/conventions.md; sources in :mod:`model`), made into one here. With
    ``layout_keys`` (the default) a cost option this layout does not read is refused
    (:func:`model.key_rules.check_layout_reads_options`, ``check_sac_scaled_mm``,
    ``check_grad_stats_group``, ``check_megatron_step_settings``); a validation table and a sweep pass
    False: their settings apply to every run, each run reading those its layout reads.

    Raises
    ------
    PlannerError
        Any bad or inapplicable input, one line naming the parameter, value and rule
        (:func:`interface.inputs.build_case`); a value the model gave by default, not the
        user, named as such (:func:`default_named`).
    """
    request = evaluate_request(request, per_stage)
    case = build_case(request.params)
    if layout_keys:
        check_layout_keys(case)
    try:
        est = case.evaluate()
    except PlannerError as err:  # the same error (its type and fields), its line completed
        err.args = (default_named(str(err), case.defaults_used, case.model.name),)
        raise
    out = estimate_to_dict(est, request.per_stage or per_stage)
    out["defaults_used"] = case.defaults_used
    out["notes"] = [*out["notes"], *case.notes]
    return out


MODEL_DEFAULTS = ("seq_len", "global_batch_size")
"""The recipe's values a model gives when the user gives none (its published training setup,
:func:`optimizer.case.training_of`; a rule's for a model without one): a refusal of one of them
says so (:func:`default_named`)."""


def default_named(message: str, defaults_used: Mapping[str, Any], model: str) -> str:
    """``message`` (a one-line refusal) with, where its head parameter is one of
    :data:`MODEL_DEFAULTS` the user did not give (in ``defaults_used``, the case's
    :attr:`~optimizer.case.Case.defaults_used`), the value named as ``model``'s default and the
    parameter that sets it; else ``message`` as it is. The head is written as the user's flag
    (or the page's field) by :func:`interface.flags.refusal`, the parameter after ``give``
    likewise.

    Examples
    --------
    >>> line = "global_batch_size: 2,048 is not divisible by micro_batch_size 1 × dp 3 = 3"
    >>> default_named(line, {"global_batch_size": 2048}, "llama3-70b")[len(line) :]
    " (2,048 is llama3-70b's default; give `global_batch_size` to set another)"
    >>> default_named(line, {"seq_len": 8192}, "llama3-70b") == line
    True
    """
    head = message.partition(":")[0]
    if head not in MODEL_DEFAULTS or head not in defaults_used:
        return message
    value = defaults_used[head]
    shown = f"{value:,}" if isinstance(value, int) else str(value)
    return f"{message} ({shown} is {model}'s default; give `{head}` to set another)"


def check_layout_keys(case: Any) -> None:
    """Refuse a cost option that ``case``'s layout does not read: one rule for ``evaluate`` and
    each run of a ``calibrate`` measurements file (:func:`model.key_rules.check_layout_reads_options`,
    ``check_sac_scaled_mm``, ``check_flat_parameters``, ``check_grad_stats_group``,
    ``check_megatron_step_settings``).

    Raises
    ------
    LayoutError
        One line naming the key, its value and the layouts that read it.
    """
    lay = case.layout
    given = options_given(case.options)
    check_layout_reads_options(given, lay.framework, lay.zero_stage, lay.pp, lay.virtual_stages)
    check_sac_scaled_mm(lay.framework, case.training, lay.recompute)
    check_flat_parameters(lay.framework, case.training, lay.pp)
    where = f"{lay.framework} zero_stage {lay.zero_stage}"
    check_grad_stats_group(case.options.grad_stats_group, [(lay.framework, lay.zero_stage)], where)
    check_megatron_step_settings(
        case.options, [lay.framework], str(lay.framework), case.training.distributed_optimizer
    )


MAX_CONFIG_CHARS = 1_000_000
"""Largest uploaded config.json read (a Hugging Face config is a few kB)."""


def rlhf_json(kw: Mapping[str, Any]) -> dict[str, Any]:
    """``trainplan rlhf --json`` of the command's parsed options (display-only ones such as
    ``width`` dropped), made its request once (:class:`interface.tab_requests.RLHFRequest`): the
    textbook accounting's figures, and the faithful accounting with ``model``."""
    from trainplan.interface import tabs
    from trainplan.interface.tab_requests import RLHFRequest, tab_request

    kw = {k: v for k, v in kw.items() if k not in ("width", "as_json")}
    return tabs.rlhf_report(tab_request(RLHFRequest, kw))


def uploaded_model(text: str, name: str | None = None) -> Any:
    """A :class:`~model.specs.ModelSpec` from the text of a Hugging Face ``config.json`` (the web
    app's upload; the CLI reads the same keys from a path, :meth:`ModelSpec.from_hf_config`),
    named ``name``, else by its ``_name_or_path``, else ``uploaded``.

    Raises
    ------
    ScenarioError
        Text that is not a JSON object (a key twice, nesting too deep:
        :func:`model.hf_config.parse_config_json`), too long, or a config the mapping refuses
        (:func:`model.hf_families.architecture_from_hf`, naming the key).
    """
    where = "config: the uploaded config.json"
    if len(text) > MAX_CONFIG_CHARS:
        raise ScenarioError(f"{where} has {len(text):,} characters, over {MAX_CONFIG_CHARS:,}")
    config = parse_config_json(text, where)
    arch = architecture_from_hf(config, where)
    label = name or str(config.get("_name_or_path") or "uploaded").rstrip("/").split("/")[-1]
    return ModelSpec(name=label, source="Hugging Face config.json (uploaded)", arch=arch)


def inline_accelerator(text: str) -> Any:
    """The part a JSON object describes (the web API's ``accelerator=``): the keys of an
    accelerator file, read as one (:func:`topology.accelerator_file.part_from_table`).

    Raises
    ------
    ScenarioError
        Not a JSON object (:func:`model.hf_config.parse_config_json`), too long, or what a file's
        ``[[accelerator]]`` table is refused for, in one line headed ``accelerator:``.
    """
    from trainplan.topology.accelerator_file import part_from_table

    if len(text) > MAX_CONFIG_CHARS:
        raise ScenarioError(
            f"accelerator: the object has {len(text):,} characters, over {MAX_CONFIG_CHARS:,}"
        )
    return part_from_table(parse_config_json(text, "accelerator"), "accelerator", INLINE_ORIGIN)[0]


INLINE_ORIGIN = "the request's accelerator object"
"""Where the web API's inline accelerator's figures come from, as its answer says."""


def named_like(
    rows: list[dict[str, Any]], name_filter: str | None, what: str, listing: str
) -> list[dict[str, Any]]:
    """The ``rows`` whose ``name`` holds ``name_filter`` in any case or with other separators
    (:func:`scenarios.catalogue.spelling_key`: ``llama`` matches ``Llama3-70B``, ``h100``
    ``H100-SXM``); every row when it is None. ``what``: the rows' kind (``model``,
    ``accelerator``); ``listing``: the command that lists them all.

    Raises
    ------
    InputError
        A filter that matches no row: ``FILTER: 'x' matches no model; trainplan models lists
        them all``.

    >>> named_like([{"name": "H100-SXM"}, {"name": "B200"}], "h100", "accelerator", "trainplan gpus")
    [{'name': 'H100-SXM'}]
    """
    if name_filter is None:
        return rows
    key = spelling_key(name_filter)
    out = [r for r in rows if key in spelling_key(str(r["name"]))]
    if not out:
        raise InputError(f"FILTER: {name_filter!r} matches no {what}; {listing} lists them all")
    return out


def models_json() -> list[dict[str, Any]]:
    """The model catalogue (``trainplan models --json``): name, exact parameter counts
    (``num_active_params``: :data:`model.params.ACTIVE_COUNTS`), the published s and B, and each
    model's source (``scenarios/models/*.toml``)."""
    rows: list[dict[str, Any]] = []
    for name in model_names():
        entry = get_model(name)
        counts = count_params(entry.model.arch)
        rows.append(
            {
                "name": name,
                "num_params": counts.total,
                "num_active_params": counts.active,
                "seq_len": entry.training.get("seq_len"),
                "global_batch_size": entry.training.get("global_batch_size"),
                "source": entry.model.source,
            }
        )
    return rows


def gpus_json(part_file: str | None = None) -> list[dict[str, Any]]:
    """The accelerator table (``trainplan gpus --json``): memory, dense BF16 peak, links, each
    row with its source (``topology/accelerators.toml``); with ``part_file``, the one row of the
    part that file describes (``trainplan gpus --file PATH.toml``,
    :func:`topology.accelerator_file.part_file_row`: its ``file``, ``base``, ``like`` and the
    keys it gives besides).

    Raises
    ------
    ScenarioError
        What ``--gpu PATH.toml`` refuses of the file, headed ``file: 'PATH'``.
    """
    if part_file is None:
        return accelerator_rows()
    from trainplan.topology.accelerator_file import part_file_row

    try:
        return [part_file_row(part_file)]
    except ScenarioError as err:  # the file is --file's here, not --gpu's
        raise ScenarioError("file" + str(err).removeprefix("gpu")) from None


_PER_STAGE_FRONTIER = frozenset(
    (
        "PER_STAGE_FRONTIER_SEARCHES",
        "check_searches_apply",
        "per_stage_frontier_json",
        "per_stage_proof",
    )
)


def __getattr__(name: str) -> Any:
    """The per-stage frontier's names (:mod:`interface.per_stage_frontier_command`), loaded on
    first use: that module brings the search's solver, which ``trainplan evaluate`` does not
    load."""
    if name in _PER_STAGE_FRONTIER:
        from trainplan.interface import per_stage_frontier_command

        return getattr(per_stage_frontier_command, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
