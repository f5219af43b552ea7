"""The ``trainplan evaluate …`` command line that gives flat evaluate parameters: what
``calibrate`` prints for each fitted run and ``search`` for its answer, so a user can run the
planner on exactly what was fitted or found (the round trip ``tests/cli/test_evaluate_line.py``
runs in fresh processes).

Each parameter is written as evaluate's own option where it has one (``--tp 8``,
``--no-sequence-parallel``), else as ``--set KEY=VALUE`` (the scenario keys evaluate takes)."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

import click

from trainplan.interface.cli.planner import evaluate_cmd

__all__ = ["evaluate_line", "value_text", "answer_params", "ANSWER_FIELDS"]


def value_text(value: Any) -> str:
    """A parameter's value as the command line takes it: ``true``/``false`` for a boolean, a
    comma-separated list for a sequence (``--stage-layers 7,8,8,7``), ``repr`` of a float (the
    exact figure, ``0.746``), else ``str``.

    >>> value_text(True), value_text([7, 8]), value_text(0.746), value_text("bf16")
    ('true', '7,8', '0.746', 'bf16')
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ",".join(value_text(v) for v in value)
    if isinstance(value, float):
        return repr(value)
    return str(value)


def evaluate_line(params: Mapping[str, Any]) -> str:
    """``trainplan evaluate`` with ``params`` (flat evaluate parameters by name,
    :func:`interface.inputs.build_case`'s; None values left out; a table value such as
    ``overlap`` written as its dotted keys, ``--set overlap.dp=0.5``), quoted for a POSIX shell.

    >>> evaluate_line({"model": "llama3-8b", "tp": 2, "sequence_parallel": False,
    ...     "gradient_dtype": "bf16", "stage_layers": [16, 16], "pp": None})
    'trainplan evaluate --model llama3-8b --tp 2 --no-sequence-parallel --stage-layers 16,16 --set gradient_dtype=bf16'
    """
    options = {
        p.name: p
        for p in evaluate_cmd.params
        if isinstance(p, click.Option) and p.name not in ("set", "as_json", "per_stage")
    }
    words = ["trainplan", "evaluate"]
    sets: list[str] = []
    for key, value in params.items():
        if value is None:
            continue
        option = options.get(key)
        if option is None:
            items = value.items() if isinstance(value, Mapping) else [(None, value)]
            sets += [
                f"{key}{'' if sub is None else '.' + str(sub)}={value_text(v)}" for sub, v in items
            ]
        elif option.is_flag and option.secondary_opts:
            words.append(_long(option.opts) if value else _long(option.secondary_opts))
        elif option.is_flag:
            if value:
                words.append(_long(option.opts))
        else:
            words += [_long(option.opts), value_text(value)]
    for item in sets:
        words += ["--set", item]
    return shlex.join(words)


def _long(opts: list[str]) -> str:
    return next((o for o in opts if o.startswith("--")), opts[0])


ANSWER_FIELDS: tuple[str, ...] = tuple(
    "framework dp tp pp cp cp_kind cp_a2a ep etp zero_stage"
    " optimizer recompute recompute_layers micro_batch_size global_batch_size seq_len"
    " schedule virtual_stages stage_layers sequence_parallel rank_order".split()
)
"""The fields of a search answer's ``layout`` object that evaluate takes back (its options of the
same names): the searched ones, the batch, and the split of the layers over the stages."""


def answer_params(request: Any, answer: Mapping[str, Any]) -> dict[str, Any]:
    """Flat evaluate parameters that give a search answer (``answer``: its JSON object, as
    :func:`interface.search_commands.search_json` or ``per_stage_json`` writes it) under the
    search's request (:class:`interface.requests.SearchRequest`): the answer's model and
    accelerator, its layout (:data:`ANSWER_FIELDS`; the layers of each model chunk where
    virtual_stages > 1) and every key of the request's ``[cluster]`` table (the recipe, links and
    time model the search evaluated under)."""
    model = request.values.get("model")
    if not (isinstance(model, str) and model.endswith(".json")):
        model = answer["model"]["name"]
    gpu = answer["gpu"]
    out: dict[str, Any] = {"model": model, "gpu": gpu.get("file") or gpu["name"]}
    if request.values.get("mtp_layers") is not None:
        out["mtp_layers"] = request.values["mtp_layers"]
    layout = dict(answer["layout"])
    if (layout.get("virtual_stages") or 1) > 1 and layout.get("chunk_layers"):
        layout["stage_layers"] = layout["chunk_layers"]
    out |= {k: layout[k] for k in ANSWER_FIELDS if layout.get(k) is not None}
    out |= {k: v for k, v in request.cluster.items() if v not in (None, {}, [])}
    return out
