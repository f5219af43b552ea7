"""What the user's own settings cost a search: the best layout without them.

A search takes the ``[cluster]`` keys a user gives (``--set KEY=VALUE``, their flags such as
``--precision``, a scenario file's table) as requirements: every candidate layout runs with
them. Most of the mechanisms among them are choices the user could leave to the framework
(``moe_ep_overlap``, ``tp_comm_overlap``, ``fp8_recipe``, ``recompute_modules`` …), and a choice
can lose: with ``moe_ep_overlap = overlap_moe_expert_parallel_comm`` Mixtral 8x7B's best layout on
64 H100s takes 18.062 s a step, against 17.697 s for the search that leaves the key at
Megatron-Core's default (none), because Megatron-Core refuses the overlap with full recomputation
(:mod:`model.moe_rules`) and the fastest layout without it recomputes fully
(tests/interface/test_setting_cost.py); Qwen3-235B-A22B's on 256 H100s takes 13.024 s against
9.377 s.

So a search or frontier that ran with such a choice set searches once more with the choices
removed — every other input as given, the same space, constraints and objective — and reports the
difference (:class:`SettingCost`; the command's ``settings_cost``, a note in its text) when the
defaults' best is better by more than :data:`THRESHOLD`. The keys that describe the user's
cluster, software or measurements (:data:`FACT_KEYS`: ``nccl_nvls = false`` on a fabric without
NVLink SHARP, a calibrated efficiency, a framework version) are not choices and never trigger it.
No figure of the comparison is a second cost model: it is the same search over the same cost
model (:func:`optimizer.search.search`), only without the settings.

Which choice costs: with two to :data:`EACH_MAX` choices set and the note said, each is dropped
alone too (the others kept, one more search each) and the note names what keeping each costs
(``settings_cost.each``); with more, they are named together, said so.

Cost: nothing unless a choice key is set to a value that is not what every searched profile runs
by default (:func:`interface.setting_defaults.same_runs`: ``tp_comm_overlap = async`` under
Megatron-Core is its default, not a choice; such a setting is neither compared nor named);
otherwise one more table build and one CP-SAT solve (top 1), and one more per choice when they
are told apart, within what ``--time-limit`` leaves. The first search's tables are not reused: the
settings are part of each job's case, from which every table is built; the memory terms are
memoised by the recipe alone (:func:`optimizer.job_rows._job_rows`) but hold the legality rules,
which read the cost options too (``tp_comm_overlap`` among them), so sharing them across the two
searches would carry one search's legality into the other.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from fractions import Fraction
from types import MappingProxyType
from typing import Any

from trainplan.interface.flags import with_flags
from trainplan.interface.render.report_dict import estimate_to_dict
from trainplan.interface.requests import SearchRequest
from trainplan.interface.scenario import problem_of
from trainplan.interface.scenario_file import CLUSTER_KEYS
from trainplan.interface.setting_defaults import same_runs
from trainplan.interface.setting_notes import each_text, note_of, without_line
from trainplan.model.errors import InfeasibleError, PlannerError
from trainplan.optimizer.problem import Objective, Problem, objective_value
from trainplan.optimizer.search import SOLVE_FLOOR_S, prepare, search
from trainplan.optimizer.solver import interrupted
from trainplan.optimizer.tables import TableProgress, objective_divisor

__all__ = [
    "CHOICE_KEYS",
    "EACH_MAX",
    "FACT_KEYS",
    "THRESHOLD",
    "SettingCost",
    "chosen_settings",
    "settings_cost",
    "best_without",
    "settings_json",
    "without_line",
]

THRESHOLD = 0.01
"""How much better the defaults' best must be before the output says the settings cost
something: 1 % of the objective (step time, time to train, dollars, GPU-seconds per token). A
presentation threshold, not a figure of the cost model: it keeps a difference of a few
milliseconds out of the text; ``settings_cost`` holds both figures whatever the difference."""

EACH_MAX = 4
"""The most choices told apart (one more search each, :func:`settings_cost`); above it the note
names them together. A bound on the work, not a figure of the cost model."""

CHOICE_KEYS: Mapping[str, str] = MappingProxyType(
    {
        # how communication hides under compute
        "tp_comm_overlap": "Megatron-LM --tp-comm-overlap / torchtitan async TP",
        "tp_comm_overlap_cfg": "Transformer Engine's userbuffers configuration",
        "grad_reduce_overlap": "Megatron-LM --overlap-grad-reduce / --overlap-param-gather",
        "p2p_overlap": "Megatron-Core overlap_p2p_comm",
        "p2p_warmup_flush": "Megatron-LM --overlap-p2p-communication-warmup-flush",
        "deepspeed_overlap_comm": "DeepSpeed zero_optimization.overlap_comm",
        "moe_ep_overlap": "Megatron-LM --moe-shared-expert-overlap / "
        "--overlap-moe-expert-parallel-comm",
        # MoE routing and dispatch
        "moe_dispatcher": "Megatron-LM --moe-token-dispatcher-type",
        "moe_capacity_factor": "Megatron-LM --moe-expert-capacity-factor",
        "moe_pad_to_capacity": "Megatron-LM --moe-pad-expert-input-to-capacity",
        "moe_node_limit": "Megatron-LM --moe-router-group-topk",
        # numerics
        "precision": "FP8 linear layers (Transformer Engine, torchao)",
        "fp8_recipe": "Megatron-LM --fp8-recipe, torchtitan's float8 recipe",
        "fp8_param_gather": "Megatron-LM --fp8-param-gather, torchtitan enable_fsdp_float8_all_gather",
        "fp8_activation_storage": "what FP8 layers keep for backward",
        "gradient_dtype": "Megatron-LM --accumulate-allreduce-grads-in-fp32",
        "optimizer_dtype": "Megatron-LM --exp-avg-dtype",
        "master_weights": "an FP32 master copy in the optimizer",
        "seq_parallel_communication_data_type": "DeepSpeed's Ulysses gradient dtype",
        "muon_tp_mode": "Megatron-LM --muon-tp-mode",
        # memory
        "offload_optimizer": "Megatron-LM --optimizer-offload-fraction, DeepSpeed offload_optimizer",
        "offload_params": "DeepSpeed offload_param, FSDP2 CPUOffloadPolicy",
        "offload_activations": "Megatron-Core --offload-modules",
        "cpu_offloading_num_layers": "Megatron-Core --cpu-offloading-num-layers",
        "recompute_modules": "Megatron-LM --recompute-modules",
        "fsdp_double_buffer": "Megatron-LM --fsdp-double-buffer",
        "memory_efficient_norm": "Megatron-LM --memory-efficient-layer-norm",
        "tp_block_inputs": "fsdp2's tensor-parallel plan",
        # kernels
        "compile": "torchtitan compile.enable",
        "cross_entropy_fusion_impl": "Megatron-LM --cross-entropy-fusion-impl",
        "bias_dropout_fusion": "Megatron-DeepSpeed --no-bias-dropout-fusion",
    }
)
"""The ``[cluster]`` keys that are choices of the training run (each with the framework setting it
stands for): set, they are compared with the search that leaves them at the frameworks'
defaults."""

FACT_KEYS: Mapping[str, str] = MappingProxyType(
    {
        **dict.fromkeys(
            ("nvlink_domain", "segment_gpus", "nvlink_gbps", "scaleout_gbps", "fabric"),
            "the cluster's hardware",
        ),
        **dict.fromkeys(
            ("pod_size", "oversubscription", "host_link_gbps", "host_memory_gbps"),
            "the cluster's hardware",
        ),
        **dict.fromkeys(("memory_reserve_gib",), "the cluster's hardware"),
        "nccl_nvls": "the fabric: NVLink SHARP present and enabled (NCCL_NVLS_ENABLE)",
        **dict.fromkeys(
            ("time_model", "gemm_efficiency", "hbm_efficiency", "scaleup_efficiency"),
            "a measurement or the time model's calibration",
        ),
        **dict.fromkeys(
            ("scaleout_efficiency", "kernel_efficiency", "attention_efficiency", "overlap"),
            "a measurement or the time model's calibration",
        ),
        "calibration": "a measurement or the time model's calibration",
        "nccl_sm_charge": "what the time model charges",
        "nccl_channel_setup": "what the memory model counts",
        "activation_convention": "an accounting convention",
        "causal_attention_flops": "an accounting convention",
        "attention_kernel": "the software stack's attention kernel",
        "flash_attention": "the software stack's attention kernel",
        "distributed_optimizer": "the software stack (Megatron-Core's or Apex's under NeMo)",
        "flat_parameters": "the software stack (PyTorch FSDP1's FullyShardedDataParallel)",
        "grad_stats_group": "the Megatron-Core version",
        "grad_clip_scaling": "the Megatron-LM version",
        "loss_scaling": "the Megatron-LM run's precision (FP16 with a loss scale)",
        "p2p_forward_send_wait": "the Megatron-Core version",
        "use_multi_rank_bucket_allreduce": "the DeepSpeed version",
        "lp_grads_set_to_none": "the DeepSpeed version",
        "sac_saves_scaled_mm": "the torchtitan version",
        "pipeline_keeps_outputs": "the torchtitan version",
        "pipeline_frees_stage_tensors": "the pipeline runtime (Llama 3's own)",
        "vocab_multiple": "the checkpoint's padded vocabulary",
        "moe_imbalance": "a measurement of the router",
        **dict.fromkeys(
            ("document_length", "document_length_spread", "document_lengths"), "the data"
        ),
    }
)
"""The ``[cluster]`` keys that describe the user's cluster, software, data or measurements, or
the model's conventions (each with what it describes): never compared."""

