"""What a new user met from a clean clone, each run as the user runs it: its own ``trainplan``
process (:func:`tests.cli_runs.trainplan`), text and ``--json`` where both apply."""

from __future__ import annotations

import json

from tests.cli_runs import refusal, trainplan

LLAMA8_TP8 = ("--model", "llama3-8b", "--gpus", "8", "--tp", "8")


def test_userbuffers_without_sequence_parallelism_are_refused():
    """Megatron-LM d98e8a64dd ``validate_args`` asserts ``args.sequence_parallel`` when
    ``args.tp_comm_overlap`` ("Tensor parallel communication/GEMM overlap can happen only when
    sequence parallelism is enabled"): ``--no-sequence-parallel`` with ``tp_comm_overlap=full``
    at tp 8 is one line and exit 2 (it was rc 0, with 1.65 GB of userbuffers and tp exposed
    257.3 → 234.1 s); with sequence parallelism it runs, userbuffers counted."""
    args = ("evaluate", "--model", "llama3-70b", "--tp", "8", "--set", "tp_comm_overlap=full")
    line = refusal(trainplan(*args, "--no-sequence-parallel"))
    assert line == (
        "--set tp_comm_overlap: full (Transformer Engine's userbuffers) needs sequence "
        "parallelism at tp 8 (Megatron-LM's validate_args asserts it); turn sequence_parallel "
        "on or use tp_comm_overlap async"
    )
    done = trainplan(*args, "--json")
    assert done.returncode == 0, done.stderr
    d = json.loads(done.stdout)
    assert d["time"]["tp_comm_overlap"] == "full" and d["memory"]["userbuffer_bytes"] > 0


def test_a_search_keeps_the_frameworks_that_run_userbuffers():
    """A search over megatron and fsdp2 with ``tp_comm_overlap=full`` drops the fsdp2 candidates
    (torchtitan has no userbuffers) and answers with megatron, where it stopped at the first
    fsdp2 table; fsdp2 alone is refused by the rule's own line."""
    args = ("search", "--model", "llama3-8b", "--gpus", "8", "--set", "tp_comm_overlap=full")
    done = trainplan(*args, "--framework", "megatron", "--framework", "fsdp2", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["layout"]["framework"] == "megatron"
    line = refusal(trainplan(*args, "--framework", "fsdp2"))
    assert line == (
        "--set tp_comm_overlap: full (Transformer Engine's userbuffers) needs framework "
        "megatron or textbook, not fsdp2"
    )


def test_async_tp_without_sequence_parallelism_runs_as_none():
    """torchtitan b5bcd76c6 runs ``enable_async_tensor_parallel`` without sequence parallelism,
    and Inductor's ``micro_pipeline_tp_pass`` fuses only all-gathers and reduce-scatters: the
    plan's all-reduces are all waited for, so Llama 3 8B at tp 8 on 8 H100s (fsdp2) exposes the
    whole tp time, as under ``none`` (it hid the backward all-reduces: 58.206 s exposed of
    86.632 s). With sequence parallelism async TP still hides part of it."""
    base = ("evaluate", *LLAMA8_TP8, "--framework", "fsdp2", "--json")
    runs = {
        o: json.loads(
            trainplan(*base, "--no-sequence-parallel", "--set", f"tp_comm_overlap={o}").stdout
        )
        for o in ("none", "async-tp")
    }
    tp = {o: next(r for r in d["traffic"] if r["axis"] == "tp") for o, d in runs.items()}
    assert tp["async-tp"]["exposed_seconds"] == tp["async-tp"]["seconds"]
    assert tp["async-tp"]["seconds"] == tp["none"]["seconds"]
    assert round(tp["async-tp"]["seconds"], 3) == 86.632
    assert runs["async-tp"]["time"]["step_s"] == runs["none"]["time"]["step_s"]
    assert runs["async-tp"]["time"]["tp_comm_overlap"] == "none"
    sp = json.loads(trainplan(*base, "--set", "tp_comm_overlap=async-tp").stdout)
    row = next(r for r in sp["traffic"] if r["axis"] == "tp")
    assert row["exposed_seconds"] < row["seconds"] and sp["time"]["tp_comm_overlap"] == "async-tp"
