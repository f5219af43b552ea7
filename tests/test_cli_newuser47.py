"""A new user's first two hours, a further pass, each ``trainplan`` call its own process
(:mod:`tests.cli_runs`): a model by its dimensions whose heads do not divide its width (the
refusal named a ``head_dim`` no option gave: ``--head-dim`` now gives it, and a search's
``evaluate it:`` line carries it), a search of a model by its dimensions without a batch (refused
as if no model were given), and an empty sweep axis."""

from __future__ import annotations

import json

from tests.cli_runs import refusal, run_many

GPT = "--arch gpt --layers 80 --hidden 8190 --heads 64".split()
"""A GPT model 8,190 wide with 64 heads: 8,190 / 64 is not whole, so its heads need a size."""

TINY = "--arch llama --layers 16 --hidden 2040 --heads 16 --ffn-hidden 8192".split()
"""A small Llama-family model whose 16 heads do not divide its 2,040-wide hidden size either."""


def gpt_params(h: int, heads_dim: int, layers: int = 80, vocab: int = 51200, s: int = 4096) -> int:
    """Parameters of the planner's ``--arch gpt`` model (GELU MLP 4h, LayerNorm with bias, biases
    on every linear, learned positions of s rows, tied embeddings; GPT-2/Megatron-LM's layer):
    a layer is QKV h·3ad + 3ad, the projection ad·h + h, the MLP 2·h·4h + 4h + h and two norms
    2·2h; the model is L layers + V·h (tied) + s·h + the final norm 2h."""
    f = 4 * h
    layer = h * 3 * heads_dim + 3 * heads_dim + heads_dim * h + h + 2 * h * f + f + h + 4 * h
    return layers * layer + vocab * h + s * h + 2 * h


def test_heads_that_do_not_divide_the_width_take_head_dim():
    """``--hidden 8190 --heads 64`` was refused with "give head_dim", which no option of evaluate
    took. The refusal names ``--head-dim`` and ``--head-dim 128`` gives it: attention 64 · 128 =
    8,192 wide on an 8,190-wide residual stream. Counted by hand (:func:`gpt_params`):
    64,859,706,300 parameters, where 8,192 wide with 64 heads of 128 is 64,886,030,336. With
    ``--model`` the catalogue's own dimensions stand, so ``--head-dim`` is refused there."""
    assert gpt_params(8190, 64 * 128) == 64_859_706_300
    assert gpt_params(8192, 64 * 128) == 64_886_030_336
    runs = run_many(
        {
            "no head_dim": ["evaluate", *GPT, "--gpu", "H100-SXM", "--tp", "4"],
            "head_dim": ["evaluate", *GPT, *"--head-dim 128 --gpu H100-SXM --tp 4 --json".split()],
            "catalogue": ["evaluate", "--model", "llama3-70b", "--head-dim", "128"],
        }
    )
    assert refusal(runs["no head_dim"]) == (
        "model.hidden_size: 8190 is not divisible by num_attention_heads = 64; give --head-dim"
    )
    assert runs["head_dim"].returncode == 0, runs["head_dim"].stderr
    assert json.loads(runs["head_dim"].stdout)["model"]["num_params"] == 64_859_706_300
    assert refusal(runs["catalogue"]) == (
        "--head-dim: 128 does not apply: model llama3-70b has its own dimensions; give them with "
        "--params instead of --model"
    )


def test_a_search_with_head_dim_prints_the_evaluate_line_that_gives_its_figures():
    """A search of a model with ``head_dim`` printed no ``evaluate it:`` line (evaluate had no
    option for it). It prints one now, with ``--head-dim 128``, and that line's figures are the
    search's answer's: the same memory total and step time, to the byte and the second."""
    search = ["search", *TINY, *"--head-dim 128 --gpus 8 --gpu H100-SXM".split()]
    search += ["--global-batch", "64", "--json"]
    answer = run_many({"search": search})["search"]
    assert answer.returncode == 0, answer.stderr
    d = json.loads(answer.stdout)
    line = d["evaluate_command"]
    assert "--head-dim 128" in line
    args = line.split()[1:]  # less the leading "trainplan"
    again = run_many({"evaluate": [*args, "--json"]})["evaluate"]
    assert again.returncode == 0, again.stderr
    e = json.loads(again.stdout)
    assert e["memory"]["total_bytes"] == d["memory"]["total_bytes"]
    assert e["time"]["step_s"] == d["time"]["step_s"]
    assert e["model"]["num_params"] == d["model"]["num_params"]


