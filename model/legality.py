"""Every legality rule of a layout, written once (docs/concepts/conventions.md "Inputs and errors").

Each :class:`Rule` reads a few of a layout's fields (its ``scope``) and raises a
:class:`model.errors.LayoutError` naming the parameter, its value and the rule. Two uses:

* :func:`model.layout.validate` checks one layout: the rules in order, the first broken raised;
* :func:`legality` answers for any :class:`model.terms.fields.Fields` — one layout, or the
  search's columns of candidates — the legal mask and the first broken rule's reason per
  candidate, each rule evaluated once per distinct value of its scope. The search's shapes
  (:func:`optimizer.space.legal_shapes`) and tables ask it; they never re-type a rule.

Rank order (inner to outer): tp, cp, ep, dp, pp (Megatron-LM's default). The world size is ``G = dp · tp · pp · cp``;
the expert-parallel group is carved out of the ``dp · cp`` ranks: ep does not multiply G (docs/concepts/conventions.md "Layout").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from trainplan.model.activation_offload import check_activation_offload, check_layer_offload
from trainplan.model.context_parallel import CpKind
from trainplan.model.cp_rules import check_cp_framework, check_cp_kind
from trainplan.model.deepspeed_fp8 import check_deepspeed_fp8
from trainplan.model.deepspeed_layers import check_deepspeed_layers, check_deepspeed_pipe_recompute
from trainplan.model.errors import LayoutError
from trainplan.model.expert_groups import check_expert_groups
from trainplan.model.flex_domains import FLEX_DOMAINS_SCOPE, flex_domains_rule
from trainplan.model.fp8_gather_rules import fp8_param_gather_rule
from trainplan.model.frameworks import (
    Framework,
    check_distributed_optimizer,
    check_framework,
    check_framework_recompute,
)
from trainplan.model.hash_once import HashOnce, hashable
from trainplan.model.key_rules import check_framework_recipe, check_options, options_given
from trainplan.model.model_spec import ModelSpec
from trainplan.model.moe_rules import (
    HYBRIDEP_TOKENS_SCOPE,
    MOE_CAPACITY_SCOPE,
    check_expert_parallel,
    hybridep_tokens_rule,
    moe_capacity_rule,
    moe_framework_rule,
    moe_layout_rule,
    moe_schedule_rule,
)
from trainplan.model.mtp_rules import MTP_RECOMPUTE_SCOPE, mtp_recompute_rule
from trainplan.model.muon import muon_tp_gathers
from trainplan.model.offload_rules import check_offload_rules
from trainplan.model.optimizers import OptimizerKind, check_optimizer
from trainplan.model.pipeline import check_schedule
from trainplan.model.precision import check_fp8_activation_storage
from trainplan.model.recompute_counts import check_count_sizes, check_recompute_counts
from trainplan.model.recompute_modules import check_setting_recompute_modules
from trainplan.model.schedule_cost import check_split_layout
from trainplan.model.schedule_support import split_recompute_rule
from trainplan.model.shape_rules import heads_rule, moe_sequence_parallel_rule, size_only_rule
from trainplan.model.specs import TrainingSpec
from trainplan.model.split import (
    check_chunks,
    check_framework_split,
    check_stage_layers,
    split_rule_of,
)
from trainplan.model.tp_overlap import check_layout_tp_overlap
from trainplan.model.xp import where

__all__ = [
    "Rule",
    "RULES",
    "Setting",
    "legality",
    "check_rules",
    "refusal",
    "first_broken",
    "check_expert_parallel",
]


@dataclass(frozen=True, slots=True)
class Setting(HashOnce):
    """What the rules read besides the layout: the model, the recipe and the GPU count the
    degrees must multiply to (None: not checked), the on/off cost options set away from
    their defaults (:func:`model.key_rules.options_given`) and the tensor-parallel overlap
    chosen (:class:`model.timing.CostOptions` ``tp_comm_overlap``'s value; None: the
    framework's default)."""

    model: ModelSpec
    training: TrainingSpec
    num_gpus: int | None = None
    options: tuple[tuple[str, bool], ...] = ()
    tp_comm_overlap: str | None = None
    nvlink_domain: int | None = None
    """GPUs of consecutive ranks in one NVLink domain (:attr:`model.hardware.DeviceSpec.
    placement_domain`: the domain or the job's Slurm segment); None: the rules that read where a
    group lies are not checked (:func:`model.moe_rules.hybridep_tokens_rule`)."""

    @classmethod
    def of(
        cls,
        model: ModelSpec,
        training: TrainingSpec,
        num_gpus: int | None,
        options: Any,
        device: Any = None,
    ) -> Setting:
        """The setting of :class:`model.timing.CostOptions` ``options`` (None: defaults) on a
        :class:`model.hardware.DeviceSpec` ``device`` (its ``placement_domain``; None: unknown)."""
        overlap = getattr(options, "tp_comm_overlap", None)
        given = None if overlap is None else str(overlap)
        domain = getattr(device, "placement_domain", None)
        return cls(model, training, num_gpus, options_given(options), given, domain)


@dataclass(frozen=True, slots=True)
class Rule:
    """One legality rule: ``check(setting, *values of scope)`` raises a LayoutError."""

    name: str
    scope: tuple[str, ...]
    check: Callable[..., None]


def _gpus(s: Setting, dp: int, tp: int, pp: int, cp: int) -> None:
    if s.num_gpus is not None and dp * tp * pp * cp != s.num_gpus:
        raise LayoutError(
            f"gpus: dp {dp:,} × tp {tp:,} × pp {pp:,} × cp {cp:,} = {dp * tp * pp * cp:,}, not "
            f"{s.num_gpus:,}"
        )


def _batch(s: Setting, b: int, dp: int) -> None:
    B = s.training.global_batch_size
    if B % (b * dp):
        raise LayoutError(
            f"global_batch_size: {B:,} is not divisible by micro_batch_size {b:,} × dp {dp:,} = "
            f"{b * dp:,}"
        )


def _framework(s: Setting, framework: Any, zero_stage: int, pp: int) -> None:
    check_framework(Framework(framework), zero_stage, pp)
    check_framework_recipe(framework, zero_stage, s.training, s.model.arch, pp)


def _deepspeed_fp8(s: Setting, framework: Any, tp: int, pp: int, cp: int) -> None:
    t = s.training
    check_deepspeed_fp8(framework, t.precision, t.fp8_recipe, s.model.arch, tp, pp, cp)


def _deepspeed_layers(s: Setting, framework: Any) -> None:
    check_deepspeed_layers(framework, s.model.arch, s.training.seq_len)


def _framework_recompute(s: Setting, framework: Any, recompute: Any, pp: int) -> None:
    check_framework_recompute(framework, recompute, pp)


def _offload(s: Setting, framework: Any, zero_stage: int, optimizer: Any) -> None:
    check_offload_rules(framework, zero_stage, optimizer, s.training)


def _activation_offload(
    s: Setting, framework: Any, recompute: Any, counts: tuple[int, ...] | None
) -> None:
    arch = s.model.arch
    has_moe = arch is None or arch.kind_index(True) is not None
    has_mla = arch is None or arch.mla is not None
    check_activation_offload(
        framework, recompute, s.training.offload.activations, has_moe, counts, has_mla
    )


def _layer_offload(s: Setting, framework: Any, pp: int, recompute: Any, counts: Any) -> None:
    arch, t = s.model.arch, s.training
    has_moe = arch is not None and arch.kind_index(True) is not None
    layers = None if arch is None else arch.num_layers
    check_layer_offload(
        t.cpu_offloading_num_layers, framework, pp, recompute, counts, layers, has_moe,
        t.offload.activations,
    )  # fmt: skip


def _recompute_modules(s: Setting, framework: Any, recompute: Any) -> None:
    check_setting_recompute_modules(s.model.arch, s.training, framework, recompute)


def _distributed_optimizer(
    s: Setting, framework: Any, zero_stage: int, optimizer: Any, ep: int
) -> None:
    t = s.training
    offloaded = bool(t.offload.optimizer) or t.offload.params
    check_distributed_optimizer(
        t.distributed_optimizer,
        framework,
        zero_stage,
        optimizer,
        t.fp8_param_gather,
        offloaded,
        ep,
    )


def _fp8_activation_storage(s: Setting, framework: Any) -> None:
    check_fp8_activation_storage(framework, s.training.fp8_activation_storage)


def _experts(s: Setting, etp: int | None, tp: int, dp: int, cp: int, ep: int, fw: Any) -> None:
    moe = s.model.arch is not None and s.model.arch.moe is not None
    check_expert_groups(etp, tp, dp, cp, ep, fw, moe)


def _schedule(s: Setting, pp: int, m: int, schedule: Any, v: int) -> None:
    check_schedule(pp, m, schedule, v)
    if str(schedule) == "interleaved" and pp < 2:
        raise LayoutError(
            "schedule: interleaved needs pp ≥ 2 (Megatron-LM's virtual pipeline interleaves "
            "model chunks across pipeline stages), not pp 1; use 1f1b"
        )


def _options(s: Setting, framework: Any, pp: int, v: int) -> None:
    check_options(s.options, framework, pp, v)


def _split_schedule(s: Setting, pp: int, m: int, schedule: Any, v: int, framework: Any) -> None:
    check_split_layout(pp, m, schedule, v, str(framework))


def _sequence_parallel(s: Setting, sequence_parallel: bool | None, tp: int) -> None:
    if sequence_parallel and tp == 1:
        raise LayoutError(
            "sequence_parallel: splits the tp group's activations and needs tp ≥ 2, not tp 1"
        )


def _tp_overlap(s: Setting, framework: Any, tp: int, sp: bool) -> None:
    check_layout_tp_overlap(s.tp_comm_overlap, framework, tp, sp)


def _split(s: Setting, pp: int, v: int, uneven: bool, sizes: Any, framework: Any) -> None:
    """pp·v chunks at most L (and dividing it when uneven stages are off), or explicit
    ``stage_layers`` summing to L that the framework runs (:mod:`model.split`)."""
    arch = s.model.arch
    if arch is None:
        return
    rule = split_rule_of(uneven, framework, pp)
    if sizes is not None:
        check_stage_layers(arch.num_layers, pp, v, sizes)
        check_framework_split(arch.num_layers, pp, v, rule, sizes)
        return
    check_chunks(arch.num_layers, pp, v, rule)
    chunks = pp * v
    if arch.num_layers % chunks and not uneven:
        raise LayoutError(
            f"pp: {pp:,} × virtual_stages {v:,} = {chunks:,} does not divide num_layers = "
            f"{arch.num_layers:,} (allow uneven stages or choose a divisor)"
        )


def _recompute_layers(
    s: Setting,
    counts: tuple[int, ...] | None,
    recompute: Any,
    pp: int,
    v: int,
    uneven: bool | str,
    sizes: tuple[int, ...] | None,
    schedule: Any = None,
) -> None:
    """The per-stage recomputation counts' rules (:func:`model.recompute_counts.check_count_sizes`)."""
    check_count_sizes(s.model.arch, counts, recompute, pp, v, uneven, sizes, schedule)


def _cp(
    s: Setting, cp: int, cp_kind: Any, cp_a2a: int | None, tp: int, sp: bool, framework: Any
) -> None:
    """cp > 1 needs s divisible by 2·cp (load-balanced causal split, every flavour); the
    flavour's own rules (:func:`model.cp_rules.check_cp_kind`); with sequence
    parallelism tp divides s/cp."""
    seq = s.training.seq_len
    if cp > 1 and seq % (2 * cp):
        raise LayoutError(f"cp: seq_len {seq:,} is not divisible by 2 × cp = {2 * cp:,}")
    check_cp_kind(cp_kind, cp, cp_a2a, tp, s.model.arch, framework)
    if sp and (seq // cp) % tp:
        raise LayoutError(
            f"tp: sequence parallelism needs seq_len / cp = {seq // cp:,} divisible by tp = {tp:,}"
        )


def _cp_framework(s: Setting, cp: int, cp_kind: Any, framework: Any, tp: int, pp: int) -> None:
    """The CP flavour runs under the framework on these layers
    (:func:`model.cp_rules.check_cp_framework`: verl's Ulysses under FSDP only;
    Transformer Engine refuses the ring and the hybrid on sliding-window layers)."""
    check_cp_framework(CpKind(cp_kind), cp, framework, s.model.arch, tp, pp)


def _optimizer(s: Setting, optimizer: Any, framework: Any, zero_stage: int) -> None:
    """The framework runs the optimizer at this ZeRO stage
    (:func:`model.optimizers.check_optimizer`); an optimizer other than Adam needs the model's
    matrices (a size alone has none)."""
    check_optimizer(optimizer, framework, zero_stage)
    if OptimizerKind(optimizer) is OptimizerKind.MUON:
        muon_tp_gathers(str(framework), s.training.muon_tp_mode)
    if s.model.arch is None and OptimizerKind(optimizer) is not OptimizerKind.ADAM:
        raise LayoutError(
            f"optimizer: {optimizer} needs the model's layers (which parameters are matrices), "
            "not a size only"
        )


RULES: tuple[Rule, ...] = (
    Rule("gpus", ("dp", "tp", "pp", "cp"), _gpus),
    Rule("global_batch_size", ("micro_batch_size", "dp"), _batch),
    Rule("framework", ("framework", "zero_stage", "pp"), _framework),
    Rule("framework_recompute", ("framework", "recompute", "pp"), _framework_recompute),
    Rule("deepspeed_layers", ("framework",), _deepspeed_layers),
    Rule("deepspeed_fp8", ("framework", "tp", "pp", "cp"), _deepspeed_fp8),
    Rule("offload", ("framework", "zero_stage", "optimizer"), _offload),
    Rule("activation_offload", ("framework", "recompute", "recompute_layers"), _activation_offload),
    Rule("layer_offload", ("framework", "pp", "recompute", "recompute_layers"), _layer_offload),
    Rule("recompute_modules", ("framework", "recompute"), _recompute_modules),
    Rule("fp8_param_gather", ("framework", "dp", "cp"), fp8_param_gather_rule),
    Rule(
        "distributed_optimizer",
        ("framework", "zero_stage", "optimizer", "ep"),
        _distributed_optimizer,
    ),
    Rule("fp8_activation_storage", ("framework",), _fp8_activation_storage),
    Rule("experts", ("etp", "tp", "dp", "cp", "ep", "framework"), _experts),
    Rule("schedule", ("pp", "m", "schedule", "virtual_stages"), _schedule),
    Rule("options", ("framework", "pp", "virtual_stages"), _options),
    Rule("split_schedule", ("pp", "m", "schedule", "virtual_stages", "framework"), _split_schedule),
    Rule("sequence_parallel", ("sequence_parallel", "tp"), _sequence_parallel),
    Rule("tp_comm_overlap", ("framework", "tp", "sp"), _tp_overlap),
    Rule("size_only", ("stage_layers", "ep"), size_only_rule),
    Rule("heads", ("tp", "ep", "etp", "framework"), heads_rule),
    Rule("moe_sequence_parallel", ("framework", "tp", "sp"), moe_sequence_parallel_rule),
    Rule("split", ("pp", "virtual_stages", "uneven_stages", "stage_layers", "framework"), _split),
    Rule(
        "recompute_layers",
        ("recompute_layers", "recompute", "pp", "virtual_stages", "split_rule", "stage_layers")
        + ("schedule",),
        _recompute_layers,
    ),
    Rule("deepspeed_pipe", ("framework", "pp", "recompute_layers"), check_deepspeed_pipe_recompute),
    Rule(
        "recompute_counts", ("framework", "recompute", "recompute_layers"), check_recompute_counts
    ),
    Rule("context_parallel", ("cp", "cp_kind", "cp_a2a", "tp", "sp", "framework"), _cp),
    Rule("cp_framework", ("cp", "cp_kind", "framework", "tp", "pp"), _cp_framework),
    Rule("optimizer", ("optimizer", "framework", "zero_stage"), _optimizer),
    Rule("moe_framework", ("framework", "recompute"), moe_framework_rule),
    Rule("moe_schedule", ("framework", "schedule"), moe_schedule_rule),
    Rule("split_recompute", ("framework", "recompute", "schedule", "pp"), split_recompute_rule),
    Rule("mtp_recompute", MTP_RECOMPUTE_SCOPE, mtp_recompute_rule),
    Rule("moe_layout", ("ep", "pp", "virtual_stages", "tp", "etp", "framework"), moe_layout_rule),
    Rule("moe_capacity", MOE_CAPACITY_SCOPE, moe_capacity_rule),
    Rule("hybridep_tokens", HYBRIDEP_TOKENS_SCOPE, hybridep_tokens_rule),
    Rule("flex_domains", FLEX_DOMAINS_SCOPE, flex_domains_rule),
)
"""Every rule, in the order :func:`model.layout.validate` checks them."""


def check_rules(setting: Setting, values: Callable[[str], Any]) -> None:
    """Check every rule on one layout's field ``values`` (a name → value function); raise the
    first broken one.

    Raises
    ------
    LayoutError
        Naming the constraint and the numbers.
    """
    for rule in RULES:
        rule.check(setting, *(values(name) for name in rule.scope))


@lru_cache(maxsize=65536, typed=True)
def _reason(check: Callable[..., None], setting: Setting, *values: Any) -> str:
    """The rule's refusal of these values, or "" (one distinct value of its scope)."""
    try:
        check(setting, *values)
    except LayoutError as err:
        return str(err)
    return ""


def legality(setting: Setting, f: Any, rules: tuple[Rule, ...] = RULES) -> tuple[Any, Any]:
    """(legal, reason) of the layout(s) ``f`` (:class:`model.terms.fields.Fields`): whether
    every rule of ``rules`` (all of them unless told) holds, and the first broken rule's
    message ("" where legal). Scalars for one layout; ``[n, 1]`` columns for many, each rule
    evaluated once per distinct value of its scope.

    Examples
    --------
    >>> from trainplan.model.layout import Layout
    >>> from trainplan.model.model_spec import ModelSpec
    >>> from trainplan.model.terms.fields import LayoutFields
    >>> s = Setting(ModelSpec(name="m", num_params_declared=10**9), TrainingSpec(seq_len=8,
    ...     global_batch_size=6))
    >>> legality(s, LayoutFields(Layout(dp=4), 6))
    (False, 'global_batch_size: 6 is not divisible by micro_batch_size 1 × dp 4 = 4')
    """
    reason: Any = ""
    for rule in rules:
        found = f.lookup(_reason, (rule.check, setting), *rule.scope)
        reason = where(reason == "", found, reason)
    return reason == "", reason


def refusal(setting: Setting, **values: Any) -> str:
    """The first broken rule among those whose whole scope is in ``values`` (field name →
    value), or "": the rules that decide a partial choice (which frameworks run a ZeRO stage
    with a pipeline, which CP flavours a shape takes) without a whole layout.

    Cached for the search's tens of thousands of questions (:func:`optimizer.space.legal_shapes`),
    on values made hashable first (:func:`model.hash_once.hashable`: a list becomes a tuple); a
    value still unhashable (a dict) is answered by the uncached rules, never by a
    ``TypeError``. ``typed`` keeps apart values given directly whose types differ (``True``,
    ``1`` and ``1.0`` each keep their own message) but not inside a tuple or list, compared
    by equality (``(True,)``, ``(1,)`` and ``[1]`` share one message).

    Examples
    --------
    >>> from trainplan.model.model_spec import ModelSpec
    >>> s = Setting(ModelSpec(name="m", num_params_declared=10**9), TrainingSpec(seq_len=8,
    ...     global_batch_size=8))
    >>> refusal(s, framework="deepspeed", zero_stage=2, pp=4).split(" (")[0]
    'zero_stage: 2 with `framework` deepspeed needs pp = 1'
    >>> import numpy as np
    >>> refusal(s, framework="deepspeed", zero_stage=np.array(2), pp=np.int64(4)).split(" (")[0]
    'zero_stage: 2 with `framework` deepspeed needs pp = 1'
    """
    frozen = {name: hashable(value) for name, value in values.items()}
    try:
        hash(tuple(frozen.values()))
    except TypeError:  # still unhashable: the rules themselves, uncached
        return first_broken(setting, frozen, cached=False)
    return _cached_refusal(setting, **frozen)


@lru_cache(maxsize=65536, typed=True)
def _cached_refusal(setting: Setting, **values: Any) -> str:
    """:func:`refusal` of hashable ``values``, cached."""
    return first_broken(setting, values)


def first_broken(setting: Setting, values: Mapping[str, Any], cached: bool = True) -> str:
    """:func:`refusal`'s body: the message of the first rule of :data:`RULES` with its scope in
    ``values`` that they break, or ""; ``cached``: through :func:`_reason`'s cache."""
    for rule in _scoped(frozenset(values)):
        args = [values[name] for name in rule.scope]
        found = (_reason if cached else _reason.__wrapped__)(rule.check, setting, *args)
        if found:
            return found
    return ""


@lru_cache(maxsize=256)
def _scoped(names: frozenset[str]) -> tuple[Rule, ...]:
    """The rules of :data:`RULES` (in their order) whose whole scope is among ``names``."""
    return tuple(rule for rule in RULES if all(name in names for name in rule.scope))
