"""The cost model's named terms, each written once over a layout's fields.

A term is a function ``term(c, f)`` of a :class:`~model.terms.fields.Context` (model, recipe,
accelerator, options) and a :class:`~model.terms.fields.Fields` (a layout's fields: exact
scalars for ``evaluate()``, numpy columns for the search's tables). :data:`TERMS` lists the
terms the search tabulates, each with

* its **scope** — the layout fields it reads (a property test changes every other field and
  checks the term does not move: ``tests/model/test_term_scopes.py``); the tables evaluate a
  term once per distinct value of its scope, so ``state`` is tabulated per (shape, ZeRO stage)
  and ``activations`` per (shape, recompute mode);
* its **control** fields — those its body branches on (a framework's mechanism, a recompute
  mode's forms, the pipeline degree that sizes the stage axis): the tables hand it one value of
  each at a time;
* whether it answers **per stage** (bytes of each pipeline stage) or per layout;
* its **unit** and the **rounding** the tables apply: bytes rounded up, times to the nearest
  nanosecond.

``evaluate()`` (:mod:`model.estimate`) sums the same terms on one layout. A new mechanism is
one edit here — a term, or a change inside one — and ``evaluate()``, the layout search, the
per-stage search and the frontier all see it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from trainplan.model.layout import LAYOUT_FIELDS
from trainplan.model.terms.activations import stage_activations_term
from trainplan.model.terms.comm_memory import comm_memory_term
from trainplan.model.terms.deepspeed_turn import walks_recompute
from trainplan.model.terms.fields import Context, Fields
from trainplan.model.terms.peak import stream_pool_term
from trainplan.model.terms.persistent_buffers import persistent_buffers_term
from trainplan.model.terms.state import model_state_term
from trainplan.model.terms.step import dp_term, pipeline_term
from trainplan.model.terms.userbuffers import userbuffers_term

__all__ = ["Term", "TERMS", "term"]


@dataclass(frozen=True, slots=True)
class Term:
    """One named term of the cost model (see the module docstring)."""

    name: str
    fn: Callable[[Context, Fields], Any]
    scope: frozenset[str]
    """The :class:`model.layout.Layout` fields the term reads."""
    control: tuple[str, ...]
    """Of them, the fields the term's body branches on: one value at a time."""
    per_stage: bool
    """Bytes of each pipeline stage (True) or one figure per layout."""
    unit: str
    """``bytes`` or ``seconds``."""
    rounding: str
    """``ceil`` (bytes: a table holds each stage's bytes rounded up) or ``ns`` (seconds: whole
    nanoseconds, to nearest)."""
    reads_recompute: Callable[[Mapping[str, Any]], bool] | None = None
    """For a term whose scope holds both the ZeRO stage and the recompute mode: whether its body
    reads the recompute mode at a group's control values (a mapping of field → scalar); where it
    does not, the tables copy the first mode's figures (:func:`optimizer.columns.tabulate`).
    None: every group reads it."""

    def __post_init__(self) -> None:
        unknown = (self.scope | set(self.control)) - set(LAYOUT_FIELDS)
        if unknown:
            raise ValueError(f"term {self.name}: {sorted(unknown)} are not layout fields")
        if not set(self.control) <= self.scope:
            raise ValueError(f"term {self.name}: control fields outside its scope")


_SPLIT = {"tp", "pp", "virtual_stages", "ep", "etp", "uneven_stages", "framework", "stage_layers"}
_SHAPE = {*_SPLIT, "dp", "cp", "cp_kind", "cp_a2a", "micro_batch_size", "sequence_parallel"}
_WALK = {"recompute", "recompute_layers"}
"""What DeepSpeed ZeRO-3's coordinator walk reads of a layout beyond its shape: the recomputed
forward in the backward (:func:`model.terms.traffic.deepspeed_walk`), so its gathered weights
(``state``) and gather launches (``dp_time``) are per ZeRO stage and recompute mode; the other
mechanisms do not read them (:func:`_walks`)."""


