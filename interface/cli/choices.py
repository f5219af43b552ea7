"""Choices that say which of their values a user's word for it is: a framework, an optimizer or a
pipeline schedule as Megatron-LM, torchtitan or PyTorch name it (``--framework torchtitan``,
``--optimizer adamw``, ``--schedule Interleaved1F1B``), refused in one line naming the parameter,
the value, the values taken and the one to write — where click would list the values alone. The
command line and the web API (which parses a query by the same options) share them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import click

from trainplan.interface.launch_torchtitan import TORCHTITAN_SCHEDULES

__all__ = ["FRAMEWORK_WORDS", "OBJECTIVE_WORDS", "OPTIMIZER_WORDS", "SCHEDULE_WORDS", "NamedChoice"]

_MEGATRON = ("megatron", "Megatron-LM and Megatron-Core are megatron")
_FSDP2 = (
    "fsdp2",
    "PyTorch's fully_shard (FSDP2), as torchtitan runs it, is fsdp2; FSDP1's "
    "FullyShardedDataParallel has no profile",
)
FRAMEWORK_WORDS: dict[str, tuple[str, str]] = {
    "megatron-lm": _MEGATRON,
    "megatron-core": _MEGATRON,
    "mcore": _MEGATRON,
    "torchtitan": _FSDP2,
    "fsdp": _FSDP2,
    "zero": ("deepspeed", "DeepSpeed's ZeRO is deepspeed, its stage --zero"),
}
"""A user's word for a framework profile → (the profile, why)."""

OPTIMIZER_WORDS: dict[str, tuple[str, str]] = {
    "adamw": (
        "adam",
        "adam is AdamW, as Megatron-LM's adam decouples the weight decay unless told not to "
        "(megatron/core/optimizer/optimizer_config.py OptimizerConfig.decoupled_weight_decay, "
        "True at d98e8a64): the same two FP32 moments",
    ),
}
"""A user's word for an optimizer → (the optimizer, why)."""

OBJECTIVE_WORDS: dict[str, tuple[str, str]] = {
    "mfu": (
        "step-time or tokens-per-gpu",
        "with the GPU count and batch fixed the shortest step is the highest MFU, and over a "
        "range of GPU counts on one accelerator the fewest GPU-seconds per token are (a model's "
        "FLOPs per token are fixed)",
    ),
}
"""A user's word for a search objective → (the objectives to write, why)."""

SCHEDULE_WORDS: dict[str, tuple[str, str]] = {
    word: ("interleaved", "Megatron-LM's interleaved 1F1B (virtual pipeline stages) is interleaved")
    for word in ("interleaved-1f1b", "vpp")
} | {
    theirs.lower(): (ours, f"torchtitan's {theirs} is {ours}")
    for ours, theirs in TORCHTITAN_SCHEDULES.items()
    if theirs is not None and theirs.lower() != ours
}
"""A user's word for a schedule → (the schedule, why): torchtitan's names of the schedules
(:data:`interface.launch_torchtitan.TORCHTITAN_SCHEDULES`, torch.distributed.pipelining
``get_schedule_class``) that are not ours in another case (``Interleaved1F1B``,
``ZBVZeroBubble``), and Megatron-LM's interleaved schedule as users write it."""


class NamedChoice(click.Choice):
    """A :class:`click.Choice` (case-insensitive) that refuses a word of ``words`` (lower case →
    (the value to write, why)) naming the value to write.

    Raises
    ------
    click.BadParameter
        ``'adamw' is not one of 'adam', …: adam is AdamW, …; write adam``.
    """

    def __init__(self, choices: Sequence[str], words: Mapping[str, tuple[str, str]]) -> None:
        super().__init__(list(choices), case_sensitive=False)
        self.words = dict(words)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            return super().convert(value, param, ctx)
        except click.BadParameter:
            said = self.words.get(str(value).strip().lower())
            if said is None:
                raise
            ours, why = said
            taken = ", ".join(repr(c) for c in self.choices)
            self.fail(f"{value!r} is not one of {taken}: {why}; write {ours}", param, ctx)
