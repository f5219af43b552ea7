"""The cost model's parameter names as the flags a user types.

``model/`` speaks parameter names: a message that tells the user what to give names the
parameter in backticks (``give `host_link_gbps```, ``use `framework` megatron``). Where the
interface presents a message — a one-line error on the command line, an HTTP 422 of the web API,
an estimate's notes — :func:`with_flags` writes each such name as the flag the user typed
(``--host-link-gbps``, ``--framework megatron``), so the line names what the user can change.
A parameter whose flag was moved off the command line (:data:`MOVED_FLAGS`) is written as the
``--set`` that gives it (``--set host_link_gbps``) on the command line, and as its query parameter
(``host-link-gbps``) in the web API's lines (``web=True``), which take it by that name.
"""

from __future__ import annotations

import re
from collections.abc import Collection

__all__ = [
    "PARAMETER_FLAGS",
    "derived_count",
    "MOVED_FLAGS",
    "MOVED_KEYS",
    "MOVED_QUERY",
    "flag_for",
    "with_flags",
    "as_fields",
    "as_keys",
    "on_page",
    "refusal",
    "as_typed",
    "typed_on_page",
    "moved_hint",
]

PARAMETER_FLAGS: dict[str, tuple[str, ...]] = {
    "num_layers": ("--layers",),
    "hidden_size": ("--hidden",),
    "num_attention_heads": ("--heads",),
    "num_params_declared": ("--params",),
    "zero_stage": ("--zero",),
    "micro_batch_size": ("--micro-batch",),
    "global_batch_size": ("--global-batch",),
    "pp": ("--pp", "--stages"),
    "num_microbatches": ("--num-microbatches", "--microbatches", "--micro-batches"),
    "model": ("--model", "--policy"),
}
"""Parameter names whose flag is not (only) the name with ``_`` written ``-``: the flags that
give it, the first where no command is named (:func:`flag_for`); another where a command spells
it so (``pp`` is ``--stages`` and ``num_microbatches`` ``--microbatches`` on ``trainplan
pipeline``, whose micro-batch count is given where evaluate derives it from the batch). The RLHF
commands' policy network is ``--model`` (the spec's ``policy``): ``--policy``, as an RLHF user
names it, is read as that spelling, so ``rlhf --policy X`` is told to write ``--model X``."""

MOVED_FLAGS: dict[str, tuple[str, bool | None]] = {
    # links, memory reserve
    "--nvlink-domain": ("nvlink_domain", None),
    "--segment-gpus": ("segment_gpus", None),
    "--nvlink-gbps": ("nvlink_gbps", None),
    "--scaleout-gbps": ("scaleout_gbps", None),
    "--fabric": ("fabric", None),
    "--pod-size": ("pod_size", None),
    "--oversubscription": ("oversubscription", None),
    "--host-link-gbps": ("host_link_gbps", None),
    "--host-memory-gbps": ("host_memory_gbps", None),
    "--memory-reserve": ("memory_reserve_gib", None),
    # the step-time model
    "--time-model": ("time_model", None),
    "--gemm-efficiency": ("gemm_efficiency", None),
    "--hbm-efficiency": ("hbm_efficiency", None),
    "--scaleup-efficiency": ("scaleup_efficiency", None),
    "--scaleout-efficiency": ("scaleout_efficiency", None),
    "--attention-efficiency": ("attention_efficiency", None),
    "--tp-comm-overlap": ("tp_comm_overlap", None),
    "--attention-kernel": ("attention_kernel", None),
    "--grad-reduce-overlap": ("grad_reduce_overlap", True),
    "--no-grad-reduce-overlap": ("grad_reduce_overlap", False),
    "--kernel-efficiency": ("kernel_efficiency", None),
    "--overlap": ("overlap", None),
    # counting conventions
    "--activation-convention": ("activation_convention", None),
    "--causal-attention-flops": ("causal_attention_flops", True),
    "--full-attention-flops": ("causal_attention_flops", False),
    "--pad-vocab": ("vocab_multiple", None),
    # the training recipe's rarely set knobs
    "--gradient-dtype": ("gradient_dtype", None),
    "--optimizer-dtype": ("optimizer_dtype", None),
    "--master-weights": ("master_weights", True),
    "--no-master-weights": ("master_weights", False),
    "--memory-efficient-norm": ("memory_efficient_norm", True),
    "--no-memory-efficient-norm": ("memory_efficient_norm", False),
    "--tp-block-inputs": ("tp_block_inputs", None),
    "--pipeline-frees-stage-tensors": ("pipeline_frees_stage_tensors", True),
    "--pipeline-keeps-outputs": ("pipeline_keeps_outputs", True),
    "--compile": ("compile", True),
    "--no-compile": ("compile", False),
    "--moe-capacity-factor": ("moe_capacity_factor", None),
    "--moe-pad-to-capacity": ("moe_pad_to_capacity", True),
    "--no-moe-pad-to-capacity": ("moe_pad_to_capacity", False),
    "--moe-imbalance": ("moe_imbalance", None),
    "--moe-node-limit": ("moe_node_limit", None),
    "--moe-dispatcher": ("moe_dispatcher", None),
    "--moe-ep-overlap": ("moe_ep_overlap", None),
    "--offload-activations": ("offload_activations", None),
    "--recompute-modules": ("recompute_modules", None),
    "--fp8-param-gather": ("fp8_param_gather", True),
    "--document-length-spread": ("document_length_spread", None),
}
"""The flags of evaluate, example, search and frontier that were moved off the command line
(most runs never set them), each with the scenario key that replaces it and, for an on/off flag,
the value it meant: ``--set KEY=VALUE`` on the command line, the key in a scenario file, the old
flag's name as a query parameter of the web API. Given anyway, a moved flag is refused with its
replacement (:func:`moved_hint`); ``tests/data/cli_options.txt`` lists them."""

