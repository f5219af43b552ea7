"""`trainplan search --per-stage` says what its OPTIMAL is proven over where the space holds
interleaved shapes: only splits whose chunks on a stage are equal (the stage tables give an
interleaved stage multiples of v layers, optimizer/stage_rules.py ``layer_counts``), while
Megatron-Core also builds unequal chunks (megatron/core/transformer/
pipeline_parallel_layer_layout.py ``PipelineParallelLayerLayout``) and `trainplan evaluate` prices
them. The scope is needed: on a 7-layer model over pp 2 (no split of 7 layers into 2 or 3 equal
chunks a stage) an unequal-chunk plan `evaluate` confirms is faster than the search's answer."""

from __future__ import annotations

import json

from tests.cli_runs import run_many

MODEL = ["--arch", "llama", "--layers", "7", "--hidden", "256", "--heads", "4", "--ffn-hidden",
         "688", "--vocab", "1024", "--seq-len", "8192", "--global-batch", "8", "--gpus", "2",
         "--gpu", "H100-SXM", "--pp", "2", "--tp", "1", "--micro-batch", "1"]  # fmt: skip
HEADROOM = 0.97042613
"""Memory kept free: capacity × (1 − 0.97042613) = 2.461 GB of the H100's 83.21 GB usable, so
the 2.391 GB of the unequal-chunk plan below fits."""
SEARCH = [*MODEL, "--zero", "0", "--zero", "1", "--recompute", "none", "--recompute", "full",
          "--schedule", "1f1b", "--schedule", "interleaved", "--virtual-stages", "2",
          "--virtual-stages", "3", "--headroom", str(HEADROOM), "--per-stage"]  # fmt: skip
UNEQUAL = [*MODEL, "--zero", "0", "--recompute", "none", "--schedule", "interleaved",
           "--virtual-stages", "2", "--stage-layers", "2,2,2,1", "--json"]  # fmt: skip
"""Stage 0 holds chunks 0 and 2 (2 + 2 layers), stage 1 chunks 1 and 3 (2 + 1): Megatron-Core's
``--pipeline-model-parallel-layout "Ett|tt|tt|tL"``."""
SCOPE = (
    "OPTIMAL (proven over the shapes searched, interleaved ones (v > 1) only over splits whose "
    "chunks on a stage are equal, not the unequal chunks of --pipeline-model-parallel-layout)"
)


def test_optimal_says_its_scope_and_an_unequal_chunk_plan_is_faster():
    """The search answers 1F1B 4/3 layers at 16.6 ms, optimal over its space, and says the
    interleaved shapes (7 layers, v 2 and 3) were not searched rather than infeasible; evaluate's
    interleaved v 2 with chunks 2, 2, 2, 1 fits within the same headroom and takes 15.2 ms."""
    done = run_many(
        {
            "text": ["search", *SEARCH],
            "json": ["search", *SEARCH, "--json"],
            "eval": ["evaluate", *UNEQUAL],
        }
    )
    assert all(d.returncode == 0 for d in done.values()), {k: d.stderr for k, d in done.items()}
    text = done["text"].stdout
    assert text.splitlines()[0].split(": ", 1)[1].startswith(SCOPE)
    assert (
        "interleaved v=2, pp 2: not searched (the search gives each stage 2 equal chunks, so a "
        "multiple of 2 layers each: 7 layers cannot split so)" in text
    )
    assert (
        "interleaved v=3, pp 2: not searched (the search gives each stage 3 equal chunks, so a "
        "multiple of 3 layers each: 7 layers cannot split so)" in text
    )
    ps = json.loads(done["json"].stdout)["per_stage"]
    assert ps["status"] == "optimal" and ps["proof_scope"] in SCOPE
    assert ps["stage_layers"] == [4, 3] and round(ps["step_s"] * 1e3, 1) == 16.6
    inter = [s for s in ps["shapes"] if s["virtual_stages"] > 1]
    assert {(s["virtual_stages"], s["status"]) for s in inter} == {
        (2, "not-searched"),
        (3, "not-searched"),
    }
    ev = json.loads(done["eval"].stdout)
    mem = ev["memory"]
    assert mem["fits"] and mem["fit_bytes"] <= int(mem["capacity_bytes"] * (1 - HEADROOM))
    assert round(ev["time"]["step_s"] * 1e3, 1) == 15.2 < round(ps["step_s"] * 1e3, 1)
