"""Search problems from a scenario TOML file and/or command-line options.

A scenario file (unknown keys are rejected):

```toml
description = "Llama 3 70B on 64–4096 GPUs of three kinds"
model = "llama3-70b"              # catalogue name or config.json path
gpu = ["H100-SXM", "H200", "B200"] # one name or a list
gpus = "64..4096"                 # a count (16384 or "16,384"), a range, or a list [2048, 4096]
seq_len = 8192
global_batch = 2048               # sequences: a count, range or list; or global_batch_tokens = 16e6
objective = "time-to-train"       # step-time | tokens-per-gpu | time-to-train | cost | params
framework = "megatron"            # or a list; megatron | deepspeed | fsdp2 | textbook
tokens = 15e12                    # token budget for time-to-train and cost
gpu_hour_price = { H100-SXM = 2.5, H200 = 3.2, B200 = 5.0 }   # or one number
per_stage = false                 # search, frontier: also choose layers and recomputed layers per stage
[space]        # tp pp cp ep micro_batch (lists), max_tp max_micro_batch, zero recompute schedule virtual_stages,
               # framework (one name or a list: megatron, deepspeed, fsdp2, textbook; default megatron),
               # cp_kind (ring, all-gather, ulysses, ulysses-kv-repeat, a2a+p2p, pytorch-allgather,
               # pytorch-alltoall; default the first three and PyTorch's two, each where it runs),
               # cp_a2a (hybrid inner degrees), optimizer (adam, adam-8bit, adafactor, lion, muon, soap;
               # default adam only)
[constraints]  # headroom, min_mfu, tp_in_nvlink, allocator_retries_ok
[cluster]      # nvlink_domain, nvlink_gbps, scaleout_gbps, memory_reserve_gib; the recipe:
               # precision (bf16 | fp8), fp8_recipe (delayed | tensorwise | blockwise | mxfp8),
               # gradient_dtype, optimizer_dtype (fp32 | bf16),
               # tp_block_inputs (sharded | gathered: fsdp2's tensor-parallel plan),
               # master_weights; offload_optimizer (0-1), offload_params, offload_activations, host_link_gbps,
               # host_memory_gbps; memory: recompute_modules, fp8_param_gather, fsdp_double_buffer,
               # cross_entropy_fusion_impl (none | native | te: megatron's loss),
               # fp8_activation_storage (linear_inputs | deepseek_v3); muon_tp_mode (duplicated | blockwise);
               # distributed_optimizer (mcore_distributed_optim | distributed_fused_adam);
               # MoE: moe_capacity_factor, moe_pad_to_capacity, moe_imbalance, moe_node_limit,
               # moe_dispatcher (alltoall | deepep | hybridep),
               # moe_ep_overlap (none | moe_shared_expert_overlap | overlap_moe_expert_parallel_comm),
               # packed documents: document_length, document_length_spread,
               # document_lengths ([[length, count], …]); the time model: time_model (roofline | single),
               # gemm_efficiency, hbm_efficiency, scaleup_efficiency, scaleout_efficiency,
               # attention_efficiency or attention_kernel (flash-attention-2 | cudnn | …),
               # tp_comm_overlap (none | async | full | async-tp),
               # grad_reduce_overlap, p2p_overlap, calibration (a file of trainplan calibrate);
               # single model: kernel_efficiency, overlap = { dp = 0.5 }
```

Command-line options override the file's values. Unknown keys and values of the wrong kind
(``seq_len = "long"``; :data:`VALUE_KINDS`) are refused with the file and the key, and so is an
empty list (``tp = []`` would silently mean every tp). Numbers and lists have the grammar of
every input (:func:`model.units.parse_number`, :func:`model.units.list_items`): ``"16,384"`` is
one number; a list is a TOML array or text with ``;`` between the items (``"2048;4096"``).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from trainplan.interface import search_options as opts
from trainplan.interface.inputs import (
    DEFAULT_GPU,
    DIM_KEYS,
    build_case,
    parse_framework,
)
from trainplan.interface.requests import SearchRequest, constraints_of, merged_request
from trainplan.interface.scenario_file import (
    CLUSTER_KEYS,
    CONSTRAINT_KEYS,
    CP_KIND_NAMES,
    SPACE_KEYS,
    TOP_KEYS,
    VALUE_KINDS,
    check_scenario,
    load_scenario,
)
from trainplan.interface.time_inputs import calibration_gpu
from trainplan.interface.tp_plan import (
    check_pipeline_frees_stage_tensors,
    check_tp_block_inputs,
    gathered_block_inputs,
)
from trainplan.model.context_parallel import DEFAULT_SEARCHED_CP_KINDS, CpKind
from trainplan.model.elementwise import check_compile
from trainplan.model.errors import InputError, PlannerError, check_applicable
from trainplan.model.frameworks import DEFAULT_FRAMEWORK
from trainplan.model.hardware import DeviceSpec
from trainplan.model.layout import Recompute
from trainplan.model.model_spec import ModelSpec
from trainplan.model.optimizers import OptimizerKind
from trainplan.model.pipeline import Schedule, check_virtual_stages
from trainplan.model.schedule_support import SCHEDULE_SUPPORT, check_schedule_framework
from trainplan.model.units import parse_count, parse_counts
from trainplan.optimizer.problem import Job, Objective, Problem, gpu_counts
from trainplan.optimizer.space import (
    DEFAULT_RANK_ORDER,
    SearchSpace,
    divisors,
)
from trainplan.scenarios.catalogue import get_model
from trainplan.topology.accelerator_file import get_part
from trainplan.topology.accelerators import is_part_file

if TYPE_CHECKING:
    from trainplan.optimizer.case import Case

__all__ = [
    "load_scenario",
    "check_scenario",
    "build_problem",
    "problem_of",
    "TOP_KEYS",
    "SPACE_KEYS",
    "CONSTRAINT_KEYS",
    "CLUSTER_KEYS",
    "VALUE_KINDS",
]


def _listify(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return list(value)
    return [value]


def _parts(value: Any) -> list[str | DeviceSpec]:
    """The accelerators searched: catalogue names (one, a list, or a comma list), a file
    describing a part (``PATH.toml``, read here: the part answers and is priced by its own
    name), or one :class:`DeviceSpec` built in code (a hardware what-if part,
    :mod:`topology.what_if`)."""
    if value is None:
        return [DEFAULT_GPU]
    if isinstance(value, DeviceSpec):
        return [value]
    parts = [get_part(n) if is_part_file(n) else n for n in opts.names(value, "gpu")]
    files = [p for p in parts if isinstance(p, DeviceSpec)]
    for one, other in itertools.combinations(files, 2):
        if one.name == other.name:
            raise InputError(
                f"gpu: {one.origin!r} and {other.origin!r} both name their part {one.name!r}; "
                "give each file's part a name of its own"
            )
    return parts


def _ints(d: Mapping[str, Any], key: str) -> tuple[int, ...] | None:
    """The counts of list ``key`` of the space, or None when not given (every value)."""
    return None if d.get(key) is None else tuple(parse_counts(d[key], key))


def _space(d: Mapping[str, Any], num_gpus: int) -> SearchSpace:
    """The :class:`SearchSpace` of the ``[space]`` values (the options' over the file's).

    Raises
    ------
    InputError
        A value its rule refuses; a CP flavour or inner degree the space could never use; a
        schedule no framework of the space runs; v > 1 without an interleaved schedule.
    """
    tp = _ints(d, "tp")
    schedules = tuple(Schedule(s) for s in opts.names(d.get("schedule"), "schedule")) or tuple(
        Schedule
    )
    for v in _ints(d, "virtual_stages") or ():  # evaluate's rule: v > 1 only with interleaving
        check_virtual_stages(v, schedules)
    cap = parse_count(d["max_tp"], "max_tp") if d.get("max_tp") else None
    if cap is not None and tp:  # a cap, not a list: each job keeps its own count's divisors below
        tp = tuple(t for t in tp if t <= cap)  # it (SearchSpace.max_tp, where shapes are built)
    cp = _ints(d, "cp") or (1,)
    cp_kinds, cp_a2a = _cp_space(d, cp)
    frameworks = tuple(
        dict.fromkeys(parse_framework(f) for f in opts.names(d.get("framework"), "framework"))
    ) or (DEFAULT_FRAMEWORK,)
    if d.get("schedule"):  # a schedule asked for by name runs under a framework of the space
        for name in schedules:
            if not any(fw in SCHEDULE_SUPPORT[name] for fw in frameworks):
                check_schedule_framework(name, frameworks[0], 2, 2)
    return SearchSpace(
        num_gpus=num_gpus,
        tp=tp,
        max_tp=cap,
        pp=_ints(d, "pp"),
        cp=cp,
        ep=_ints(d, "ep"),
        micro_batch_size=_ints(d, "micro_batch"),
        max_micro_batch_size=parse_count(d.get("max_micro_batch") or 8, "max_micro_batch"),
        zero_stages=tuple(dict.fromkeys(int(z) for z in _listify(d.get("zero")))) or (0, 1, 2, 3),
        recomputes=tuple(Recompute(r) for r in opts.names(d.get("recompute"), "recompute"))
        or tuple(Recompute),
        schedules=schedules,
        virtual_stages=_ints(d, "virtual_stages") or None,
        rank_orders=tuple(
            dict.fromkeys(_order(o) for o in opts.names(d.get("rank_order"), "rank_order"))
        )
        or (DEFAULT_RANK_ORDER,),
        frameworks=frameworks,
        cp_kinds=cp_kinds or DEFAULT_SEARCHED_CP_KINDS,
        cp_a2a=cp_a2a,
        optimizers=tuple(
            dict.fromkeys(OptimizerKind(o) for o in opts.names(d.get("optimizer"), "optimizer"))
        )
        or (OptimizerKind.ADAM,),
    )


def _cp_space(
    d: Mapping[str, Any], cp: tuple[int, ...]
) -> tuple[tuple[CpKind, ...], tuple[int, ...] | None]:
    """(the CP flavours asked for, the a2a+p2p inner degrees asked for); one the space could
    never use (a flavour with cp 1 only, an inner degree without a2a+p2p) is an error."""
    cp_kinds = tuple(dict.fromkeys(_cp_kind(k) for k in opts.names(d.get("cp_kind"), "cp_kind")))
    cp_a2a = _ints(d, "cp_a2a")
    check_applicable(
        {
            "cp_kind": ", ".join(cp_kinds) if cp_kinds and max(cp) == 1 else None,
            "cp_a2a": ", ".join(map(str, cp_a2a))
            if cp_a2a and CpKind.HYBRID not in cp_kinds
            else None,
        },
        {
            "cp_kind": "it chooses among context-parallel flavours, and the search's cp is 1 "
            "(add --cp 2 …)",
            "cp_a2a": "it is the inner degree of --cp-kind a2a+p2p, which is not searched",
        },
    )
    return cp_kinds, cp_a2a


def _cp_kind(text: str) -> CpKind:
    try:
        return CpKind(text.lower())
    except ValueError:
        raise InputError(f"cp_kind: {text!r} is not one of {', '.join(CP_KIND_NAMES)}") from None


def _order(text: str) -> tuple[str, ...]:
    order = tuple(part.strip() for part in str(text).split("-"))
    if sorted(order) != ["cp", "dp", "ep", "pp", "tp"]:
        raise InputError(
            f"rank_order: {text!r} must order each of tp, cp, ep, dp, pp once, e.g. tp-cp-ep-dp-pp"
        )
    return order


def family_depths(num_layers: int, max_layers: int | None) -> range:
    """The depths (layers) of the ``params`` objective's family of a ``num_layers`` model: every
    eighth of its layers (at least 1) up to ``max_layers`` (default 4 × ``num_layers``); a depth
    between two members is not tried (llama3-70b: 10, 20, …, 320)."""
    step = max(1, num_layers // 8)
    return range(step, (max_layers or 4 * num_layers) + 1, step)


def _family(model_name: str, max_layers: int | None) -> list[dict[str, Any]]:
    """Depth variants of a catalogue model (same width): the ``params`` objective's family."""
    from dataclasses import replace

    entry = get_model(model_name)
    arch = entry.model.arch
    assert arch is not None
    out = []
    for layers in family_depths(arch.num_layers, max_layers):
        variant = replace(arch, num_layers=layers, moe=arch.moe)
        spec = ModelSpec(
            name=f"{model_name}@L{layers}",
            source=f"{entry.model.source}; depth varied to {layers}",
            arch=variant,
        )
        out.append({"model_spec": spec, "training": entry.training})
    return out


