"""Megatron-DeepSpeed's TorchScript bias-dropout-add masks (model.activation_rows.
BIAS_DROPOUT_MASKS) as a user meets them, each command in its own process: the search answer
they move, the layout they no longer let fit, ``--set bias_dropout_fusion=false`` (the run's
``--no-bias-dropout-fusion``) and its refusal under another framework, the assumption line."""

import json

import pytest

from tests.cli_runs import refusal, run_many

SEARCH = ["search", "--model", "llama3-70b", "--gpus", "32", "--gpu", "H100-SXM",
          "--framework", "deepspeed", "--offload-optimizer", "1"]  # fmt: skip
OLD = ["evaluate", "--model", "llama3-70b", "--gpu", "H100-SXM", "--framework", "deepspeed",
       "--dp", "2", "--tp", "4", "--pp", "4", "--zero", "1", "--offload-optimizer", "1",
       "--micro-batch", "1", "--global-batch", "2048"]  # fmt: skip
OFF = ["--set", "bias_dropout_fusion=false"]
PP8 = [*OLD[:7], "--gpus", "32", "--dp", "1", "--tp", "4", "--pp", "8", *OLD[13:],
       "--json"]  # fmt: skip


@pytest.fixture(scope="module")
def done():
    return run_many(
        {
            "search": [*SEARCH, "--json"],
            "old": OLD,
            "old_off": [*OLD, *OFF],
            "old_off_json": [*OLD, *OFF, "--json"],
            "megatron": ["evaluate", "--model", "llama3-70b", "--tp", "4", "--pp", "4", *OFF],
            "pp8": PP8,
        }
    )


