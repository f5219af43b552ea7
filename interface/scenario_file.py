"""A scenario file's keys and the kind of value each holds, and the reading and checking of a
file (the keys' table is :mod:`interface.scenario`'s docstring; the search problem is built from
the checked values there).

Unknown keys and values of the wrong kind (``seq_len = "long"``; :data:`VALUE_KINDS`) are refused
with the file and the key, and so is an empty list. Numbers and lists have the grammar of every
input (:func:`model.units.parse_number`, :func:`model.units.list_items`).
"""

from __future__ import annotations

import difflib
import re
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from trainplan.interface.moe_inputs import DISPATCHERS, EP_OVERLAPS
from trainplan.interface.parameter_names import CLUSTER_KEYS
from trainplan.interface.recipe_inputs import histogram
from trainplan.interface.tp_plan import TP_BLOCK_INPUTS
from trainplan.model.activation_offload import OFFLOAD_MODULES
from trainplan.model.context_parallel import CpKind
from trainplan.model.errors import InputError, ScenarioError
from trainplan.model.frameworks import Framework
from trainplan.model.layout import Recompute
from trainplan.model.optimizers import OptimizerKind
from trainplan.model.pipeline import Schedule
from trainplan.model.quantities import FRACTION_RULE
from trainplan.model.recompute_modules import RECOMPUTE_MODULES
from trainplan.model.units import (
    list_items,
    parse_count,
    parse_counts,
    parse_number,
    shown_text,
)
from trainplan.model.userbuffers_gemm import UB_CONFIGS
from trainplan.optimizer.objectives import Objective

__all__ = [
    "closest_key",
    "ON_WORDS",
    "OFF_WORDS",
    "switch_word",
    "TOP_KEYS",
    "SPACE_KEYS",
    "CONSTRAINT_KEYS",
    "CLUSTER_KEYS",
    "VALUE_KINDS",
    "CP_KIND_NAMES",
    "load_scenario",
    "check_scenario",
]

TOP_KEYS = {
    "description",
    "source",
    "model",
    "gpu",
    "gpus",
    "seq_len",
    "global_batch",
    "global_batch_tokens",
    "objective",
    "tokens",
    "gpu_hour_price",
    "max_layers",
    "mtp_layers",
    "framework",
    "per_stage",
    "space",
    "constraints",
    "cluster",
}
SPACE_KEYS = {
    "optimizer",
    "tp",
    "pp",
    "cp",
    "cp_kind",
    "cp_a2a",
    "ep",
    "micro_batch",
    "max_tp",
    "max_micro_batch",
    "zero",
    "recompute",
    "schedule",
    "virtual_stages",
    "rank_order",
    "framework",
}
CONSTRAINT_KEYS = {"headroom", "min_mfu", "tp_in_nvlink", "allocator_retries_ok"}


_FLAG, _TEXT, _COUNT, _WHOLE, _NUMBER, _SIZES, _PRICE, _FRACTIONS = (
    "flag",
    "text",
    "count",
    "whole",
    "number",
    "sizes",
    "price",
    "fractions",
)
_FRACTION = "fraction"  # a 0–1 share: headroom, min_mfu
_ANY = "any"  # a key without a kind yet (a test requires one for every key)
_HISTOGRAM = "histogram"  # [[length, count], …] (interface.recipe_inputs)
_SCHEDULES = tuple(x.value for x in Schedule)
_RECOMPUTES = tuple(x.value for x in Recompute)
_FRAMEWORKS = tuple(x.value for x in Framework)
_OPTIMIZERS = tuple(x.value for x in OptimizerKind)
CP_KIND_NAMES = tuple(x.value for x in CpKind) + ("p2p", "all_gather", "a2a", "hybrid")
ON_WORDS = ("true", "1", "yes", "on")
OFF_WORDS = ("false", "0", "no", "off")
"""An on/off value as the command line's ``--set`` and the web API's query read it, in any case
(Python's ``True``, TOML's and JSON's ``true``, YAML's ``yes``); a scenario file is TOML and
takes TOML's ``true`` and ``false`` (docs/guides/cli.md, "Rarely set knobs")."""


def switch_word(text: str) -> bool | None:
    """``text`` as an on/off value (:data:`ON_WORDS`, :data:`OFF_WORDS`, any case), None when it
    is none of them.

    >>> switch_word("True"), switch_word(" OFF "), switch_word("maybe")
    (True, False, None)
    """
    word = text.strip().lower()
    return True if word in ON_WORDS else False if word in OFF_WORDS else None