_MODEL_VALUES = ("params", *DIM_KEYS, "mtp_layers", "model_spec")
"""The request's values that give each job's model beside ``model``: a size, dimensions, MTP
modules, or ``model_spec``, a model built in code (the web's uploaded config.json,
:func:`interface.web.api.search_run`)."""


def build_problem(file_values: dict[str, Any], cli: dict[str, Any]) -> Problem:
    """Merge a scenario's values with command-line values (CLI wins) into a :class:`Problem`
    (:func:`interface.requests.merged_request`, then :func:`problem_of`)."""
    return problem_of(merged_request(file_values, cli))


def problem_of(request: SearchRequest) -> Problem:
    """The search :class:`Problem` of a search request: its jobs (model × accelerator × GPU
    count × batch, each a case of :func:`interface.inputs.build_case`), space, constraints and
    objective.

    Raises
    ------
    PlannerError
        A value its rule refuses (one line; a value the scenario file gave, with the file and
        the key: ``scenario s.toml: global_batch_tokens: …``; no model anywhere, with the file's
        key to give), an unknown model or GPU.
    """
    try:
        return _problem_of(request)
    except PlannerError as err:
        path, said = request.scenario_file, request.said_by_file(err)
        if path is None or said is not err:
            raise said from None
        if str(err).split(":", 1)[0] == "model" and not request.values.get("model"):
            raise type(err)(
                f'scenario {path}: model missing: give model = "NAME" in the file (a catalogue '
                "name or a config.json path), or --model NAME, --params SIZE or the dimensions "
                "--layers --hidden --heads"
            ) from None
        raise


