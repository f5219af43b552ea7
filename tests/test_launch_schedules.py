"""The launch line of a split-backward schedule: torchtitan's own ``pipeline_parallel_schedule``
names (torch.distributed.pipelining ``get_schedule_class``), and a note, never a silent 1F1B,
where a framework has no such schedule."""

from __future__ import annotations

import pytest

from trainplan.interface.launch import megatron_flags, torchtitan_toml
from trainplan.model.layout import Layout
from trainplan.model.specs import Architecture

ARCH = Architecture(
    num_layers=8, hidden_size=8, num_attention_heads=2, ffn_hidden_size=32, vocab_size=16
)


@pytest.mark.parametrize(
    ("schedule", "v", "name"),
    [
        ("zb-h1", 1, "InterleavedZeroBubble"),
        ("zb-v", 2, "ZBVZeroBubble"),
        ("dualpipev", 2, "DualPipeV"),
    ],
)
def test_torchtitan_names(schedule: str, v: int, name: str) -> None:
    """torchtitan runs these: its schedule name, one split point per model chunk (pp·v − 1)."""
    lay = Layout(pp=2, schedule=schedule, virtual_stages=v, framework="fsdp2")
    flags = torchtitan_toml(ARCH, lay)
    assert f'pipeline_parallel_schedule = "{name}"' in flags.flags
    split = next(x for x in flags.flags if x.startswith("pipeline_parallel_split_points"))
    assert split.count("layers.") == 2 * v - 1
    assert flags.notes == ()


def test_what_a_framework_cannot_run_is_said() -> None:
    """DualPipe runs in deepseek-ai/DualPipe only: torchtitan's fragment and Megatron-LM's flags
    each say so in a note."""
    lay = Layout(pp=2, schedule="dualpipe", framework="textbook")
    assert any("deepseek-ai/DualPipe" in n for n in torchtitan_toml(ARCH, lay).notes)
    notes = megatron_flags(ARCH, lay, 8).notes
    assert any("Megatron-Core runs 1f1b and interleaved only" in n for n in notes)


VALIDATION_TABLE = """
[[table]]
source = "a run that used DualPipe"
framework = "megatron"
framework_as_run = "a DualPipe trainer"
published = "step_s"
convention = "seconds per step"
recipe = "DualPipe"

[[table.run]]
key = "r"
model = "llama3-8b"
gpu = "H100"
num_gpus = 64
pp = 4
schedule = "dualpipe"
global_batch_size = 64
seq_len = 4096
step_s = 1.0
"""


def test_a_published_run_under_a_framework_without_its_schedule_is_listed() -> None:
    """A validation row whose framework profile cannot run its schedule is listed with
    check_schedule_framework's reason, outside the statistics — never evaluated as 1F1B."""
    from trainplan.interface.fidelity.validation import runs_from_text

    (run,) = runs_from_text(VALIDATION_TABLE, "t")
    assert not run.counted
    assert run.cannot_express is not None
    assert run.cannot_express.startswith(
        "schedule: dualpipe does not run under framework megatron (runs under: textbook;"
    )
