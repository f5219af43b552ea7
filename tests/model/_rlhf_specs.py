"""The RLHF spec the weight-sync, engine and placement tests share: Qwen2.5 7B trained by GRPO
with a rule reward, 16 samples per prompt, 1,024 prompt and 4,096 completion tokens (verl's
GSM8K/DAPO recipes' lengths), one place to build it so that each test file states only what it
changes."""

from __future__ import annotations

from typing import Any

from trainplan.model.rlhf.spec import RLHFSpec
from trainplan.scenarios.catalogue import get_model

QWEN = get_model("qwen2.5-7b").model
"""Qwen2.5 7B: L 28, h 3,584, a 28, g 4, d 128, V 152,064; 7,615,616,512 parameters (untied
embedding and output layer)."""


def qwen_grpo(**changes: Any) -> RLHFSpec:
    """The shared spec with ``changes`` (any :class:`model.rlhf.spec.RLHFSpec` field) over it:
    GRPO, policy Qwen2.5 7B, reward ``rule``, 4 prompts × 16 samples, 1,024 prompt and 4,096
    completion tokens, the spec's default framework unless ``framework`` is given."""
    base: dict[str, Any] = dict(
        algorithm="grpo",
        policy=QWEN,
        reward="rule",
        prompts=4,
        samples_per_prompt=16,
        prompt_tokens=1024,
        completion_tokens=4096,
    )
    return RLHFSpec(**{**base, **changes})