assert not set(CHOICE_KEYS) & set(FACT_KEYS), "a key is a choice or a fact"
assert set(CHOICE_KEYS) | set(FACT_KEYS) == set(CLUSTER_KEYS), "every [cluster] key is classed"


def _text(value: Any) -> str:
    """A setting's value as ``--set`` writes it (``true``, ``0.5``, ``core_attn;mlp``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Fraction):
        return str(int(value)) if value.denominator == 1 else f"{float(value):g}"
    if isinstance(value, list | tuple):
        return ";".join(_text(v) for v in value)
    return str(value)


def chosen_settings(request: SearchRequest) -> dict[str, str]:
    """The choice keys (:data:`CHOICE_KEYS`) ``request`` sets, in the order given: {key: value
    as ``--set`` writes it}.

    >>> from trainplan.interface.requests import search_request
    >>> r = search_request({"set": {"moe_ep_overlap": "moe_shared_expert_overlap",
    ...                             "nccl_nvls": False, "compile": True}})
    >>> chosen_settings(r)
    {'moe_ep_overlap': 'moe_shared_expert_overlap', 'compile': 'true'}
    """
    return {k: _text(v) for k, v in request.cluster.items() if k in CHOICE_KEYS}


@dataclass(frozen=True, slots=True)
class SettingCost:
    """The search without the user's choices beside the search with them (JSON
    ``settings_cost``)."""

    settings: Mapping[str, str]
    """The choice keys the search took as given, {key: value as ``--set`` writes it}."""
    status: str
    """The search without them: ``optimal``, ``feasible`` (stopped by the time limit: the best
    found, not proven), ``infeasible`` (no layout meets the constraints without them),
    ``unknown`` (the time limit ran out before an answer), ``refused`` (the other inputs need
    one of them: ``reason``), ``skipped`` (the time limit was spent, or Ctrl-C: ``reason``)."""
    objective_kind: str
    """The objective both searches minimise (``step-time``…)."""
    unit: str
    """The objective's JSON key, naming its unit (``objective_s``, ``objective_usd``,
    ``objective_gpu_s_per_token``)."""
    with_settings: float | None
    """The answer's objective, in that unit (the frontier's: its fastest point's)."""
    without_settings: float | None = None
    """The best objective without the settings, in that unit; None without an answer."""
    step_s: float | None = None
    """The step time of the best layout without the settings, s."""
    job: str | None = None
    """Its job (model on G × accelerator, B)."""
    layout: Mapping[str, Any] | None = None
    """Its layout, as the evaluate object's ``layout``."""
    reason: str | None = None
    """Why there is no figure without the settings (the defaults refused, the time limit)."""
    note: str | None = None
    """The line the output shows, parameter names in backticks (:func:`interface.flags.with_flags`
    writes each as the flag or query parameter that gives it): set when the settings cost more
    than :data:`THRESHOLD`, or when no layout meets the constraints with them but one does
    without."""
    threshold: float = THRESHOLD
    """The fraction the defaults must be better by for the note."""
    each: tuple[Mapping[str, Any], ...] = ()
    """Each choice dropped alone, the others kept (set when the note is said and two to
    :data:`EACH_MAX` choices are set), in the order given: ``setting``, ``value`` (as ``--set``
    writes it), ``status`` (as :attr:`status`), ``without_setting`` (the best objective without
    it alone, in :attr:`unit`; None without an answer), ``cost`` (with ÷ that − 1: what keeping
    it costs; None without both figures) and ``reason`` (why there is no figure)."""

    @property
    def cost(self) -> float | None:
        """with ÷ without − 1: what the settings cost, a fraction of the best without them
        (negative: they gain); None without both figures."""
        if self.with_settings is None or not self.without_settings:
            return None
        return self.with_settings / self.without_settings - 1

    def to_dict(self, web: bool = False) -> dict[str, Any]:
        """The JSON object: every field, and ``cost``; the note's names as the command line's
        flags (``web``: as the web API's query parameters)."""
        return {
            "settings": dict(self.settings),
            "status": self.status,
            "objective_kind": self.objective_kind,
            "unit": self.unit,
            "with_settings": self.with_settings,
            "without_settings": self.without_settings,
            "cost": self.cost,
            "threshold": self.threshold,
            "step_s": self.step_s,
            "job": self.job,
            "layout": None if self.layout is None else dict(self.layout),
            "reason": self.reason,
            "note": None if self.note is None else with_flags(self.note, web),
            "each": [dict(e) for e in self.each],
        }


