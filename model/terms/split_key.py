"""The split structure: what the per-stage parameter split of a layout reads, as one key.

* :data:`SPLIT_FIELDS` — the layout's fields it reads (by name, for
  :meth:`model.terms.fields.Fields.per_stage`);
* :class:`SplitKey` — those fields resolved (the framework read as its physical flag and its
  vocabulary padding multiple), with the model: the key every per-stage structure function
  (:mod:`model.terms.stage_params`, :mod:`model.terms.tensors`, :mod:`model.terms.state`) is
  cached on;
* :func:`on_split`, :func:`read_split` — a structure function of a layout's key, and its entry
  at the stage ``f.stage``.

Sources: :mod:`model.split` (which layers a stage holds), :mod:`model.params` (the per-layer
counts and the vocabulary padding), :mod:`model.vocab` (the framework's padding multiple).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from trainplan.model.frameworks import Framework
from trainplan.model.model_spec import ModelSpec
from trainplan.model.params import padded_vocab
from trainplan.model.split import output_rank, stage_layers
from trainplan.model.terms.fields import Context, Fields
from trainplan.model.vocab import vocab_multiple_for

__all__ = ["SPLIT_FIELDS", "CACHE", "SplitKey", "on_split", "read_split"]

SPLIT_FIELDS = (
    "tp",
    "pp",
    "virtual_stages",
    "ep",
    "split_rule",
    "expert_tp",
    "framework",
    "stage_layers",
    "schedule",
)
"""What the per-stage parameter split reads of a layout (physical profiles keep norms and
routers whole on every tp rank; the framework also pads the vocabulary; the schedule places the
model chunks, :func:`model.split.chunk_ranks`)."""

CACHE = 4096
"""Entries each structure cache keeps (a long-lived server sees many models and layouts)."""


@dataclass(frozen=True, slots=True)
class SplitKey:
    """The split structure of one layout: the model and the layout's :data:`SPLIT_FIELDS`, the
    framework resolved. Hashable (the structure functions' ``lru_cache`` key); built from a
    layout's fields by :meth:`of`.

    Examples
    --------
    >>> from trainplan.scenarios.catalogue import get_model
    >>> key = SplitKey.of(get_model("llama3-8b").model, None, 2, 4, 1, 1, False, 1, "megatron",
    ...                   None, None)
    >>> key.tp, key.pp, key.physical, key.vocab_multiple
    (2, 4, True, 128)
    """

    model: ModelSpec
    """The model whose parameters are split (:class:`model.model_spec.ModelSpec`; a size-only
    model, ``arch`` None, is split evenly)."""
    tp: int
    """Tensor-parallel degree (ranks, ≥ 1): dense weights ÷ tp (:mod:`model.params`)."""
    pp: int
    """Pipeline-parallel degree (ranks, ≥ 1): the number of stages."""
    v: int
    """Virtual stages (model chunks) per pipeline rank (≥ 1; the layout's ``virtual_stages``)."""
    ep: int
    """Expert-parallel degree (ranks, ≥ 1): routed experts ÷ etp·ep."""
    uneven: bool | str
    """How the layers split over the stages (the layout's ``split_rule``,
    :func:`model.split.split_rule_of`, read by :func:`model.split.stage_layers`)."""
    etp: int
    """Expert tensor-parallel degree (ranks, ≥ 1; the layout's ``expert_tp``)."""
    physical: bool
    """Whether the framework keeps norms and routers whole on every tp rank
    (:attr:`model.frameworks.Framework.physical`; :attr:`model.params.LayerParams.tp_replicated`)."""
    sizes: tuple[int, ...] | None
    """Layers per stage declared by the layout (its ``stage_layers``), None for the framework's
    split (:func:`model.split.stage_layers`)."""
    vocab_multiple: int
    """The vocabulary padding multiple (rows; :func:`model.vocab.vocab_multiple_for`: the
    training's ``vocab_multiple`` where given, else the framework's)."""
    schedule: Any = None
    """The pipeline schedule (:class:`model.pipeline.Schedule` or its value; None for the
    default): where the model chunks sit (:func:`model.split.chunk_ranks`)."""

    @classmethod
    def of(
        cls,
        model: ModelSpec,
        given: int | None,
        tp: int,
        pp: int,
        v: int,
        ep: int,
        uneven: bool | str,
        etp: int,
        framework: Any,
        sizes: tuple[int, ...] | None,
        schedule: Any = None,
    ) -> SplitKey:
        """The key of a layout's :data:`SPLIT_FIELDS` values (in that order) for ``model``:
        ``framework`` (a :class:`model.frameworks.Framework` or its value) read as its physical
        flag and, with ``given`` (the training's ``vocab_multiple``, None for the framework's),
        its vocabulary padding multiple. Raises ValueError for an unknown framework."""
        multiple = vocab_multiple_for(Framework(framework), given)
        physical = Framework(framework).physical
        return cls(model, tp, pp, v, ep, uneven, etp, physical, sizes, multiple, schedule)

    def layers(self) -> tuple[tuple[int, ...], ...]:
        """The layer indices each pipeline rank holds (:func:`model.split.stage_layers`).
        Raises AttributeError for a size-only model (no ``arch``)."""
        return stage_layers(
            self.model.arch, self.pp, self.v, self.uneven, self.sizes, self.schedule
        )  # type: ignore[arg-type]

    def vocab(self) -> int:
        """The padded vocabulary (rows over all tp ranks; :func:`model.params.padded_vocab` of
        :attr:`vocab_multiple`). Raises AttributeError for a size-only model."""
        return padded_vocab(self.model.arch.vocab_size, self.vocab_multiple, self.tp)  # type: ignore[union-attr]

    def output_rank(self) -> int:
        """The pipeline rank holding the output layer (:func:`model.split.output_rank`)."""
        return output_rank(self.pp, self.v, self.schedule)

    def dense_per_gpu(self, dense: int, replicated: int) -> Fraction:
        """Dense parameters (elements) on one tensor-parallel rank: ÷ tp, except (physical
        profiles) ``replicated``, what every rank holds whole
        (:attr:`model.params.LayerParams.tp_replicated`)."""
        if not self.physical:
            return Fraction(dense, self.tp)
        return Fraction(dense - replicated + replicated * self.tp, self.tp)  # (d − r)/tp + r

    def experts_per_gpu(self, experts: int) -> Fraction:
        """Routed-expert parameters (elements) on one GPU: ÷ etp·ep."""
        return Fraction(experts, self.etp * self.ep)

    @classmethod
    def of_layout(cls, model: ModelSpec, layout: Any, given: int | None = None) -> SplitKey:
        """The key of one layout (:class:`model.layout.Layout`; ``given`` as in :meth:`of`)."""
        return cls.of(model, given, *(getattr(layout, n) for n in SPLIT_FIELDS))


def on_split(
    fn: Callable[[SplitKey], Any], model: ModelSpec, given: int | None, *fields: Any
) -> Any:
    """``fn`` (a structure function of a :class:`SplitKey`) of the key of the
    :data:`SPLIT_FIELDS` values ``fields``: what :meth:`Fields.per_stage` evaluates once per
    distinct split structure."""
    return fn(SplitKey.of(model, given, *fields))


def read_split(c: Context, f: Fields, fn: Callable[[SplitKey], Any]) -> Any:
    """``fn``'s per-stage answer of the layout's split structure at the stage ``f.stage``
    (``[n, P]`` columns for many layouts)."""
    return f.per_stage(on_split, (fn, c.model, c.vocab_multiple), *SPLIT_FIELDS)
