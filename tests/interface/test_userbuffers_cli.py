"""Transformer Engine's userbuffers (``tp_comm_overlap = full``) as the command line and the
launch line see them: the search answer they moved and ``--tp-comm-overlap``
(model/terms/userbuffers.py; the figures derived in tests/model/test_userbuffers.py)."""

from __future__ import annotations

import json
from dataclasses import replace

from tests.cli_runs import run_many
from trainplan.interface.launch import megatron_flags
from trainplan.model.layout import Layout, Recompute
from trainplan.model.op_time import TpOverlap
from trainplan.model.timing import CostOptions
from trainplan.scenarios.catalogue import get_model

LLAMA_70B = get_model("llama3-70b").model
FULL = CostOptions(tp_comm_overlap=TpOverlap.FULL)
BASE = Layout(
    dp=1, tp=8, pp=2, cp=1, micro_batch_size=1, zero_stage=1, recompute=Recompute.FULL,
    sequence_parallel=True, framework="megatron",
)  # fmt: skip


def test_the_launch_line_turns_userbuffers_on():
    arch = LLAMA_70B.arch
    flags = megatron_flags(arch, BASE, 64, options=FULL).flags
    assert "--tp-comm-overlap" in flags and "--sequence-parallel" in flags
    assert "--tp-comm-overlap" not in megatron_flags(arch, BASE, 64).flags
    assert (
        "--tp-comm-overlap" not in megatron_flags(arch, replace(BASE, tp=1), 64, options=FULL).flags
    )
    no_sp = megatron_flags(arch, replace(BASE, sequence_parallel=False), 64, options=FULL)
    assert "--tp-comm-overlap" not in no_sp.flags
    assert any("sequence parallelism" in n for n in no_sp.notes)


def test_search_answers_a_layout_that_fits_with_them():
    """The same search answered dp 2 × tp 8 × pp 2 interleaved v 3 (the same degrees, one more
    chunk per stage, so fewer micro-batches' activations in flight on stage 0), its fit figure,
    userbuffers included (1,650,871,296 B, in ``communicator_bytes``), 82,994,157,568 B, within
    the usable 83,210,009,600 B by 215,852,032 B. NVLink SHARP's bytes (model/terms/
    nvls_memory.py: the tp 8 ring in the node 2 MiB of credits and 16 × 2 × (128 KiB × 8) × 8 =
    256 MiB of buffers; the gradient-statistics, world and model-parallel rings, 8 a node, 2 MiB
    of credits each: 264 MiB = 276,824,064 B) put it over by 60,972,032 B (83,270,981,632 B;
    ``--set nccl_nvls=false`` gives back 82,994,157,568). The answer is now the same degrees
    under 1f1b, 79,333,054,464 B, 485.732 s against v 3's 485.695 s; with the userbuffers' SM
    margin and GEMM chunks charged (tests/model/test_userbuffers_gemm.py) 512.124 s against
    512.111 s, the same answer. Transformer Engine's placeholder weight gradients on the busiest
    stage 0 (model/terms/dummy_wgrads.py; the tp 8 layer shapes QKV [1,280, 8,192], proj
    [8,192, 1,024], FC1 [7,168, 8,192], FC2 [8,192, 3,584] in BF16): 213,909,504 B more,
    79,546,963,968 B, the same answer."""
    args = ("search", "--model", "llama3-70b", "--gpus", "32", "--gpu", "H100-SXM",
            "--set", "tp_comm_overlap=full", "--json")  # fmt: skip
    run = run_many({"full": args})["full"]
    assert run.returncode == 0, run.stderr[-2000:]
    d = json.loads(run.stdout)
    lay, m = d["layout"], d["memory"]
    assert (lay["dp"], lay["tp"], lay["pp"], lay["schedule"], lay["virtual_stages"]) == (
        2, 8, 2, "1f1b", 1,
    )  # fmt: skip
    assert (lay["recompute"], lay["micro_batch_size"]) == ("none", 1)
    assert m["userbuffer_bytes"] == 1_650_871_296
    assert 2 * (1280 * 8192 + 8192 * 1024 + 7168 * 8192 + 8192 * 3584) == 213_909_504
    fit = 79_333_054_464 + 213_909_504
    assert m["fit_bytes"] == fit == 79_546_963_968 <= m["capacity_bytes"] == 83_210_009_600


