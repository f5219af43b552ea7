"""A model as the cost model takes it: a name, a source, and dimensions, a declared size, or both
(:class:`ModelSpec`). The dimensions themselves are :class:`model.specs.Architecture`'s; a
declared size is checked against their parameter count (:mod:`model.params`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from trainplan.model.errors import InputError, ScenarioError
from trainplan.model.hash_once import HashOnce
from trainplan.model.hf_config import parse_config_json
from trainplan.model.hf_families import read_hf_config
from trainplan.model.params import count_params
from trainplan.model.specs import Architecture
from trainplan.model.units import check_limit, shown_number, shown_text

__all__ = ["ModelSpec", "DECLARED_SIZE_TOLERANCE", "CONFIG_RULE"]


CONFIG_RULE = "a model path must be a Hugging Face config.json (a JSON object)"
"""What a model given as a path must be (:meth:`ModelSpec.from_hf_config`), said after a file
that is not JSON text at all (:func:`model.hf_config.parse_config_json`)."""


def _as_model(err: ScenarioError, path: Path, rule: str | None = None) -> ScenarioError:
    """``err`` of the config file at ``path`` (headed by the path) headed ``model:`` and the path
    as given, the parameter and its value, then ``rule`` where the reason alone does not say it.

    >>> str(_as_model(ScenarioError("c.json: is not JSON: x"), Path("c.json"), "rule"))
    "model: 'c.json': is not JSON: x; rule"
    """
    reason = str(err).removeprefix(f"{path}: ")
    return ScenarioError(
        f"model: {shown_text(str(path))}: {reason}" + (f"; {rule}" if rule else "")
    )


DECLARED_SIZE_TOLERANCE = Fraction(1, 10)
"""How far a declared size (``--params``) may lie from the count of the dimensions given with it,
as a fraction of that count. Published sizes are rounded (Llama 2 "70B" has 68.98·10^9
parameters, GPT-3 "175B" 174.6·10^9: within 2%); 10% leaves room for details dimensions given on
the command line leave out (biases, norms, a vocabulary guess), and refuses ``--params 7B`` with
80 layers of hidden 8,192 (about 65·10^9)."""


def _check_declared_size(declared: int, arch: Architecture) -> None:
    """Refuse a declared size that the dimensions' own count contradicts (see
    :data:`DECLARED_SIZE_TOLERANCE`)."""
    counted = count_params(arch).total
    if abs(declared - counted) > DECLARED_SIZE_TOLERANCE * counted:
        raise InputError(
            f"params: {declared:,} declared, but the dimensions given ({arch.num_layers} layers, "
            f"hidden {arch.hidden_size:,}, ffn {arch.ffn_hidden_size:,}, vocab {arch.vocab_size:,}) "
            f"count {counted:,} ({(declared - counted) / counted:+.0%}); the two must agree within "
            f"{float(DECLARED_SIZE_TOLERANCE):.0%} — correct the dimensions, or leave out `num_params_declared` to "
            "use their count"
        )


def _config_name(path: Path) -> str:
    """The model's name for a config file at ``path``: its folder's for ``config.json`` (the
    Hugging Face layout, one model a folder), else the file's stem.

    >>> _config_name(Path("/m/mixtral/config.json")), _config_name(Path("/m/bm/mixtral.json"))
    ('mixtral', 'mixtral')
    """
    if path.name == "config.json":
        return path.parent.name or path.resolve().parent.name or path.stem
    return path.stem


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSpec(HashOnce):
    """A model: its name, source and either an architecture, a declared size, or both.

    With only ``num_params_declared`` (``--params 70B``) the model is *size-only*: model state
    is computed and divided evenly over tp·pp (the textbook convention); activations are
    unavailable. With both, the declared size is used for model state and the architecture for
    activations, traffic and FLOPs; the two must agree within :data:`DECLARED_SIZE_TOLERANCE`
    (an InputError otherwise).
    """

    name: str
    source: str = ""
    arch: Architecture | None = None
    num_params_declared: int | None = None
    """Parameter count as given by the user; None means counted from ``arch``."""
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    """Published facts kept for display (e.g. {"params_total": 671e9}); never used in formulas."""
    notes: tuple[str, ...] = field(default=(), compare=False)
    """What reading the model left out or approximated (a ``config.json`` key not understood, a
    vision encoder not modelled…); printed with every estimate's notes."""

    def __post_init__(self) -> None:
        if self.arch is None and self.num_params_declared is None:
            raise InputError(f"model {self.name}: give dimensions or a parameter count")
        if self.num_params_declared is not None:
            n = self.num_params_declared
            if not isinstance(n, int) or isinstance(n, bool) or n < 1:
                raise InputError(f"params: {shown_number(n)} must be a whole number >= 1")
            check_limit("params", n)
            if self.arch is not None:
                _check_declared_size(n, self.arch)

    @property
    def total_and_active_params(self) -> tuple[int, int]:
        """(total, active) parameters, counts: the declared size for both where the user gave
        one (a declared size says nothing of which parameters a token meets), else both counted
        from :attr:`arch` (:func:`model.params.count_params`; active = the parameters one token
        meets, the routed experts it is sent to). What evaluate's MFU and ``trainplan mfu
        --model`` read as N."""
        if self.num_params_declared is not None or self.arch is None:
            n = int(self.num_params_declared or 0)
            return n, n
        counts = count_params(self.arch)
        return int(counts.total), int(counts.active)

    @property
    def size_only(self) -> bool:
        """True when the model has no dimensions (activations unavailable)."""
        return self.arch is None

    @classmethod
    def from_hf_config(cls, path: str | Path, name: str | None = None) -> ModelSpec:
        """Read a Hugging Face ``config.json`` from disk (nothing is downloaded).

        The families and keys understood are listed in :mod:`model.hf_families`; a key that is
        neither read nor known to change no cost is named in :attr:`notes`. Its name, unless
        ``name`` is given: a ``config.json``'s folder (``huggingface-cli download … --local-dir
        mixtral`` leaves ``mixtral/config.json``), any other file's stem (``bm/mixtral.json`` is
        ``mixtral``).

        Raises
        ------
        ScenarioError
            When the file cannot be read, is no JSON object (:data:`CONFIG_RULE`), a required
            key is missing, or a key's value cannot be modelled: headed ``model:`` and the path
            (the parameter and the value given), then what is wrong (the key and its value).
        """
        p = Path(path)
        try:
            data = p.read_bytes()
        except OSError as err:
            raise ScenarioError(f"model: cannot read {p}: {err.strerror or err}") from None
        try:
            config = parse_config_json(data, str(p))
        except ScenarioError as err:  # not text, not JSON: the rule, else the reason says it
            raise _as_model(err, p, CONFIG_RULE if "is not " in str(err) else None) from None
        try:
            arch, notes = read_hf_config(config, str(p))
        except ScenarioError as err:
            raise _as_model(err, p) from None
        return cls(
            name=name or _config_name(p),
            source=f"Hugging Face config {p}",
            arch=arch,
            notes=notes,
        )
