"""An accelerator the table lacks, described in a file (``--gpu PATH.toml``).

The file holds one ``[[accelerator]]`` table with the keys of ``topology/accelerators.toml``,
checked and converted by the same loader (:func:`topology.accelerators.check_row`,
:func:`topology.accelerators.to_device`), plus two keys of its own:

``base``
    A catalogue part the file starts from: every key the file does not give is that part's
    (``base = "H100-SXM"``, ``name = "H100-600W"``, ``bf16_tflops = 900``, ``source = "our
    measurement"``). The base's device-memory detail (``hbm_gib``, the ``driver_*`` capture)
    is not taken when the file gives ``memory_gb`` or ``memory_unit``: it measured the base's
    memory. A figure of a group with its own source (``hbm_tbps`` and ``host_link_gbps`` under
    ``bandwidth_source``; ``host_*`` under ``host_source``; ``power_w``; the ``driver_*``
    figures) needs that source in the file; the group's figures the file leaves out keep the
    base's, and the source says so.
``like``
    The catalogue part whose per-part tables stand for this one
    (:attr:`model.hardware.DeviceSpec.part`): its generation's calibrated efficiencies
    (:func:`model.roofline.generation_of`, :func:`model.timing.kernel_efficiency_for`), its
    SM count (``scenarios/kernels/gemm.toml``), its published attention, GEMM and collective
    curves (:mod:`model.part_family`), read as fractions of that part's peak and applied to the
    file's. Required without ``base`` (with one it is the base), so a part never falls back to a
    default generation unsaid; a part like nothing the table has names the catalogue part the
    cost model should borrow from, and the output says which.

``name`` and ``source`` are required (the source says where the file's figures come from); the
name is the file's own, never a catalogue name. ``status`` is optional with a base (``derived``:
the base's figures, some replaced) and required without one, as in the table.

Refusals are one line headed ``gpu: 'PATH'`` (the command line shows ``--gpu``): a missing or
unreadable file, TOML that does not parse, an unknown key, a figure not positive, a bandwidth
or FLOP rate above 100× the table's fastest (:mod:`topology.rate_bounds`), a base or ``like``
not in the table, more than one ``[[accelerator]]``.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from trainplan.model.errors import ScenarioError, named_lookup
from trainplan.model.hardware import DeviceSpec
from trainplan.model.op_rates import SUSTAINED_CLOCK
from trainplan.model.units import shown_text
from trainplan.topology.accelerators import (
    accelerator_tables,
    catalogue_row,
    check_keys,
    check_row,
    get_accelerator,
    is_part_file,
    load_accelerators,
    name_key,
    row_dict,
    to_device,
)
from trainplan.topology.rate_bounds import check_part_rates

__all__ = [
    "get_part",
    "accelerator_of",
    "read_part_file",
    "part_file_row",
    "part_from_table",
    "FILE_KEYS",
]

FILE_KEYS = ("base", "like")
"""The keys a file takes besides the table's."""

_MEMORY_DETAIL = ("hbm_gib", "driver_total_mib", "driver_reserved_mib", "driver_source")
"""A base's figures of its own device memory: not taken when the file gives the capacity."""

_GROUPS: dict[str, tuple[str, ...]] = {
    "fp8_source": ("fp8_tflops",),
    "bandwidth_source": ("hbm_tbps", "host_link_gbps"),
    "host_source": ("host_memory_gb", "host_memory_gbps", "host_cores"),
    "power_source": ("power_w",),
    "driver_source": ("driver_total_mib", "driver_reserved_mib"),
}
"""Figures with a source key of their own (``topology/accelerators.toml``'s header); the
others are ``source``'s. ``fp8_tflops`` may also stand under ``source``."""

_MAIN = (
    *("memory_gb", "memory_unit", "hbm_gib", "bf16_tflops", "fp8_tflops", "dense"),
    *("nvlink_gbps", "nvlink_domain", "scaleout_gbps", "gpus_per_node"),
)
"""Figures ``source`` answers for (``fp8_tflops`` where no ``fp8_source`` is given)."""

