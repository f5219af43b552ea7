"""Per-stage recompute counts under ``fsdp2`` refused by the one rule the per-stage search reads
(:func:`model.recompute_counts.recompute_counts_refusal`), checked as a user meets it: ``python
-m trainplan evaluate`` in its own process, text and ``--json`` (exit 2, one line on stderr,
nothing on stdout, no traceback).

torchtitan runs no count of a stage's layers: at b5bcd76c6
``torchtitan/distributed/activation_checkpoint.py`` ``ActivationCheckpointing.apply`` wraps every
transformer block with one policy (no layer-level option since 114151ad4), and before it
``selective_ac_option = "N"`` wrapped every N-th block of the model part, one N for every
stage."""

from __future__ import annotations

import subprocess

import pytest

from tests import cli_runs
from tests.optimizer.test_per_stage import tiny_case
from trainplan.optimizer.stage_rules import takes_counts

RULE = (
    "Error: --recompute-layers: 4,2 under fsdp2: torchtitan wraps every transformer block with "
    "one checkpointing policy (ActivationCheckpointing.apply; before 114151ad4 every N-th block "
    "of the model), never the first k layers of each stage; use recompute full, selective or "
    "none on every layer"
)
ARGS = ("evaluate", "--model", "llama3-8b", "--gpus", "8", "--dp", "4", "--pp", "2")


def trainplan(*args: str) -> subprocess.CompletedProcess[str]:
    return cli_runs.trainplan(*args, timeout=300)


@pytest.mark.parametrize("recompute", ["none", "selective"])
@pytest.mark.parametrize("as_json", [False, True])
def test_evaluate_refuses_per_stage_counts_under_fsdp2(recompute, as_json):
    """Llama 3 8B's 32 layers on pp 2 (16 a stage), the first 4 of stage 0 and 2 of stage 1
    fully recomputed: Megatron-LM's block method, which torchtitan has no setting for, with
    either mode on the other layers."""
    extra = ["--framework", "fsdp2", "--recompute", recompute, "--recompute-layers", "4,2"]
    p = trainplan(*ARGS, *extra, *(["--json"] if as_json else []))
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and not p.stdout and len(lines) == 1, p.stderr
    assert "Traceback" not in p.stderr and lines[0] == RULE, p.stderr


def test_the_same_counts_run_under_megatron_and_every_layer_under_fsdp2():
    """The counts are Megatron-LM's (``--recompute-method block --recompute-num-layers``):
    accepted there; under fsdp2 the launchable form, ``recompute full`` on every layer, is."""
    assert trainplan(*ARGS, "--framework", "megatron", "--recompute-layers", "4,2").returncode == 0
    assert trainplan(*ARGS, "--framework", "fsdp2", "--recompute", "full").returncode == 0


def test_the_per_stage_search_reads_the_same_rule():
    """:func:`optimizer.stage_rules.takes_counts` is the negation of the rule ``evaluate``
    refused by above: False under fsdp2 with any mode, True under megatron with recompute none
    (6 layers on pp 2, the per-stage tests' tiny case)."""
    case = tiny_case(6, 2)
    for mode in ("none", "selective", "full"):
        lay = case.layout.with_(framework="fsdp2", zero_stage=2, recompute=mode)
        assert not takes_counts(case, lay)
    assert takes_counts(case, case.layout.with_(framework="megatron", recompute="none"))