def _problem_of(request: SearchRequest) -> Problem:
    """:func:`problem_of` without the file's name on its refusals."""
    d, space_d, cons_d = request.values, request.space, request.constraints
    constraints = constraints_of(cons_d)  # bad constraints refused before any case is built
    if d.get("gpus") is None:
        raise InputError(
            "gpus: give --gpus N (a count, or a range 1024..16384; repeat it for several)"
        )
    counts = gpu_counts(d["gpus"])
    accelerators = _parts(d.get("gpu"))
    if not accelerators:
        raise InputError(f"gpu: {d['gpu']!r} names no accelerator (trainplan gpus lists them)")
    names = [p if isinstance(p, str) else p.name for p in accelerators]
    prices = opts.prices(d.get("gpu_hour_price"), names)
    objective = _objective(d)
    space = _space(space_d, counts[0])
    base = {
        "model": d.get("model"),
        **{k: d.get(k) for k in _MODEL_VALUES if d.get(k) is not None},
        "seq_len": d.get("seq_len"),
        **_tp_plan(request.cluster, space, counts),
    }
    opts.require_dimensions(d)
    opts.require_batch(d)
    models: list[dict[str, Any]] = [{}]
    check_applicable(  # read only by the params objective's family: refused, not dropped
        {"max_layers": d.get("max_layers") if objective is not Objective.PARAMS else None},
        {
            "max_layers": "it is the deepest member of the family that --maximize params "
            f"tries, and the objective is {objective} (add --maximize params)"
        },
    )
    if objective is Objective.PARAMS:
        if not d.get("model"):
            raise InputError(
                "maximize params: give --model as the family's base (its depth is varied)"
            )
        models = _family(str(d["model"]), d.get("max_layers"))
    calibrated = _calibrated(base.get("calibration"), accelerators)
    jobs = []
    for variant, (gpu, name), count in itertools.product(
        models, zip(accelerators, names, strict=True), counts
    ):
        params = dict(base, gpu=gpu)
        if gpu not in calibrated:
            params.pop("calibration", None)
        case = _variant_case(params, variant, space.frameworks, space.optimizers)
        jobs += _jobs(case, d, count, name, prices[name])
    tokens = parse_count(d["tokens"], "tokens") if d.get("tokens") is not None else None
    opts.check_applies(objective, d.get("tokens"), space_d, jobs)
    return Problem(
        jobs=tuple(jobs), space=space, constraints=constraints, objective=objective, tokens=tokens
    )