MOVED_KEYS = frozenset(key for key, _ in MOVED_FLAGS.values())
"""The scenario keys of :data:`MOVED_FLAGS`."""

MOVED_QUERY: dict[str, str] = {}
"""The web API's query parameter of each moved key {key: query name}: its flag's primary
spelling without the dashes (``memory_reserve_gib``: ``memory-reserve``; an on/off key by its
``true`` spelling, ``master-weights=false``)."""
for _flag, (_key, _switch) in MOVED_FLAGS.items():
    if _switch is not False:
        MOVED_QUERY.setdefault(_key, _flag[2:])


def moved_hint(flag: str, value: str | None = None) -> str:
    """The line that refuses moved ``flag`` (given with ``value``, when it takes one).

    Examples
    --------
    >>> moved_hint("--moe-node-limit", "4")
    '--moe-node-limit: moved to --set moe_node_limit=4 or the scenario key'
    >>> moved_hint("--no-master-weights")
    '--no-master-weights: moved to --set master_weights=false or the scenario key'
    >>> moved_hint("--overlap", "dp=0.5")
    '--overlap: moved to --set overlap.dp=0.5 or the scenario key'
    """
    key, switch = MOVED_FLAGS[flag]
    if switch is not None:
        setting = f"{key}={str(switch).lower()}"
    elif key == "overlap":
        setting = f"overlap.{value or 'AXIS=FRACTION'}"
    else:
        setting = f"{key}={value if value is not None else 'VALUE'}"
    return f"{flag}: moved to --set {setting} or the scenario key"


_NAME = re.compile(r"`([a-z][a-z0-9_]*)`")


def derived_count(flag: str, command: str, fields: Collection[str] | None = None) -> str:
    """The line refusing a micro-batch count (``flag``, a spelling of ``num_microbatches`` in
    :data:`PARAMETER_FLAGS`) given to ``command``, which derives it from the batch as
    Megatron-LM does (megatron/core/num_microbatches_calculator.py,
    ConstantNumMicroBatchesCalculator: global batch ÷ (micro batch × data-parallel size)) — where
    the closest flag, ``--micro-batch``, is the sequences of one micro-batch, another figure.
    ``fields``: the web API's query keys of ``command`` (the line as the page reads it,
    :func:`on_page`); None: the command line's.

    Examples
    --------
    >>> derived_count("--microbatches", "evaluate")[:60]
    '--microbatches: no such option of trainplan evaluate, which '
    >>> derived_count("microbatches", "evaluate", {"global-batch", "micro-batch"})[:80]
    'microbatches: no such parameter of evaluate, which derives the micro-batch count'
    """
    line = (
        f"{flag}: no such option of trainplan {command}, which derives the micro-batch count m "
        "from the batch: m = --global-batch ÷ (--micro-batch × dp), --micro-batch being the "
        "sequences of one micro-batch"
    )
    if fields is None:
        return line
    return on_page(
        line.replace(f"option of trainplan {command}", f"parameter of {command}"), fields
    )


