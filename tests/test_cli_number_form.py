"""One number form in refusals and layout lines (thousands grouped, as every other refusal echoes
``4,000,000``), checked in fresh processes as a user runs the commands."""

from __future__ import annotations

from tests.cli_runs import refusal, run_many


def test_refusals_and_layout_lines_group_thousands():
    """``ckpt --layers 4000``: the value echoed as docs/tools.md writes it (4,000 above the
    limit of 1,000); a search at B 4,000,000 and s 2 on 64 GPUs: dp 32 × pp 2, b 8, so
    m = 4,000,000 / (32 · 8) = 15,625 micro-batches, every count grouped on the layout line."""
    done = run_many(
        {
            "ckpt": ["ckpt", "--layers", "4000"],
            "search": [
                "search",
                "--model",
                "llama3-8b",
                "--gpus",
                "64",
                "--seq-len",
                "2",
                "--global-batch",
                "4,000,000",
            ],
        }  # fmt: skip
    )
    assert refusal(done["ckpt"]).startswith("--layers: 4,000 is above the limit of 1,000 layers")
    assert done["search"].returncode == 0, done["search"].stderr
    line = next(x for x in done["search"].stdout.splitlines() if x.startswith("layout: "))
    assert ", b 8, B 4,000,000, m 15,625, s 2, " in line, line
    assert 4_000_000 // (32 * 8) == 15_625 and line.startswith("layout: dp 32 × tp 1 × pp 2")
