"""A search problem: one or more *jobs* (a model and training setup on a GPU type and count),
the layout space, user constraints and an objective.

Several jobs arise from a GPU-count range (``--gpus 1024..16384``), several accelerators
(``--gpu H100-SXM,H200``), a batch range, or a model family (``--maximize params``); the search
picks one job and one layout of it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

from trainplan.model.errors import InputError
from trainplan.model.flops import step_flops
from trainplan.model.frameworks import ZERO_STAGES
from trainplan.model.key_rules import (
    FLAT_PARAMETERS_FSDP2_ONLY,
    SAC_SCALED_MM_FSDP2_ONLY,
    check_grad_stats_group,
)
from trainplan.model.layout import Recompute
from trainplan.model.params import count_params
from trainplan.model.step_setting_rules import check_megatron_step_settings
from trainplan.model.units import parse_counts, shown_number
from trainplan.optimizer.case import Case
from trainplan.optimizer.objectives import Objective
from trainplan.optimizer.space import SearchSpace

__all__ = [
    "Objective",
    "Job",
    "Constraints",
    "fit_rule",
    "Problem",
    "gpu_counts",
    "objective_factor",
    "objective_unit",
    "objective_value",
    "job_model_flops",
]


@dataclass(frozen=True, slots=True)
class Job:
    """One model on one GPU type and count, with its training setup."""

    case: Case
    num_gpus: int
    label: str
    gpu_hour_price: float | None = None
    """Dollars per GPU-hour for this accelerator (cost objective and price frontier)."""

    def __post_init__(self) -> None:
        # the case placed for this job's GPUs (its Slurm segment, model.segments): a search's
        # case is built before its GPU count is known
        object.__setattr__(self, "case", self.case.placed(self.num_gpus))

    @property
    def cents_per_hour(self) -> int:
        """The cluster's price in whole cents per hour, ``round(num_gpus × gpu_hour_price ×
        100)`` (0 without a price): the price frontier's axis, as the solver holds it."""
        return round(self.num_gpus * (self.gpu_hour_price or 0) * 100)


