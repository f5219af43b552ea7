"""From flat parameters (CLI options, an example's TOML table) to the cost model's inputs.

One place decides every default (docs/concepts/conventions.md;
docs/guides/evaluate.md "Inputs"): the catalogue's published training setup
(s, B), degrees 1, ZeRO-1, 1F1B, sequence parallelism on when tp > 1, FlashAttention on, the
H100-SXM when no GPU is named. The defaults used are listed in
:attr:`trainplan.optimizer.case.Case.defaults_used`.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from fractions import Fraction
from pathlib import Path
from typing import Any, overload

from trainplan.interface.moe_inputs import MOE_KEYS, moe_run_of
from trainplan.interface.recipe_inputs import DOCUMENT_KEYS, documents_from
from trainplan.interface.time_inputs import TIME_KEYS, cost_options, fraction_of_peak
from trainplan.interface.time_inputs import bool_param as _flag
from trainplan.interface.tp_plan import check_tp_block_inputs, gathered_block_inputs
from trainplan.model.errors import InputError, check_applicable
from trainplan.model.frameworks import DEFAULT_FRAMEWORK, DEFAULT_ZERO_STAGE, Framework
from trainplan.model.hardware import ClusterLinks, DeviceSpec
from trainplan.model.layout import LAYOUT_FIELDS, SEARCHED_FIELDS, Layout
from trainplan.model.model_spec import ModelSpec
from trainplan.model.offload import Offload
from trainplan.model.op_rates import check_fp8_recipe
from trainplan.model.optimizers import OptimizerKind
from trainplan.model.pipeline import LAYOUT_CHUNKS, Schedule
from trainplan.model.precision import Precision, check_precision, dtype_bytes, optimizer_state_bytes
from trainplan.model.recompute_modules import parse_recompute_modules
from trainplan.model.specs import Architecture, Mlp, Norm, PositionEmbedding, TrainingSpec
from trainplan.model.split import megatron_stage_layers
from trainplan.model.timing import attention_efficiency_for
from trainplan.model.units import parse_count, parse_number, shown_number, shown_text
from trainplan.optimizer.case import Case
from trainplan.scenarios.catalogue import get_model
from trainplan.topology.accelerators import get_accelerator

MAX_SHOWN_PATH = 400
"""Characters of a file path an error line echoes: a path is what the user typed and needs whole
to act on (a temporary folder's path alone runs past 80); a pasted 100,000-character value is still
cut, with its length said."""

__all__ = [
    "build_case",
    "DEFAULT_GPU",
    "LAYOUT_KEYS",
    "DIM_KEYS",
    "RECIPE_KEYS",
    "parse_framework",
    "output_path",
    "writing",
]

DEFAULT_GPU = "H100-SXM"
LAYOUT_KEYS = LAYOUT_FIELDS
RECIPE_KEYS = (
    "gradient_dtype",
    "precision",
    "fp8_recipe",
    "optimizer_dtype",
    "master_weights",
    "offload_optimizer",
    "offload_params",
    "offload_activations",
    "recompute_modules",
    "fp8_param_gather",
    "muon_tp_mode",
    "fp8_activation_storage",
    "host_link_gbps",
    "host_memory_gbps",
    *DOCUMENT_KEYS,
    *MOE_KEYS,
)
"""The training recipe's numerics, offload, packed documents and MoE routing and dispatch
(:mod:`model.precision`, :mod:`model.offload`, :mod:`model.packing`, :mod:`model.moe_run`):
evaluate options, and ``[cluster]`` keys of a
scenario file."""
MEGATRON_SPLIT_KEYS = (
    "first_stage_layers",
    "last_stage_layers",
    "account_for_embedding",
    "account_for_loss",
)
"""Megatron-Core's stage-layout arguments (:func:`model.split.megatron_stage_layers`), turned
into ``stage_layers`` once the model's depth is known."""
KNOWN_KEYS = frozenset(
    {
        "model",
        "params",
        "name",
        "model_spec",
        "training_defaults",
        "gpu",
        "num_gpus",
        "seq_len",
        "global_batch_size",
        "flash_attention",
        "nvlink_domain",
        "nvlink_gbps",
        "scaleout_gbps",
        "kernel_efficiency",
        "attention_efficiency",
        "overlap",
        "mfu_convention",
        "causal_attention_flops",
        "zero3_regather",
        "vocab_multiple",
        "fabric",
        "pod_size",
        "oversubscription",
        "activation_convention",
        "memory_efficient_norm",
        "tp_block_inputs",
        "gathered_block_inputs",  # the search's: tp_block_inputs checked against its space
        *RECIPE_KEYS,
        "memory_reserve_gib",
        *TIME_KEYS,
        *LAYOUT_KEYS,
        *MEGATRON_SPLIT_KEYS,
        "layers",
        "hidden",
        "heads",
        "kv_heads",
        "ffn_hidden",
        "vocab",
        "arch",
        "head_dim",
        "mtp_layers",
    }
)
"""Every parameter :func:`build_case` reads; anything else is an error naming it."""
DIM_KEYS = ("arch", "layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "head_dim")
"""Dimensions given with ``--params`` (the CLI options of the same names)."""


@overload
def _count(params: Mapping[str, Any], key: str, default: int) -> int: ...
@overload
def _count(params: Mapping[str, Any], key: str, default: None = None) -> int | None: ...
def _count(params: Mapping[str, Any], key: str, default: int | None = None) -> int | None:
    """A whole number >= 1 within its limit from ``params[key]`` (number or text like 70B; the
    rule of :func:`model.units.parse_count`), or ``default``."""
    value = params.get(key)
    return default if value is None else parse_count(value, key)


MIN_GBPS = 0.1
"""The least link or host-memory bandwidth accepted, GB/s: below any interconnect in use (PCIe
Gen1 ×1 moves 0.25 GB/s per direction, PCI-SIG), so a typo such as 1e-3 is refused instead of
printing a step of years."""


def _fraction_of_peak(params: Mapping[str, Any], key: str) -> float | None:
    """An efficiency in (0, 1] (:func:`time_inputs.fraction_of_peak`), or None when not given."""
    value = params.get(key)
    return None if value is None else fraction_of_peak(value, key)


def _attention_efficiency(
    params: Mapping[str, Any], device_name: str, training: TrainingSpec
) -> float | None:
    """The FlashAttention core's efficiency: given, or the accelerator's default. Given with
    FlashAttention off it would be ignored (the core is then matmuls at the kernel efficiency):
    an error rather than a silent no-op."""
    given = _fraction_of_peak(params, "attention_efficiency")
    if not training.flash_attention:
        check_applicable(
            {"attention_efficiency": given},
            {
                "attention_efficiency": "it is FlashAttention's core efficiency, and with "
                "flash_attention off the core runs at the kernel efficiency (drop one of the two)"
            },
        )
    return given if given is not None else attention_efficiency_for(device_name)


def _arch_from_dims(params: Mapping[str, Any], seq_len: int) -> Architecture | None:
    if params.get("layers") is None and params.get("hidden") is None:
        return None
    missing = [k for k in ("layers", "hidden", "heads") if params.get(k) is None]
    if missing:
        raise InputError(
            f"model dimensions: also give --{' --'.join(missing)} (with --layers/--hidden)"
        )
    kind = str(params.get("arch") or "gpt").lower()
    if kind not in ("gpt", "llama"):
        raise InputError(f"arch: {kind!r} is not one of gpt, llama")
    h = _count(params, "hidden")
    assert h is not None
    gpt = kind == "gpt"
    ffn = _count(params, "ffn_hidden", 4 * h if gpt else None)
    if ffn is None:
        raise InputError("ffn_hidden: required with --arch llama (e.g. 53248 for Llama 3 405B)")
    layers, heads = _count(params, "layers"), _count(params, "heads")
    assert layers is not None and heads is not None  # checked above
    return Architecture(
        num_layers=layers,
        hidden_size=h,
        num_attention_heads=heads,
        num_kv_heads=_count(params, "kv_heads"),
        head_dim=_count(params, "head_dim"),
        ffn_hidden_size=ffn,
        vocab_size=_count(params, "vocab", 51200 if gpt else 128256),
        mlp=Mlp.GELU if gpt else Mlp.SWIGLU,
        norm=Norm.LAYERNORM if gpt else Norm.RMSNORM,
        position_embedding=PositionEmbedding.LEARNED if gpt else PositionEmbedding.ROPE,
        max_position_embeddings=seq_len if gpt else None,
        linear_bias=gpt,
        tie_embeddings=gpt,
        dropout=gpt,
    )


def _model(params: Mapping[str, Any], used: dict[str, Any]) -> tuple[ModelSpec, dict[str, int]]:
    if params.get("model_spec") is not None:  # a ModelSpec built in code (e.g. a model family)
        return params["model_spec"], dict(params.get("training_defaults") or {})
    name = params.get("model")
    size = params.get("params")
    if name is not None:
        check_applicable(
            {"params": size},
            {"params": f"model {name} has its own size; give either --model or --params, not both"},
        )
        entry = get_model(str(name))
        return entry.model, dict(entry.training)
    if size is None:
        raise InputError(
            "model: give --model NAME (a catalogue name or a config.json path) or --params SIZE"
        )
    n = _count(params, "params")
    seq = _count(params, "seq_len", 4096)
    arch = _arch_from_dims(params, seq or 4096)
    label = params.get("name") or f"{float(Fraction(n or 0, 10**9)):g}B"
    return ModelSpec(
        name=str(label), source="size given by the user", arch=arch, num_params_declared=n
    ), {}


def _check_adam_knobs(params: Mapping[str, Any], layout: Layout) -> None:
    """``optimizer_dtype`` and ``master_weights`` size Adam's state: refused with another
    optimizer, whose state (an FP32 master included) is its own (:mod:`model.optimizers`);
    ``muon_tp_mode`` applies to Muon only."""
    if "muon_tp_mode" in params and layout.optimizer is not OptimizerKind.MUON:
        raise InputError(f"muon_tp_mode: applies to optimizer muon, not {layout.optimizer}")
    if layout.optimizer is OptimizerKind.ADAM:
        return
    for key in ("optimizer_dtype", "master_weights"):
        if key in params:
            raise InputError(
                f"{key}: sizes Adam's state; optimizer {layout.optimizer} keeps its own (an FP32 "
                f"master included), give no {key}"
            )


def build_case(params: Mapping[str, Any]) -> Case:
    """Build a :class:`Case` from flat parameters named as in docs/concepts/conventions.md (``dp``, ``seq_len``…).

    Raises
    ------
    PlannerError
        For an unknown model or GPU, an unreadable number, or an impossible layout.
    """
    params = {k: v for k, v in params.items() if v is not None}
    unknown = sorted(set(params) - KNOWN_KEYS)
    if unknown:
        raise InputError(
            f"{unknown[0]}: not a planner parameter (known: {', '.join(sorted(KNOWN_KEYS))})"
        )
    used: dict[str, Any] = {}
    model, defaults = _model(params, used)
    model = _with_mtp(model, params)
    layout_args = {k: params[k] for k in LAYOUT_KEYS if k in params}
    for k in ("dp", "tp", "pp", "cp", "cp_a2a", "ep", "etp", "micro_batch_size", "virtual_stages"):
        if k in layout_args:
            layout_args[k] = _count(params, k)
    schedule = str(layout_args.get("schedule", "")).lower()
    if "virtual_stages" not in layout_args and schedule in LAYOUT_CHUNKS:
        layout_args["virtual_stages"] = LAYOUT_CHUNKS[Schedule(schedule)]  # the schedule's own
    if "dp" not in layout_args and "num_gpus" in params:
        layout_args["dp"] = _dp_from_gpus(params, layout_args)
    if any(k in params for k in MEGATRON_SPLIT_KEYS):
        layout_args["stage_layers"] = _megatron_split(params, model, layout_args)
    framework = parse_framework(params.get("framework", DEFAULT_FRAMEWORK))
    layout_args["framework"] = framework
    layout_args.setdefault("zero_stage", DEFAULT_ZERO_STAGE[framework])
    layout = Layout(**layout_args)
    for k in SEARCHED_FIELDS:  # the layout defaults worth printing (v is 1 unless asked; the
        # CP flavour only with cp > 1)
        if k not in params and k != "virtual_stages" and (k != "cp_kind" or layout.cp > 1):
            value = getattr(layout, k)
            used[k] = (
                str(value) if k in ("recompute", "schedule", "framework", "cp_kind") else value
            )
    seq = _count(params, "seq_len", defaults.get("seq_len", 4096))
    batch_default, batch_note = _default_batch(model, defaults, layout)
    batch = _count(params, "global_batch_size", batch_default)
    if "seq_len" not in params:
        used["seq_len"] = seq
    if "global_batch_size" not in params:
        used["global_batch_size"] = batch
    training = TrainingSpec(
        seq_len=seq,
        global_batch_size=batch,
        flash_attention=_flag(params, "flash_attention", True),
        activation_convention=str(params.get("activation_convention", "paper")),
        memory_efficient_norm=_flag(params, "memory_efficient_norm", False),
        gathered_block_inputs=(
            _flag(params, "gathered_block_inputs", False)
            if "gathered_block_inputs" in params
            else gathered_block_inputs(params.get("tp_block_inputs"))
        ),
        gradient_bytes=_gradient_bytes(params),
        optimizer_bytes=optimizer_state_bytes(
            str(params.get("optimizer_dtype", "fp32")), _flag(params, "master_weights", True)
        ),
        precision=params.get("precision", Precision.BF16),
        recompute_modules=parse_recompute_modules(params.get("recompute_modules")),
        fp8_param_gather=_flag(params, "fp8_param_gather", False),
        fp8_recipe=params.get("fp8_recipe"),
        fp8_activation_storage=str(params.get("fp8_activation_storage", "linear_inputs")),
        offload=Offload(
            optimizer=parse_number(params.get("offload_optimizer", 0), "offload_optimizer"),
            params=_flag(params, "offload_params", False),
            activations=params.get("offload_activations") or (),
        ),
        documents=documents_from(params, seq),
        moe_run=moe_run_of(params, model, framework),
        muon_tp_mode=params.get("muon_tp_mode"),
    )
    _check_adam_knobs(params, layout)
    _tp_plan(params, layout, used)
    gpu_name = params.get("gpu", DEFAULT_GPU)  # an empty name is refused, not defaulted
    if "gpu" not in params:
        used["gpu"] = gpu_name
    # a DeviceSpec built in code (a hardware what-if, topology.what_if) is taken as it is
    device = gpu_name if isinstance(gpu_name, DeviceSpec) else get_accelerator(str(gpu_name))
    check_precision(training.precision, device)
    check_fp8_recipe(training.precision, training.fp8_recipe, device)
    if training.precision is Precision.FP8 and model.arch is None:
        raise InputError(
            "precision: fp8 needs the model's layers (which weights are linear), not a size only"
        )
    gbps = {}
    for k in ("nvlink_gbps", "scaleout_gbps", "host_link_gbps", "host_memory_gbps"):
        value = None
        if k in params:
            value = float(parse_number(params[k], k))
            if value < MIN_GBPS:
                raise InputError(
                    f"{k}: {shown_number(params[k])} must be a bandwidth of at least {MIN_GBPS:g} "
                    "GB/s per GPU per direction (PCIe Gen1 ×1 moves 0.25)"
                )
        gbps[k] = None if value is None else value * 1e9
    device = device.with_links(
        nvlink_domain=_count(params, "nvlink_domain"),
        nvlink_bytes_per_s=gbps["nvlink_gbps"],
        scaleout_bytes_per_s=gbps["scaleout_gbps"],
    )
    if gbps["host_link_gbps"] is not None:
        device = replace(device, host_link_bytes_per_s=gbps["host_link_gbps"])
    if gbps["host_memory_gbps"] is not None:
        device = replace(device, host_memory_bytes_per_s=gbps["host_memory_gbps"])
    if "memory_reserve_gib" in params:
        reserve = parse_number(params["memory_reserve_gib"], "memory_reserve")
        device = replace(device, runtime_reserve_bytes=int(reserve * 2**30))
    options = cost_options(
        params,
        device,
        model,
        training,
        framework,
        _attention_efficiency(params, device.name, training),
    )
    return Case(
        model=model,
        training=training,
        layout=layout,
        device=device,
        links=ClusterLinks.from_device(device),
        options=options,
        num_gpus=_count(params, "num_gpus"),
        vocab_multiple=_count(params, "vocab_multiple"),
        fabric=_fabric(params),
        defaults_used=used,
        notes=() if "global_batch_size" in params or batch_note is None else (batch_note,),
    )


def _dp_from_gpus(params: Mapping[str, Any], layout_args: dict[str, Any]) -> int:
    """The data-parallel degree a GPU count implies when ``dp`` is not given: ``num_gpus ÷
    (tp·pp·cp)`` (ep and etp subdivide dp·cp and tp, so they take no GPUs of their own); it is listed among
    the defaults used like every layout field not given.

    Raises
    ------
    InputError
        When tp·pp·cp does not divide the GPU count (one line naming both).
    """
    gpus = _count(params, "num_gpus", 1)  # present: the caller checked
    model_parallel = 1
    for k in ("tp", "pp", "cp"):
        model_parallel *= int(layout_args.get(k, 1))
    if gpus % model_parallel:
        raise InputError(
            f"gpus: {gpus:,} is not divisible by tp·pp·cp = {model_parallel:,}; give dp, or a "
            "GPU count that tp·pp·cp divides"
        )
    return gpus // model_parallel


def _tp_plan(params: Mapping[str, Any], layout: Layout, used: dict[str, Any]) -> None:
    """``tp_block_inputs`` checked against the layout (:func:`interface.tp_plan.
    check_tp_block_inputs`); the fsdp2 profile's own plan listed among the defaults used where
    it counts (tp > 1 with sequence parallelism) and was not chosen."""
    check_tp_block_inputs(
        params.get("tp_block_inputs"), (layout.framework,), (layout.tp,), layout.sp
    )
    chosen = "tp_block_inputs" in params or "gathered_block_inputs" in params
    if not chosen and layout.framework.gathers_block_inputs and layout.sp:
        used["tp_block_inputs"] = "gathered"


MICROBATCHES_PER_STAGE = 4
"""Micro-batches per pipeline stage in the default batch of a model with layers but no published
batch: m = 4·pp keeps the 1F1B bubble (pp − 1)/(m + pp − 1) under 20% (Narayanan et al. 2021
§2.2.1: the bubble is small when m ≫ pp)."""


def _default_batch(
    model: ModelSpec, defaults: Mapping[str, int], layout: Layout
) -> tuple[int, str | None]:
    """B when none is given: the model's published batch; for a model with layers but none
    published (a config.json, dimensions given), dp·b·4·pp sequences with a note saying so (dp·b
    alone would be one micro-batch per step: DeepSeek-V3 at pp 16 ran at 1.1% MFU, almost all
    bubble); dp·b for a size-only model, whose step time is not modelled."""
    if "global_batch_size" in defaults:
        return defaults["global_batch_size"], None
    dp, b = layout.dp, layout.micro_batch_size
    if model.arch is None:
        return dp * b, None
    m = MICROBATCHES_PER_STAGE * layout.pp
    note = (
        f"global_batch_size: {model.name} has no published batch size, so B = dp·b·m = "
        f"{dp}·{b}·{m} = {dp * b * m:,} sequences, with m = {MICROBATCHES_PER_STAGE}·pp "
        "micro-batches per step (the 1F1B bubble (pp − 1)/(m + pp − 1) stays under 20%); give "
        "--global-batch to set yours"
    )
    return dp * b * m, note


def _megatron_split(
    params: Mapping[str, Any], model: ModelSpec, layout_args: Mapping[str, Any]
) -> tuple[int, ...]:
    """Per-chunk layer counts from Megatron-Core's stage-layout arguments."""
    check_applicable(
        {"stage_layers": layout_args.get("stage_layers")},
        {
            "stage_layers": "give either stage_layers or Megatron's first/last-stage layers and "
            "embedding/loss accounting, not both"
        },
    )
    if model.arch is None:
        raise InputError(
            "first_stage_layers: a stage layout needs the model's layers (a catalogue model, a "
            "config.json or --layers), not a size only"
        )
    ends = {}
    for k in ("first_stage_layers", "last_stage_layers"):
        if k in params:
            ends[k] = parse_number(params[k], k)
            if ends[k] != int(ends[k]) or ends[k] < 0:
                raise InputError(f"{k}: {params[k]} must be a whole number >= 0")
    return megatron_stage_layers(
        model.arch.num_layers,
        int(layout_args.get("pp", 1)),
        int(layout_args.get("virtual_stages", 1)),
        first=None if "first_stage_layers" not in ends else int(ends["first_stage_layers"]),
        last=None if "last_stage_layers" not in ends else int(ends["last_stage_layers"]),
        account_for_embedding=_flag(params, "account_for_embedding", False),
        account_for_loss=_flag(params, "account_for_loss", False),
    )


def _with_mtp(model: ModelSpec, params: Mapping[str, Any]) -> ModelSpec:
    """The model with ``mtp_layers`` multi-token-prediction modules instead of its own
    (``--mtp-layers``; DeepSeek-V3 §2.2), when given.

    Raises
    ------
    InputError
        For a model without dimensions, whose layers are unknown.
    """
    value = params.get("mtp_layers")
    if value is None:
        return model
    n = parse_count(value, "mtp_layers", minimum=0)
    if model.arch is None or model.num_params_declared is not None:
        raise InputError(
            f"mtp_layers: {value!r} needs a model with dimensions (a catalogue model or a "
            "config.json), not a declared size"
        )
    return replace(model, arch=replace(model.arch, mtp_layers=n))


def _gradient_bytes(params: Mapping[str, Any]) -> int | None:
    """Bytes of ``gradient_dtype`` (fp32 4, bf16 2); None (the framework's default) unset."""
    if params.get("gradient_dtype") is None:
        return None
    return dtype_bytes("gradient_dtype", params["gradient_dtype"])


def parse_framework(value: Any) -> Framework:
    """A framework profile by name (``megatron``, ``deepspeed``, ``fsdp2``, ``textbook``)."""
    try:
        return Framework(str(value).lower())
    except ValueError:
        names = ", ".join(f.value for f in Framework)
        raise InputError(f"framework: {value!r} is not one of {names}") from None


MAX_OVERSUBSCRIPTION = 255
"""The largest scale-out oversubscription accepted: a leaf switch's downlinks per uplink is at
most its port count less one, and the most ports a switch offers is 256 (NVIDIA Spectrum-4,
51.2 Tb/s: 64 × 800 GbE, split into up to 256 × 100 GbE; the SN5600 announcement). Beyond it the
figure is no fabric's: 10^6 printed 8.3 days per step at 0.0% MFU."""


def _fabric(params: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    """Cluster-graph options from ``fabric`` (two-tier | fat-tree | rail), ``pod_size`` and
    ``oversubscription``; empty for the default two-tier rule."""
    kind = str(params.get("fabric") or "two-tier")
    if kind not in ("two-tier", "fat-tree", "rail"):
        raise InputError(f"fabric: {kind!r} is not one of two-tier, fat-tree, rail")
    pod, over = params.get("pod_size"), params.get("oversubscription")
    given_keys = ("pod_size", "oversubscription")
    if kind == "two-tier":
        why = "it shapes a cluster graph; add `fabric`=fat-tree or rail"
        check_applicable(
            {"pod_size": pod, "oversubscription": over}, dict.fromkeys(given_keys, why)
        )
        return ()
    out: list[tuple[str, Any]] = [("rail_optimized", kind == "rail")]
    if pod is not None:
        out.append(("pod_size", _count(params, "pod_size")))
    if over is not None:
        value = float(parse_number(over, "oversubscription"))
        if not 1 <= value <= MAX_OVERSUBSCRIPTION:
            raise InputError(
                f"oversubscription: {shown_number(over)} must be between 1 (non-blocking) and "
                f"{MAX_OVERSUBSCRIPTION} (a leaf switch of {MAX_OVERSUBSCRIPTION + 1} ports, the "
                "most one has, with a single uplink)"
            )
        out.append(("oversubscription", value))
    return tuple(out)


def output_path(
    path: str | os.PathLike[str] | None, name: str, suffixes: tuple[str, ...] = ()
) -> Path:
    """The file a command will write (``--csv``, ``--png``, ``--svg``, ``--gif``, ``--chart``),
    checked before anything is computed or written — the one rule for every output path.

    The path must be non-empty, end in one of ``suffixes`` (any ending when empty; compared
    without case), not be a folder, and lie in a folder that exists and may be written (an
    existing file there must be writable too).

    Raises
    ------
    InputError
        Naming the option (``name``), the path and the broken rule.

    Examples
    --------
    >>> output_path("", "--csv")
    Traceback (most recent call last):
    ...
    trainplan.model.errors.InputError: --csv: '' is empty; give the file to write, e.g. --csv out.csv
    """
    text = "" if path is None else os.fspath(path)
    if not text.strip():
        example = f"out{suffixes[0]}" if suffixes else "out.csv"
        raise InputError(
            f"{name}: {text!r} is empty; give the file to write, e.g. {name} {example}"
        )
    shown = shown_text(text, MAX_SHOWN_PATH)
    p = Path(text).expanduser()
    try:
        if p.is_dir():
            raise InputError(f"{name}: {shown} is a folder; give a file path inside it")
        if suffixes and p.suffix.lower() not in suffixes:
            raise InputError(f"{name}: {shown} must end in {', '.join(suffixes)}")
        folder = p.parent
        if not folder.is_dir():
            raise InputError(
                f"{name}: {shown} is in a folder that does not exist ({shown_text(str(folder), MAX_SHOWN_PATH)}); "
                "create it first"
            )
        if not os.access(folder, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
            raise InputError(f"{name}: {shown} cannot be written (permission denied)")
        if not p.exists():
            _check_name(p)
    except OSError as err:  # a name the file system refuses: too long, a NUL byte…
        raise InputError(f"{name}: {shown} cannot be written: {err.strerror or err}") from None
    return p


def _check_name(path: Path) -> None:
    """Raise the OSError the file system gives for ``path``'s name (too long for the folder's
    file system: ``pathconf`` ``PC_NAME_MAX``), before any work is done."""
    limit = os.pathconf(path.parent, "PC_NAME_MAX") if hasattr(os, "pathconf") else 255
    if len(os.fsencode(path.name)) > limit:
        raise OSError(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG), str(path))


@contextmanager
def writing(path: str | os.PathLike[str], name: str) -> Iterator[None]:
    """Around the write itself: what the file system still refuses after :func:`output_path`'s
    check (a read-only mount, a full disk, ``/proc``) becomes an InputError naming the option and
    the path, never a traceback.

    Raises
    ------
    InputError
        ``--png: '/proc/x.png' could not be written: No such file or directory``.
    """
    try:
        yield
    except OSError as err:
        raise InputError(
            f"{name}: {os.fspath(path)!r} could not be written: {err.strerror or err}"
        ) from None