def flag_for(name: str, web: bool = False, options: Collection[str] = ()) -> str:
    """The flag of parameter ``name`` (``web``: a moved key as the web API's query parameter):
    of its spellings (:data:`PARAMETER_FLAGS`) the first that is one of ``options`` (a command's
    flags), else the first.

    Examples
    --------
    >>> flag_for("zero_stage"), flag_for("tp"), flag_for("host_link_gbps")
    ('--zero', '--tp', '--set host_link_gbps')
    >>> flag_for("host_link_gbps", web=True), flag_for("memory_reserve_gib", web=True)
    ('host-link-gbps', 'memory-reserve')
    >>> flag_for("pp"), flag_for("pp", options={"--stages", "--microbatches"})
    ('--pp', '--stages')
    """
    if name in MOVED_KEYS:
        return MOVED_QUERY[name] if web else f"--set {name}"
    flags = PARAMETER_FLAGS.get(name, ("--" + name.replace("_", "-"),))
    return next((f for f in flags if f in options), flags[0])


def with_flags(message: str, web: bool = False, options: Collection[str] = ()) -> str:
    """``message`` with each backticked parameter name written as its flag (``web``: a moved
    key as its query parameter; ``options``: the command's flags, :func:`flag_for`).

    Examples
    --------
    >>> with_flags("offload: the B200 has no host link bandwidth; give `host_link_gbps`")
    'offload: the B200 has no host link bandwidth; give --set host_link_gbps'
    >>> with_flags("offload: the B200 has no host link bandwidth; give `host_link_gbps`", web=True)
    'offload: the B200 has no host link bandwidth; give host-link-gbps'
    >>> with_flags("pod_size: 8 does not apply; add --set fabric=rail", web=True)
    'pod-size: 8 does not apply; add fabric=rail'
    >>> with_flags("num_microbatches: 6 must be a multiple of `pp` = 4", options={"--stages"})
    'num_microbatches: 6 must be a multiple of --stages = 4'
    """
    message = _NAME.sub(lambda m: flag_for(m.group(1), web, options), message)
    if not web:
        return message
    message = _SET.sub(lambda m: _query(m.group(1), m.group(2)), message)
    return _HEAD.sub(lambda m: MOVED_QUERY.get(m.group(1), m.group(1)), message)


def as_keys(message: str) -> str:
    """``message`` as a sweep grid's (or a scenario file's) reader reads it: each backticked
    parameter as the key itself, which is how a grid gives it (``global_batch``), never a flag.

    Examples
    --------
    >>> as_keys("global_batch: no batch; give `global_batch` or `global_batch_tokens`")
    'global_batch: no batch; give global_batch or global_batch_tokens'
    """
    return _NAME.sub(lambda m: m.group(1), message)


def on_page(message: str, fields: Collection[str]) -> str:
    """``message`` as the web page's user reads it: a command-line line (:func:`with_flags`'s, or
    a backticked parameter) with each flag of the page's command written as the form field and
    query parameter that gives it (``--recompute`` as ``recompute``, ``--global-batch`` as
    ``global-batch``, ``--set memory_reserve_gib`` as ``memory-reserve``). ``fields``: the page's
    field names (the command's query parameters, :func:`interface.cli.query.query_params`); a
    ``--word`` that is not one of them (a framework's own flag, ``--overlap-grad-reduce``) is kept.

    Examples
    --------
    >>> on_page("give --layers --hidden --heads …", {"layers", "hidden", "heads"})
    'give layers hidden heads …'
    >>> on_page("(--set moe_dispatcher=deepep; Megatron's --moe-token-dispatcher-type)", {"tp"})
    "(moe-dispatcher=deepep; Megatron's --moe-token-dispatcher-type)"
    >>> on_page("cp_kind: ulysses needs cp to divide the heads", {"cp-kind"})
    'cp-kind: ulysses needs cp to divide the heads'

    The terminal's list of ``--set`` keys is the manual's table on the page:

    >>> print(on_page("--set: 'x' is not a key (trainplan evaluate --set help lists them)", {"set"}))
    set: 'x' is not a key (the manual's CLI reference lists them: /manual/reference/cli/#scenario-keys-set)
    """
    message = _SET_HELP.sub(SET_KEYS_PAGE, message)
    message = with_flags(message, web=True, options={f"--{f}" for f in fields})
    message = _HEAD.sub(lambda m: _dashed(m.group(1), fields), message)
    return as_fields(message, fields)


def as_fields(message: str, fields: Collection[str]) -> str:
    """``message`` with each ``--flag`` left in it that is one of ``fields`` written as that field:
    the web's line naming another command's parameter after :func:`on_page` wrote this command's
    (``/api/rlhf-plan`` refusing DPO points to ``/api/rlhf``'s ``policy-params``); a framework's
    own flag, no field, is kept.

    >>> as_fields("takes --policy-params, not --overlap-grad-reduce", {"policy-params"})
    'takes policy-params, not --overlap-grad-reduce'
    """
    return _FLAG.sub(lambda m: m.group(1) if m.group(1) in fields else m.group(0), message)