def fit_rule(allocator_retries_ok: bool) -> str:
    """The search's memory rule in one line (the answers' assumptions and the infeasible
    message): which bytes must fit the capacity (:func:`model.terms.peak.fit_bytes`).

    >>> fit_rule(True)[:40]
    'search memory rule: a layout fits where '
    """
    if allocator_retries_ok:
        return (
            "search memory rule: a layout fits where its allocated peak with the communicators "
            "does; reserved bytes beyond the capacity accepted (allocator_retries_ok: the caching "
            "allocator then frees its cached blocks and retries at least once a step, a time the "
            "step does not charge)"
        )
    return (
        "search memory rule: a layout fits only where its reserved bytes with the communicators "
        "(allocated peak + the side streams' idle pools) fit the capacity too, since the caching "
        "allocator's release-and-retry time is not charged (--allocator-retries-ok, "
        "allocator_retries_ok = true, accepts them)"
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Constraints:
    """User constraints beyond legality and memory."""

    headroom: float = 0.0
    """Fraction of GPU memory kept free: capacity × (1 − headroom)."""
    min_mfu: float | None = None
    """Only layouts at or above this MFU."""
    tp_in_nvlink: bool = False
    """tp·cp (the tensor and context groups) within one NVLink domain."""
    allocator_retries_ok: bool = False
    """Accept a layout whose allocated peak fits while its reserved bytes with the communicators
    (:attr:`model.terms.peak.StageMemory.reserved_total_bytes`) do not: PyTorch's caching
    allocator then frees its cached blocks and retries at least once a step
    (:func:`model.terms.peak.reserved_over_capacity`), a cost with no per-operation source that
    the step time does not charge. False (the default): such a layout is infeasible. Refused
    (:class:`Problem`) where no framework searched is fsdp2 or deepspeed, the only ones whose
    reserved bytes exceed the allocated peak (FSDP2's all-gather stream, DeepSpeed ZeRO-3's
    reduce-scatter stream: :func:`model.terms.peak.stream_pool_term`)."""

    def held_bytes(self, usable_bytes: int) -> int:
        """Bytes a layout may use of a GPU's ``usable_bytes`` (its capacity as its framework
        counts it, :meth:`model.hardware.DeviceSpec.usable_bytes`) with :attr:`headroom` kept
        free: ``int(usable_bytes × (1 − headroom))``, what the search fits each candidate in.

        >>> Constraints(headroom=0.1).held_bytes(83_210_009_600)
        74889008640
        """
        return int(usable_bytes * (1 - self.headroom))

    def __post_init__(self) -> None:
        if not 0 <= self.headroom < 1:
            raise InputError(
                f"headroom: {shown_number(self.headroom)} must be at least 0 and below 1 (100%)"
            )
        if self.min_mfu is not None and not 0 < self.min_mfu <= 1:
            raise InputError(
                f"min_mfu: {shown_number(self.min_mfu)} must be in (0, 1] (a fraction: 0.4 is "
                "an MFU of 40%)"
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class Problem:
    jobs: tuple[Job, ...]
    space: SearchSpace
    """Allowed values per decision (its ``num_gpus`` is ignored: each job has its own)."""
    constraints: Constraints = field(default_factory=Constraints)
    objective: Objective = Objective.STEP_TIME
    tokens: int | None = None
    """Token budget for time-to-train and cost."""

    def __post_init__(self) -> None:
        if not self.jobs:
            raise InputError("search: no job (GPU count × accelerator) to search")
        if self.constraints.allocator_retries_ok and all(
            str(fw) not in ("fsdp2", "deepspeed") for fw in self.space.frameworks
        ):
            raise InputError(
                "allocator_retries_ok: true changes nothing without fsdp2 or deepspeed among the "
                "frameworks searched (only FSDP2's all-gather stream and DeepSpeed ZeRO-3's "
                "reduce-scatter stream reserve bytes beyond the allocated peak)"
            )
        if not all(j.case.training.sac_saves_scaled_mm for j in self.jobs) and all(
            str(fw) != "fsdp2" for fw in self.space.frameworks
        ):
            raise InputError(f"{SAC_SCALED_MM_FSDP2_ONLY}, and no framework searched is fsdp2")
        if any(j.case.training.flat_parameters for j in self.jobs) and all(
            str(fw) != "fsdp2" for fw in self.space.frameworks
        ):
            raise InputError(f"{FLAT_PARAMETERS_FSDP2_ONLY}, and no framework searched is fsdp2")
        self._check_grad_stats_group()
        unpriced = sorted({j.case.device.name for j in self.jobs if j.gpu_hour_price is None})
        if self.objective is Objective.COST and unpriced:
            raise InputError(
                f"objective: 'cost' needs --gpu-hour-price for every accelerator; none given for "
                f"{', '.join(unpriced)} (e.g. --gpu-hour-price {unpriced[0]}=2.5)"
            )
        if self.objective in (Objective.TIME_TO_TRAIN, Objective.COST) and self.tokens is None:
            raise InputError(
                f"objective {self.objective}: give the token budget, e.g. --tokens 15e12"
            )

    def _check_grad_stats_group(self) -> None:
        """``grad_stats_group`` ``world`` where no framework and ZeRO stage searched reads it
        (:func:`model.key_rules.check_grad_stats_group`), ``grad_clip_scaling`` or ``loss_scaling``
        where no framework searched is megatron or the optimizer is Apex's
        (:func:`model.step_setting_rules.check_megatron_step_settings`); where some do, the others stay
        candidates (the key describes the code the run uses; a layout that does not read it
        is not changed by it)."""
        sp = self.space
        searched = [(fw, z) for fw in sp.frameworks for z in sp.zero_stages if z in ZERO_STAGES[fw]]
        what = "the frameworks searched (" + ", ".join(f"{fw} zero_stage {z}" for fw, z in searched)
        for group in sorted({j.case.options.grad_stats_group for j in self.jobs}):
            check_grad_stats_group(group, searched, what + ")")
        frameworks = ", ".join(str(fw) for fw in sp.frameworks)
        for job in self.jobs:
            check_megatron_step_settings(
                job.case.options,
                sp.frameworks,
                f"the frameworks searched ({frameworks})",
                job.case.training.distributed_optimizer,
            )

    def check_frontier_axis(self, against: str) -> None:
        """A frontier's second axis must be one the problem can measure: ``memory``, ``gpus``,
        or ``price`` with a $ per GPU-hour for every accelerator (as the cost objective needs).

        Raises
        ------
        InputError
            The axis unknown, price without every accelerator's price, or the ``params``
            objective (bad input: exit 2, not the infeasible exit 1).
        """
        if against not in ("memory", "gpus", "price"):
            raise InputError(f"against: {against!r} is not one of memory, gpus, price")
        if self.objective is Objective.PARAMS:
            raise InputError(
                "objective: 'params' is search's alone (the largest model of a family that fits); "
                "a frontier trades one model's step time against memory, GPUs or price"
            )
        missing = sorted({j.case.device.name for j in self.jobs if j.gpu_hour_price is None})
        if against == "price" and missing:
            raise InputError(
                f"against: 'price' needs --gpu-hour-price for every accelerator; none given for "
                f"{', '.join(missing)} (e.g. --gpu-hour-price {missing[0]}=2.5)"
            )


def gpu_counts(text: object, name: str = "gpus") -> list[int]:
    """GPU counts from ``16384`` (``16,384``), a range ``1024..16384`` (the powers of two and three
    times powers of two inside it — the sizes clusters come in) or a list of them (a list or
    tuple, or ``2048;4096``; the grammar of :func:`model.units.parse_counts`). ``name``: the
    parameter the sizes are (its limit and its name in errors; e.g. ``global_batch``).

    Examples
    --------
    >>> gpu_counts("64..512")
    [64, 96, 128, 192, 256, 384, 512]
    >>> gpu_counts(["2048", "4096"]), gpu_counts("16,384")
    ([2048, 4096], [16384])
    """
    return parse_counts(text, name, ranges=True)


def objective_unit(problem: Problem, divisor: int = 1) -> str:
    """The unit of the solver's objective value (after dividing by ``divisor``)."""
    base = {
        Objective.STEP_TIME: "ns per step",
        Objective.PARAMS: "ns per step",
        Objective.TOKENS_PER_GPU: "GPU·ns per 1000 tokens (lower is more tokens/s per GPU)",
        Objective.TIME_TO_TRAIN: "ns to train the token budget",
        Objective.COST: "nano-dollars to train the token budget",
    }[problem.objective]
    return base if divisor == 1 else f"{base} ÷ {divisor:,}"


def objective_value(objective: Objective, value: int, divisor: int = 1) -> tuple[str, float]:
    """The solver's objective ``value`` (in :func:`objective_unit`'s units ÷ ``divisor``) in base
    units, with the JSON key that names its unit (docs/reference/json.md: times in seconds):

    * ``objective_s``: seconds — per step (step-time; params, whose first objective is the size)
      or to train the token budget (time-to-train);
    * ``objective_usd``: dollars to train the token budget (cost);
    * ``objective_gpu_s_per_token``: GPU-seconds per token (tokens-per-gpu; its inverse is tokens
      per second per GPU).

    Resolution: ``divisor`` ns (or nano-dollars), as the solver's integers hold it.

    Examples
    --------
    >>> key, seconds = objective_value(Objective.TIME_TO_TRAIN, 19_711_837_881, 100_000)
    >>> key, round(seconds / 86400, 1)  # 1,971,183.8 s = 22.8 days
    ('objective_s', 22.8)
    """
    base = value * divisor * 1e-9  # ns → s, nano-dollars → $
    if objective is Objective.TOKENS_PER_GPU:
        return "objective_gpu_s_per_token", base / 1000  # the solver counts per 1000 tokens
    if objective is Objective.COST:
        return "objective_usd", base
    return "objective_s", base


def objective_factor(problem: Problem, job: Job) -> Fraction:
    """Multiplier turning one step's nanoseconds into the objective's unit for ``job``.

    step-time: 1 (ns); tokens-per-gpu: G/(B·s)·1000 (GPU·ns per thousand tokens);
    time-to-train: tokens/(B·s) (ns); cost: tokens/(B·s)·G·price/3600 (nano-dollars per ns → $·1e-9).
    """
    t = job.case.training
    per_step = t.global_batch_size * t.seq_len
    if problem.objective in (Objective.STEP_TIME, Objective.PARAMS):
        return Fraction(1)
    if problem.objective is Objective.TOKENS_PER_GPU:
        return Fraction(job.num_gpus * 1000, per_step)
    assert problem.tokens is not None
    steps = Fraction(problem.tokens, per_step)
    if problem.objective is Objective.TIME_TO_TRAIN:
        return steps
    assert job.gpu_hour_price is not None
    return steps * job.num_gpus * Fraction(repr(job.gpu_hour_price)) / 3600


def model_size(job: Job) -> int:
    """Parameters of a job's model: the declared size, else its dimensions' count (the
    ``params`` objective maximises it)."""
    model = job.case.model
    if model.num_params_declared is not None:
        return model.num_params_declared
    assert model.arch is not None
    return count_params(model.arch).total


def job_model_flops(job: Job, rs: tuple[Recompute, ...]) -> list[float]:
    """Model FLOPs per step of ``job`` under each recompute mode of ``rs``
    (:func:`model.flops.step_flops`' ``model_flops``, the job's MFU convention), as float: the
    same for every shape of the job."""
    arch = job.case.model.arch
    assert arch is not None
    n_active = job.case.model.num_params_declared or count_params(arch).active
    t, options = job.case.training, job.case.options
    return [
        float(
            step_flops(
                arch, n_active, t.seq_len, t.global_batch_size, mode,
                options.mfu_convention, options.causal_attention_flops,
            ).model_flops
        )
        for mode in rs
    ]  # fmt: skip