class _Stopped(Exception):
    """Ctrl-C while the comparison's tables were built."""


def settings_cost(
    request: SearchRequest,
    problem: Problem,
    with_value: float | None,
    started: float,
    on_tables: TableProgress | None = None,
) -> SettingCost | None:
    """The search of ``request`` without its choice keys (:func:`chosen_settings`) beside the
    answer's objective ``with_value`` (base units, :func:`optimizer.problem.objective_value`;
    None when the search with them found no layout); ``problem`` the search's own, ``started``
    the :func:`time.perf_counter` at which the command began (``request.time_limit`` bounds both
    searches together); ``on_tables`` the table-building progress.

    None when nothing is compared: no choice key set, none that changes a job's case, or the
    ``params`` objective (a model size, not a cost).

    Raises
    ------
    Exception
        Only what ``on_tables`` raises: the comparison's own refusals and empty answers are its
        ``status`` and ``reason``, and Ctrl-C is checked before ``on_tables`` is called (the
        command line's raises only then).
    """
    settings = chosen_settings(request)
    if not settings or problem.objective is Objective.PARAMS:
        return None
    alone = _alone(request, problem, settings)
    if not alone:  # every one the profiles' default
        return None
    chosen = {k: settings[k] for k in alone}
    unit = objective_value(problem.objective, 0)[0]
    given: dict[str, Any] = {"settings": chosen, "objective_kind": str(problem.objective)}
    given["unit"] = unit
    given["with_settings"] = with_value
    try:
        without = _without(request, tuple(settings))
    except PlannerError as err:  # another key needs one of them
        return SettingCost(**given, status="refused", reason=str(err))
    found = _best(without, request, started, on_tables)
    cost = SettingCost(**given, **found)
    if cost.layout is None:
        return cost
    note = note_of(cost, problem.tokens, len(problem.jobs) > 1)
    if note is None or len(chosen) == 1:
        return replace(cost, note=note)
    if len(chosen) > EACH_MAX:
        note += f"; more than {EACH_MAX} choices: not told apart (a search each)"
        return replace(cost, note=note)
    each = tuple(_each(k, chosen[k], alone[k], cost, request, started) for k in chosen)
    return replace(cost, note=note + each_text(each, cost, problem.tokens), each=each)


