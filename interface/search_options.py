"""What a search's options mean beyond one value's kind: names and batch sizes as lists, prices
per accelerator, and the checks across options (a token budget the objective does not use, a
degree above its cap, an expert-parallel degree the model refuses, a batch the model does not
publish) — for the command line and scenario files alike (:func:`interface.scenario.build_problem`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from trainplan.interface.batch_inputs import sequences_of_tokens
from trainplan.interface.model_inputs import NO_MODEL
from trainplan.model.errors import InputError, check_applicable, named_lookup
from trainplan.model.legality import check_expert_parallel
from trainplan.model.units import (
    list_items,
    parse_count,
    parse_counts,
    parse_number,
    shown_number,
    shown_text,
)
from trainplan.optimizer.problem import Job, Objective, gpu_counts
from trainplan.scenarios.catalogue import get_model

__all__ = ["names", "batches", "prices", "require_dimensions", "require_batch", "check_applies"]


def names(value: Any, key: str = "value") -> list[str]:
    """Names from one name, a list, or text with ``,`` or ``;`` between them (no name holds
    either); in order, each once."""
    out: list[str] = []
    for item in list_items(value, key) if value is not None else []:
        parts = [part.strip() for part in str(item).replace(";", ",").split(",")]
        if not all(parts):  # as list_items refuses "64;": an empty name is no name
            raise InputError(f"{key}: {shown_text(item)} has an empty item")
        out += parts
    return list(dict.fromkeys(out))


def batches(value: Any, tokens: Any, seq_len: int) -> list[int]:
    """Global batch sizes in sequences, from ``global_batch`` (counts, ranges) or
    ``global_batch_tokens`` (token counts, each a whole number of sequences, or token ranges);
    ascending, each once."""
    check_applicable(
        {"global_batch_tokens": tokens if value is not None else None},
        {
            "global_batch_tokens": "give the batch in sequences (`global_batch`) or in tokens, "
            "not both"
        },
    )
    if tokens is None:
        return [] if value is None else gpu_counts(value, "global_batch")
    out: set[int] = set()
    for item in list_items(tokens, "global_batch_tokens"):
        if isinstance(item, str) and ".." in item:
            lo, _, hi = item.partition("..")
            if not lo.strip() or not hi.strip():
                raise InputError(
                    f"global_batch_tokens: range {item!r} needs both ends, e.g. 8e6..16e6"
                )
            try:
                lo_b = -(-int(parse_number(lo, "global_batch_tokens")) // seq_len)
                hi_b = int(parse_number(hi, "global_batch_tokens")) // seq_len
            except InputError as err:  # the range as typed, then the end's rule
                rule = str(err).removeprefix("global_batch_tokens: ")
                raise InputError(f"global_batch_tokens: range {item!r}: {rule}") from None
            out.update(gpu_counts(f"{lo_b}..{hi_b}", "global_batch_tokens"))
            continue
        out.add(sequences_of_tokens(item, seq_len))
    return sorted(out)


def _price(value: Any, gpu: str) -> float:
    price = float(parse_number(value, f"gpu_hour_price {gpu}"))
    if price <= 0:
        raise InputError(
            f"gpu_hour_price: {value!r} for {gpu} must be a positive number of dollars per GPU-hour"
        )
    return price


def prices(value: Any, gpus: list[str]) -> dict[str, float | None]:
    """Dollars per GPU-hour per accelerator from one number, ``GPU=PRICE`` pairs separated by
    ``,`` or ``;`` (a comma inside a price groups thousands: ``H100-SXM=1,000,B200=5``), or a
    TOML table; an accelerator priced twice is refused (which price was meant is unknown)."""
    if value is None:
        return {g: None for g in gpus}
    if isinstance(value, dict):
        pairs = {str(k): v for k, v in value.items()}
    elif "=" in str(value):
        pairs = {}
        for part in re.split(r"[,;]\s*(?=[^,;=]+=)", str(value).strip()):
            name, sep, price = (x.strip() for x in part.partition("="))
            if not sep or not name:
                raise InputError(f"gpu_hour_price: {part!r} must be GPU=PRICE, e.g. H100-SXM=2.5")
            if name in pairs:
                raise InputError(
                    f"gpu_hour_price: {name} is priced twice ({pairs[name]} and {price}); give "
                    "each accelerator one price"
                )
            pairs[name] = price
    else:
        try:
            parse_number(value, "gpu_hour_price")
        except InputError:  # neither form: GPU:PRICE, a name alone
            raise InputError(
                f"gpu_hour_price: {shown_text(value)} is neither one price nor GPU=PRICE pairs; "
                f"write e.g. 2.5 (every GPU) or {gpus[0]}=2.5"
            ) from None
        return {g: _price(value, g) for g in gpus}
    unknown = sorted(set(pairs) - set(gpus))
    if unknown:
        raise InputError(
            f"gpu_hour_price: {unknown[0]!r} is not one of the searched GPUs ({', '.join(gpus)})"
        )
    return {g: (_price(pairs[g], g) if g in pairs else None) for g in gpus}


def _size_only(d: Mapping[str, Any]) -> bool:
    """A model given by ``--params`` alone: no name, no config, no dimensions."""
    named = any(d.get(k) is not None for k in ("model", "model_spec", "layers", "hidden", "heads"))
    return d.get("params") is not None and not named


def require_dimensions(d: Mapping[str, Any]) -> None:
    """A search places and times layers: a model given by its size alone
    (``--params 70B``) is refused first, before any rule of the batch it would also need
    (the cost model's own refusal, :func:`optimizer.tables.job_shapes`, comes only after the
    tables are asked for).

    Raises
    ------
    InputError
        ``params: 70,000,000,000 is a size only …``, naming what gives the dimensions.
    """
    if _size_only(d):
        size = d["params"]
        whole = isinstance(size, int | Fraction) and size == int(size)
        shown = f"{int(size):,}" if whole else shown_number(size)
        raise InputError(
            f"params: {shown} is a size only, and a search needs the model's "
            "dimensions (its layers and widths) to place and time it; give --model NAME (a "
            "catalogue name or a config.json), or --layers --hidden --heads with --params"
        )


def require_batch(d: Mapping[str, Any]) -> None:
    """A search needs the global batch: a model without a published one (a config.json,
    dimensions given) has it from the user, or every job would search B = 1 sequence.

    Raises
    ------
    InputError
        Naming the model and the options that give the batch.
    """
    if d.get("global_batch") is not None or d.get("global_batch_tokens") is not None:
        return

    model = d.get("model")
    if model is not None:
        entry = named_lookup("model", get_model, str(model))
        if "global_batch_size" in entry.training:
            return
    dims = all(d.get(k) is not None for k in ("layers", "hidden", "heads"))
    if d.get("model") is None and d.get("params") is None and d.get("model_spec") is None:
        if not dims:  # dimensions alone are a model (evaluate's rule): their batch rule below
            raise InputError(NO_MODEL)  # the model's refusal, as evaluate's, before the batch's
    if d.get("model") is None and d.get("model_spec") is None and d.get("layers") is None:
        return  # a size only: the search refuses it for want of layers (optimizer.tables), first
    name = d.get("model") or "a model given by its dimensions"
    raise InputError(
        f"global_batch: {name} has no published batch size; give `global_batch` (sequences per "
        "step, e.g. 1024, or a range 512..2048) or `global_batch_tokens` (e.g. 4e6)"
    )


_DEFAULT_CAPS = {"max_tp": 2**24, "max_micro_batch": 8}
"""The caps a search uses when none is given (:class:`optimizer.space.SearchSpace`)."""


def check_applies(
    objective: Objective, tokens: Any, space_d: Mapping[str, Any], jobs: list[Job]
) -> None:
    """Options the search would otherwise ignore or contradict, refused with both named: a token
    budget an objective does not use; a degree or micro-batch above the cap given beside it; an
    expert-parallel degree the model's experts refuse (evaluate's rule,
    :func:`model.legality.check_expert_parallel`).

    Raises
    ------
    InputError
        The first such option.
    """
    check_applicable(
        {"tokens": tokens if objective not in (Objective.TIME_TO_TRAIN, Objective.COST) else None},
        {
            "tokens": f"it is the token budget of --objective time-to-train or cost, and the "
            f"objective is {objective} (add --objective time-to-train)"
        },
    )
    for key, cap in (("tp", "max_tp"), ("micro_batch", "max_micro_batch")):
        given = space_d.get(key)
        limit = parse_count(space_d[cap], cap) if cap in space_d else _DEFAULT_CAPS[cap]
        above = [v for v in parse_counts(given, key) if v > limit] if given else []
        if not above:
            continue
        shown = ", ".join(map(str, above))
        if cap in space_d:
            raise InputError(
                f"{key}: {shown} is above {cap} {limit}: the two contradict each other; drop one "
                f"or raise {cap}"
            )
        raise InputError(f"{key}: {shown} is above {cap} {limit} (its default); raise {cap} too")
    if space_d.get("ep") is None:
        return
    for job in jobs:
        for ep in parse_counts(space_d["ep"], "ep"):
            check_expert_parallel(ep, job.case.model)