_LIKE_MEANS = (
    "the catalogue part whose generation's calibrated efficiencies, SM count and published "
    "kernel and collective rates stand for this one (trainplan gpus lists them)"
)


def _file_text(path: str, where: str) -> str:
    """The text of the file ``path``, refused in one line when it cannot be read."""
    p = Path(path).expanduser()
    try:
        if not p.exists():
            raise ScenarioError(f"{where} names a file describing an accelerator; nothing is there")
        if p.is_dir():
            raise ScenarioError(f"{where} is a folder, not a file describing an accelerator")
        if not p.is_file():
            raise ScenarioError(f"{where} is not a regular file")
        return p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ScenarioError(f"{where} is not UTF-8 text") from None
    except OSError as err:
        raise ScenarioError(f"{where} cannot be read: {err.strerror or err}") from None


def _catalogue_name(value: Any, key: str, where: str) -> str:
    """The catalogue name ``base`` or ``like`` gives (never a file: one file, one part)."""
    if not isinstance(value, str) or not value.strip() or is_part_file(value):
        raise ScenarioError(
            f"{where}: {key} {shown_text(value)} must name a part of the accelerator table "
            "(trainplan gpus lists them)"
        )
    try:
        return get_accelerator(value).name
    except ScenarioError as err:  # unknown (with the closest names) or ambiguous
        text = str(err)
        if text.startswith("unknown"):
            hint = text.split("; ", 1)[-1]
            text = f"{shown_text(value)} is not in the accelerator table; {hint}"
        raise ScenarioError(f"{where}: {key} {text.removeprefix('gpu: ')}") from None


def _check_own(row: dict[str, Any], where: str) -> None:
    """The file's ``name`` and ``source``: given, text, and the name not a catalogue part's."""
    for key, why in (("name", "the part's own name"), ("source", "where its figures come from")):
        if key not in row:
            raise ScenarioError(f"{where}: missing required key '{key}' ({why})")
        if not isinstance(row[key], str) or not row[key].strip():
            raise ScenarioError(f"{where}: key '{key}' must be a non-empty string ({why})")
    name = row["name"]
    if "[" in name or "]" in name:
        raise ScenarioError(
            f"{where}: name {shown_text(name)} has a bracket, which marks a what-if part "
            "(H100-SXM[hbm×1.5]); name the part without one"
        )
    taken = {name_key(n): n for n in load_accelerators()}
    if name_key(name) in taken:
        raise ScenarioError(
            f"{where}: name {shown_text(name)} is the accelerator table's "
            f"{taken[name_key(name)]}; give the file's part a name of its own"
        )


def _on_base(given: dict[str, Any], base: dict[str, Any], where: str) -> dict[str, Any]:
    """The row of a file on base part ``base`` (module docstring): the file's keys over the
    base's, each figure's source saying whose it is."""
    name = base["name"]
    merged = dict(base)
    if any(k in given for k in ("memory_gb", "memory_unit", *_MEMORY_DETAIL)):
        for key in _MEMORY_DETAIL:
            merged.pop(key, None)
    for source, figures in _GROUPS.items():
        mine = [k for k in figures if k in given]
        if source in given and not mine:
            raise ScenarioError(
                f"{where}: {source} is given without {' or '.join(figures)}, the figures it is "
                "the source of"
            )
        if mine and source not in given and source != "fp8_source":
            raise ScenarioError(
                f"{where}: {mine[0]} needs {source} beside it (the {name}'s {source} is of its "
                "own figures)"
            )
    if "fp8_tflops" in given:
        merged.pop("fp8_source", None)
    merged.update(given)
    for source, figures in _GROUPS.items():
        kept = [k for k in figures if k in merged and k not in given]
        if kept and source in given:
            merged[source] = f"{given[source]}; {', '.join(kept)} the {name}'s: {base[source]}"
        elif kept and source in base:
            merged[source] = f"the {name}'s: {base[source]}"
    if "fp8_tflops" in base and "fp8_tflops" not in given and "fp8_source" not in base:
        merged["fp8_source"] = f"the {name}'s: {base['source']}"
    main = [k for k in _MAIN if k in given and not (k == "fp8_tflops" and "fp8_source" in given)]
    said = f"{', '.join(main)}: " if main else ""
    merged["source"] = f"{said}{given['source']}; the other figures the {name}'s: {base['source']}"
    merged["status"] = given.get("status", "derived")
    return merged