def _dashed(name: str, fields: Collection[str]) -> str:
    """A line's head parameter as the page's field when it is one: its flag's name
    (``global_batch_size`` as ``global-batch``, ``cp_kind`` as ``cp-kind``); else as it is."""
    field = flag_for(name, web=True, options={f"--{f}" for f in fields}).removeprefix("--")
    return field if field in fields else name


def refusal(message: str, options: Collection[str], web: bool = False) -> str:
    """A one-line refusal as its reader typed the input — the one convention for every refusal
    the interface prints. Command line: backticked parameters as flags (:func:`with_flags`), the
    head (the parameter the line starts with, before its ``:`` or its ``NAME:``) as the flag the
    user typed when it is one of ``options`` (the command line's flags: ``gpus:`` as
    ``--gpus:``, ``global_batch_size:`` as ``--global-batch:``, ``gpu_hour_price H100-SXM:`` as
    ``--gpu-hour-price H100-SXM:``), a key given as ``--set KEY=…`` as ``--set KEY:`` (the key is
    in ``options`` as ``--set KEY``: :func:`interface.cli.common.typed_options`). Web (``web``,
    ``options`` the API's query keys): every name as the API's key (:func:`on_page`: ``--dp:`` as
    ``dp:``).

    Examples
    --------
    >>> refusal("global_batch_size: 7 is not divisible by 8", {"--global-batch"})
    '--global-batch: 7 is not divisible by 8'
    >>> refusal("--set: compile: 'True' must be true or false", {"--set"})
    "--set compile: 'True' must be true or false"
    >>> refusal("compile: 'maybe' must be true or false", {"--set", "--set compile"})
    "--set compile: 'maybe' must be true or false"
    >>> refusal("--set compile: set twice", {"--set"}), refusal("nvlink_gbps: 0 …", {"--gpus"})
    ('--set compile: set twice', 'nvlink_gbps: 0 …')
    >>> refusal("gpu_hour_price B200: 'x' is not a number", {"--gpu-hour-price"})
    "--gpu-hour-price B200: 'x' is not a number"
    >>> refusal("global_batch_size: 7 …", {"global-batch"}, web=True)
    'global-batch: 7 …'
    """
    if web:
        return on_page(message, options)
    message = with_flags(message, options=options)
    if _SET_HEAD.match(message):
        return _SET_HEAD.sub(r"--set \1:", message)
    return _CLI_HEAD.sub(lambda m: _typed(m.group(1), options), message)


def _typed(name: str, options: Collection[str]) -> str:
    """A line's head parameter as the flag the user typed, where the command line has one."""
    flag = flag_for(name, options=options)
    if flag in options:
        return flag
    return f"--set {name}" if f"--set {name}" in options else name


_SET_HEAD = re.compile(r"^--set:? ([a-z][a-z0-9_.]*):")
"""A line's ``--set KEY:`` or ``--set: KEY:`` head (the key is what the user typed)."""
_CLI_HEAD = re.compile(r"^([a-z][a-z0-9_]*)(?=(?: (?=[^\s:]*[A-Z0-9-])[A-Za-z0-9-]+)?:)")
"""A one-line error's head parameter on the command line (``gpus: dp 3 × …``), also one that
names an item before its ``:`` (``gpu_hour_price H100-SXM: …``)."""


_SET_HELP = re.compile(r"trainplan [a-z-]+ --set help lists them")
"""The command line's pointer to its list of ``--set`` keys (``interface.scenario_keys``)."""
SET_KEYS_PAGE = "the manual's CLI reference lists them: /manual/reference/cli/#scenario-keys-set"
"""The same pointer on the page: the manual's table of the keys (``docs/reference/cli.md``
"Scenario keys (--set)", :func:`interface.cli.reference.cli_markdown`), served at ``/manual/``."""
_FLAG = re.compile(r"(?<![\w-])--([a-z][a-z0-9-]*)")
"""A ``--flag`` in a line."""
_SET = re.compile(r"--set ([a-z][a-z0-9_]*)(\.)?")
"""The command line's ``--set KEY`` (``--set overlap.`` for a table's entry) in a line."""
_HEAD = re.compile(r"^([a-z][a-z0-9_]*)(?=[: ])")
"""The parameter a one-line error starts with (``nvlink_gbps: 0.001 must be…``)."""


def _query(key: str, dot: str | None) -> str:
    """A line's ``--set KEY`` as the web API's query parameter (``--set overlap.dp=0.5`` as
    ``overlap=dp=0.5``)."""
    name = MOVED_QUERY.get(key)
    if name is None:
        return f"--set {key}{dot or ''}"
    return f"{name}=" if dot else name