VALUE_KINDS: dict[str, Any] = {
    # top level
    "description": _TEXT,
    "source": _TEXT,
    "model": _TEXT,
    "gpu": [_TEXT],
    "gpus": _SIZES,
    "seq_len": _COUNT,
    "global_batch": _SIZES,
    "global_batch_tokens": _SIZES,
    "objective": tuple(o.value for o in Objective),
    "tokens": _COUNT,
    "gpu_hour_price": _PRICE,
    "max_layers": _COUNT,
    "mtp_layers": _WHOLE,
    "framework": [_FRAMEWORKS],  # top level or [space]: one profile or a list
    # [space]
    "tp": [_COUNT],
    "pp": [_COUNT],
    "cp": [_COUNT],
    "cp_kind": [CP_KIND_NAMES],
    "optimizer": [_OPTIMIZERS],
    "cp_a2a": [_COUNT],
    "ep": [_COUNT],
    "micro_batch": [_COUNT],
    "max_tp": _COUNT,
    "max_micro_batch": _COUNT,
    "zero": [(0, 1, 2, 3)],
    "recompute": [_RECOMPUTES],
    "schedule": [_SCHEDULES],
    "virtual_stages": [_COUNT],
    "rank_order": [_TEXT],
    # [constraints]
    "headroom": _FRACTION,
    "min_mfu": _FRACTION,
    "tp_in_nvlink": _FLAG,
    "allocator_retries_ok": _FLAG,
    "per_stage": _FLAG,
    # [cluster]
    "nvlink_domain": _COUNT,
    "segment_gpus": _WHOLE,  # 0: no segments (model.hardware.DeviceSpec.segment_gpus)
    "nvlink_gbps": _NUMBER,
    "scaleout_gbps": _NUMBER,
    "kernel_efficiency": _NUMBER,
    "attention_efficiency": _NUMBER,
    "overlap": _FRACTIONS,
    "flash_attention": _FLAG,
    "fabric": ("two-tier", "fat-tree", "rail"),
    "pod_size": _COUNT,
    "oversubscription": _NUMBER,
    "causal_attention_flops": _FLAG,
    "activation_convention": ("paper", "pytorch"),
    "memory_efficient_norm": _FLAG,
    "pipeline_frees_stage_tensors": _FLAG,
    "pipeline_keeps_outputs": _FLAG,
    "tp_block_inputs": TP_BLOCK_INPUTS,
    "gradient_dtype": ("bf16", "fp32"),
    "precision": ("bf16", "fp8"),
    "fp8_recipe": ("delayed", "tensorwise", "blockwise", "mxfp8"),
    "optimizer_dtype": ("fp32", "bf16"),
    "master_weights": _FLAG,
    "offload_optimizer": _NUMBER,
    "offload_params": _FLAG,
    "offload_activations": [OFFLOAD_MODULES],
    "cpu_offloading_num_layers": _WHOLE,
    "recompute_modules": [RECOMPUTE_MODULES],
    "fp8_param_gather": _FLAG,
    "fsdp_double_buffer": _FLAG,
    "flat_parameters": _FLAG,
    "deepspeed_overlap_comm": _FLAG,
    "seq_parallel_communication_data_type": ("fp32", "bf16"),
    "bias_dropout_fusion": _FLAG,
    "sac_saves_scaled_mm": _FLAG,
    "cross_entropy_fusion_impl": ("none", "native", "te"),
    "muon_tp_mode": ("duplicated", "blockwise"),
    "distributed_optimizer": ("mcore_distributed_optim", "distributed_fused_adam"),
    "fp8_activation_storage": ("linear_inputs", "deepseek_v3"),
    "compile": _FLAG,
    "host_link_gbps": _NUMBER,
    "host_memory_gbps": _NUMBER,
    "document_length": _NUMBER,
    "document_length_spread": _NUMBER,
    "document_lengths": _HISTOGRAM,
    "moe_capacity_factor": _NUMBER,
    "moe_pad_to_capacity": _FLAG,
    "moe_imbalance": _NUMBER,
    "moe_node_limit": _COUNT,
    "moe_dispatcher": DISPATCHERS,
    "moe_ep_overlap": EP_OVERLAPS,
    "memory_reserve_gib": _NUMBER,
    "vocab_multiple": _COUNT,
    "time_model": ("roofline", "single"),
    "gemm_efficiency": _NUMBER,
    "hbm_efficiency": _NUMBER,
    "scaleup_efficiency": _NUMBER,
    "scaleout_efficiency": _NUMBER,
    "tp_comm_overlap": ("none", "async", "full", "async-tp"),
    "tp_comm_overlap_cfg": tuple(UB_CONFIGS),
    "grad_reduce_overlap": _FLAG,
    "p2p_overlap": _FLAG,
    "p2p_warmup_flush": _FLAG,
    "p2p_forward_send_wait": _FLAG,
    "nccl_sm_charge": _FLAG,
    "nccl_channel_setup": _FLAG,
    "nccl_nvls": _FLAG,
    "use_multi_rank_bucket_allreduce": _FLAG,
    "lp_grads_set_to_none": _FLAG,
    "loss_scaling": _FLAG,
    "grad_stats_group": ("intra_dist_opt_instance", "world"),
    "grad_clip_scaling": ("every_step", "above_limit"),
    "attention_kernel": ("flash-attention-2", "flash-attention-3", "cudnn", "pytorch-sdpa-cudnn"),
    "calibration": _TEXT,
}
"""The kind of value each scenario key holds — the one place a file's value types are checked:
``flag`` (true/false), ``text``, ``whole`` (≥ 0), ``count`` (a whole number ≥ 1 within its limit, as 8192 or
"15e12"), ``number``, ``sizes`` (a count, a range "64..4096", or a list of them: [2048, 4096] or "2048;4096"),
``price`` (a number or a table GPU = number), ``histogram`` ([[length, count], …]),
``fractions`` (a table axis = number in [0, 1]), a tuple of allowed values, or ``[kind]`` for
one value or a list of them. Ranges and rules beyond the type (min_mfu in (0, 1], headroom in
[0, 1)…) are checked where the value is used, by the same code as the command-line options."""


