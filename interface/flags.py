"""The cost model's parameter names as the flags a user types.

``model/`` speaks parameter names: a message that tells the user what to give names the
parameter in backticks (``give `host_link_gbps```, ``use `framework` megatron``). Where the
interface presents a message — a one-line error on the command line, an HTTP 422 of the web API,
an estimate's notes — :func:`with_flags` writes each such name as the flag the user typed
(``--host-link-gbps``, ``--framework megatron``), so the line names what the user can change.
"""

from __future__ import annotations

import re

__all__ = ["PARAMETER_FLAGS", "flag_for", "with_flags"]

PARAMETER_FLAGS: dict[str, str] = {
    "num_layers": "--layers",
    "hidden_size": "--hidden",
    "num_attention_heads": "--heads",
    "num_params_declared": "--params",
    "zero_stage": "--zero",
    "micro_batch_size": "--micro-batch",
    "global_batch_size": "--global-batch",
    "vocab_multiple": "--pad-vocab",
}
"""Parameter names whose flag is not the name with ``_`` written ``-`` (the rest are)."""

_NAME = re.compile(r"`([a-z][a-z0-9_]*)`")


def flag_for(name: str) -> str:
    """The flag of parameter ``name``.

    Examples
    --------
    >>> flag_for("zero_stage"), flag_for("host_link_gbps")
    ('--zero', '--host-link-gbps')
    """
    return PARAMETER_FLAGS.get(name, "--" + name.replace("_", "-"))


def with_flags(message: str) -> str:
    """``message`` with each backticked parameter name written as its flag.

    Examples
    --------
    >>> with_flags("offload: the B200 has no host link bandwidth; give `host_link_gbps`")
    'offload: the B200 has no host link bandwidth; give --host-link-gbps'
    """
    return _NAME.sub(lambda m: flag_for(m.group(1)), message)