def _check_like(like: str, given: dict[str, Any], base: str | None, where: str) -> None:
    """Refuse a part that would take ``like``'s sustained clock (:data:`model.op_rates.
    SUSTAINED_CLOCK`) for a peak or a power limit of its own: that fraction derates the
    ``like`` part's rated peak under its own limit, and says nothing of another. Refuse too a
    part that would lose its base's derating (a derated ``base`` with another ``like`` and no
    ``bf16_tflops`` of its own), and a ``power_w`` without the ``bf16_tflops`` it sustains: no
    term reads ``power_w``, so the part would run at its rated peak."""
    if base in SUSTAINED_CLOCK and like != base and "bf16_tflops" not in given:
        raise ScenarioError(
            f"{where}: base {base} runs its tensor cores at {SUSTAINED_CLOCK[base][0]:.3f} of its "
            f"rated peak under its power limit (model.op_rates.SUSTAINED_CLOCK); like {like} "
            "would drop that derating: give the bf16_tflops this part sustains, or leave like out"
        )
    if "power_w" in given and "bf16_tflops" not in given:
        raise ScenarioError(
            f"{where}: power_w {given['power_w']} is shown, not read by the time model (it runs "
            "at the rated bf16_tflops): give the bf16_tflops this part sustains at that limit"
        )
    if like not in SUSTAINED_CLOCK or (
        base == like and not {"bf16_tflops", "power_w"} & set(given)
    ):
        return
    fraction = SUSTAINED_CLOCK[like][0]
    raise ScenarioError(
        f"{where}: like {like} runs its tensor cores at {fraction:.3f} of its rated peak under "
        "its own power limit (model.op_rates.SUSTAINED_CLOCK), which says nothing of a part "
        'with its own bf16_tflops or power_w; name the uncapped die (like = "H100-SXM") and '
        "give the peak this part sustains"
    )


def part_from_table(row: Any, where: str, origin: str = "") -> tuple[DeviceSpec, dict[str, Any]]:
    """(the part, its checked row) of one ``[[accelerator]]`` table ``row`` as a file gives it
    (module docstring); ``where`` heads a refusal, ``origin`` is the file (or what gave it).

    Raises
    ------
    ScenarioError
        An unknown key, a missing ``name``, ``source``, or ``like`` (without ``base``), a name
        the table has, a base or ``like`` not in the table, a figure the table's rules refuse,
        a bandwidth or FLOP rate above the bound of :mod:`topology.rate_bounds`.
    """
    if not isinstance(row, dict):
        raise ScenarioError(f"{where}: an accelerator is a table of keys, got {shown_text(row)}")
    check_keys(row, where, FILE_KEYS)
    _check_own(row, where)
    given = {k: v for k, v in row.items() if k not in FILE_KEYS}
    base = _catalogue_name(row["base"], "base", where) if "base" in row else None
    if "like" in row:
        like = _catalogue_name(row["like"], "like", where)
    elif base is not None:
        like = base
    else:
        raise ScenarioError(f"{where}: missing key 'like' (or 'base'): {_LIKE_MEANS}")
    _check_like(like, given, base, where)
    merged = given if base is None else _on_base(given, catalogue_row(base), where)
    check_row(merged, where)
    device = replace(to_device(merged, where), like=like, origin=origin)
    check_part_rates(device, merged, where)
    return device, merged


