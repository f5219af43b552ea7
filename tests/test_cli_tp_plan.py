"""``--tp-block-inputs``: the fsdp2 profile's tensor-parallel plan, chosen on evaluate, search,
frontier, in scenario files and the web API — each run as a user runs it, in its own process.

Meta's published Llama 3 405B layout (TP 8, PP 16, DP 128, interleaved v = 8, no recomputation;
Llama 3 Table 4) under torchtitan's plan (fsdp2's default: each block's all-gathered QKV and FC1
inputs whole on every tp rank) does not fit an H100; as Meta ran it, with the sequence shard
kept, it does. The difference is hand-derived below."""

from __future__ import annotations

import json

import pytest

from tests.cli_runs import refusal, run_many, trainplan

META = [
    *("--model", "llama3-405b", "--gpu", "H100-SXM", "--tp", "8", "--pp", "16", "--dp", "128"),
    *("--seq-len", "8192", "--micro-batch", "1", "--global-batch", "2048", "--framework"),
    *("fsdp2", "--zero", "2", "--set", "gradient_dtype=fp32", "--schedule", "interleaved"),
    *(
        "--virtual-stages",
        "8",
        "--set",
        "memory_efficient_norm=true",
        "--set",
        "pipeline_frees_stage_tensors=true",
        "--mfu-convention",
        "6n+attention",
    ),
]
"""Meta's layout and recipe (Llama 3 §3.3): FSDP as ZeRO-2 with FP32 gradients, one-layer
chunks, memory-efficient norms, a pipeline that frees each stage's input and output (§3.3.2)."""

GATHERED_EXTRA = 128 * 2 * (2 * 8192 * 16384) * 7 // 8
"""Bytes torchtitan's plan keeps beyond the shard on the busiest stage: 8 layers × 16
micro-batches in flight (interleaved, v = 8, the stage's 8 one-layer chunks), two inputs per layer
(QKV and FC1; the norms' inputs are freed by memory-efficient norms), each β·s·h = 2·8192·16384
bytes whole instead of 1/8 of it: 60,129,542,144 B."""


@pytest.fixture(scope="module")
def meta() -> dict[str, object]:
    return run_many(
        {
            "default": ["evaluate", *META, "--json"],
            "sharded": ["evaluate", *META, "--set", "tp_block_inputs=sharded", "--json"],
            "gathered": ["evaluate", *META, "--set", "tp_block_inputs=gathered", "--json"],
            "text": ["evaluate", *META],
            "text sharded": ["evaluate", *META, "--set", "tp_block_inputs=sharded"],
            **FREES_NOTHING,
        }
    )


_FREES = ("--set", "pipeline_frees_stage_tensors=true")
_SMALL = ("--model", "llama3-8b", "--gpu", "H100-SXM", "--gpus", "16")
FREES_NOTHING = {
    "frees under megatron": ["evaluate", *_SMALL, "--pp", "2", "--framework", "megatron", *_FREES],
    "frees with pp 1": ["evaluate", *_SMALL, "--pp", "1", "--framework", "fsdp2", *_FREES],
    "frees in a megatron search": ["search", *_SMALL, "--framework", "megatron", *_FREES],
}
"""``pipeline_frees_stage_tensors = true`` where it changes nothing: refused, as ``compile`` is
outside fsdp2."""


