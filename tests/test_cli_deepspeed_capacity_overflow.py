"""A DeepSpeed capacity factor so large that the gate's float32 capacity overflows is refused in
one line (exit 2), not a traceback: DeepSpeed edaa72212 ``sharded_moe.py`` ``_capacity``
multiplies ``num_tokens / num_experts`` by ``torch.tensor(capacity_factor × k)``, a float32
tensor (largest finite value about 3.4e38); 1e40 × k = 2 is 2e40."""

from __future__ import annotations

from tests.cli_runs import refusal, trainplan

MIXTRAL = (
    *("evaluate", "--model", "mixtral-8x7b", "--gpu", "H100-SXM", "--framework", "deepspeed"),
    *("--dp", "8", "--ep", "8", "--global-batch", "64", "--seq-len", "4096"),
)


def test_an_overflowing_capacity_factor_is_refused_in_one_line() -> None:
    done = trainplan(*MIXTRAL, "--set", "moe_capacity_factor=1e40")
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    line = refusal(done)
    assert "moe_capacity_factor" in line and "2e+40" in line and "float32" in line
    ok = trainplan(*MIXTRAL, "--set", "moe_capacity_factor=2", "--json")
    assert ok.returncode == 0, ok.stderr
