"""``search``'s ``evaluate it:`` line as a user runs it, each command its own process: the line
gives the model as the user gave it (a name, a folder, or a size and dimensions), leaves off a
split of the layers that is evaluate's own default (128 numbers for Llama 3 405B at pp 32 × v 4),
and is not printed where evaluate cannot give the answer (a family member of the params
objective); the figures it gives are the answer's, with the split written out or not."""

from __future__ import annotations

import json
import shlex

from tests.cli_runs import run_many, trainplan


def _evaluate(line: str, cwd: object = None) -> dict:
    words = shlex.split(line)
    assert words[:2] == ["trainplan", "evaluate"], line
    done = trainplan(*words[1:], "--json", cwd=cwd)  # type: ignore[arg-type]
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _same(a: dict, b: dict) -> None:
    assert a["time"]["step_s"] == b["time"]["step_s"]
    assert a["memory"]["total_bytes"] == b["memory"]["total_bytes"]
    assert a["model"]["num_params"] == b["model"]["num_params"]


INTERLEAVED = ["search", "--model", "llama3-405b", "--gpus", "16384", "--gpu", "H100-SXM",
               "--tp", "8", "--pp", "32", "--schedule", "interleaved", "--virtual-stages", "4",
               "--recompute", "none", "--zero", "1", "--micro-batch", "1"]  # fmt: skip
"""The README's answer (dp 64 × tp 8 × pp 32, interleaved v 4), its search space cut to it."""


def test_an_interleaved_answer_leaves_its_default_split_off():
    """126 layers in 32 × 4 = 128 chunks: ⌈126/128⌉ = 1 layer a chunk is 128, two too many, so
    the end chunks give theirs back first — the first chunk holds the embedding alone, the last
    the output layer alone: 0, 1 × 126, 0 (model.split.default_chunk_sizes), which is what
    evaluate builds without --stage-layers. The line printed to the terminal and the JSON's
    ``evaluate_command`` omit it; run as printed, and with those 128 counts written out, evaluate
    gives the answer's 7.118 s and peak memory to the bit.

    7.116 → 7.118 s (7.11638 → 7.11849) when the optimizer step zeroed Megatron-Core's whole
    FP32 gradient buffer (``zero_grad_buffer``), 4 B × the busiest stage's 1.594e9 parameters
    a GPU less the 4 B × 1.594e9/64 of the shard already counted, 6.28 GB at 2.97 TB/s: 2.1 ms.

    7.117 → 7.116 s (7.11725 → 7.11638) under NCCL's tuner (model/nccl_tuner.py: NCCL's
    ``ncclTopoTuneModel``, ``topoGetAlgoInfo``): the dp 64 group holds one rank a node (tp 8
    fills it), so its ring's 63 steps all cross the network at the tree's hop (``ppn == 1``).
    Each of the ⌈1.594e9 ∕ 6.4e7⌉ = 25 bf16 parameter all-gathers (the busiest stage's
    parameters a GPU in Megatron-Core's buckets of max(4e7, 1e6 × dp)) sends 125.5 MB a rank: in
    Simple 8.4 + 63 × 14 = 890.4 µs and the bytes at 48 GB/s; in LL128 14 + 63 × 8.5 =
    549.5 µs and the bytes at min(0.92 × 48, 2 channels × 36.7) = 44.16 GB/s, 227.4 µs more for
    them: LL128 by 113.5 µs a call, 2.84 ms of dp (240.65 → 237.82 ms), 0.87 ms of it exposed.
    The fp32 reduce-scatters (251.0 MB) stay in Simple: 454.8 µs more bytes in LL128."""
    runs = run_many({"json": [*INTERLEAVED, "--json"], "text": INTERLEAVED})
    assert runs["json"].returncode == 0, runs["json"].stderr[-2000:]
    answer = json.loads(runs["json"].stdout)
    line = answer["evaluate_command"]
    chunks = answer["layout"]["chunk_layers"]
    assert chunks == [0, *[1] * 126, 0]
    assert "--stage-layers" not in line and "--virtual-stages 4" in line
    assert f"\nevaluate it: {line}\n" in runs["text"].stdout
    # 7.118 s before Megatron-Core's own optimizer-step passes (model.step_passes: the clip's
    # scaling and the master's second read, 12 B an element stepped; optimizer step 2.4 → 2.5 ms)
    assert round(answer["time"]["step_s"], 3) == 7.119
    _same(_evaluate(line), answer)
    _same(_evaluate(f"{line} --stage-layers {','.join(map(str, chunks))}"), answer)