def _objective(d: Mapping[str, Any]) -> Objective:
    """The objective asked for; tokens per GPU when several batch sizes are searched and none
    is named (their step times do not compare).

    Raises
    ------
    InputError
        Several batch sizes with the step-time objective named.
    """
    objective = Objective(str(d.get("objective") or "step-time"))
    seq_len = parse_count(d["seq_len"], "seq_len") if d.get("seq_len") is not None else 1
    several = len(opts.batches(d.get("global_batch"), d.get("global_batch_tokens"), seq_len)) > 1
    if several and not d.get("objective"):
        return Objective.TOKENS_PER_GPU
    if several and objective is Objective.STEP_TIME:
        raise InputError(
            "global_batch: several batch sizes make step times incomparable; use "
            "--objective tokens-per-gpu or time-to-train"
        )
    return objective


def _jobs(case: Case, d: Mapping[str, Any], count: int, name: str, price: Any) -> list[Job]:
    """The jobs of one case on ``count`` GPUs of accelerator ``name``: one per global batch
    searched (the case's own when none is given)."""
    batches = opts.batches(
        d.get("global_batch"), d.get("global_batch_tokens"), case.training.seq_len
    ) or [case.training.global_batch_size]
    out = []
    for batch in batches:
        job_case = case if batch == case.training.global_batch_size else _with_batch(case, batch)
        # the part as the accelerator table spells it (H100_sxm typed: H100-SXM)
        label = f"{job_case.model.name} on {count:,} × {job_case.device.name}, B {batch:,}"
        out.append(Job(job_case, count, label, price))
    return out


