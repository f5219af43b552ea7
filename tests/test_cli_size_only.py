"""A model given only by its size (``--params 70B``) under every framework's ZeRO-3, as a user
runs ``trainplan`` (each call its own process, :mod:`tests.cli_runs`): Megatron-FSDP (``megatron
--zero 3``) once crashed counting its reduce-scatter queue, which reads the stage's layer count
(``AttributeError: 'NoneType' object has no attribute 'num_layers'``; HTTP 500 on the web). A
size-only model has no layers: its layer units are 0, so its queue holds no layer bucket, as
FSDP2's and DeepSpeed's ZeRO-3 count no gathered unit for it (the note says so). A search needs
the layers; it says so before asking for a batch the model could not use."""

from __future__ import annotations

import json

from tests.cli_runs import refusal, run_many

SIZE_ONLY = ["--params", "70B", "--gpus", "64", "--zero", "3"]


def test_every_zero3_counts_a_size_only_model_without_its_layers():
    done = run_many(
        {
            **{fw: ["evaluate", *SIZE_ONLY, "--framework", fw, "--json"] for fw in
               ("megatron", "fsdp2", "deepspeed")},
            "text": ["evaluate", *SIZE_ONLY],
        }
    )  # fmt: skip
    for name, run in done.items():
        assert run.returncode == 0 and "Traceback" not in run.stderr, (name, run.stderr[-2000:])
    n, d = 70 * 10**9, 64
    mem = {fw: json.loads(done[fw].stdout)["memory"] for fw in ("megatron", "fsdp2", "deepspeed")}
    # Megatron-FSDP optim_grads_params, every byte sharded over dp 64: BF16 weights 2 B + FP32
    # main weights 4 B = 6 B, FP32 main gradients 4 B, Adam's two FP32 moments 8 B: 18 B/param
    megatron = mem["megatron"]
    assert megatron["weights_bytes"] == 6 * n // d == 6_562_500_000
    assert megatron["gradients_bytes"] == 4 * n // d == 4_375_000_000
    assert megatron["optimizer_bytes"] == 8 * n // d == 8_750_000_000
    assert megatron["model_state_bytes"] == 18 * n // d == 19_687_500_000
    # no layer unit: nothing gathered, no reduce-scatter bucket, as under the other ZeRO-3s
    for fw, m in mem.items():
        assert m["zero3_gathered_bytes"] == 0, fw
    assert megatron["buffers_bytes"] == mem["fsdp2"]["buffers_bytes"] == 0
    assert megatron["fits_covers"] == "model state only"
    text = done["text"].stdout
    assert (
        "megatron ZeRO-3" in text
        and "= model state                                      19.69 GB" in text
    )
    assert (
        "Note: ZeRO-3's gather buffer (the gathered layer and the next) needs layer sizes" in text
    )


def test_a_search_of_a_size_only_model_asks_for_its_layers_first():
    """Once it asked for ``--global-batch`` first, then, given it, for the layers."""
    done = run_many(
        {
            f"{cmd} {batch}": [cmd, "--params", "70B", "--gpus", "64", *batch]
            for cmd in ("search", "frontier")
            for batch in ([], ["--global-batch", "1024"])
        }
    )
    want = (
        "--params: 70,000,000,000 is a size only, and a search needs the model's dimensions (its "
        "layers and widths) to place and time it; give --model NAME (a catalogue name or a "
        "config.json), or --layers --hidden --heads with --params"
    )
    assert len(done) == 4
    for name, run in done.items():
        assert refusal(run) == want, name
    dims = ["--layers", "80", "--hidden", "8192", "--heads", "64"]  # dimensions: the batch rule
    (given,) = run_many({"dims": ["search", "--params", "70B", "--gpus", "64", *dims]}).values()
    assert refusal(given).startswith("--global-batch: a model given by its dimensions has no ")