def test_the_line_gives_the_model_as_the_user_gave_it(tmp_path):
    """A model by its dimensions printed ``--model 0.157B`` (its label, which evaluate refuses as
    an unknown model); a folder named like a catalogue model (``./llama3-8b`` holding a config
    of 8 layers) printed ``--model llama3-8b``, which evaluate reads as the catalogue's 32-layer
    model. Now the line gives the dimensions, and the path as typed; each gives the answer's
    parameter count, step time and peak memory. A 1-stage answer's split (every layer on the
    one stage) is evaluate's default and is left off too."""
    folder = tmp_path / "llama3-8b"
    folder.mkdir()
    config = {"model_type": "llama", "hidden_size": 1024, "intermediate_size": 4096,
              "num_attention_heads": 16, "num_key_value_heads": 4, "num_hidden_layers": 8,
              "vocab_size": 32000, "max_position_embeddings": 2048, "tie_word_embeddings": False}  # fmt: skip
    (folder / "config.json").write_text(json.dumps(config))
    small = ["--gpus", "8", "--gpu", "H100-SXM", "--global-batch", "64", "--seq-len", "2048",
             "--json"]  # fmt: skip
    dims = ["search", "--layers", "8", "--hidden", "1024", "--heads", "16", *small]
    runs = run_many(
        {"dims": dims, "folder": ["search", "--model", "./llama3-8b", *small]}, tmp_path
    )
    for name, done in runs.items():
        assert done.returncode == 0, (name, done.stderr[-2000:])
    by_dims, by_folder = (json.loads(runs[k].stdout) for k in ("dims", "folder"))
    line = by_dims["evaluate_command"]
    assert line.startswith("trainplan evaluate --layers 8 --hidden 1024 --heads 16 --gpu H100-SXM")
    assert "--stage-layers" not in line
    _same(_evaluate(line), by_dims)
    line = by_folder["evaluate_command"]
    assert line.startswith("trainplan evaluate --model ./llama3-8b --gpu H100-SXM")
    again = _evaluate(line, cwd=tmp_path)
    _same(again, by_folder)
    assert by_folder["model"]["num_params"] < 8 * 10**9  # not the catalogue's 8,030,261,248


def test_the_params_objective_says_the_size_and_prints_no_line():
    """``--objective params`` (as ``--maximize params``) answers a family member, here Llama 3
    8B deepened to 64 layers (the largest of 4, 8, …, 64 under --max-layers 64): its objective
    said the member's step, ``501.911 s per step``, as if the objective were step time, and its
    ``evaluate it:`` line named ``--model llama3-8b@L64``, which evaluate refuses. The objective
    now says the size first; no line is printed (evaluate cannot give a family member).
    501.919 s since Megatron-Core's own optimizer-step passes (model.step_passes: 12 B more an
    element stepped, 7.6 ms over the member's 15.0e9 / 8 elements at 2.97 TB/s)."""
    args = ["search", "--model", "llama3-8b", "--gpus", "8", "--gpu", "H100-SXM",
            "--objective", "params", "--max-layers", "64"]  # fmt: skip
    runs = run_many({"json": [*args, "--json"], "text": args})
    answer = json.loads(runs["json"].stdout)
    assert answer["model"]["name"] == "llama3-8b@L64"
    assert answer["objective_text"] == (
        f"{answer['model']['num_params']:,} parameters (llama3-8b@L64) at 501.919 s (8.4 min) "
        "per step"
    )
    assert answer["model"]["num_params"] == 15_009_845_248
    assert "evaluate_command" not in answer
    text = runs["text"].stdout
    assert f"\nobjective (params): {answer['objective_text']}\n" in text
    assert "evaluate it:" not in text