def _walks(scalars: Mapping[str, Any]) -> bool:
    """Whether a layout of these control values reads :data:`_WALK`: DeepSpeed ZeRO-3 (the
    ``if`` of :func:`model.terms.deepspeed_turn.zero3_turn_gathered` and
    :func:`model.terms.dp_time.dp_group_seconds`)."""
    return walks_recompute(scalars["framework"], scalars["zero_stage"])


TERMS: tuple[Term, ...] = (
    Term(
        "state",
        model_state_term,
        frozenset(
            {*_SPLIT, "dp", "cp", "zero_stage", "micro_batch_size", "optimizer", "schedule"} | _WALK
        ),
        ("pp", "framework", "zero_stage", "optimizer", "schedule", "cp", "recompute"),
        # cp: Ulysses' dtype; recompute: DeepSpeed ZeRO-3's gathered weights (_WALK)
        True,
        "bytes",
        "ceil",
        _walks,
    ),
    Term(
        "activations",
        stage_activations_term,
        frozenset(
            {*_SHAPE, "recompute", "recompute_layers", "schedule", "deallocate_pipeline_outputs"}
            | {"rank_order"}  # activation offload's copy backlog reads the micro-batch's time
        ),
        ("pp", "recompute", "virtual_stages", "schedule", "framework"),
        True,
        "bytes",
        "ceil",
    ),
    Term(
        "comm_memory",
        comm_memory_term,
        frozenset(
            {"tp", "dp", "cp", "cp_kind", "cp_a2a", "ep", "etp", "pp", "schedule", "virtual_stages"}
            | {"framework", "rank_order", "zero_stage"}
        ),
        ("pp", "framework", "zero_stage"),
        True,
        "bytes",
        "ceil",
    ),
    Term(
        "userbuffers",
        userbuffers_term,
        frozenset({"tp", "cp", "micro_batch_size", "sequence_parallel", "pp", "framework"}),
        ("pp", "framework"),
        True,
        "bytes",
        "ceil",
    ),
    Term(
        "persistent_buffers",
        persistent_buffers_term,
        frozenset(
            {"tp", "cp", "micro_batch_size", "sequence_parallel", "pp", "schedule", "framework"}
            | {"virtual_stages", "uneven_stages", "stage_layers"}  # which stages hold layers
            | {"etp"}  # the experts' weight shapes (model.terms.dummy_wgrads)
            | {"dp"}  # m: DeepSpeed's first stage keeps a causal mask per filled input buffer
        ),
        ("pp", "framework"),
        True,
        "bytes",
        "ceil",
    ),
    Term(
        "stream_pool",
        stream_pool_term,
        frozenset({*_SPLIT, "dp", "cp", "zero_stage", "micro_batch_size", "optimizer", "schedule"}),
        ("pp", "framework", "zero_stage"),
        True,
        "bytes",
        "ceil",
    ),
    Term(
        "pipeline_time",
        pipeline_term,
        frozenset(
            {
                *_SHAPE,
                "recompute",
                "recompute_layers",
                "rank_order",
                "pipeline_scatter_gather",
                "schedule",
            }
        ),
        ("pp", "framework", "recompute", "schedule"),
        False,
        "seconds",
        "ns",
    ),
    Term(
        "dp_time",
        dp_term,
        frozenset({*_SHAPE, "zero_stage", "rank_order", "optimizer", "schedule"} | _WALK),
        ("pp", "framework", "zero_stage", "optimizer", "cp", "schedule", "recompute"),
        # schedule: fsdp2's re-gathers under pp (model.fsdp2_pipeline.regather_forward_share);
        # recompute: DeepSpeed ZeRO-3's gather launches (_WALK)
        False,
        "seconds",
        "ns",
        _walks,
    ),
)
"""The terms the search tabulates, in the order the tables build them."""


def term(name: str) -> Term:
    """The term named ``name``."""
    for t in TERMS:
        if t.name == name:
            return t
    raise KeyError(name)