def test_userbuffers_refuse_the_blockwise_fp8_recipe_in_a_fresh_process():
    """Transformer Engine's userbuffers fill their all-gather buffer through
    ``fill_userbuffers_buffer_for_all_gather`` (module/base.py), which takes delayed, tensorwise
    and MXFP8 quantizers only and raises for the blockwise one: evaluate and search refuse the
    pair in one line, exit 2; delayed scaling with userbuffers still runs."""
    import subprocess
    import sys

    base = [sys.executable, "-m", "trainplan"]
    job = ["--model", "llama3-70b", "--gpus", "64", "--precision", "fp8"]
    full = ["--set", "tp_comm_overlap=full"]
    for cmd in (["evaluate", *job, "--tp", "8", "--pp", "2"], ["search", *job, "--top", "1"]):
        res = subprocess.run(
            [*base, *cmd, "--fp8-recipe", "blockwise", *full], capture_output=True, text=True
        )
        assert res.returncode == 2, res.stderr
        assert res.stderr.strip().splitlines() == [
            "Error: --set tp_comm_overlap: full (Transformer Engine's userbuffers) does not run "
            "with fp8_recipe blockwise (fill_userbuffers_buffer_for_all_gather takes delayed, "
            "tensorwise and mxfp8 quantizers only); use another recipe or tp_comm_overlap async"
        ]
        assert "Traceback" not in res.stderr and res.stdout == ""
    ok = subprocess.run(
        [*base, "evaluate", *job, "--tp", "8", "--pp", "2", "--fp8-recipe", "delayed", *full],
        capture_output=True,
        text=True,
    )
    assert ok.returncode == 0, ok.stderr


def test_the_userbuffers_config_from_the_command_line():
    """``--set tp_comm_overlap_cfg`` (model/userbuffers_gemm.py; the GEMM figures derived in
    tests/model/test_userbuffers_gemm.py): Llama 3 70B at tp 4 × pp 4 interleaved v 8 on 1,024
    H100s, Transformer Engine's defaults (16 SMs off the six margin GEMMs) 4.319 s against
    Transformer Engine 1.x's (no margin: the same 16 SMs held beside them while the bulk and
    pipeline collectives run) 4.173 s (4.313 and 4.167 s before the optimizer step zeroed the
    distributed optimizer's whole FP32 gradient buffer, model.terms.optimizer_time.whole_buffer_zeroing_bytes;
    4.318 and 4.172 s while the dp group's calls ran in
    Simple where NCCL's tuner runs them in LL128, model/nccl_tuner.py and
    tests/model/test_userbuffers_gemm.py; 4.328 and 4.182 s while the dp group's ring charged all
    its steps the network's 14 µs, NCCL's model only the 31 between its 32 nodes: 551.2 µs a
    call, not 890.4; 4.181 s while the cross-entropy's tp 4 all-reduces read
    the NVLS curve; NCCL runs a 4-GPU all-reduce of an H100 node as a ring, model/nccl_search.py:
    the curve ÷ 480/370; 4.299 and 4.154 s with the equal chunks' bubble, where
    v 8 splits a rank's 20 layers into chunks of 2 and 3: model.pipeline_uneven; 4.331 and
    4.186 s while the dp group's collectives were
    charged NVLS's 16 blocks, not the 8 of the ring NCCL runs them as); the JSON and the assumptions say which; an
    unknown name is refused in one line, exit 2; the launch line says a config other than the
    default is not written (Megatron-LM reads it from a YAML file)."""
    job = ("evaluate", "--model", "llama3-70b", "--gpus", "1024", "--gpu", "H100-SXM",
           "--global-batch", "512", "--dp", "64", "--tp", "4", "--pp", "4", "--zero", "1",
           "--recompute", "none", "--schedule", "interleaved", "--virtual-stages", "8",
           "--micro-batch", "1", "--set", "tp_comm_overlap=full")  # fmt: skip
    runs = run_many(
        {
            "te": (*job, "--json"),
            "te1": (*job, "--set", "tp_comm_overlap_cfg=te-1", "--json"),
            "text": job,
            "bad": (*job, "--set", "tp_comm_overlap_cfg=nope"),
        }
    )
    te, te1 = json.loads(runs["te"].stdout), json.loads(runs["te1"].stdout)
    assert (te["time"]["tp_comm_overlap_cfg"], te1["time"]["tp_comm_overlap_cfg"]) == ("te", "te-1")
    assert round(te["time"]["step_s"], 3) == 4.319 and round(te1["time"]["step_s"], 3) == 4.173
    assert (
        "tp overlap full (userbuffers te: GEMM chunks and its kernels' SMs charged)"
        in runs["text"].stdout
    )
    assert runs["bad"].returncode == 2 and "Traceback" not in runs["bad"].stderr
    line = runs["bad"].stderr.strip().splitlines()
    assert len(line) == 1 and line[0].startswith(
        "Error: --set tp_comm_overlap_cfg: 'nope' is not one of te, te-1, "
    )
    options = replace(FULL, tp_comm_overlap_cfg="userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192")
    launch = megatron_flags(LLAMA_70B.arch, BASE, 64, options=options)
    assert "--tp-comm-overlap" in launch.flags
    assert any("--tp-comm-overlap-cfg, not written" in n for n in launch.notes)
    assert not any(
        "tp_comm_overlap_cfg" in n
        for n in megatron_flags(LLAMA_70B.arch, BASE, 64, options=FULL).notes
    )