def test_default_split_under_each_framework_rule():
    """The split evaluate builds by itself, per framework (model.split.split_rule_of): megatron
    61 layers on pp 8 is ⌈61/8⌉ = 8 a stage, 64 − 61 = 3 given back by the first, the last and
    the second: 7, 7, 8, 8, 8, 8, 8, 7; deepspeed's partition_balanced puts the extra layers of
    126 on pp 16 (⌊126/16⌋ = 7, 126 mod 16 = 14) on the first 14 stages: 8 × 14, 7, 7; fsdp2
    (torchtitan) counts the embedding and the output as a layer each, 126 + 2 = 128 units over
    16 × 8 chunks, one a chunk: the first chunk the embedding alone, the last the output alone."""
    from trainplan.interface.cli.evaluate_line import default_split

    def split(framework: str, pp: int, v: int, chunks: list[int]) -> bool:
        lay = {"framework": framework, "pp": pp, "virtual_stages": v, "chunk_layers": chunks}
        return default_split(lay)

    assert split("megatron", 8, 1, [7, 7, 8, 8, 8, 8, 8, 7])
    assert not split("megatron", 8, 1, [8, 8, 8, 8, 8, 8, 7, 6])
    assert split("deepspeed", 16, 1, [8] * 14 + [7, 7])
    assert not split("megatron", 16, 1, [8] * 14 + [7, 7])
    assert split("fsdp2", 16, 8, [0, *[1] * 126, 0])
    assert not split("fsdp2", 16, 8, [1] * 126 + [0, 0])


def test_the_line_carries_the_settings_the_answer_reads():
    """A search keeps the layouts a ``--set`` setting does not apply to, and evaluate refuses the
    setting on them: the line printed ``--set p2p_warmup_flush=true`` on a pp 1 answer, which
    evaluate refused (the pipeline send options are read by Megatron-Core's interleaved
    schedule only, model.key_rules.check_layout_reads_options), and ``sac_saves_scaled_mm=false``
    on a megatron answer (torchtitan's save list, model.key_rules.check_sac_scaled_mm). The line
    now leaves off each setting the answer's layout does not read — evaluate's own refusals,
    interface.cli.evaluate_line.layout_read — and keeps those it reads (``--precision fp8``,
    ``grad_stats_group=world`` under megatron ZeRO-3, ``compile=true`` under fsdp2). Run in a
    fresh process, each line exits 0 with the search's step time and peak memory."""
    small = ["search", "--model", "llama3-8b", "--gpus", "8", "--gpu", "H100-SXM", "--json"]
    calls = {
        "p2p": [*small, "--framework", "megatron", "--set", "p2p_warmup_flush=true",
                "--set", "p2p_overlap=false", "--set", "grad_stats_group=world"],
        "sac": [*small, "--framework", "megatron", "--framework", "fsdp2",
                "--set", "precision=fp8", "--set", "sac_saves_scaled_mm=false"],
        "fsdp": [*small, "--framework", "fsdp2", "--zero", "3", "--pp", "1",
                 "--set", "grad_reduce_overlap=false", "--set", "compile=true"],
    }  # fmt: skip
    runs = run_many(calls)
    answers = {}
    for name, done in runs.items():
        assert done.returncode == 0, (name, done.stderr[-2000:])
        answers[name] = json.loads(done.stdout)
    lay = answers["p2p"]["layout"]
    assert (lay["framework"], lay["zero_stage"], lay["virtual_stages"]) == ("megatron", 3, 1)
    line = answers["p2p"]["evaluate_command"]
    assert "p2p_" not in line and line.endswith("--set grad_stats_group=world")
    lay = answers["sac"]["layout"]
    assert lay["framework"] == "megatron"
    line = answers["sac"]["evaluate_command"]
    assert "sac_saves_scaled_mm" not in line and "--precision fp8" in line
    lay = answers["fsdp"]["layout"]
    assert (lay["framework"], lay["zero_stage"], lay["pp"]) == ("fsdp2", 3, 1)
    line = answers["fsdp"]["evaluate_command"]
    assert "grad_reduce_overlap" not in line and line.endswith("--set compile=true")
    lines = {
        name: shlex.split(a["evaluate_command"])[1:] + ["--json"] for name, a in answers.items()
    }
    for name, done in run_many(lines).items():
        assert done.returncode == 0, (name, done.stderr[-2000:])
        _same(json.loads(done.stdout), answers[name])
