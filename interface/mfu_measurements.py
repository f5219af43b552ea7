"""The MFU tab's measurement: exactly one of a step's tokens and seconds, a throughput or a
reported FLOP rate (:func:`interface.tabs.mfu_report`)."""

from __future__ import annotations

from trainplan.interface.tab_requests import MfuRequest
from trainplan.model.errors import InputError

__all__ = ["check_one_measurement"]


def _measurements_given(r: MfuRequest) -> str:
    """The measurements ``r`` gives, each backticked with its value as typed (``given:
    `step_seconds` 7, `tokens_per_second` 5``), for the refusal of none or several."""
    keys: tuple[str, ...] = ("tokens", "step_seconds", "tokens_per_second", "achieved_pflops")
    keys += ("achieved_tflops_per_gpu",)
    said = [f"`{k}` {getattr(r, k)}" for k in keys if getattr(r, k) is not None]
    return "given: " + ", ".join(said) if said else "no measurement given"


def check_one_measurement(r: MfuRequest) -> None:
    """Refuse ``r`` unless it gives exactly one measurement (a step's tokens and seconds, a
    throughput, a FLOP rate): checked first, before the peak, so that a bare ``trainplan mfu``
    names what the command needs rather than ``--gpu``.

    Raises
    ------
    InputError
        ``mfu: no measurement given; give exactly one measurement: …``.
    """
    rate_given = r.achieved_pflops is not None or r.achieved_tflops_per_gpu is not None
    given = [rate_given, r.tokens_per_second is not None]
    given.append(r.tokens is not None or r.step_seconds is not None)
    if sum(given) != 1 or (r.achieved_pflops is not None and r.achieved_tflops_per_gpu is not None):
        raise InputError(
            f"mfu: {_measurements_given(r)}; give exactly one measurement: `tokens` with "
            "`step_seconds`, `tokens_per_second` (either with `params` or `model`), "
            "`achieved_pflops` or `achieved_tflops_per_gpu`"
        )
