"""Which of a user's choice settings are the searched profiles' own defaults: a setting equal to
what every searched profile runs without it is not a choice, so it neither triggers the search
without the settings nor is named as costing (:mod:`interface.setting_cost`).

A job's case holds None for several settings whose default is each profile's own, so "the same
case" alone would call ``tp_comm_overlap = async`` under Megatron-Core a choice, though Megatron-Core
runs it by default. The comparison here reads each such field through the model's one resolver
of that default, per searched profile (no second copy of a default):

* ``tp_comm_overlap`` — :func:`model.tp_overlap.tp_overlap_for` (``async`` under ``megatron``
  and ``deepspeed``; ``none`` under ``fsdp2`` with torchtitan's plan);
* ``tp_block_inputs`` — :func:`model.memory.keeps_gathered_inputs`
  (:attr:`model.frameworks.Framework.gathers_block_inputs`);
* ``gradient_dtype`` — :func:`model.frameworks.gradient_bytes_for` (FP32 under ``megatron`` and
  ``fsdp2``, the parameter dtype under ``deepspeed``);
* ``compile`` — :func:`model.elementwise.elementwise_mode` (torchtitan's default off);
* ``fp8_recipe`` — :func:`model.precision.fp8_recipe_of` (``delayed`` under Transformer Engine,
  ``tensorwise`` under torchao);
* ``muon_tp_mode`` — :func:`model.muon.muon_tp_gathers` (``duplicated`` under Megatron-Core).

Every other choice key's default is a plain value of the case (``moe_ep_overlap = none``, …),
which the case comparison already sees.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from trainplan.model.elementwise import elementwise_mode
from trainplan.model.frameworks import Framework, gradient_bytes_for
from trainplan.model.memory import keeps_gathered_inputs
from trainplan.model.muon import muon_tp_gathers
from trainplan.model.precision import fp8_recipe_of
from trainplan.model.tp_overlap import tp_overlap_for
from trainplan.optimizer.problem import Job, Problem

__all__ = ["same_runs"]


def _run_of(job: Job, frameworks: Sequence[Framework]) -> tuple[Any, ...]:
    """What ``job`` runs under each of ``frameworks``: its case with the profile-default fields
    (module docstring) resolved per profile, and those fields set to None in the case."""
    case = job.case
    t, o = case.training, case.options
    resolved = tuple(
        (
            tp_overlap_for(fw, o.tp_comm_overlap, keeps_gathered_inputs(fw, t)),
            keeps_gathered_inputs(fw, t),
            gradient_bytes_for(fw, t.gradient_bytes),
            elementwise_mode(fw, t.compile),
            fp8_recipe_of(fw, t.fp8_recipe),
            muon_tp_gathers(fw, t.muon_tp_mode) if fw is Framework.MEGATRON else t.muon_tp_mode,
        )
        for fw in frameworks
    )
    plain = replace(
        t,
        gathered_block_inputs=None,
        gradient_bytes=None,
        compile=None,
        fp8_recipe=None,
        muon_tp_mode=None,
    )
    options = replace(o, tp_comm_overlap=None)
    return (job.num_gpus, case.model, plain, options, case.vocab_multiple, case.fabric, resolved)


def same_runs(a: Problem, b: Problem) -> bool:
    """Whether two problems' jobs run the same under every searched profile (a setting at the
    profiles' default changes none; ``a``'s space names the profiles).

    >>> from trainplan.interface.requests import search_request
    >>> from trainplan.interface.scenario import problem_of
    >>> job = {"model": "llama3-8b", "gpus": "8"}
    >>> same = lambda x, y: same_runs(problem_of(search_request(x)), problem_of(search_request(y)))
    >>> same(job, {**job, "set": {"tp_comm_overlap": "async"}})  # Megatron-Core's default
    True
    >>> same(job, {**job, "set": {"tp_comm_overlap": "none"}})
    False
    >>> fsdp2 = {**job, "framework": "fsdp2"}
    >>> same(fsdp2, {**fsdp2, "set": {"tp_comm_overlap": "none"}})  # torchtitan's default
    True
    """
    frameworks = a.space.frameworks
    return len(a.jobs) == len(b.jobs) and all(
        _run_of(x, frameworks) == _run_of(y, frameworks)
        for x, y in zip(a.jobs, b.jobs, strict=True)
    )
