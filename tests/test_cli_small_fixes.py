"""A new user's small findings on the command line, each in a fresh process: one limit and one
message for ``ckpt -n``; an example's header follows the values ``--set`` changed; a fractional
count of micro-batches in flight printed as the per-stage table prints it."""

from __future__ import annotations

import json

from tests.cli_runs import refusal, run_many

CKPT_LIMIT = (
    "above the limit of 1,000 layers (the walk-through lists every tensor at every one of its "
    "3·n steps, n² cells: use a smaller n to see the pattern)"
)
INTERLEAVED_3 = [
    "evaluate", "--model", "llama3-70b", "--gpus", "24", "--tp", "8", "--pp", "3",
    "--virtual-stages", "2", "--global-batch", "24", "--micro-batch", "1",
    "--schedule", "interleaved",
]  # fmt: skip


def test_small_fixes():
    done = run_many(
        {
            "ckpt 4,000": ["ckpt", "-n", "4,000"],
            "ckpt 100000": ["ckpt", "-n", "100000"],
            "ckpt 1000": ["ckpt", "-n", "1000", "--step", "1"],
            "example": ["example", "1f1b-4x8", "--set", "microbatches=16"],
            "example json": ["example", "1f1b-4x8", "--set", "microbatches=16", "--json"],
            "example as published": ["example", "1f1b-4x8"],
            "in flight": INTERLEAVED_3,
            "in flight json": [*INTERLEAVED_3, "--json"],
        }
    )
    # one limit, one message, the value in the one number form however typed: 4,000 and 100,000
    assert refusal(done["ckpt 4,000"]) == f"--layers: 4,000 is {CKPT_LIMIT}"
    assert refusal(done["ckpt 100000"]) == f"--layers: 100,000 is {CKPT_LIMIT}"
    assert done["ckpt 1000"].returncode == 0

    # 16 micro-batches on 4 stages: bubble (p − 1)/(m + p − 1) = 3/19, not the published 3/11
    head = done["example"].stdout.splitlines()[0]
    assert head.startswith(
        "Example 1f1b-4x8 with --set microbatches=16 (the figures below are for these; as "
        "published: 4 stages, 8 micro-batches, 1F1B: bubble 3/11 = 27%)"
    )
    assert "bubble_fraction 3/19 = 15.8%" in done["example"].stdout
    js = json.loads(done["example json"].stdout)
    assert js["changed"] == {"microbatches": "16"} and js["bubble_fraction_exact"] == "3/19"
    assert done["example as published"].stdout.startswith(
        "Example 1f1b-4x8: 4 stages, 8 micro-batches, 1F1B: bubble 3/11"
    )

    # the busiest stage's count, as the JSON holds it, printed to four significant figures
    held = json.loads(done["in flight json"].stdout)["pipeline"]["microbatches_in_flight"]
    assert held == 3.962962962962963
    assert "; 3.963 micro-batches in flight on the busiest stage;" in done["in flight"].stdout
