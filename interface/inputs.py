"""From flat parameters (CLI options, an example's TOML table) to the cost model's inputs.

This module parses (text, flags, the number grammar) and refuses (one line naming the
parameter); the defaults (docs/concepts/conventions.md; docs/guides/evaluate.md "Inputs": the
catalogue's published training setup (s, B), degrees 1, the framework's ZeRO stage, 1F1B,
sequence parallelism on when tp > 1, FlashAttention on, the accelerator's efficiencies, the
H100-SXM when no GPU is named) are the typed constructors' it calls — :meth:`trainplan.optimizer.
case.Case.of`, :meth:`trainplan.model.layout.Layout.of` and the dataclasses' own; the defaults
used are listed in :attr:`trainplan.optimizer.case.Case.defaults_used`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from trainplan.interface.batch_inputs import input_notes, with_batch_in_sequences
from trainplan.interface.cluster_inputs import device_of, fabric_of
from trainplan.interface.model_inputs import count_of, model_of, with_mtp
from trainplan.interface.moe_inputs import moe_run_of
from trainplan.interface.parameter_names import (
    DIM_KEYS,
    INTERNAL_KEYS,
    KNOWN_KEYS,
    LAYOUT_KEYS,
    MEGATRON_SPLIT_KEYS,
    PARAMETERS,
    PARAMETERS_PAGE,
    RECIPE_KEYS,
    SCENARIO_SPELLINGS,
    unknown_parameter,
)
from trainplan.interface.recipe_inputs import DOCUMENT_KEYS, documents_from
from trainplan.interface.time_inputs import bool_param as _flag
from trainplan.interface.time_inputs import cost_options, fraction_of_peak
from trainplan.interface.tp_plan import (
    check_pipeline_frees_stage_tensors,
    check_tp_block_inputs,
    gathered_block_inputs,
)
from trainplan.model.elementwise import check_compile
from trainplan.model.errors import InputError, check_applicable
from trainplan.model.frameworks import DEFAULT_FRAMEWORK, Framework
from trainplan.model.layout import SEARCHED_FIELDS, Layout
from trainplan.model.megatron_split import megatron_stage_layers
from trainplan.model.model_spec import ModelSpec
from trainplan.model.offload import Offload
from trainplan.model.optimizers import OptimizerKind
from trainplan.model.precision import dtype_bytes, optimizer_state_bytes
from trainplan.model.recompute_modules import parse_recompute_modules
from trainplan.model.specs import TrainingSpec
from trainplan.model.units import parse_count, parse_number
from trainplan.optimizer.case import DEFAULT_GPU, Case, training_of

__all__ = [
    "build_case",
    "DEFAULT_GPU",
    "LAYOUT_KEYS",
    "DIM_KEYS",
    "RECIPE_KEYS",
    "KNOWN_KEYS",
    "INTERNAL_KEYS",
    "MEGATRON_SPLIT_KEYS",
    "PARAMETERS",
    "PARAMETERS_PAGE",
    "SCENARIO_SPELLINGS",
    "unknown_parameter",
    "parse_framework",
]


def _fraction_of_peak(params: Mapping[str, Any], key: str) -> float | None:
    """An efficiency in (0, 1] (:func:`time_inputs.fraction_of_peak`), or None when not given."""
    value = params.get(key)
    return None if value is None else fraction_of_peak(value, key)


def _attention_efficiency(params: Mapping[str, Any], training: TrainingSpec) -> float | None:
    """The FlashAttention core's efficiency given (None: the accelerator's default,
    :func:`trainplan.optimizer.case.cost_options_for`). Given with FlashAttention off it would
    be ignored (the core is then matmuls at the kernel efficiency): an error rather than a
    silent no-op."""
    given = _fraction_of_peak(params, "attention_efficiency")
    if not training.flash_attention:
        check_applicable(
            {"attention_efficiency": given},
            {
                "attention_efficiency": "it is FlashAttention's core efficiency, and with "
                "flash_attention off the core runs at the kernel efficiency (drop one of the two)"
            },
        )
    return given


def _check_adam_knobs(params: Mapping[str, Any], optimizers: tuple[OptimizerKind, ...]) -> None:
    """``optimizer_dtype`` and ``master_weights`` size Adam's state: refused when no optimizer
    of ``optimizers`` (the layout's, or every one a search chooses among) is Adam, their state
    (an FP32 master included) being their own (:mod:`model.optimizers`); ``muon_tp_mode``
    applies to Muon only, refused when Muon is not among them."""
    names = ", ".join(str(o) for o in optimizers)
    if "muon_tp_mode" in params and OptimizerKind.MUON not in optimizers:
        raise InputError(f"muon_tp_mode: applies to optimizer muon, not {names}")
    if OptimizerKind.ADAM in optimizers:
        return
    for key in ("optimizer_dtype", "master_weights"):
        if key in params:
            raise InputError(
                f"{key}: sizes Adam's state; optimizer {names} keeps its own (an FP32 "
                f"master included), give no {key}"
            )


def build_case(
    params: Mapping[str, Any],
    frameworks: Iterable[Framework | str] | None = None,
    optimizers: Iterable[OptimizerKind] | None = None,
) -> Case:
    """Build a :class:`Case` from flat parameters named as in docs/concepts/conventions.md
    (``dp``, ``seq_len``…; an evaluate request's :attr:`~interface.requests.EvaluateRequest.params`).
    ``frameworks``: those the recipe's FP8 scaling is checked under (a search's; default the
    layout's, :func:`interface.cluster_inputs.check_fp8_profile`). ``optimizers``: those an
    optimizer's own settings are checked against (a search's; default the layout's).

    Raises
    ------
    PlannerError
        For an unknown model or GPU, an unreadable number, or an impossible layout.
    """
    params = {k: v for k, v in params.items() if v is not None}
    unknown = unknown_parameter(params)
    if unknown:
        raise InputError(unknown)
    used: dict[str, Any] = {}
    model, defaults = model_of(params, used)
    params = with_batch_in_sequences(params, defaults)
    published, model = model, with_mtp(model, params)
    layout = _layout(params, model, used)
    training, notes = _training(params, model, layout, defaults, used)
    _check_adam_knobs(params, tuple(optimizers or (layout.optimizer,)))
    _tp_plan(params, layout, used)
    check_compile(params.get("compile"), (layout.framework,))
    check_pipeline_frees_stage_tensors(  # a search's cases: checked against its space
        _flag(params, "pipeline_frees_stage_tensors", False), (layout.framework,), (layout.pp,)
    )
    check_pipeline_frees_stage_tensors(
        _flag(params, "pipeline_keeps_outputs", False),
        (layout.framework,),
        (layout.pp,),
        "pipeline_keeps_outputs",
    )
    device = device_of(params, model, training, used, frameworks or (layout.framework,))
    options = cost_options(
        params, device, layout.framework, _attention_efficiency(params, training)
    )
    return Case.of(
        model,
        device,
        layout,
        training,
        num_gpus=count_of(params, "num_gpus"),
        vocab_multiple=count_of(params, "vocab_multiple"),
        fabric=fabric_of(params),
        defaults_used=used,
        notes=(*notes, *input_notes(params, published, model, training)),
        **options,
    )


def _layout(params: Mapping[str, Any], model: ModelSpec, used: dict[str, Any]) -> Layout:
    """The layout of ``params`` (degrees, ZeRO stage, schedule…; dp from ``num_gpus`` when not
    given; Megatron-Core's split arguments as ``stage_layers``), its defaults worth printing
    added to ``used``."""
    layout_args = {k: params[k] for k in LAYOUT_KEYS if k in params}
    for k in ("dp", "tp", "pp", "cp", "cp_a2a", "ep", "etp", "micro_batch_size", "virtual_stages"):
        if k in layout_args:
            layout_args[k] = count_of(params, k)
    if layout_args.get("zero_stage") is not None:  # text from --set or a page: a whole number
        layout_args["zero_stage"] = parse_count(layout_args["zero_stage"], "zero_stage", 0)
    if "dp" not in layout_args and "num_gpus" in params:
        layout_args["dp"] = _dp_from_gpus(params, layout_args)
    dense = model.arch is not None and model.arch.moe is None
    if dense and layout_args.get("etp") == layout_args.get("tp", 1):
        # a dense model's etp is its tp (the JSON's layout.etp, report_dict._etp): given back,
        # it says nothing; any other etp is refused (model.legality)
        del layout_args["etp"]
    if any(k in params for k in MEGATRON_SPLIT_KEYS):
        layout_args["stage_layers"] = _megatron_split(params, model, layout_args)
    layout_args["framework"] = parse_framework(params.get("framework", DEFAULT_FRAMEWORK))
    layout = Layout.of(**layout_args)  # the framework's ZeRO stage, the schedule's own v
    for k in SEARCHED_FIELDS:  # defaults worth printing (v 1 unless asked; CP flavour at cp > 1)
        if k not in params and k != "virtual_stages" and (k != "cp_kind" or layout.cp > 1):
            value = getattr(layout, k)
            used[k] = (
                str(value) if k in ("recompute", "schedule", "framework", "cp_kind") else value
            )
    return layout


_RECIPE_FLAGS = (
    "flash_attention",
    "memory_efficient_norm",
    "fp8_param_gather",
    "fsdp_double_buffer",
    "flat_parameters",
    "deepspeed_overlap_comm",
    "bias_dropout_fusion",
    "sac_saves_scaled_mm",
)
"""The recipe's on/off keys (:class:`model.specs.TrainingSpec` fields of the same names;
default false, ``bias_dropout_fusion`` and ``sac_saves_scaled_mm`` true)."""

_RECIPE_STRINGS = (
    "activation_convention",
    "fp8_activation_storage",
    "cross_entropy_fusion_impl",
    "seq_parallel_communication_data_type",
)
"""The recipe's keys given as words (:class:`model.specs.TrainingSpec` fields of the same names)."""


def _training(
    params: Mapping[str, Any],
    model: ModelSpec,
    layout: Layout,
    defaults: Mapping[str, int],
    used: dict[str, Any],
) -> tuple[TrainingSpec, tuple[str, ...]]:
    """(the training recipe of ``params``, the note of a global batch chosen by rule when none
    was given); s and B the model's published ones when not given
    (:func:`trainplan.optimizer.case.training_of`), listed in ``used``."""
    given: dict[str, Any] = {
        k: count_of(params, k) for k in ("seq_len", "global_batch_size") if k in params
    }
    for key in _RECIPE_FLAGS:
        if key in params:
            given[key] = _flag(params, key, False)
    for key in _RECIPE_STRINGS:
        if key in params:
            given[key] = str(params[key])
    for key in ("precision", "fp8_recipe", "muon_tp_mode", "distributed_optimizer"):
        if key in params:
            given[key] = params[key]
    frees = _flag(params, "pipeline_frees_stage_tensors", False)
    keeps = _flag(params, "pipeline_keeps_outputs", False)
    given["pipeline_frees_stage_tensors"] = frees or _flag(
        params, "pipeline_frees_stage_tensors_fsdp2", False
    )
    given["pipeline_keeps_outputs"] = keeps or _flag(params, "pipeline_keeps_outputs_fsdp2", False)
    given["gathered_block_inputs"] = (
        _flag(params, "gathered_block_inputs", False)
        if "gathered_block_inputs" in params
        else gathered_block_inputs(params.get("tp_block_inputs"))
    )
    if "cpu_offloading_num_layers" in params:
        given["cpu_offloading_num_layers"] = parse_count(
            params["cpu_offloading_num_layers"], "cpu_offloading_num_layers", minimum=0
        )
    given["gradient_bytes"] = _gradient_bytes(params)
    if "optimizer_dtype" in params or "master_weights" in params:
        given["optimizer_bytes"] = optimizer_state_bytes(
            str(params.get("optimizer_dtype", "fp32")), _flag(params, "master_weights", True)
        )
    if "recompute_modules" in params:
        given["recompute_modules"] = parse_recompute_modules(params["recompute_modules"])
    given["compile"] = _compile(params)
    if any(k in params for k in ("offload_optimizer", "offload_params", "offload_activations")):
        given["offload"] = Offload(
            optimizer=parse_number(params.get("offload_optimizer", 0), "offload_optimizer"),
            params=_flag(params, "offload_params", False),
            activations=params.get("offload_activations") or (),
        )
    given["moe_run"] = moe_run_of(params, model, layout.framework)
    training, notes = training_of(model, layout, defaults, **given)
    if any(params.get(k) is not None for k in DOCUMENT_KEYS):
        training = replace(training, documents=documents_from(params, training.seq_len))
    if "seq_len" not in params:
        used["seq_len"] = training.seq_len
    if "global_batch_size" not in params:
        used["global_batch_size"] = training.global_batch_size
    return training, notes


def _compile(params: Mapping[str, Any]) -> bool | None:
    """The recipe's ``compile`` (:attr:`model.specs.TrainingSpec.compile`), or the search's
    ``compile_fsdp2`` (checked against its frameworks); None when neither is given."""
    for key in ("compile", "compile_fsdp2"):
        if key in params:
            return _flag(params, key, False)
    return None


def _dp_from_gpus(params: Mapping[str, Any], layout_args: dict[str, Any]) -> int:
    """The data-parallel degree a GPU count implies when ``dp`` is not given: ``num_gpus ÷
    (tp·pp·cp)`` (ep and etp subdivide dp·cp and tp, so they take no GPUs of their own); it is listed among
    the defaults used like every layout field not given.

    Raises
    ------
    InputError
        When tp·pp·cp does not divide the GPU count (one line naming both).
    """
    gpus = count_of(params, "num_gpus", 1)  # present: the caller checked
    model_parallel = 1
    for k in ("tp", "pp", "cp"):
        model_parallel *= int(layout_args.get(k, 1))
    if gpus % model_parallel:
        raise InputError(
            f"gpus: {gpus:,} is not divisible by tp·pp·cp = {model_parallel:,}; give `dp`, or a "
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