def test_the_search_answer_moves(done):
    """Without the masks the search answered dp 2 × tp 4 × pp 4 (552.133 s, 82.71 GB). Its
    stage 0 holds 20 layers × 4 micro-batches in flight (1F1B at pp 4): the masks add 80 ×
    2 × 8,192 × 8,192 / 4 = 80 × 33,554,432 = 2,684,354,560 B, 82.71 → 85.39 GB of 83.21: it
    does not launch. The answer was then dp 1 × tp 4 × pp 8 (below), 76.99 GB:
    76,841,011,712 B before NVLink SHARP was counted, and 138 MiB of it (:mod:`model.terms.nvls_memory`): the tp
    ring of 4 in a node 2 MiB of credits and 16 × 2 × (128 KiB × 8) × 4 = 128 MiB of buffers, the
    model-parallel, pipe, slice and world rings (one-float or small collectives) 2 MiB of
    credits each: 130 + 4 × 2 = 138 MiB, 144,703,488 B → 76,985,715,200 B.

    The step: 582.107 s with the CPU Adam step at the DIMMs' 76.8 GB/s; 583.436 s at the DGX
    H100's 14 cores × 2.27 GB/s; + 6.723 s of NCCL's SM charge φ = 1 − 1/1.314 = 0.238965 on
    the dense layers' and the output layer's asynchronous tp collectives
    (:func:`model.step_time.kind_parts`). Each tp 4 collective of a micro-batch (100,663,296 B)
    takes 0.325978 ms; a layer's backward hides 4 of them under its GEMMs (for attention and
    the MLP, the input's re-gather under the column-parallel dgrad and the input gradient's
    reduce-scatter under its wgrad), now waiting φ × 1.303914 ms = 0.311590 ms, and the output
    layer's 2 (the gradient's all-gather under the logits' dgrad, the reduce-scatter under
    their wgrad) φ × 0.651957 ms = 0.155795 ms. The last stage, 10 layers and the output layer,
    stays the slowest (0.280269 → 0.283540 s a micro-batch): 10 × 0.311590 + 0.155795 =
    3.271692 ms over m + pp − 1 = 2,048 + 7 = 2,055 slots, 6.403 + 0.320 = 6.723328 s:
    583.436472 → 590.160 s.

    DeepSpeed's pipeline engine as it runs (model/deepspeed_pipe.py): the transfers and
    all-gathers on TrainSchedule's critical path (4m + 2pp − 8 = 8,200 and 3m + 3pp − 8 =
    6,160, for 4 and 3 a cycle over 2,055 cycles) and each gather's zeros and clone of the
    whole 134,217,728 B tensor (3 × at 0.9 of 3.35 TB/s + 2 × 3 µs = 0.1395 ms): the pipeline
    messages 5.067 → 5.917 s. Autograd's add into the BF16 ``.grad`` of the ZeRO optimizer
    (ZeRO-1, offloaded: no BF16_Optimizer) in 2,048 + 8 − 2 = 2,054 backwards, 6 B × the last
    stage's 10 · 213,925,888 + 8,192 + 262,668,288 = 2,401,935,360 elements at the H100's
    triad (3.35 TB/s × 0.8866): 9.967 s (model/deepspeed_accumulate.py). 590.160 + 0.851 +
    9.967 = 600.977 s (that layout, before the charge followed the algorithm).

    Since the charge follows the algorithm NCCL runs each group's collectives as
    (model.nccl_channels) the answer is dp 8 × tp 4 × pp 1 under ZeRO-3, 588.579 s, 73.77 GB:
    its dp group (8 ranks, 2 on each of 4 nodes) all-gathers and reduce-scatters per
    micro-batch as a ring on 8 blocks (2 search channels at 48 GB/s, duplicated, doubled by
    Postset), φ_dp = 1 − 1/1.177 = 0.150382, so of its 248.913 s of dp traffic each pass waits
    φ_dp of its seconds, 37.432 s (59.48 s at NVLS's 0.238965, which kept it behind); with
    484.062 s of compute, 47.295 s of tp exposed (the tp 4 all-gathers and reduce-scatters on
    the node's 24 ring blocks, φ_tp = 1 − 1/1.350) and the CPU Adam step's 19.790 s. dp 1 ×
    tp 4 × pp 8 is 601.548 s now (590.731 s before its pipeline messages and accumulation,
    its tp at φ_tp: 0.571 s more), slower.

    NCCL runs an all-reduce of 4 GPUs of an H100 node as a ring (model/nccl_search.py: NVLS's
    240 GB/s of bus bandwidth against the ring's 360): the tp ring of 4 holds NVLS's 2 MiB of
    credits, not 130 (73.77 → 73.64 GB), and the cross-entropy's tp 4 all-reduces read the NVLS
    curve ÷ 480/370: tp exposed 47.295 → 47.302 s, 588.586 s; dp 1 × tp 4 × pp 8 601.601 s
    (601.406 s with 1F1B's bubble the order's own, model.pipeline_onef: DeepSpeed's
    TrainSchedule's fill and drain run through the seven faster stages, not seven of the slowest).

    DeepSpeed ZeRO-3's all-gathers counted by its fetches (model/deepspeed_fetches.py: 80 layers
    of 4 weights at tp 4, 214 M elements a layer, beyond 1e9 live: one call a weight, 320 a pass,
    640 a micro-batch, not the 36 reduce buckets, ⌈70.55e9 / 4 / 5e8⌉, for both passes) and a
    ring's latency by its placement (the dp ring's 8 ranks, 2 on each of 4 nodes: 8.4 + 3 × 14 +
    4 × 3.4 = 64.0 µs a call where 8.4 + 7 × 14 = 106.4 were charged): each of the 256
    micro-batches (36 + 640) × 64.0 µs against (36 + 36) × 106.4 µs, + 9.114 s: 258.027 s of dp
    traffic, φ_dp of it 38.803 s, the step 589.956 s, still ahead of pp 8.

    With the output weight (32,064 · 8,192 = 262,668,288 elements) gathered once a step, the
    embedding once a backward (and in the step's first forward) and DeepSpeed's coordinator
    walked (tests/model/test_zero_gather_calls.py test_deepspeed_launches_walked, 70B tp 4:
    n_available held at 904,396,800, room 5e7 after a down's release, so a down alone and QKV
    + output + gate-up closing at the bucket, 2 launches a layer a pass; the last three layers,
    641,728,512 elements, kept into the backward): 317 launches in the first micro-batch, 315 in
    each later one, 315.008 a micro-batch; not gathered 1,427,681,280 elements a micro-batch
    (262,668,288 + 641,728,512 in the first, 3 × 262,668,288 + 641,728,512 in the others), 2 B
    × 7/8 at the link's 96 GB/s: 258.027 → 246.040 s of dp traffic (252.458 s with one launch
    a weight), φ_dp of it 37.000 s, the step 588.154 s.

    DeepSpeed ZeRO-3's gathered weights from the same walk (model/deepspeed_gathered.py): the
    turn's 1,101,529,088 elements where the turn bound counted 1,117,440,512, 31,822,848 B less:
    73.64 → 73.61 GB (tests/model/test_deepspeed_gathered.py).

    Each micro-batch's last reduce bucket (1 of the 36: the BF16 gradients of 70,553,706,496 / 4
    parameters, 2 B × 7/8 at 96 GB/s, 0.3215 s, + 36 calls × 64.0 µs, 0.3238 s, ÷ 36 = 8.995 ms)
    runs after the backward's computation, which ZeRO-3's epilogue waits for (stage3.py
    ``independent_gradient_partition_epilogue``): whole, not φ_dp of it
    (model.dp_exposure.microbatch_exposed_seconds), 256 × 8.995 ms × (1 − φ_dp) = 1.957 s
    more: dp exposed 37.000 → 38.957 s, the step 588.154 → 590.110 s, still ahead of pp 8."""
    assert done["search"].returncode == 0, done["search"].stderr[-2000:]
    d = json.loads(done["search"].stdout)
    lay = d["layout"]
    assert (lay["dp"], lay["tp"], lay["pp"], lay["zero_stage"]) == (8, 4, 1, 3)
    assert lay["bias_dropout_fusion"] is True
    dp, tp = (next(t for t in d["traffic"] if t["axis"] == a) for a in ("dp", "tp"))
    per_mb = (36 + 2 * 320) * 64.0e-6 - (36 + 36) * 106.4e-6
    assert 248.913 + 256 * per_mb == pytest.approx(258.027, abs=1e-3)
    calls = (317 + 255 * 315) / 256
    per_mb -= (640 - calls) * 64.0e-6 + 2 * 7 / 8 * 1_427_681_280 / 96e9
    assert dp["seconds"] == pytest.approx(248.913 + 256 * per_mb, abs=2e-3)
    assert dp["seconds"] == pytest.approx(246.040, abs=1e-3)
    phi = 1 - 1 / 1.177
    last = (70_553_706_496 / 4 * 2 * 7 / 8 / 96e9 + 36 * 64.0e-6) / 36
    exposed = phi * (dp["seconds"] - 256 * last) + 256 * last
    assert dp["exposed_seconds"] == pytest.approx(exposed, abs=5e-4)
    assert dp["exposed_seconds"] == pytest.approx(38.957, abs=1e-3)
    assert tp["exposed_seconds"] == pytest.approx(47.302, abs=1e-3)
    t = d["time"]
    assert t["step_s"] == pytest.approx(484.062 + 47.302 + 38.957 + 19.790, abs=1e-3)
    assert round(d["objective_s"], 3) == 590.110
    assert round(d["memory"]["total_bytes"] / 1e9, 2) == 73.61 and d["memory"]["fits"]
    pp8 = json.loads(done["pp8"].stdout)
    assert round(pp8["time"]["step_s"], 3) == 601.406 > d["objective_s"]
    assert pp8["time"]["grad_accumulation_s"] == pytest.approx(9.967, abs=1e-3)


