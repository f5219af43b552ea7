"""The rule that keeps a model's multi-token-prediction (MTP) modules to the recomputation
Megatron-Core can run them with (:func:`mtp_recompute_rule`, one of :data:`model.legality.RULES`).

Megatron-Core recomputes an MTP module apart from the decoder's layers:
``MultiTokenPredictionLayer.forward`` (``megatron/core/transformer/multi_token_prediction.py``,
Megatron-LM d98e8a64dd) calls ``_checkpointed_forward`` under ``--recompute-granularity full``
in training, and there ``--recompute-method uniform`` asserts ``recompute_num_layers == 1``
("recompute_num_layers must be 1 for MTP recompute", since 08abeedbfe, "support CP and recompute
for MTP"); ``block`` skips the MTP module's recomputation with a warning.
"""

from __future__ import annotations

from typing import Any

from trainplan.model.errors import LayoutError
from trainplan.model.recompute_counts import decoder_segment
from trainplan.model.split import stage_layers

__all__ = ["MTP_RECOMPUTE_SCOPE", "mtp_segment", "mtp_recompute_rule"]

MTP_RECOMPUTE_SCOPE = (
    "framework", "recompute", "pp", "virtual_stages", "split_rule", "stage_layers", "schedule",
)  # fmt: skip
"""The layout fields :func:`mtp_recompute_rule` reads, in its arguments' order."""


def mtp_segment(arch: Any, pp: int, v: int, uneven: bool | str, sizes: Any, schedule: Any) -> int:
    """k, the layers of one checkpointed segment under ``sqrt``: round(√n) of the rank holding
    the most decoder layers (:func:`model.recompute_counts.decoder_segment`; the MTP blocks,
    which Megatron-Core checkpoints apart, not counted) — the segment the memory terms cut
    (``model.terms.activation_fields._forms``) and, as Megatron-LM's one
    ``--recompute-num-layers``, every model chunk's and the launch line's.

    Examples
    --------
    DeepSeek-V3's 61 layers and one MTP block: pp 8 holds at most 8 layers a rank
    (round(√8) = 3); pp 32 at most 2 (round(√2) = 1).

    >>> from trainplan.scenarios.catalogue import get_model
    >>> arch = get_model("deepseek-v3").model.arch
    >>> mtp_segment(arch, 8, 1, True, None, "1f1b"), mtp_segment(arch, 32, 1, True, None, "1f1b")
    (3, 1)
    """
    return decoder_segment(stage_layers(arch, pp, v, uneven, sizes, schedule), arch.num_layers)


def mtp_recompute_rule(
    s: Any,
    framework: Any,
    recompute: Any,
    pp: int,
    v: int,
    uneven: bool | str,
    sizes: Any,
    schedule: Any,
) -> None:
    """Refuse ``recompute`` ``sqrt`` of a model with MTP modules under ``megatron`` (Megatron-LM's
    ``--recompute-method uniform --recompute-num-layers k``) where its segments hold k > 1 layers
    (:func:`mtp_segment`): the MTP module's ``_checkpointed_forward`` asserts k = 1 (module
    docstring), so the run stops at its first training step on the rank holding the MTP block.
    k = 1 (at most two layers a rank) is ``full`` and runs; other frameworks and modes are not
    read here.

    Raises
    ------
    LayoutError
        ``recompute: sqrt with `framework` megatron and 1 MTP module checkpoints 3 layers …``.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> from trainplan.scenarios.catalogue import get_model
    >>> s = SimpleNamespace(model=get_model("deepseek-v3").model)
    >>> mtp_recompute_rule(s, "megatron", "sqrt", 32, 1, True, None, "1f1b")
    >>> mtp_recompute_rule(s, "megatron", "full", 8, 1, True, None, "1f1b")
    >>> try:
    ...     mtp_recompute_rule(s, "megatron", "sqrt", 8, 1, True, None, "1f1b")
    ... except LayoutError as err:
    ...     print(str(err).split(" (")[0])
    recompute: sqrt with `framework` megatron and 1 MTP module checkpoints 3 layers a segment
    """
    arch = s.model.arch
    if arch is None or not arch.mtp_layers or str(framework) != "megatron":
        return
    if str(recompute) != "sqrt":
        return
    k = mtp_segment(arch, pp, v, uneven, sizes, schedule)
    if k > 1:
        modules = "module" if arch.mtp_layers == 1 else "modules"
        raise LayoutError(
            f"recompute: sqrt with `framework` megatron and {arch.mtp_layers} MTP {modules} "
            f"checkpoints {k} layers a segment (--recompute-method uniform "
            f"--recompute-num-layers {k}), which Megatron-Core's MTP layer refuses "
            "(multi_token_prediction.py: recompute_num_layers must be 1 for MTP recompute); "
            "use full, selective or none, or `mtp_layers` 0"
        )