def _tp_plan(cluster: Mapping[str, Any], space: SearchSpace, counts: list[int]) -> dict[str, Any]:
    """The ``[cluster]`` values as the jobs' cases take them: ``tp_block_inputs`` checked against
    the searched frameworks and tp degrees (:func:`interface.tp_plan.check_tp_block_inputs`) and
    passed on as the recipe's ``gathered_block_inputs``, which every other profile the search
    weighs leaves as its own (the shard)."""
    out = {
        k: v
        for k, v in cluster.items()
        if k
        not in (
            "tp_block_inputs",
            "compile",
            "pipeline_frees_stage_tensors",
            "pipeline_keeps_outputs",
        )
    }
    check_compile(cluster.get("compile"), space.frameworks)
    check_pipeline_frees_stage_tensors(
        cluster.get("pipeline_frees_stage_tensors"),
        space.frameworks,
        space.pp or divisors(max(counts)),
    )
    check_pipeline_frees_stage_tensors(
        cluster.get("pipeline_keeps_outputs"),
        space.frameworks,
        space.pp or divisors(max(counts)),
        "pipeline_keeps_outputs",
    )
    for key in ("pipeline_frees_stage_tensors", "pipeline_keeps_outputs"):
        if cluster.get(key) is not None:  # fsdp2's, with pp > 1
            out[f"{key}_fsdp2"] = cluster[key]
    if cluster.get("compile") is not None:  # fsdp2's; every other profile runs fused kernels
        out["compile_fsdp2"] = cluster["compile"]
    value = cluster.get("tp_block_inputs")
    tps = space.tp or [t for t in divisors(max(counts)) if t <= (space.max_tp or t)]
    check_tp_block_inputs(value, space.frameworks, tps)
    if gathered_block_inputs(value) is False:
        out["gathered_block_inputs"] = False
    return out


def _calibrated(path: Any, accelerators: list[str | DeviceSpec]) -> set[str | DeviceSpec]:
    """The searched accelerators a calibration file applies to: the one it was fitted on (the
    others keep their default figures; a what-if part answers by its own name).

    Raises
    ------
    InputError
        The file was fitted on none of the searched accelerators: it would be unused.
    """
    if not path:
        return set()

    fitted_on = calibration_gpu(path)
    names = {
        gpu: gpu.name if isinstance(gpu, DeviceSpec) else get_part(gpu).name for gpu in accelerators
    }
    if fitted_on not in names.values():
        given = ", ".join(g if isinstance(g, str) else g.name for g in accelerators)
        raise InputError(
            f"calibration: {str(path)!r} was fitted on {fitted_on}, which is not among the "
            f"searched accelerators ({given}); efficiencies measured on one "
            f"accelerator say nothing of another — add --gpu {fitted_on}, calibrate on these, "
            "or leave --calibration out"
        )
    return {gpu for gpu, name in names.items() if name == fitted_on}


def _with_batch(case, batch: int):
    """The case with global batch ``batch`` (and without the note of a batch chosen by rule)."""
    from dataclasses import replace

    return replace(case, training=replace(case.training, global_batch_size=batch), notes=())


def _variant_case(
    params: dict[str, Any], variant: dict[str, Any], frameworks: Any, optimizers: Any
):
    """The case of ``params`` (with a family member's model and training where ``variant`` is
    one), the FP8 recipe checked under every framework searched, each one's default
    (:func:`interface.cluster_inputs.check_fp8_profile`), an optimizer's settings against every
    optimizer searched."""
    if not variant:
        return build_case(params, frameworks, optimizers)
    return build_case(
        {
            **params,
            "model": None,
            "model_spec": variant["model_spec"],
            "training_defaults": variant["training"],
        },
        frameworks,
        optimizers,
    )