PIPELINED_GRADIENTS = 4 * 3_187_933_184 * 127 // 128 - 4 * 398_491_648
COMMUNICATORS = (484 + 76 + 48 + 2 * 4 * 12 + 28 + 292 + 2 * 76 + 258 + 2) * 2**20
"""NCCL's buffers on a middle stage (model/terms/comm_memory.py), each ring its placement's
collective channels × 12 MiB and each communicator its set-up, (pow2Up(channels) × 3 + 2) ×
2 MiB (``group_channels``): the tp 8 ring in a node, 24 channels, 288 + 196 = 484 MiB; the dp
128 ring over 1,024 consecutive ranks, one a node, 4 channels, 48 + 28 = 76; the pp group's ring
(torchtitan's ``clip_grad_norm_`` all-reduces the gradient norm over the pp mesh, whose
communicator otherwise only sends point to point; placed as the world, 16 channels),
192 + 100 = 292; two pipeline neighbours across nodes, 4 channels × 12 MiB each, and the pp
communicator's set-up, 28; the world ring of torchtitan's barrier after step 1, 292; and
torchtitan's "batch" (dp 128) and "loss" (dp·cp = 128) groups, placed as the dp ring, 2 × 76
(model/terms/comm_groups.py data_rings): 1,420 MiB (was 384 + 384 + 384 + 2 × 48 = 1,248 MiB
at 32 channels a ring, no set-up and no barrier; 1,268 MiB, 20,971,520 B more, with them:
141.82 → 141.85 GB gathered, 81.96 → 81.98 GB sharded; 152 MiB = 159,383,552 B more with the
batch and loss groups: 142.01 GB gathered, 82.14 GB sharded). The pp group's ring runs on the
pp group's own communicator, the one its sends use (model/terms/comm_groups.py group_rings): its
connections at the pp group's placement, one rank a node, 4 channels, 48 MiB, set up with the
sends' communicator, in place of 292: 1,176 MiB = 1,233,125,376 B, 141.75 GB gathered,
81.89 GB sharded. NVLink SHARP (model/terms/nvls_memory.py, NCCL src/transport/nvls.cc): the tp 8
ring in the node 2 MiB of credits and 16 × 2 × (128 KiB × 8) × 8 = 256 MiB of buffers, the world
ring (8 a node, the barrier's one float, run as a ring: no buffers) 2 MiB of credits, the rings
with one rank a node none: 1,436 MiB = 1,505,755,136 B; with SDPA's log-sum-exp (LSE) 142.09 GB
gathered, 82.23 GB sharded."""
"""Bytes FSDP2 holds more under a pipeline schedule (PyTorch's ``PipelineStage`` turns gradient
sync off until the last micro-batch; :func:`model.frameworks._fsdp2_pipelined`): the stage's
3,187,933,184 parameters per GPU (8 layers of 398,491,648 each after tp 8) keep whole FP32
gradients instead of 1/128 of them, and the per-unit reduce buffer no longer holds an FP32 copy
of one layer's gradients (only its BF16 gradients): 12,652,109,824 − 1,593,966,592 =
11,058,143,232 B."""


WORKING_GATHERED = (32 + 32 + 4 + 2 * 256 + 32 - (32 + 2 + 2 + 32)) * 2**20
WORKING_SHARDED = WORKING_GATHERED + 256 * 2**20
"""One layer's backward working set (model/backward_working.py, fsdp2, s 8192, h 16384, tp 8
with sequence parallelism), MiB: its largest step, the QKV projection's backward, holds the
output gradient n = 2·s·h/t (32), dQ (32), dK and dV (2 + 2), two whole input gradients
(torchtitan's separate wq/wk/wv: 2 × 2·s·h = 2 × 256) and the reduce-scatter's output (32), less
Q, K, V and the output projection's input it releases (32 + 2 + 2 + 32): 544 MiB under
torchtitan's plan; with the sequence shard kept the norm output is gathered again (2·s·h, 256
more): 800 MiB. (torchtitan opens no world-group communicator: no world ring here.)"""


