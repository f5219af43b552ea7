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
        ("zb-v", 2, "ZBVZeroBubble"),
        ("dualpipev", 2, "DualPipeV"),
    ],
)
def test_torchtitan_names(schedule: str, v: int, name: str) -> None:
    """torchtitan runs these: its schedule name, and its model chunks only where the plan's split
    is not the one torchtitan generates (two stages per rank for these schedules; 8 layers over
    4 chunks: 10 effective = 4·2 + 2 → 3, 3, 2, 2 → 2, 3, 2, 1, the fsdp2 plan's own split).
    Another split (textbook's 2 × 4) is written out, one module list per model chunk."""
    lay = Layout(pp=2, schedule=schedule, virtual_stages=v, framework="fsdp2")
    flags = torchtitan_toml(ARCH, lay)
    assert f'pipeline_parallel_schedule = "{name}"' in flags.flags
    assert not any(x.startswith("module_fqns_per_model_part") for x in flags.flags)
    assert flags.notes == ()
    even = torchtitan_toml(ARCH, lay.with_(framework="textbook")).flags
    split = next(x for x in even if x.startswith("module_fqns_per_model_part"))
    assert split.count("], [") == 2 * v - 1 and split.count("layers.") == 8


def test_zb_h1_is_not_written_as_torchtitans_interleaved_zero_bubble() -> None:
    """torchtitan _get_pipeline_metadata: InterleavedZeroBubble (a PipelineScheduleMulti)
    "requires at least 2 stages per rank"; ZB-H1 has one, so the fragment says so."""
    lay = Layout(pp=2, schedule="zb-h1", framework="textbook")
    flags = torchtitan_toml(ARCH, lay)
    assert 'pipeline_parallel_schedule = "1F1B"' in flags.flags
    assert any("needs at least 2 stages per rank" in n for n in flags.notes)


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


def test_v_placement_sets_each_ranks_layers() -> None:
    """Under ZB-V (and DualPipeV) rank i holds model chunks i and 2·pp − 1 − i
    (model.split.chunk_ranks; torchtitan ``style="v"``), not i and i + pp. Chunks of 1, 2, 3 and
    4 layers on pp 2: rank 0 holds chunks 0 and 3 (1 + 4 = 5 layers: 0, 6, 7, 8, 9), rank 1
    chunks 1 and 2 (2 + 3 = 5) — the loop placement would give 1 + 3 = 4 and 2 + 4 = 6."""
    from trainplan.interface.launch import single_count_layout

    arch = Architecture(
        num_layers=10, hidden_size=8, num_attention_heads=2, ffn_hidden_size=32, vocab_size=16
    )
    every = Layout(pp=2, virtual_stages=2, schedule="zb-v", stage_layers=(1, 2, 3, 4))
    # 4 recomputed per chunk = every layer of every chunk (the largest has 4): torchtitan's
    # whole-model "full", which a per-rank count of (4, 6) layers would not have matched
    toml = torchtitan_toml(arch, every.with_(recompute_layers=(4, 4))).flags
    assert toml[-1] == 'mode = "full"'
    assert 'pipeline_parallel_schedule = "ZBVZeroBubble"' in toml
    assert (
        'module_fqns_per_model_part = [["tok_embeddings", "layers.0"], ["layers.1", "layers.2"], '
        '["layers.3", "layers.4", "layers.5"], ["layers.6", "layers.7", "layers.8", "layers.9", '
        '"norm", "output"]]'
    ) in toml
    # one --recompute-num-layers, capped at each rank's largest chunk: rank 0's is chunk 3
    # (4 layers), rank 1's chunk 2 (3 layers)
    single = single_count_layout(every.with_(recompute_layers=(4, 1)), arch)
    assert single is not None and single.recompute_layers == (4, 3)


def test_megatron_default_split_pp_does_not_divide_is_written() -> None:
    """Megatron-LM's ``validate_args`` asserts pp divides L unless the split is given
    (``--decoder-first/last-pipeline-num-layers`` or the layout string), so a plan whose default
    split is uneven writes it: 10 layers over 4 stages, ceil 3 each with the two ends one fewer,
    2, 3, 3, 2; 8 layers over 4 (2 each, Megatron-LM's own split) write nothing."""
    ten = Architecture(
        num_layers=10, hidden_size=8, num_attention_heads=2, ffn_hidden_size=32, vocab_size=16
    )
    flags = megatron_flags(ten, Layout(pp=4), 8).flags
    assert flags[-4:] == (
        "--decoder-first-pipeline-num-layers", "2", "--decoder-last-pipeline-num-layers", "2",
    )  # fmt: skip
    assert not any("pipeline-num-layers" in x for x in megatron_flags(ARCH, Layout(pp=4), 8).flags)