def _read(path: str) -> tuple[DeviceSpec, dict[str, Any], dict[str, Any]]:
    """(the part, its checked row, the file's own table) of the file ``path``."""
    where = f"gpu: {shown_text(path)}"
    tables = accelerator_tables(_file_text(path, where), where)
    if len(tables) != 1:
        raise ScenarioError(
            f"{where} holds {len(tables)} [[accelerator]] tables; a file describes one part "
            "(give each its own file)"
        )
    device, merged = part_from_table(tables[0], where, path)
    return device, merged, tables[0]


def read_part_file(path: str) -> DeviceSpec:
    """The accelerator the file ``path`` describes (module docstring): its figures in base
    units as :class:`DeviceSpec` holds them, :attr:`~model.hardware.DeviceSpec.like` the
    catalogue part its per-part tables are read from, :attr:`~model.hardware.DeviceSpec.origin`
    the path.

    Raises
    ------
    ScenarioError
        One line headed ``gpu: 'PATH'``: the file missing, a folder or unreadable; not TOML; no
        or several ``[[accelerator]]`` tables; what :func:`part_from_table` refuses.

    Examples
    --------
    >>> from importlib import resources
    >>> example = str(resources.files("trainplan.scenarios") / "gpus" / "h100-a3-high.toml")
    >>> part = read_part_file(example)
    >>> part.name, part.part, part.scaleout_bytes_per_s, part.peak_flops_per_s
    ('H100-A3-High', 'H100-SXM', 12500000000.0, 989400000000000.0)
    """
    return _read(path)[0]


def part_file_row(path: str) -> dict[str, Any]:
    """``trainplan gpus --file PATH``'s object: the row :func:`topology.accelerators.
    accelerator_rows` would hold for the part (its figures as the file and its base write them,
    each source saying whose), plus ``file`` (the path), ``base`` (None without one), ``like``
    and ``given`` (the keys the file gives, in its order).

    Raises
    ------
    ScenarioError
        What :func:`read_part_file` refuses.
    """
    device, merged, own = _read(path)
    return {
        **row_dict(merged, device),
        "host_source": merged.get("host_source"),
        "driver_source": merged.get("driver_source"),
        "file": path,
        "base": get_accelerator(own["base"]).name if "base" in own else None,
        "like": device.like,
        "given": list(own),
    }


def get_part(name: str) -> DeviceSpec:
    """The accelerator ``name`` gives: the file it names (a path ending in ``.toml``,
    :func:`read_part_file`), else the table's part of that name
    (:func:`topology.accelerators.get_accelerator`). What every ``--gpu`` reads.

    Raises
    ------
    ScenarioError
        What :func:`read_part_file` or :func:`topology.accelerators.get_accelerator` refuses;
        a list of names (``H100-SXM,H200``), which a command that takes one is given where
        search and frontier take several (they split it before: :func:`interface.search_options.names`).

    >>> get_part("h100-sxm").name
    'H100-SXM'
    """
    if not is_part_file(name) and any(sep in str(name) for sep in ",;"):  # no name holds either
        raise ScenarioError(
            f"gpu: {name!r} names several accelerators; this takes one (search and frontier "
            "choose among several)"
        )
    return read_part_file(name) if is_part_file(name) else get_accelerator(name)


def accelerator_of(gpu: DeviceSpec | str) -> DeviceSpec:
    """``gpu`` as it is when it is a :class:`DeviceSpec` built in code (a hardware what-if,
    ``topology.what_if``), else the part :func:`get_part` reads for it.

    Raises
    ------
    ScenarioError
        ``gpu: unknown gpu 'X'; did you mean …?`` (the parameter named,
        :func:`model.errors.named_lookup`), or a file's refusal headed ``gpu: 'PATH'``.
    """
    return gpu if isinstance(gpu, DeviceSpec) else named_lookup("gpu", get_part, str(gpu))
