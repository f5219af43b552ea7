"""A fractional ``moe_imbalance`` as a user types it (``--set moe_imbalance=1.37``): every byte
figure ``trainplan evaluate --json`` prints stays a whole number, and DeepSpeed's capacity-sized
routing tensors follow ``C``, not the imbalance, under a capacity factor. Each call its own
process.

Hand derivation (Mixtral 8x7B: E 8, k 2; s 4,096, micro-batch 1, so T = 4,096 tokens a rank):

* DeepSpeed with ``capacity_factor`` 1.5 sizes its ``[E, C, h]`` buffers and the ``E·C`` slot
  indices at ``C = max(4, ceil(T/E · 1.5·2)) = 1,536`` (deepspeed edaa72212
  ``sharded_moe.py`` ``_capacity``) whatever the routing: the memory at imbalance 1.37 is the
  memory at 1, byte for byte;
* dropless, its ``C`` is the busiest count, ``min(T, ceil(1.37·T·k/E)) = ceil(1,402.88) = 1,403``
  rows against 1,024 balanced (``model.moe_rows.deepspeed_capacity``), so the memory grows;
* the busiest rank's rows under Megatron-Core, ``ceil(1.37·T·k) = ceil(11,223.04) = 11,224``
  (``model.moe_rows.rank_rows``), are whole too.
"""

from __future__ import annotations

import json

from tests.cli_runs import run_many

BASE = [
    *("evaluate", "--model", "mixtral-8x7b", "--gpu", "H100-SXM", "--gpus", "16", "--ep", "8"),
    "--json",
]


def _byte_fields(node: object, path: str = "") -> list[tuple[str, object]]:
    """Every (path, value) under a key ending in ``bytes`` (also in lists)."""
    out: list[tuple[str, object]] = []
    if isinstance(node, dict):
        for key, value in node.items():
            here = f"{path}.{key}"
            if key.endswith("bytes") and not isinstance(value, (dict, list)):
                out.append((here, value))
            out += _byte_fields(value, here)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out += _byte_fields(value, f"{path}[{i}]")
    return out


def test_fractional_imbalance_keeps_whole_bytes_and_capacity_sized_tensors() -> None:
    calls = {}
    for fw in ("deepspeed", "megatron"):
        for imb in ("1", "1.37"):
            for cf in ((), ("--set", "moe_capacity_factor=1.5")):
                name = f"{fw} {imb} {'cf' if cf else 'dropless'}"
                calls[name] = [*BASE, "--framework", fw, "--set", f"moe_imbalance={imb}", *cf]
    done = run_many(calls)
    found = {}
    for name, d in done.items():
        assert d.returncode == 0, (name, d.stderr[-2000:])
        data = json.loads(d.stdout)
        fields = _byte_fields(data)
        assert fields, name
        fractional = [(p, v) for p, v in fields if isinstance(v, float) or (
            isinstance(v, str) and "." in v)]  # fmt: skip
        assert not fractional, (name, fractional[:5])
        found[name] = data["memory"]
    # DeepSpeed under a capacity factor: C = 1,536 whatever the imbalance, same bytes
    assert found["deepspeed 1.37 cf"] == found["deepspeed 1 cf"]
    # dropless: C = 1,403 rows against 1,024, the busiest rank holds more
    assert (
        found["deepspeed 1.37 dropless"]["total_bytes"]
        > found["deepspeed 1 dropless"]["total_bytes"]
    )
    assert (
        found["megatron 1.37 dropless"]["total_bytes"] > found["megatron 1 dropless"]["total_bytes"]
    )


def test_the_capacities_by_hand() -> None:
    from fractions import Fraction

    from trainplan.model.moe_rows import deepspeed_capacity
    from trainplan.model.moe_run import MoERun

    cf = Fraction(3, 2)
    assert deepspeed_capacity(MoERun(cf, imbalance=Fraction(137, 100)), 4096, 8, 2) == 1536
    assert deepspeed_capacity(MoERun(cf), 4096, 8, 2) == 1536
    assert deepspeed_capacity(MoERun(imbalance=Fraction(137, 100)), 4096, 8, 2) == 1403
    assert deepspeed_capacity(MoERun(), 4096, 8, 2) == 1024
