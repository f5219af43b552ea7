"""A search job's inputs: the model, training setup, layout, accelerator, links and cost
options that ``evaluate()`` reads, and the links each axis of a layout rides on the cluster.

:meth:`Case.of` builds a case from typed inputs and holds the planner's defaults (the model's
published training setup, the accelerator's efficiencies, the default batch rule); parsing flat
parameters (CLI options, scenario files) is the interfaces' job
(:func:`trainplan.interface.inputs.build_case`, which calls :meth:`Case.of`); the search only reads
cases.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from trainplan.model.errors import InputError, named_lookup
from trainplan.model.estimate import Estimate, evaluate
from trainplan.model.expert_groups import expert_placement_tp_of
from trainplan.model.hardware import ClusterLinks, DeviceSpec
from trainplan.model.layout import Layout, validate
from trainplan.model.model_spec import ModelSpec
from trainplan.model.op_rates import deployed_params
from trainplan.model.roofline import CALIBRATABLE
from trainplan.model.segments import placed_for
from trainplan.model.specs import TrainingSpec
from trainplan.model.timing import CostOptions, attention_efficiency_for, kernel_efficiency_for
from trainplan.scenarios.catalogue import get_model
from trainplan.topology.accelerator_file import accelerator_of
from trainplan.topology.graph import build_cluster
from trainplan.topology.placement import axis_links

__all__ = [
    "Case",
    "links_for",
    "cost_options_for",
    "default_batch",
    "training_of",
    "DEFAULT_GPU",
    "DEFAULT_SEQ_LEN",
    "MICROBATCHES_PER_STAGE",
]

DEFAULT_GPU = "H100-SXM"
"""The accelerator when none is named."""

DEFAULT_SEQ_LEN = 4096
"""s, tokens, for a model without a published training setup (a config.json, a size given)."""

MICROBATCHES_PER_STAGE = 4
"""Micro-batches per pipeline stage in the default batch of a model with layers but no published
batch: m = 4·pp keeps the 1F1B bubble (pp − 1)/(m + pp − 1) under 20% (Narayanan et al. 2021
§2.2.1: the bubble is small when m ≫ pp)."""

_TRAINING_FIELDS = frozenset(f.name for f in fields(TrainingSpec))
_COST_FIELDS = frozenset(f.name for f in fields(CostOptions)) - {"roofline"} | {"roofline_figures"}
_LAYOUT_FIELDS = frozenset(f.name for f in fields(Layout))
_CASE_FIELDS = ("num_gpus", "vocab_multiple", "fabric", "defaults_used", "notes")


@dataclass(frozen=True, slots=True, kw_only=True)
class Case:
    """Everything ``evaluate()`` needs, plus where each default came from."""

    model: ModelSpec
    training: TrainingSpec
    layout: Layout
    device: DeviceSpec
    links: ClusterLinks
    options: CostOptions
    num_gpus: int | None = None
    """The job's GPU count, checked against the layout's; None: the layout's own."""
    vocab_multiple: int | None = None
    """Pad V to a multiple of this × tp (``--pad-vocab``); None = each layout's framework's
    (:data:`model.vocab.VOCAB_MULTIPLE`)."""
    fabric: tuple[tuple[str, Any], ...] = ()
    """Cluster-graph options (rail_optimized, pod_size, oversubscription); empty = two tiers."""
    defaults_used: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    """What the reader must know about the inputs themselves (a default chosen by a rule, not
    published): printed with the evaluation's notes."""

    @classmethod
    def of(
        cls,
        model: ModelSpec | str,
        device: DeviceSpec | str = DEFAULT_GPU,
        layout: Layout | None = None,
        training: TrainingSpec | None = None,
        *,
        training_defaults: Mapping[str, int] | None = None,
        **options: Any,
    ) -> Case:
        """A case from typed inputs with the planner's defaults filled in: what ``trainplan
        evaluate`` builds (:func:`trainplan.interface.inputs.build_case` parses its options and
        calls this). ``model``: a :class:`ModelSpec`, or a catalogue name or config.json path
        (:func:`trainplan.scenarios.catalogue.get_model`, ``trainplan models``); ``device``: a
        :class:`DeviceSpec` or an accelerator's name (``trainplan gpus``; :data:`DEFAULT_GPU`),
        its links the cluster's (:meth:`ClusterLinks.from_device`); ``layout``: None is
        :meth:`Layout.of` of the ``options`` named as its fields (degrees 1 unless given, the
        framework's ZeRO stage, a schedule's own v);
        ``training``: None is :func:`training_of` of the ``options`` named as
        :class:`TrainingSpec` fields (``seq_len`` tokens and ``global_batch_size`` sequences
        defaulting to the published ones: the catalogue entry's, or ``training_defaults`` for a
        ModelSpec). Other ``options``: :class:`CostOptions` fields and the roofline's figures
        (:data:`model.roofline.CALIBRATABLE`, fractions of peak in (0, 1]), defaulted per
        accelerator by :func:`cost_options_for`; ``num_gpus``, ``vocab_multiple``, ``fabric``,
        ``defaults_used``, ``notes`` as :class:`Case` holds them. A name in two places (in
        ``training`` or ``layout`` and in ``options``) is refused.

        Raises
        ------
        PlannerError
            An unknown model or accelerator, a name in ``options`` that is none of the above, a
            recipe field given both in ``training`` and ``options``, a value a dataclass refuses.

        Examples
        --------
        >>> case = Case.of("llama3-8b", "H100-SXM", Layout(tp=2, dp=4), precision="fp8")
        >>> case.training.seq_len, case.training.global_batch_size, case.options.attention_efficiency
        (8192, 2048, 0.35)
        """
        if isinstance(model, str):
            entry = named_lookup("model", get_model, model)
            model, training_defaults = entry.model, entry.training
        device = accelerator_of(device)
        given, case_args, layout_args = _split_options(options)
        _refuse_twice(layout_args if layout is not None else {}, "layout")
        _refuse_twice(given if training is not None else {}, "training")
        layout = Layout.of(**layout_args) if layout is None else layout
        device = _placed(device, case_args.get("num_gpus"), layout)
        if training is None:
            training, notes = training_of(model, layout, training_defaults, **given)
            case_args["notes"] = (*notes, *case_args.get("notes", ()))
        return cls(
            model=model,
            training=training,
            layout=layout,
            device=device,
            links=ClusterLinks.from_device(device, layout.num_gpus),
            options=cost_options_for(device, model, training, **options),
            **case_args,
        )

    def placed(self, num_gpus: int) -> Case:
        """This case for a job of ``num_gpus`` GPUs: its device placed again
        (:func:`model.segments.placed_for`: the Slurm segment NVIDIA advises for the job's
        size) and its links with it; itself where nothing moves. A search's job reads it
        (:class:`optimizer.problem.Job`).

        Raises
        ------
        InputError
            A ``segment_gpus`` that does not divide ``num_gpus``
            (:func:`model.segments.placed_for`).
        """
        device = placed_for(self.device, num_gpus)
        if device == self.device:
            return self
        return replace(self, device=device, links=ClusterLinks.from_device(device, num_gpus))

    def evaluate(self, layout: Layout | None = None) -> Estimate:
        """Evaluate this case (or another layout of it, placed for its own GPUs:
        :meth:`placed`).

        Raises
        ------
        LayoutError
            The layout's first broken legality rule (:func:`model.layout.validate`), checked
            before the links are placed so the message is the cost model's.
        """
        if layout is not None and layout.num_gpus != (self.num_gpus or self.layout.num_gpus):
            return self.placed(layout.num_gpus).evaluate_placed(layout)
        return self.evaluate_placed(layout)

    def evaluate_placed(self, layout: Layout | None = None) -> Estimate:
        """:meth:`evaluate` on this case's own placement (its device's segment as it is)."""
        lay = layout or self.layout
        num_gpus = None if layout else self.num_gpus
        domain = self.device.placement_domain
        validate(lay, self.model, self.training, num_gpus, self.options, domain)
        return evaluate(
            self.model,
            self.training,
            lay,
            self.device,
            links_for(lay, self.links, self.fabric),
            self.options,
            None if layout else self.num_gpus,
            self.vocab_multiple,
        )