def _check_value(key: str, value: Any, kind: Any) -> None:
    """Raise InputError when ``value`` is not of ``kind`` (see :data:`VALUE_KINDS`)."""
    if isinstance(kind, list):
        if kind[0] == _COUNT:
            parse_counts(value, key)
            return
        if isinstance(kind[0], tuple) and isinstance(value, str):
            value = value.replace(",", ";")  # names hold no comma: core_attn,mlp is two
        for item in list_items(value, key):
            _check_value(key, item, kind[0])
    elif isinstance(kind, tuple):
        if isinstance(value, bool) or value not in kind:
            raise InputError(f"{key}: {value!r} is not one of {', '.join(map(str, kind))}")
    elif kind == _FLAG:
        if not isinstance(value, bool):
            raise InputError(f"{key}: {value!r} must be true or false")
    elif kind == _TEXT:
        if not isinstance(value, str):
            raise InputError(f"{key}: {value!r} must be a string")
    elif kind == _COUNT:
        parse_count(value, key)
    elif kind == _WHOLE:
        parse_count(value, key, minimum=0)
    elif kind == _NUMBER:
        parse_number(value, key)
    elif kind == _FRACTION:
        try:
            parse_number(value, key)
        except InputError:
            raise InputError(
                f"{key}: {shown_text(value, 40)} is not a number: give {FRACTION_RULE}"
            ) from None
    elif kind == _SIZES and key != "global_batch_tokens":  # tokens: checked with seq_len
        parse_counts(value, key, ranges=True)
    elif kind == _SIZES:
        list_items(value, key)
    elif kind == _HISTOGRAM:
        histogram(value)
    elif kind in (_PRICE, _FRACTIONS):
        table = value if isinstance(value, dict) else {None: value}
        if kind == _FRACTIONS and not isinstance(value, dict):
            raise InputError(f"{key}: {value!r} must be a table of fractions, e.g. {{ dp = 0.5 }}")
        for name, number in table.items():
            x = parse_number(number, f"{key} {name}" if name else key)
            if kind == _FRACTIONS and not 0 <= x <= 1:
                raise InputError(f"{key} {name}: {number!r} must be {FRACTION_RULE}")


def closest_key(key: str, keys: Iterable[str]) -> str | None:
    """The one of ``keys`` closest to a misspelt ``key`` (:func:`difflib.get_close_matches`,
    ``-`` and ``_`` alike), or None: the "did you mean" of ``--set`` and of the API's query
    keys (:func:`interface.cli.query.parse_query`).

    >>> closest_key("compil", ["compile", "cp", "recompute"]), closest_key("gpu-hour", ["tp"])
    ('compile', None)
    >>> closest_key("memory_efficent_norm", ["memory-efficient-norm", "tp"])
    'memory-efficient-norm'
    """
    by_form = {k.replace("-", "_"): k for k in sorted(keys)}
    near = difflib.get_close_matches(key.replace("-", "_"), list(by_form), n=1)
    return by_form[near[0]] if near else None


