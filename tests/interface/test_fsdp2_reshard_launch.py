"""The torchtitan launch fragment names the FSDP reshard policy the plan counted where it is not
what torchtitan's ``"default"`` runs (b5bcd76c6 ``get_fsdp_reshard_after_forward_policy``:
``"default"`` is ``not pp_enabled``; ``fsdp_reshard_after_forward`` is a ``[parallelism]`` key
since 5940ddeb5)."""

from __future__ import annotations

from trainplan.interface.launch import torchtitan_toml
from trainplan.model.layout import Layout
from trainplan.model.specs import Architecture

ARCH = Architecture(
    num_layers=8, hidden_size=8, num_attention_heads=2, ffn_hidden_size=32, vocab_size=16
)


def _policy(pp: int, zero: int, framework: str = "fsdp2") -> list[str]:
    lay = Layout(pp=pp, framework=framework, zero_stage=zero)
    return [f for f in torchtitan_toml(ARCH, lay).flags if f.startswith("fsdp_reshard")]


def test_fragment_names_the_policy():
    """``"always"`` for ZeRO-3 with pp, ``"never"`` for ZeRO-2 without; nothing where the plan
    is what ``"default"`` runs, nor for another framework's plan."""
    assert _policy(2, 3) == ['fsdp_reshard_after_forward = "always"']
    assert _policy(1, 2) == ['fsdp_reshard_after_forward = "never"']
    assert _policy(2, 2) == _policy(1, 3) == _policy(2, 1, "megatron") == []


def test_policy_line_in_the_parallelism_section():
    flags = torchtitan_toml(ARCH, Layout(pp=2, framework="fsdp2", zero_stage=3)).flags
    at = flags.index('fsdp_reshard_after_forward = "always"')
    assert (
        flags[1] == "[parallelism]" and "[activation_checkpoint]" not in flags[:at]
    )  # [0]: the commit
