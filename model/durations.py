"""Seconds written for people, one form everywhere: the CLI's tables, the page, and the sentences
the searches compose themselves (the RLHF placement's "why" line). Pure functions of a float;
no cost rule lives here.
"""

from __future__ import annotations

__all__ = ["seconds_text", "duration", "step_text"]


def seconds_text(value: float | None) -> str:
    """Seconds as a table writes them: ``28.942 s``, ``646.2 ms`` below a second, ``—`` unknown."""
    return "—" if value is None else (f"{value * 1e3:,.1f} ms" if value < 1 else f"{value:,.3f} s")


def duration(seconds: float) -> str:
    """Seconds in the unit a person reads them in: ms below a second, s below two minutes, then
    minutes, hours and days (1 day = 86,400 s; no months or years, whose lengths vary).

    Examples
    --------
    >>> duration(1971183.7881), duration(10800), duration(5400), duration(10.44064)
    ('22.8 days', '3.0 h', '90.0 min', '10.441 s')
    """
    if seconds < 120:
        return seconds_text(seconds)
    for unit, size in (("days", 86400), ("h", 3600), ("min", 60)):
        if seconds >= 2 * size or unit == "min":
            return f"{seconds / size:,.1f} {unit}"
    raise AssertionError("unreachable")  # pragma: no cover


def step_text(seconds: float) -> str:
    """A step time as evaluate prints it (:func:`seconds_text`: ``280.679 s``, ``646.2 ms``),
    with :func:`duration`'s minutes or hours beside it where it is two minutes or longer, so a
    search's or a per-stage plan's step reads as evaluate's and frontier's do.

    >>> step_text(280.679204113), step_text(10.44064), step_text(0.6462)
    ('280.679 s (4.7 min)', '10.441 s', '646.2 ms')
    """
    text = seconds_text(seconds)
    return text if seconds < 120 else f"{text} ({duration(seconds)})"