def load_scenario(path: str | Path) -> dict[str, Any]:
    """Read and check a scenario file (flat dict with the ``space``/``constraints``/``cluster`` tables):
    every key known, every value of its kind (:data:`VALUE_KINDS`).

    Raises
    ------
    ScenarioError
        Naming the file and the unknown key, a value of the wrong kind (``seq_len = "long"``),
        an empty list, or the read error (no such file, not TOML, not UTF-8, nested too deeply, not
        a regular file).
    """
    p = Path(path)
    try:
        if not p.exists():
            raise ScenarioError(f"scenario {p}: no such file")
        if not p.is_file():  # a device or pipe would be read without end
            raise ScenarioError(f"scenario {p}: not a regular file (a folder, device or pipe)")
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as err:
        raise ScenarioError(f"scenario {p}: {_toml_error(p, err)}") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ScenarioError(f"scenario {p}: {err}") from None
    except RecursionError:
        raise ScenarioError(
            f"scenario {p}: tables or lists nest too deeply to read (a scenario nests two levels)"
        ) from None
    check_scenario(data, f"scenario {p}", dotted=True)
    return data


def _toml_error(path: Path, err: tomllib.TOMLDecodeError) -> str:
    """TOML's message, with the key it stopped at where it names none: a key given twice
    (``Cannot overwrite a value (at line 2, column 20)``) says which key, read from that line."""
    text = str(err)
    found = re.search(r"at line (\d+)", text)
    if "overwrite" not in text or not found:
        return text
    try:
        line = path.read_text(encoding="utf-8").splitlines()[int(found.group(1)) - 1]
    except (OSError, UnicodeDecodeError, IndexError):
        return text
    key = line.split("=", 1)[0].strip()
    return f"{shown_text(key, 60)}: given twice (line {found.group(1)}); give each key once"


def _choice_case(value: Any, kind: Any) -> Any:
    """``value`` with each name of a choice (:data:`VALUE_KINDS`' tuples) typed in another case
    written as the choice (``framework = "Megatron"`` is megatron, ``recompute = ["Full"]`` full),
    as the command line reads a choice in any case (click's ``case_sensitive=False``); anything
    else as it is, for :func:`_check_value` to judge.

    >>> _choice_case(["Megatron", "FSDP2"], [("megatron", "fsdp2")]), _choice_case("Rail", ("rail",))
    (['megatron', 'fsdp2'], 'rail')
    >>> _choice_case("Megatron; DeepSpeed", [("megatron", "deepspeed")])
    'megatron;deepspeed'
    """
    choices = kind[0] if isinstance(kind, list) else kind
    if not isinstance(choices, tuple):
        return value
    lower = {str(c).lower(): c for c in choices}

    def one(v: Any) -> Any:
        return lower.get(v.strip().lower(), v) if isinstance(v, str) else v

    if isinstance(value, list):
        return [one(v) for v in value]
    if isinstance(value, str) and isinstance(kind, list) and re.search("[;,]", value):
        items = [one(v) for v in re.split("[;,]", value)]
        return ";".join(items) if all(i in choices for i in items) else value
    return one(value)


def check_scenario(data: dict[str, Any], where: str, dotted: bool = False) -> None:
    """Check a scenario's values (as TOML reads them): every key known, every value of its kind
    (:data:`VALUE_KINDS`); the grid of ``trainplan sweep`` checks its base the same way. With
    ``dotted`` (a file) a table's key is named with its table, as the file places it
    (``space.tp``).

    Raises
    ------
    ScenarioError
        ``{where}: unknown key …`` (with the closest known key, :func:`closest_key`) or
        ``{where}: seq_len: 'long' …``, one line.
    """
    where = f"{where}: " if where else ""
    for name, keys in (
        ("", TOP_KEYS),
        ("space", SPACE_KEYS),
        ("constraints", CONSTRAINT_KEYS),
        ("cluster", CLUSTER_KEYS),
    ):
        table = data.get(name, {}) if name else data
        if not isinstance(table, dict):
            raise ScenarioError(f"{where}{name} = {table!r} must be a table, [{name}]")
        prefix = f"{name}." if name and dotted else ""
        unknown = sorted(set(table) - keys)
        if unknown:
            near = closest_key(unknown[0], keys)
            hint = f"; did you mean {prefix}{near}?" if near else ""
            raise ScenarioError(
                f"{where}unknown key {prefix + unknown[0]!r}{hint} (known"
                f"{' in [' + name + ']' if name else ''}: {', '.join(sorted(keys))})"
            )
        for key, value in table.items():
            if key in ("space", "constraints", "cluster"):
                continue
            kind = VALUE_KINDS.get(key, _ANY)
            table[key] = value = _choice_case(value, kind)
            try:
                _check_value(key, value, kind)
            except InputError as err:
                text = str(err)
                if prefix and text.startswith(key):
                    text = prefix + text
                raise ScenarioError(f"{where}{text}") from None