def test_a_search_of_a_model_by_its_dimensions_without_a_batch_names_the_batch():
    """``search --arch llama --layers 16 --hidden 2048 --heads 16 …`` without a batch was refused
    with "give --model NAME …, --params SIZE, or the dimensions --layers --hidden --heads" — the
    dimensions it was given. Such a model has no published batch, and the refusal says so (as a
    config.json's does); with a batch the search runs. Dimensions given only in part still get
    the model's refusal, which names the three."""
    dims = "--arch llama --layers 16 --hidden 2048 --heads 16 --ffn-hidden 8192".split()
    cluster = ["--gpus", "8", "--gpu", "H100-SXM"]
    runs = run_many(
        {
            "search": ["search", *dims, *cluster],
            "frontier": ["frontier", *dims, *cluster],
            "part": ["search", "--layers", "16", *cluster],
        }
    )
    batch = (
        "--global-batch: a model given by its dimensions has no published batch size; give "
        "--global-batch (sequences per step, e.g. 1024, or a range 512..2048) or "
        "--global-batch-tokens (e.g. 4e6)"
    )
    assert refusal(runs["search"]) == batch
    assert refusal(runs["frontier"]) == batch
    assert refusal(runs["part"]) == (
        "--model: give --model NAME (a catalogue name or a config.json path), --params SIZE, or "
        "the dimensions --layers --hidden --heads"
    )


def test_an_empty_sweep_axis_is_said_empty(tmp_path):
    """``model = []`` under ``[sweep]`` was refused with "e.g. model = [[]]", an example of the
    same mistake; the refusal now says the axis is empty and what to do."""
    grid = tmp_path / "g.toml"
    grid.write_text("[sweep]\nmodel = []\ngpus = [64]\n")
    done = run_many({"sweep": ["sweep", str(grid)]})["sweep"]
    assert refusal(done) == (
        f"grid {grid}: sweep.model: [] is empty: give the axis at least one value, or leave it "
        "out (one value for every point goes at the top level)"
    )


def test_max_layers_without_the_params_objective_is_refused_not_dropped():
    """``--max-layers`` is the deepest member of the family ``--maximize params`` tries; under
    the step-time objective no family is built and it was dropped unread, the answer the plain
    search's. It is refused, naming the objective that reads it; with that objective it is read
    (the family of Llama 3 8B every 4 layers up to 8: 2 members)."""
    search = ["search", "--model", "llama3-8b", "--gpus", "64", "--gpu", "H100-SXM"]
    mfu = "--params 70e9 --tokens 4e6 --step-seconds 7 --gpu H100-SXM --chips 512 --attention"
    mfu += " --heads 64 --head-dim 128"
    runs = run_many(
        {
            "step-time": [*search, "--max-layers", "40"],
            "params": [*search, "--maximize", "params", "--max-layers", "8", "--json"],
            "mfu": ["mfu", *mfu.split()],
        }
    )
    assert refusal(runs["step-time"]) == (
        "--max-layers: 40 does not apply: it is the deepest member of the family that --maximize "
        "params tries, and the objective is step-time (add --maximize params)"
    )
    assert runs["params"].returncode == 0, runs["params"].stderr
    assert "family's 2 members" in json.loads(runs["params"].stdout)["params_note"]
    # mfu's attention FLOPs name the missing dimensions as the flags that give them
    assert refusal(runs["mfu"]) == "--attention: needs --layers and --seq-len"
