"""The ``trainplan evaluate …`` command line that gives flat evaluate parameters: what
``calibrate`` prints for each fitted run and ``search`` for its answer, so a user can run the
planner on exactly what was fitted or found (the round trip ``tests/test_cli_round_trip.py``
runs in fresh processes).

Each parameter is written as evaluate's own option where it has one (``--tp 8``,
``--no-sequence-parallel``), else as ``--set KEY=VALUE`` (the scenario keys evaluate takes)."""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import click

from trainplan.interface.cli.planner import evaluate_cmd
from trainplan.interface.commands import check_layout_keys
from trainplan.interface.inputs import build_case
from trainplan.model.errors import LayoutError, PlannerError
from trainplan.model.split import default_chunk_sizes, split_rule_of
from trainplan.scenarios.catalogue import catalogue_name

__all__ = [
    "evaluate_line",
    "value_text",
    "answer_params",
    "answer_defaults",
    "layout_read",
    "ANSWER_FIELDS",
    "MODEL_OPTIONS",
]


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
    ``overlap`` written as its dotted keys, ``--set overlap.dp=0.5``), quoted for a POSIX shell
    (:func:`command_line`).

    >>> evaluate_line({"model": "llama3-8b", "tp": 2, "sequence_parallel": False,
    ...     "gradient_dtype": "bf16", "stage_layers": [16, 16], "pp": None})
    'trainplan evaluate --model llama3-8b --tp 2 --no-sequence-parallel --stage-layers 16,16 --set gradient_dtype=bf16'
    """
    return command_line("evaluate", evaluate_cmd, params)


def command_line(name: str, command: click.Command, params: Mapping[str, Any]) -> str:
    """``trainplan NAME`` with ``params`` (``command``'s parameters by name; None values left
    out), quoted for a POSIX shell: each written as the command's own option where it has one
    (``--tp 8``; an on/off flag as its on or off form, ``--no-sequence-parallel``; a value by
    :func:`value_text`), else as ``--set KEY=VALUE`` (a table value as its dotted keys).
    ``evaluate``'s line (:func:`evaluate_line`), and the ``mfu`` line an MFU example prints
    where ``--gpus`` does not apply (``interface.cli.examples``)."""
    options = {
        p.name: p
        for p in command.params
        if isinstance(p, click.Option) and p.name not in ("set", "as_json", "per_stage")
    }
    words = ["trainplan", name]
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


MODEL_OPTIONS: tuple[str, ...] = (
    "params", "arch", "layers", "hidden", "heads", "kv_heads", "head_dim", "ffn_hidden", "vocab",
    "mtp_layers",
)  # fmt: skip
"""The search's model options that evaluate takes by the same names (a model given by its size
and dimensions rather than ``--model``; ``--mtp-layers`` beside either)."""


def answer_params(request: Any, answer: Mapping[str, Any]) -> dict[str, Any]:
    """Flat evaluate parameters that give a search answer (``answer``: its JSON object, as
    :func:`interface.search_commands.search_json` or ``per_stage_json`` writes it) under the
    search's request (:class:`interface.requests.SearchRequest`): the model as the request gave it
    (``--model`` as the catalogue spells it, :func:`scenarios.catalogue.catalogue_name`, or a path
    as typed, so a folder named like a catalogue model is read again; else its size and
    dimensions, :data:`MODEL_OPTIONS`), the answer's accelerator, its layout (:data:`ANSWER_FIELDS`;
    the layers of each model chunk where virtual_stages > 1,
    none where they are evaluate's own default split, :func:`default_split`) and the keys of the
    request's ``[cluster]`` table (the recipe, links and time model the search evaluated under)
    that the answer's layout reads (:func:`layout_read`: a search keeps the layouts a setting does
    not apply to, evaluate refuses it on them)."""
    values = request.values
    gpu = answer["gpu"]
    model = values.get("model")
    if isinstance(model, str) and not Path(model).exists():  # LLAMA_3_8B typed: llama3-8b
        model = catalogue_name(model)
    out: dict[str, Any] = {"model": model} if isinstance(model, str) else {}
    out |= {k: values[k] for k in MODEL_OPTIONS if values.get(k) is not None}
    out["gpu"] = gpu.get("file") or gpu["name"]
    layout = dict(answer["layout"])
    if (layout.get("virtual_stages") or 1) > 1 and layout.get("chunk_layers"):
        layout["stage_layers"] = layout["chunk_layers"]
    if default_split(layout):
        layout["stage_layers"] = None
    out |= {k: layout[k] for k in ANSWER_FIELDS if layout.get(k) is not None}
    settings = {k: v for k, v in request.cluster.items() if v not in (None, {}, [])}
    return layout_read(out | settings, settings)


def answer_defaults(request: Any, answer: Mapping[str, Any]) -> dict[str, Any]:
    """The defaults evaluate uses for a search answer (``answer``: its JSON object, under the
    search's ``request``): :attr:`optimizer.case.Case.defaults_used` of the case its
    ``evaluate it:`` line builds (:func:`answer_params`, :func:`interface.inputs.build_case`),
    so the answer's text names the same ``Defaults used:`` as that evaluate (fsdp2's
    ``tp_block_inputs = gathered``); empty where that case is refused (evaluate will say it)."""
    try:
        return dict(build_case(answer_params(request, answer)).defaults_used)
    except PlannerError:
        return {}


def layout_read(params: Mapping[str, Any], settings: Iterable[str]) -> dict[str, Any]:
    """``params`` (flat evaluate parameters) less the keys of ``settings`` (those of a search's
    ``[cluster]`` table among them) that its layout does not read: evaluate's own refusals, one
    key at a time — the case it builds (:func:`interface.inputs.build_case`, which checks a
    framework's keys against the layout's framework alone) and the keys only some layouts read
    (:func:`interface.commands.check_layout_keys`: the pipeline send options without virtual
    stages, :func:`model.key_rules.check_layout_reads_options`; ``sac_saves_scaled_mm``,
    ``grad_stats_group``, Megatron's step settings). A refusal names its key first
    (``p2p_warmup_flush: true is read by …``, the convention :func:`interface.commands.default_named`
    reads too); that key is dropped and the rest checked again. A search's settings describe the
    code its run uses and apply to the layouts that read them (the rules' own docstrings), so the
    answer's figures are the same without them. A refusal of anything else leaves ``params`` as
    they are (evaluate will say it).

    Examples
    --------
    >>> base = {"model": "llama3-8b", "dp": 8, "pp": 1, "seq_len": 2048,
    ...         "global_batch_size": 64}
    >>> layout_read(base | {"p2p_warmup_flush": True, "precision": "bf16"},
    ...             ["p2p_warmup_flush", "precision"]) == base | {"precision": "bf16"}
    True
    """
    out, left = dict(params), set(settings)
    while True:
        try:
            check_layout_keys(build_case(out))
            return out
        except PlannerError as err:
            key = str(err).partition(":")[0]
            if key not in left or key not in out:
                return out
            left.discard(key)
            del out[key]


def default_split(layout: Mapping[str, Any]) -> bool:
    """Whether a layout's layers per model chunk (``layout``: the JSON ``layout`` object,
    ``chunk_layers`` in model order) are the split evaluate builds when given none:
    :func:`model.split.default_chunk_sizes` of their sum under the framework's rule
    (:func:`model.split.split_rule_of`, the ends giving a layer back first under megatron,
    DeepSpeed's and torchtitan's own under deepspeed and fsdp2). Such a split is left off the
    line: evaluate gives the same figures without it, and a 128-chunk split is 128 numbers.

    >>> default_split({"framework": "megatron", "pp": 4, "virtual_stages": 1,
    ...                "chunk_layers": [7, 8, 8, 7]})
    True
    >>> default_split({"framework": "megatron", "pp": 4, "virtual_stages": 1,
    ...                "chunk_layers": [8, 9, 9, 4]})
    False
    """
    chunks = layout.get("chunk_layers")
    if not chunks:
        return False
    pp, v = layout["pp"], layout.get("virtual_stages") or 1
    rule = split_rule_of(True, layout["framework"], pp)
    try:
        return list(default_chunk_sizes(sum(chunks), pp, v, rule)) == list(chunks)
    except LayoutError:
        return False