LSE = 128 * 4 * (128 // 8) * 8192
"""SDPA's FP32 log-sum-exp on the busiest stage: 8 one-layer chunks × 16 micro-batches in flight,
4 B × 128/8 heads × 8,192 tokens each (torchtitan's SDPA returns it and its backward reads it,
model.eager_saved; with memory-efficient norms it was left out before): 67,108,864 B, 142.01 →
142.07 GB gathered, 82.14 → 82.21 GB sharded."""


def test_meta_layout_fits_only_as_meta_ran_it(meta):
    default, sharded = (json.loads(meta[k].stdout) for k in ("default", "sharded"))
    assert PIPELINED_GRADIENTS == 11_058_143_232
    assert COMMUNICATORS == 1_488_977_920 - 244 * 2**20 + 260 * 2**20 == 1_505_755_136
    assert (WORKING_GATHERED, WORKING_SHARDED) == (570_425_344, 838_860_800)
    assert default["memory"]["total_bytes"] == (
        128_887_521_280 + PIPELINED_GRADIENTS + COMMUNICATORS + WORKING_GATHERED + LSE
    )
    assert not default["memory"]["fits"]
    assert sharded["memory"]["total_bytes"] == (
        68_757_979_136 + PIPELINED_GRADIENTS + COMMUNICATORS + WORKING_SHARDED + LSE
    )
    assert sharded["memory"]["fits"]  # 82,227,847,168 B of 83,210,009,600 usable
    assert sharded["memory"]["gradients_bytes"] == 4 * 3_187_933_184
    assert GATHERED_EXTRA == 60_129_542_144
    assert default["memory"]["total_bytes"] - sharded["memory"]["total_bytes"] == (
        GATHERED_EXTRA - (WORKING_SHARDED - WORKING_GATHERED)
    )
    # torchtitan's plan also waits on its collectives (enable_async_tensor_parallel off);
    # the Megatron-style plan runs them beside the weight-gradient GEMMs
    assert (default["time"]["tp_comm_overlap"], sharded["time"]["tp_comm_overlap"]) == (
        "none",
        "async",
    )
    assert default["time"]["step_s"] > sharded["time"]["step_s"]
    assert default["layout"]["tp_block_inputs"] == "gathered"
    assert sharded["layout"]["tp_block_inputs"] == "sharded"
    assert default["defaults_used"]["tp_block_inputs"] == "gathered"
    assert "tp_block_inputs" not in sharded["defaults_used"]
    assert default["layout"]["elementwise"] == "eager"  # fsdp2 without compile, timed and kept


def test_pipeline_frees_stage_tensors_refused_where_it_changes_nothing(meta):
    rule = (
        "--set pipeline_frees_stage_tensors: true applies to fsdp2 with pp > 1 "
        "(PyTorch's pipelining); "
    )
    assert refusal(meta["frees under megatron"]) == rule + "megatron keeps no such tensors"
    assert refusal(meta["frees with pp 1"]) == rule + "with pp 1 there is no pipeline"
    assert refusal(meta["frees in a megatron search"]) == rule + "megatron keeps no such tensors"


def test_gathered_is_the_default_said(meta):
    """Giving the default changes no figure, and it is no longer listed as a default."""
    default, gathered = (json.loads(meta[k].stdout) for k in ("default", "gathered"))
    assert gathered["memory"] == default["memory"]
    assert "tp_block_inputs" not in gathered["defaults_used"]


def test_text_says_which_plan(meta):
    text, sharded = meta["text"].stdout, meta["text sharded"].stdout
    assert "verdict: DOES NOT FIT: over by 58.88 GB" in text  # 142.09 GB − 83.21 GB usable
    assert "tp_block_inputs = gathered" in text.splitlines()[-1]  # Defaults used:
    assert "all-gathered inputs kept whole on every tp rank, torchtitan's plan" in text
    assert "verdict: fits" in sharded and "82.23 GB" in sharded
    assert "kept as the sequence shard, gathered again in backward" in sharded
    assert "elementwise passes eager (fsdp2 without torch.compile, torchtitan's default" in text


def test_megatron_output_unchanged_by_the_plan():
    """Megatron-Core keeps the shard by its own mechanism: nothing said, nothing listed."""
    done = trainplan("evaluate", "--model", "llama3-8b", "--tp", "2", "--json")
    out = json.loads(done.stdout)
    assert out["layout"]["tp_block_inputs"] == "sharded"
    assert "tp_block_inputs" not in out["defaults_used"]


REFUSED = {
    "megatron": (
        ["evaluate", "--model", "llama3-8b", "--tp", "2", "--set", "tp_block_inputs=sharded"],
        "tp_block_inputs: 'sharded' does not apply: it chooses the fsdp2 profile's "
        "tensor-parallel plan, and megatron keeps the sequence shard",
    ),
    "tp 1": (
        ["evaluate", "--model", "llama3-8b", "--framework", "fsdp2"]
        + ["--set", "tp_block_inputs=sharded"],
        "tp_block_inputs: 'sharded' does not apply: with tp 1 there is no tensor parallelism",
    ),
    "no sp": (
        [
            *("evaluate", "--model", "llama3-8b", "--framework", "fsdp2", "--tp", "2"),
            *("--no-sequence-parallel", "--set", "tp_block_inputs=gathered"),
        ],
        "tp_block_inputs: 'gathered' does not apply: with sequence parallelism off",
    ),
    "search without fsdp2": (
        [
            *("search", "--model", "llama3-8b", "--gpus", "8", "--framework", "megatron"),
            *("--framework", "deepspeed", "--set", "tp_block_inputs=sharded"),
        ],
        "and megatron, deepspeed keep the sequence shard of the blocks' inputs, a mechanism of "
        "their own (add --framework fsdp2)",
    ),
    "search tp 1": (
        [
            *("search", "--model", "llama3-8b", "--gpus", "8", "--framework", "fsdp2"),
            *("--tp", "1", "--set", "tp_block_inputs=sharded"),
        ],
        "with tp 1 there is no tensor parallelism",
    ),
    "frontier one GPU": (
        [
            *("frontier", "--model", "llama3-8b", "--gpus", "1", "--framework", "fsdp2"),
            *("--set", "tp_block_inputs=sharded"),
        ],
        "with tp 1 there is no tensor parallelism",
    ),
    "bad value": (
        ["evaluate", "--model", "llama3-8b", "--set", "tp_block_inputs=shard"],
        "tp_block_inputs: 'shard' is not one of sharded, gathered",
    ),
}


def test_refused_where_it_chooses_nothing():
    done = run_many({k: args for k, (args, _) in REFUSED.items()})
    for key, (_, line) in REFUSED.items():
        assert line in refusal(done[key]), key


def test_search_and_scenario_take_it(tmp_path):
    """The search weighs the shard-keeping plan with the very terms evaluate sums: its answer's
    memory is evaluate's for that layout; a scenario file's ``[cluster]`` key is the option."""
    scenario = tmp_path / "fsdp2.toml"
    scenario.write_text(
        'model = "llama3-8b"\ngpus = 8\nframework = "fsdp2"\n[space]\ntp = [2]\npp = [1]\n'
        '[cluster]\ntp_block_inputs = "sharded"\n'
    )
    bad = tmp_path / "bad.toml"
    bad.write_text('model = "llama3-8b"\ngpus = 8\n[cluster]\ntp_block_inputs = "shard"\n')
    done = run_many(
        {
            "search": ["search", "--scenario", str(scenario), "--json"],
            "bad": ["search", "--scenario", str(bad)],
            "megatron": ["search", "--scenario", str(scenario), "--framework", "megatron"],
        }
    )
    answer = json.loads(done["search"].stdout)
    lay = answer["layout"]
    assert (lay["framework"], lay["tp"], lay["tp_block_inputs"]) == ("fsdp2", 2, "sharded")
    args = [
        *("evaluate", "--model", "llama3-8b", "--framework", "fsdp2", "--tp", "2", "--dp", "4"),
        *("--zero", str(lay["zero_stage"]), "--recompute", lay["recompute"], "--micro-batch"),
        *(str(lay["micro_batch_size"]), "--set", "tp_block_inputs=sharded", "--json"),
    ]
    evaluated = json.loads(trainplan(*args).stdout)
    assert answer["memory"]["total_bytes"] == evaluated["memory"]["total_bytes"]
    assert refusal(done["bad"]).endswith("tp_block_inputs: 'shard' is not one of sharded, gathered")
    assert "(add --framework fsdp2)" in refusal(done["megatron"])  # the option overrides the file


@pytest.mark.slow
def test_search_finds_meta_layout_only_as_meta_ran_it():
    """Llama 3 405B on 16,384 H100s, Megatron-Core and FSDP2 weighed: under torchtitan's plan
    Meta's layout does not fit and Megatron-Core's pp 32 wins; with the shard kept and the
    stage inputs freed by memory-efficient norms (Llama 3 §3.3.2; under the pipeline schedule
    FSDP2 holds the stage's gradients whole in FP32, and without the freed inputs the layout no
    longer fits), the stage tensors freed by Meta's pipeline and its layers fused (as the README's
    command says), and the allocator's release-and-retry accepted (FSDP2's all-gather pool takes
    the reserved bytes past the memory), the search finds Meta's own layout (Llama 3 Table 4),
    with the ZeRO-2 Meta ran: ZeRO-3 gathers the weights again every micro-batch, and those
    gathers hold NCCL's SMs beside the computation they hide under (``nccl_sm_charge``, on by
    default: 7.501 s a step against ZeRO-2's 6.473 s; uncharged 6.806 s against 6.429 s, the
    forward's gathers waiting beyond the forward, model.dp_exposure)."""
    base = ["search", "--model", "llama3-405b", "--gpus", "16384", "--gpu", "H100-SXM"]
    base += ["--framework", "megatron", "--framework", "fsdp2", "--json"]
    done = run_many(
        {
            "default": base,
            "sharded": [
                *base,
                "--set",
                "tp_block_inputs=sharded",
                "--set",
                "memory_efficient_norm=true",
                "--set",
                "pipeline_frees_stage_tensors=true",
                "--set",
                "compile=true",
                "--allocator-retries-ok",  # its reserved bytes pass the memory by 0.37 GB
            ],
        }
    )
    default, sharded = (json.loads(done[k].stdout)["layout"] for k in ("default", "sharded"))
    assert (default["framework"], default["pp"], default["dp"]) == ("megatron", 32, 64)
    shape = ("framework", "zero_stage", "tp", "pp", "dp", "virtual_stages", "recompute")
    assert tuple(sharded[k] for k in shape) == ("fsdp2", 2, 8, 16, 128, 8, "none")