def _placed(device: DeviceSpec, num_gpus: int | None, layout: Layout) -> DeviceSpec:
    """``device`` placed for the job (:func:`model.segments.placed_for`): ``num_gpus`` where
    given (a ``segment_gpus`` that does not divide it refused), else the layout's own GPUs."""
    return placed_for(device, num_gpus or layout.num_gpus, strict=num_gpus is not None)


def _refuse_twice(fields: Mapping[str, Any], where: str) -> None:
    """Refuse ``fields`` given as options beside a ``where`` (layout or training) object.

    Raises
    ------
    InputError
        The first such field by name.
    """
    if fields:
        raise InputError(f"{sorted(fields)[0]}: given twice, in {where} and as an option")


def _split_options(
    options: dict[str, Any],
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(the :class:`TrainingSpec` fields, the :class:`Case` fields, the :class:`Layout` fields)
    of :meth:`Case.of`'s ``options``, removed from it (the cost options stay).

    Raises
    ------
    InputError
        A name that is no field of TrainingSpec, CostOptions, Layout or Case, nor a roofline
        figure.
    """
    known = _TRAINING_FIELDS | _COST_FIELDS | set(CALIBRATABLE) | set(_CASE_FIELDS)
    unknown = sorted(set(options) - known - _LAYOUT_FIELDS)
    if unknown:
        raise InputError(f"{unknown[0]}: not a field of TrainingSpec, CostOptions, Layout or Case")
    given = {k: options.pop(k) for k in _TRAINING_FIELDS & set(options)}
    case_args = {k: options.pop(k) for k in _CASE_FIELDS if k in options}
    return given, case_args, {k: options.pop(k) for k in _LAYOUT_FIELDS & set(options)}


def training_of(
    model: ModelSpec, layout: Layout, published: Mapping[str, int] | None = None, **given: Any
) -> tuple[TrainingSpec, tuple[str, ...]]:
    """(the :class:`TrainingSpec` of ``given``, its fields by name, with ``seq_len`` (tokens)
    and ``global_batch_size`` (sequences) defaulted when not given; the note of a batch chosen
    by rule, :func:`default_batch`, or none). s defaults to the model's published one
    (``published["seq_len"]``, a catalogue entry's training setup), else
    :data:`DEFAULT_SEQ_LEN`.

    Raises
    ------
    InputError
        A field :class:`TrainingSpec` refuses (its one line).
    """
    published = published or {}
    given.setdefault("seq_len", published.get("seq_len", DEFAULT_SEQ_LEN))
    if "global_batch_size" in given:
        return TrainingSpec(**given), ()
    given["global_batch_size"], note = default_batch(model, published, layout)
    return TrainingSpec(**given), () if note is None else (note,)


def default_batch(
    model: ModelSpec, published: Mapping[str, int], layout: Layout
) -> tuple[int, str | None]:
    """(B, sequences, when none is given; the note saying how it was chosen, or None): the
    model's published batch (``published["global_batch_size"]``); for a model with layers but
    none published (a config.json, dimensions given), dp·b·4·pp sequences with a note saying so
    (dp·b alone would be one micro-batch per step: DeepSeek-V3 at pp 16 ran at 1.1% MFU, almost
    all bubble); dp·b for a size-only model, whose step time is not modelled."""
    if "global_batch_size" in published:
        return published["global_batch_size"], None
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


def cost_options_for(
    device: DeviceSpec,
    model: ModelSpec,
    training: TrainingSpec,
    *,
    roofline_figures: Mapping[str, float] | None = None,
    kernel_efficiency: float | None = None,
    attention_efficiency: float | None = None,
    causal_attention_flops: bool | None = None,
    attention_kernel: str | None = None,
    overlap: Mapping[str, float] | None = None,
    **given: Any,
) -> CostOptions:
    """The :class:`CostOptions` of a case, each knob not given at its default: the single
    model's kernel efficiency by accelerator generation and hidden size
    (:func:`model.timing.kernel_efficiency_for`), the FlashAttention core's by generation
    (:func:`model.timing.attention_efficiency_for`), causal attention FLOPs halved exactly when
    FlashAttention is on (its kernels skip the masked half of the score matrix: Dao 2023,
    FlashAttention-2 §3.1; without it the full s² is computed, Megatron-LM's Eq. 3 convention),
    and the roofline's figures as deployed on the part (:func:`model.op_rates.deployed_params`)
    with ``roofline_figures`` (a calibration's and the given efficiencies, fractions of peak),
    ``attention_efficiency`` and any figure of :data:`model.roofline.CALIBRATABLE` in ``given``
    over them (the attention figure dropped without FlashAttention). Other ``given`` keys are
    :class:`CostOptions` fields (``time_model``, ``tp_comm_overlap``, ``grad_reduce_overlap``,
    ``mfu_convention``), their dataclass defaults otherwise.

    Raises
    ------
    InputError
        An unknown knob, a value :class:`CostOptions` refuses (an efficiency outside (0, 1], an
        unknown time model or overlap), or an attention kernel beside an attention efficiency.
    """
    figures = dict(roofline_figures or {})
    figures |= {k: given.pop(k) for k in CALIBRATABLE if k in given}
    if attention_efficiency is not None:
        figures["attention_efficiency"] = attention_efficiency
    if not training.flash_attention:
        figures.pop("attention_efficiency", None)
    if attention_kernel is not None and "attention_efficiency" in figures:
        raise InputError(
            f"attention_kernel: {attention_kernel} times the attention core from its published "
            "curves; give it or attention_efficiency, not both"
        )
    return CostOptions(
        kernel_efficiency=kernel_efficiency
        if kernel_efficiency is not None
        else kernel_efficiency_for(device.part, model.arch.hidden_size if model.arch else None),
        overlap=dict(overlap or {}),
        causal_attention_flops=training.flash_attention
        if causal_attention_flops is None
        else causal_attention_flops,
        attention_efficiency=attention_efficiency
        if attention_efficiency is not None
        else attention_efficiency_for(device.part),
        roofline=deployed_params(device.part, attention_kernel, **figures),
        attention_kernel=attention_kernel,
        **given,
    )


def links_for(
    layout: Layout, links: ClusterLinks, fabric: tuple[tuple[str, Any], ...] = ()
) -> dict[str, Any]:
    """Per-axis links of ``layout`` for its rank order: on a two-tier cluster (NVLink domains and a
    scale-out tier; topology.placement's span rule) or, with ``fabric`` options (``rail_optimized``,
    ``pod_size``, ``oversubscription``), the bottleneck bandwidth of each axis's first rank group in
    a networkx cluster graph (topology.graph)."""
    degrees = {"dp": layout.dp, "tp": layout.tp, "pp": layout.pp, "cp": layout.cp, "ep": layout.ep}
    degrees["etp"] = expert_placement_tp_of(layout.tp, layout.etp, layout.framework, layout.ep)
    if not fabric:
        return axis_links(degrees, links, layout.rank_order)
    graph = build_cluster(
        layout.num_gpus,
        links.nvlink_domain,
        links.nvlink_bytes_per_s,
        links.scaleout_bytes_per_s,
        **dict(fabric),
    )
    return axis_links(degrees, graph, layout.rank_order)