def test_the_old_answer_no_longer_fits(done):
    old, off = done["old"], done["old_off"]
    assert old.returncode == 0 and off.returncode == 0, (old.stderr[-2000:], off.stderr[-2000:])
    assert "activations (layers, in flight)                    61.78 GB" in old.stdout
    # NVLink SHARP (model/terms/nvls_memory.py): the tp ring of 4 and the dp ring of 2 in a node
    # 2 MiB of credits each (NCCL's tuner runs their all-reduces as rings, model/nccl_search.py;
    # 2 + 128 and 2 + 64 with the buffers before), the model-parallel, pipe, slice and world
    # rings 2 each: 12 MiB = 12,582,912 B, 85.18 → 85.19 GB, over by 1.97 → 1.98 GB
    # (85,188,332,032 − 83,210,009,600 = 1,978,322,432 B; 2.18 GB with 204 MiB of NVLS)
    assert "verdict: DOES NOT FIT: over by 1.98 GB" in old.stdout
    # with --no-bias-dropout-fusion the run keeps no masks: 61.78 − 2.68 = 59.10 GB
    assert "activations (layers, in flight)                    59.10 GB" in off.stdout
    # 82,491,394,560 + 12,582,912 = 82,503,977,472 B: still fits, 0.71 GB to spare
    assert "= total (peak: forward-backward)                   82.50 GB" in off.stdout
    assert "verdict: fits" in off.stdout
    assert json.loads(done["old_off_json"].stdout)["layout"]["bias_dropout_fusion"] is False


def test_the_assumption_says_which_masks(done):
    assert "16-bit, no dropout (p 0), but 1-byte masks of the TorchScript bias-dropout-add, " in (
        done["old"].stdout
    )
    assert "16-bit, no dropout (p 0), no masks; " in done["old_off"].stdout


def test_false_is_refused_under_megatron(done):
    assert refusal(done["megatron"]) == (
        "--set bias_dropout_fusion: false is read by deepspeed only (Megatron-DeepSpeed's "
        "--no-bias-dropout-fusion), not megatron, whose residual dropout keeps no mask at rate 0"
    )