def _without(request: SearchRequest, keys: tuple[str, ...]) -> Problem:
    """The problem of ``request`` without the ``[cluster]`` keys ``keys``, uniform.

    Raises
    ------
    PlannerError
        Another input needs one of them.
    """
    cluster = {k: v for k, v in request.cluster.items() if k not in keys}
    return problem_of(replace(request, cluster=MappingProxyType(cluster), per_stage=False))


def _alone(
    request: SearchRequest, problem: Problem, settings: Mapping[str, str]
) -> dict[str, Problem | PlannerError]:
    """The choices of ``settings`` that are not every searched profile's default, each with the
    problem without it alone (or the refusal of that problem: another input needs it).
    A setting whose problem runs the same (:func:`interface.setting_defaults.same_runs`) is the
    default, left out."""
    out: dict[str, Problem | PlannerError] = {}
    for key in settings:
        try:
            other = _without(request, (key,))
        except PlannerError as err:
            out[key] = err
            continue
        if not same_runs(problem, other):
            out[key] = other
    return out


def _best(
    problem: Problem,
    request: SearchRequest,
    started: float,
    on_tables: TableProgress | None,
) -> dict[str, Any]:
    """:func:`_search`'s fields for ``problem`` within what the time limit leaves, or ``status``
    and ``reason`` when there is no answer (skipped, infeasible, refused)."""
    limit = request.time_limit
    left = None if limit is None else limit - (time.perf_counter() - started)
    if left is not None and left < SOLVE_FLOOR_S:
        reason = f"the time limit of {limit:g} s was spent by the search with them"
        return {"status": "skipped", "reason": reason}
    try:
        return _search(problem, left, request.layout_workers, on_tables)
    except _Stopped:
        return {"status": "skipped", "reason": "interrupted (Ctrl-C)"}
    except InfeasibleError as err:
        reason = err.explanation[0] if err.explanation else str(err)
        return {"status": err.status, "reason": reason}
    except PlannerError as err:
        return {"status": "refused", "reason": str(err)}


