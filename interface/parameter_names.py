"""The planner's parameter names: every key :func:`interface.inputs.build_case` reads
(:data:`KNOWN_KEYS`), those a user gives (:data:`PARAMETERS`), the groups other readers take
(layout, recipe, Megatron-Core's split, model dimensions), and the one-line refusal of a name
that is none (:func:`unknown_parameter`). Split from :mod:`interface.inputs`, which re-exports
these names.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from trainplan.interface.flags import PARAMETER_FLAGS
from trainplan.interface.framework_flags import FRAMEWORK_FLAGS
from trainplan.interface.moe_inputs import MOE_KEYS
from trainplan.interface.recipe_inputs import DOCUMENT_KEYS
from trainplan.interface.time_inputs import TIME_KEYS
from trainplan.model.layout import LAYOUT_FIELDS

__all__ = [
    "CLUSTER_KEYS",
    "DIM_KEYS",
    "INTERNAL_KEYS",
    "KNOWN_KEYS",
    "LAYOUT_KEYS",
    "MEGATRON_SPLIT_KEYS",
    "PARAMETERS",
    "PARAMETERS_PAGE",
    "RECIPE_KEYS",
    "SCENARIO_SPELLINGS",
    "unknown_parameter",
]

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
    "cpu_offloading_num_layers",
    "recompute_modules",
    "fp8_param_gather",
    "fsdp_double_buffer",
    "flat_parameters",
    "deepspeed_overlap_comm",
    "seq_parallel_communication_data_type",
    "bias_dropout_fusion",
    "sac_saves_scaled_mm",
    "cross_entropy_fusion_impl",
    "muon_tp_mode",
    "distributed_optimizer",
    "fp8_activation_storage",
    "compile",
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
"""Megatron-Core's stage-layout arguments (:func:`model.megatron_split.megatron_stage_layers`), turned
into ``stage_layers`` once the model's depth is known."""
CLUSTER_KEYS = frozenset(
    {
        "nvlink_domain",
        "segment_gpus",
        "nvlink_gbps",
        "scaleout_gbps",
        "kernel_efficiency",
        "attention_efficiency",
        "overlap",
        "flash_attention",
        "fabric",
        "pod_size",
        "oversubscription",
        "causal_attention_flops",
        "activation_convention",
        "memory_efficient_norm",
        "pipeline_frees_stage_tensors",
        "pipeline_keeps_outputs",
        "tp_block_inputs",
        *RECIPE_KEYS,
        "memory_reserve_gib",
        "vocab_multiple",
        *TIME_KEYS,
    }
)
"""The keys of a scenario file's ``[cluster]`` table (:mod:`interface.scenario_file`), each a
parameter :func:`build_case` reads (:data:`KNOWN_KEYS`): the cluster's links and fabric, the
numerics and memory conventions, the training recipe (:data:`RECIPE_KEYS`) and the step-time
model's knobs (:data:`interface.time_inputs.TIME_KEYS`)."""
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
        "global_batch_tokens",
        "mfu_convention",
        *CLUSTER_KEYS,
        "gathered_block_inputs",  # the search's: tp_block_inputs checked against its space
        "compile_fsdp2",  # the search's: compile checked against its space
        "pipeline_frees_stage_tensors_fsdp2",  # the search's, checked against its space
        "pipeline_keeps_outputs_fsdp2",  # the search's, checked against its space
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
INTERNAL_KEYS = frozenset(
    {
        "name",
        "model_spec",
        "training_defaults",
        "gathered_block_inputs",
        "compile_fsdp2",
        "pipeline_frees_stage_tensors_fsdp2",
        "pipeline_keeps_outputs_fsdp2",
    }
)
"""Parameters the interface passes on and no user gives: a scenario's built model, its label and
its recipe's defaults, a search's settings checked against its space."""
PARAMETERS = KNOWN_KEYS - INTERNAL_KEYS
"""The parameters a user gives (``trainplan.evaluate``'s, a measurements file's ``[[run]]``):
listed in :data:`PARAMETERS_PAGE`."""
PARAMETERS_PAGE = "docs/guides/python.md#parameter-names"
SCENARIO_SPELLINGS = {
    "global_batch": "global_batch_size",
    "micro_batch": "micro_batch_size",
    "zero": "zero_stage",
    "gpus": "num_gpus",
}
"""A scenario file's keys (``interface.scenario``: a value, a range or a list to search) and the
parameter that gives one value of each here."""


def unknown_parameter(params: Iterable[str]) -> str | None:
    """The line refusing the first of ``params`` (names) that is no parameter (:data:`KNOWN_KEYS`),
    with the parameter meant (a scenario file's spelling, else the closest name) and where the
    list is; None when every name is one.

    >>> print(unknown_parameter(["model", "global_batch"]).split(" (")[0])
    global_batch: not a planner parameter; did you mean global_batch_size?
    >>> print(unknown_parameter(["seq_lenn"]))  # doctest: +ELLIPSIS
    seq_lenn: not a planner parameter; did you mean seq_len? (docs/guides/python.md#parameter-...)
    """
    unknown = sorted(set(params) - KNOWN_KEYS)
    if not unknown:
        return None
    key, said = unknown[0], ""
    framework = _framework_name(key)
    if framework is not None:
        return f"{key}: not a planner parameter; {framework} ({PARAMETERS_PAGE} lists them)"
    near = difflib.get_close_matches(key, sorted(PARAMETERS), n=1)
    if key in SCENARIO_SPELLINGS:
        near = [SCENARIO_SPELLINGS[key]]
        said = f"a scenario file's {key} is {near[0]} here; "
    hint = f"; did you mean {near[0]}?" if near else ""
    return f"{key}: not a planner parameter{hint} ({said}{PARAMETERS_PAGE} lists them)"


DIM_KEYS = ("arch", "layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "head_dim")
"""Dimensions given with ``--params`` (the CLI options of the same names)."""


def _framework_name(key: str) -> str | None:
    """Where ``key`` is a training framework's name of a parameter (Megatron-LM's
    ``tensor_model_parallel_size``, torchtitan's ``tensor_parallel_degree``: the fields behind
    :data:`interface.framework_flags.FRAMEWORK_FLAGS`), the words naming the framework's flag
    and the planner parameter to write; None otherwise.

    >>> _framework_name("tensor_parallel_degree")[-10:]
    ': write tp'
    >>> _framework_name("micro_batch_size") is None  # a planner parameter too
    True
    """
    for flag, (ours, whose) in FRAMEWORK_FLAGS.items():
        field = flag.removeprefix("--parallelism.").removeprefix("--").replace("-", "_")
        if field != key or key in KNOWN_KEYS:
            continue
        name = next((p for p, fs in PARAMETER_FLAGS.items() if ours in fs), None)
        return f"{flag} is {whose}: write {name or ours[2:].replace('-', '_')}"
    return None
