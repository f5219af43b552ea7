"""``grad_stats_group`` refused where nothing reads it, checked as a user meets it: ``python -m
trainplan`` in its own process, text and ``--json`` (exit 2, one line on stderr, nothing on
stdout, no traceback).

The key is read by :func:`model.terms.comm_groups.grad_stats_rings` under ``megatron`` at ZeRO
≥ 1 only: Megatron-Core's ``_get_megatron_optimizer_based_on_param_groups``
(``megatron/core/optimizer/__init__.py`` at d98e8a64dd) gives the distributed optimizer
``grad_stats_parallel_group = intra_dist_opt_group`` (the group whose Megatron-LM version the
key names) and ``Float16OptimizerWithFloat16Params`` (ZeRO-0) the model-parallel group in every
version; DeepSpeed and torchtitan reduce their grad norms over groups of their own
(:func:`model.key_rules.check_grad_stats_group`)."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests import cli_runs
from trainplan.model.errors import LayoutError
from trainplan.model.key_rules import check_grad_stats_group

RULE = (
    "grad_stats_group: 'world' is read by Megatron-Core's optimizer at ZeRO ≥ 1 only "
    "(--framework megatron with zero_stage 1 or 3, the group its grad norm reduces over), not "
)


def trainplan(*args: str) -> subprocess.CompletedProcess[str]:
    return cli_runs.trainplan(*args, timeout=300)


def assert_refused(p: subprocess.CompletedProcess[str], where: str) -> None:
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and not p.stdout and len(lines) == 1, p.stderr
    assert "Traceback" not in p.stderr and lines[0] == f"Error: --set {RULE}{where}", p.stderr


@pytest.mark.parametrize(
    ("framework", "zero", "where"),
    [
        ("fsdp2", "3", "fsdp2 zero_stage 3"),
        ("deepspeed", "1", "deepspeed zero_stage 1"),
        ("megatron", "0", "megatron zero_stage 0"),
    ],
)
@pytest.mark.parametrize("as_json", [False, True])
def test_evaluate_refuses_world_where_no_optimizer_reads_it(framework, zero, where, as_json):
    """llama3-8b on 8 GPUs under fsdp2 ZeRO-3, DeepSpeed ZeRO-1 and Megatron ZeRO-0: none of
    these layouts' optimizers reduces over the group the key names, so ``world`` would change
    nothing the plan prints; refused, the layout named."""
    args = ["evaluate", "--model", "llama3-8b", "--gpus", "8", "--framework", framework]
    args += ["--zero", zero, "--set", "grad_stats_group=world", *(["--json"] if as_json else [])]
    assert_refused(trainplan(*args), where)


def test_evaluate_reads_it_under_megatron_zero_1():
    """Megatron ZeRO-1, dp 8 on one H100 node: ``world`` drops the distributed optimizer's own
    world-sized gradient-statistics communicator, one ring in a node
    (:func:`model.terms.comm_memory.collective_channels`): 24 channels × 12 MiB of buffers =
    288 MiB, and the set-up of 32 channels, (32 × 3 + 2) × 2 MiB = 196 MiB; 484 MiB =
    507,510,784 B; and NVLink SHARP's credits on it, 16 × 2 × 64 B × 8 heads → 2 MiB (a one-float
    all-reduce sets up no NVLS buffers, :mod:`model.terms.nvls_memory`): 486 MiB. Communicators
    1,797,259,264 → 1,287,651,328 B, and the total by as much. (Before NVLink SHARP was counted,
    1,522,532,352 → 1,015,021,568 B; the dp ring of 8 in the node, which reduce-scatters and
    all-gathers, holds 16 × 2 × (128 KiB × 8) × 8 = 256 MiB of NVLS buffers and 2 of credits, the
    world ring 2 of credits: +260 MiB.)"""
    base = ["evaluate", "--model", "llama3-8b", "--gpus", "8", "--framework", "megatron"]
    base += ["--zero", "1", "--json"]
    own, world = (
        json.loads(trainplan(*base, *extra).stdout)
        for extra in ((), ("--set", "grad_stats_group=world"))
    )
    m_own, m_world = own["memory"], world["memory"]
    ring = (24 * 12 + (32 * 3 + 2) * 2 + 2) * 2**20
    assert ring == 507_510_784 + 2 * 2**20 == 509_607_936
    assert m_own["communicator_bytes"] == 1_797_259_264
    assert m_own["communicator_bytes"] - ring == m_world["communicator_bytes"] == 1_287_651_328
    assert 1_015_021_568 + (256 + 2 + 2) * 2**20 == 1_287_651_328
    assert m_own["total_bytes"] - m_world["total_bytes"] == ring
    assert world["time"]["grad_stats_group"] == "world"


@pytest.mark.parametrize("as_json", [False, True])
def test_search_refuses_world_where_no_framework_searched_reads_it(as_json):
    """A search over fsdp2 (ZeRO-2 and 3) or Megatron at ZeRO-0 only: no candidate reads the
    key; refused before searching, the frameworks and stages searched named."""
    tail = ["--set", "grad_stats_group=world", *(["--json"] if as_json else [])]
    p = trainplan("search", "--model", "llama3-8b", "--gpus", "8", "--framework", "fsdp2", *tail)
    assert_refused(p, "the frameworks searched (fsdp2 zero_stage 2, fsdp2 zero_stage 3)")
    args = ["search", "--model", "llama3-8b", "--gpus", "8", "--framework", "megatron"]
    p = trainplan(*args, "--zero", "0", *tail)
    assert_refused(p, "the frameworks searched (megatron zero_stage 0)")


def test_the_rule_keeps_a_search_where_one_framework_reads_it():
    """One rule for both (:func:`model.key_rules.check_grad_stats_group`): a search over
    megatron and fsdp2 keeps both (megatron's ZeRO-1 and 3 read the key; fsdp2's layouts are
    unchanged by it), the default value is never refused."""
    check_grad_stats_group("world", [("fsdp2", 2), ("megatron", 0), ("megatron", 1)], "x")
    check_grad_stats_group("intra_dist_opt_instance", [("fsdp2", 2)], "x")
    with pytest.raises(LayoutError, match="not textbook zero_stage 1$"):
        check_grad_stats_group("world", [("textbook", 1)], "textbook zero_stage 1")