def _each(
    key: str,
    value: str,
    alone: Problem | PlannerError,
    cost: SettingCost,
    request: SearchRequest,
    started: float,
) -> Mapping[str, Any]:
    """:attr:`SettingCost.each`'s entry of ``key``: the search without it alone."""
    entry: dict[str, Any] = {"setting": key, "value": value}
    if isinstance(alone, PlannerError):
        found: dict[str, Any] = {"status": "refused", "reason": str(alone)}
    else:
        found = _best(alone, request, started, None)
    best = found.get("without_settings")
    share = None
    if best and cost.with_settings is not None:
        share = cost.with_settings / best - 1
    entry.update(status=found["status"], without_setting=best, cost=share)
    entry["reason"] = found.get("reason")
    return MappingProxyType(entry)


def _search(
    problem: Problem,
    left: float | None,
    workers: int,
    on_tables: TableProgress | None,
) -> dict[str, Any]:
    """The best answer of ``problem`` (top 1, within ``left`` seconds) as :class:`SettingCost`'s
    fields: ``status``, ``without_settings``, ``step_s``, ``job``, ``layout``.

    Raises
    ------
    _Stopped
        Ctrl-C (:func:`optimizer.solver.interrupted`) before or while the tables were built.
    PlannerError
        What the search raises (InfeasibleError among them).
    """

    def progress(done: int, total: int, cut: str | None = None, /) -> None:
        if interrupted():
            raise _Stopped
        if on_tables is not None:
            on_tables(done, total, cut)

    if interrupted():
        raise _Stopped
    prepared = prepare(problem, progress, left)
    result = search(problem, 1, left, workers, prepared=prepared)
    best = result.best
    divisor = objective_divisor(problem, prepared[0])
    return {
        "status": result.status,
        "without_settings": objective_value(problem.objective, best.objective, divisor)[1],
        "step_s": best.estimate.step_s,
        "job": best.job.label,
        "layout": MappingProxyType(estimate_to_dict(best.estimate)["layout"]),
    }


def settings_json(
    request: SearchRequest,
    problem: Problem,
    with_value: float,
    started: float,
    on_tables: TableProgress | None = None,
    web: bool = False,
) -> dict[str, Any] | None:
    """A command's ``settings_cost``: :func:`settings_cost`'s JSON object (``web``: its note
    naming the web API's query parameters), None when nothing is compared."""
    cost = settings_cost(request, problem, with_value, started, on_tables)
    return None if cost is None else cost.to_dict(web)


def best_without(
    err: InfeasibleError,
    request: SearchRequest,
    problem: Problem,
    started: float,
    on_tables: TableProgress | None = None,
) -> InfeasibleError:
    """``err`` (the search of ``request``: no layout meets the constraints) with a last
    explanation line naming the best layout without the user's choices when there is one
    (:func:`settings_cost`; its names in backticks, which the command line and
    :func:`interface.commands.infeasible_json` write as flags); ``err`` itself otherwise."""
    if err.status != "infeasible":
        return err
    cost = settings_cost(request, problem, None, started, on_tables)
    if cost is None or cost.note is None:
        return err
    return InfeasibleError(str(err), [*err.explanation, cost.note], err.status)