def as_typed(message: str, args: Collection[str]) -> str:
    """A command line's refusal (:func:`refusal`'s) with a percent the user typed echoed as typed
    beside the value it reads as: ``--headroom: 1 must …`` for ``--headroom 100%`` reads
    ``--headroom: 100% (1) must …``, so the line quotes what was typed. ``args``: the command's
    arguments as given (``--flag VALUE``, ``--flag=VALUE``, ``--set KEY=VALUE``); any other line
    unchanged.

    Examples
    --------
    >>> as_typed("--headroom: 1 must be below 1", ["--headroom", "100%"])
    '--headroom: 100% (1) must be below 1'
    >>> as_typed("--set hbm_efficiency: 1.5 must be …", ["--set", "hbm_efficiency=150%"])
    '--set hbm_efficiency: 150% (1.5) must be …'
    >>> as_typed("--headroom: 1 must be below 1", ["--headroom=1"])
    '--headroom: 1 must be below 1'
    """
    head = _TYPED_HEAD.match(message)
    if head is None:
        return message
    name, value = head.group(1), head.group(2)
    typed: str | None = None
    words = list(args)
    for i, arg in enumerate(words):
        if arg == "--":
            break
        if name.startswith("--set "):
            if arg == "--set" and i + 1 < len(words):
                key, _, text = words[i + 1].partition("=")
                typed = text if key.strip() == name[6:] else typed
        elif arg == name and i + 1 < len(words):
            typed = words[i + 1]
        elif arg.startswith(name + "="):
            typed = arg[len(name) + 1 :]
    if typed is None or not typed.strip().endswith("%") or typed.strip() == value:
        return message
    return f"{name}: {typed.strip()} ({value}){message[head.end() :]}"


def typed_on_page(message: str, pairs: Collection[tuple[str, str]], fields: Collection[str]) -> str:
    """The web API's refusal (:func:`on_page`'s) naming its parameter and value as the request
    typed them, as :func:`as_typed` does the command line's: a key given by ``set=KEY=VALUE``
    named as that ``KEY`` (``set=moe_capacity_factor=0``: ``moe_capacity_factor: 0 must…``, not
    the field ``moe-capacity-factor``), and a percent echoed as typed beside the value it reads
    as (``headroom=100%``: ``headroom: 100% (1) must…``). ``pairs``: the request's query pairs
    (a POST body's included), ``fields``: the command's query parameters; any other line
    unchanged.

    Examples
    --------
    >>> typed_on_page("headroom: 1 must be below 1", [("headroom", "100%")], {"headroom"})
    'headroom: 100% (1) must be below 1'
    >>> typed_on_page("moe-capacity-factor: 0 must be positive",
    ...               [("set", "moe_capacity_factor=0")], {"moe-capacity-factor"})
    'moe_capacity_factor: 0 must be positive'
    >>> typed_on_page("hbm-efficiency: 150% must be …", [("set", "hbm_efficiency=150%")], {"tp"})
    'hbm_efficiency: 150% must be …'
    >>> typed_on_page("headroom: no such parameter", [("headroom", "150%")], {"tp"})
    'headroom: no such parameter'
    """
    head = _PAGE_HEAD.match(message)
    if head is None:
        return message
    name, value = head.group(1), head.group(2)
    shown, typed = name, None
    for key, text in pairs:
        if key == name:
            shown, typed = name, text
        elif key == "set" and "=" in text:
            given, _, text = text.partition("=")
            given = given.strip()
            if given and on_page(f"{given}: x", fields).partition(":")[0] == name:
                shown, typed = given, text
    rest = message[head.end() :]
    typed = (typed or "").strip()
    if typed.endswith("%") and typed != value and _NUMBER.fullmatch(value):
        rest = f" ({value}){rest}"
        value = typed
    return f"{shown}: {value}{rest}"


_PAGE_HEAD = re.compile(r"^([a-z][a-z0-9_-]*): (\S+)(?= )")
"""A web refusal's head parameter and the word after it (``headroom: 1 must…``)."""
_NUMBER = re.compile(r"-?[0-9][0-9.e+-]*")
"""A number a refusal echoes (``1``, ``1.5``, ``-0.2``), which a percent typed may stand for."""

_TYPED_HEAD = re.compile(r"^(--[a-z][a-z0-9-]*|--set [a-z][a-z0-9_]*): (-?[0-9][0-9.e+-]*)(?= )")
"""A command line's refusal's head flag and the number it echoes (``--headroom: 1 must…``)."""
