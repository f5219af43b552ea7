"""Fixes of what a new user met in the first hour, each run as the user ran it: its own process,
text and ``--json`` (the page's in tests/web/test_first_hour_page.py)."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from fastapi.testclient import TestClient

from tests.cli_runs import refusal, run_many, trainplan
from trainplan.interface.web.app import create_app

# ZB-H1, ZB-H2, ZB-V, DualPipe, DualPipeV at p 4, m 8, T_F = T_B = 1, T_W = 0: a zero-length W
# is still a pass of the schedule (Qi et al. 2024 §2: W reads the buffer I kept), so what is
# held is the closed form of model.pipeline_zb (chunks_in_flight / w_pending) at any T_W —
# ZB-H1's W buffers 1 2 3 4 (rank i: i + 1), ZB-H2's 2 4 6 7 — and the time is ZB-H1's
# (p − 1)·max(T_F, T_B, T_F + T_B − T_W) = 3·max(1, 1, 2) = 6 idle, step m·(T_F + T_B + T_W) +
# 6 = 8·2 + 6 = 22 (Qi et al. 2024 Table 2).
ZERO_W = {
    "zb-h1": ([4, 4, 4, 4], [1, 2, 3, 4]),
    "zb-h2": ([7, 7, 7, 7], [2, 4, 6, 7]),
    "zb-v": ([8, 8, 8, 8], [1, 3, 5, 7]),
    "dualpipe": ([5, 5, 5, 5], [1, 2, 2, 1]),
    "dualpipev": ([9, 9, 9, 9], [1, 2, 3, 4]),
}


def test_a_zero_length_w_pass_is_a_pass_of_zero_time():
    """``pipeline --t-w 0`` under every split-backward schedule: exit 0 (it was an
    AssertionError, the simulation dropping the instant a zero-length W holds its buffer), the
    held counts of the closed form, and ZB-H1's bubble 3·2 = 6 of a 22-unit step."""
    base = ("pipeline", "-p", "4", "-m", "8", "--t-w", "0")
    calls = {(s, j): (*base, "--schedule", s, *j) for s in ZERO_W for j in ((), ("--json",))}
    done = run_many(calls)
    for (s, j), d in done.items():
        assert d.returncode == 0 and "Traceback" not in d.stderr, (s, d.stderr[-800:])
        if not j:
            chunks, w = ZERO_W[s]
            want = f"held per rank   {' '.join(map(str, chunks))} chunk micro-batches in flight"
            assert want in d.stdout and f"W buffers {' '.join(map(str, w))} " in d.stdout
            continue
        r = json.loads(d.stdout)
        assert (r["chunks_held_per_stage"], r["w_pending_per_stage"]) == ZERO_W[s]
        assert r["pass_times"]["t_w"] == 0
    r = json.loads(done[("zb-h1", ("--json",))].stdout)
    assert (r["bubble_time_units"], r["step_time_units"], r["closed_form"]["value"]) == (6, 22, 6)


def test_a_zero_length_w_pass_on_the_page_api():
    """``GET /api/pipeline?…&t-w=0`` answers 200 with the command line's figures (it was 500)."""
    client = TestClient(create_app(("testserver",)))
    for s, (chunks, w) in ZERO_W.items():
        got = client.get(f"/api/pipeline?stages=4&microbatches=8&schedule={s}&t-w=0")
        assert got.status_code == 200, (s, got.text[:300])
        assert (got.json()["chunks_held_per_stage"], got.json()["w_pending_per_stage"]) == (
            chunks,
            w,
        )


V1 = (
    "1 under schedule interleaved needs at least 2: at 1 it is 1F1B (Megatron-LM validate_args "
    "sets virtual_pipeline_model_parallel_size 1 to None and runs "
    "forward_backward_pipelining_without_interleaving); use 1f1b or virtual_stages ≥ 2"
)


def test_interleaved_without_virtual_stages_is_refused():
    """``--schedule interleaved`` without ``--virtual-stages`` ran the interleaved order at v = 1
    (warm-up 2(p − 1 − r): 7 5 3 1 micro-batches held at p = 4 where 1F1B holds 4 3 2 1; Llama 3
    70B at tp 8 pp 4 held 39.38 GB of activations against 1F1B's 22.50 GB), a schedule Megatron
    never runs (NVIDIA/Megatron-LM d98e8a6 arguments.py validate_args: v = 1 is None, the
    one-chunk 1F1B). Refused in one line naming --virtual-stages under megatron and textbook,
    as under fsdp2 (torchtitan's own rule), and on the pipeline tab; v = 2 still runs."""
    ev = ("evaluate", "--model", "llama3-70b", "--gpus", "64", "--tp", "8", "--pp", "4")
    calls = {
        fw + j: (*ev, "--schedule", "interleaved", "--framework", fw, *([j] if j else []))
        for fw in ("megatron", "textbook")
        for j in ("", "--json")
    }
    calls["tab"] = ("pipeline", "-p", "4", "-m", "8", "--schedule", "interleaved")
    calls["tab--json"] = (*calls["tab"], "--json")
    calls["v2"] = (*calls["tab"], "-v", "2", "--json")
    done = run_many(calls)
    for key in [k for k in calls if k != "v2"]:
        assert refusal(done[key]) == f"--virtual-stages: {V1}", key
    r = json.loads(done["v2"].stdout)
    assert (r["virtual_stages"], r["bubble_fraction_exact"]) == (2, "3/19")  # 3/(2·8 + 3)


LLAMA_PP4 = ("evaluate", "--model", "llama3-8b", "--gpus", "16", "--tp", "2", "--pp", "4")
DSV3 = Path(__file__).parent / "data" / "hf" / "deepseek-v3" / "config.json"


def _config(tmp_path: Path, name: str, **changes: object) -> str:
    """DeepSeek-V3's released config.json with ``changes``, written under ``tmp_path``."""
    config = {**json.loads(DSV3.read_text()), **changes}
    path = tmp_path / name
    path.write_text(json.dumps(config))
    return str(path)


def test_small_first_hour_fixes(request):
    """(a) bubble_ratio is of the micro-batches' time: Llama 3 8B, tp 2, pp 4, B 64 over dp 2 is
    m = 64/(2·1) = 32, and the bubble is bubble_ratio of compute + the exposed tp (and cp, ep)
    the step line sums, not of compute alone. The ratio is the 1F1B order's own
    (model.pipeline_onef): its fill and drain run the three stages other than the slowest (the
    last, with the output layer), 7.2 %, below the closed form's (p − 1)/m = 3/32 = 9.375 %,
    which took every stage as long as the slowest.
    (b) first_k_dense_replace 70 of DeepSeek-V3's 61 layers: the config's key and both values.
    (d) the ep note cites "at most 4 nodes per token" for DeepSeek-V3's router (n_group 8,
    topk_group 4: transformers DeepseekV3TopkRouter keeps 4 of 8 groups), not for n_group 1.
    (e) a dense model's layout line is one format: deepspeed's "(ep 1)" as megatron's."""
    short = Path(tempfile.mkdtemp(prefix="fh"))  # a path the refusal quotes whole (< 80 chars)
    request.addfinalizer(lambda: shutil.rmtree(short, ignore_errors=True))
    g1 = _config(short, "g1.json", n_group=1, topk_group=1)
    k70 = _config(short, "k70.json", first_k_dense_replace=70)
    moe = ("--gpus", "64", "--ep", "8")
    calls = {
        "a": (*LLAMA_PP4, "--global-batch", "64"),
        "a--json": (*LLAMA_PP4, "--global-batch", "64", "--json"),
        "b": ("evaluate", "--model", k70, "--gpus", "64"),
        "b--json": ("evaluate", "--model", k70, "--gpus", "64", "--json"),
        "d8": ("evaluate", "--model", str(DSV3), *moe, "--json"),
        "d1": ("evaluate", "--model", g1, *moe, "--json"),
        "d1text": ("evaluate", "--model", g1, *moe),
        "e": ("evaluate", "--model", "llama3-8b", "--gpus", "8", "--tp", "2", "--framework", "deepspeed"),
        "e--json": ("evaluate", "--model", "llama3-8b", "--gpus", "8", "--tp", "2", "--framework", "deepspeed", "--json"),
    }  # fmt: skip
    done = run_many(calls)
    # (a)
    assert (
        "bubble_ratio 7.2% of the micro-batches' time (compute + exposed tp, cp, ep); "
        in done["a"].stdout
    )
    d = json.loads(done["a--json"].stdout)
    ratio = d["pipeline"]["bubble_ratio"]
    assert round(ratio, 4) == 0.0724 and ratio < 3 / 32
    exposed = {r["axis"]: r["exposed_seconds"] for r in d["traffic"]}
    stage = d["time"]["compute_s"] + exposed["tp"] + exposed["cp"] + exposed["ep"]
    assert exposed["tp"] > 0 and abs(d["time"]["bubble_s"] - ratio * stage) < 1e-9 * stage
    assert abs(d["time"]["bubble_s"] - ratio * d["time"]["compute_s"]) > 1e-3  # not of compute
    # (b)
    for key in ("b", "b--json"):
        assert refusal(done[key]) == (
            f"--model: '{k70}': first_k_dense_replace = 70: more than num_hidden_layers = 61"
        )
    # (d)
    notes8 = " ".join(json.loads(done["d8"].stdout)["notes"])
    notes1 = " ".join(json.loads(done["d1"].stdout)["notes"])
    assert "(DeepSeek-V3 §2.1.2, §3.2.2: at most 4 nodes per token)" in notes8
    assert "ep traffic is an upper bound" in notes1 and "nodes per token" not in notes1
    assert "deduplication sends less (--set moe_dispatcher=deepep times it)" in notes1
    assert "nodes per token" not in done["d1text"].stdout
    # (e)
    assert "layout: dp 4 × tp 2 × pp 1 × cp 1 (ep 1), deepspeed ZeRO-1" in done["e"].stdout
    assert json.loads(done["e--json"].stdout)["layout"]["etp"] == 2  # tp: no experts


def test_a_sweep_error_names_the_grid_key(tmp_path):
    """(c) A grid of a config.json with no published batch: its error rows say the grid's key
    ``global_batch`` (or ``global_batch_tokens``), not the command line's ``--global-batch``."""
    config = Path(__file__).parent / "data" / "hf" / "qwen3-8b" / "config.json"
    grid = tmp_path / "grid.toml"
    grid.write_text(f'model = "{config}"\n\n[sweep]\ngpus = [8]\n')
    text = trainplan("sweep", str(grid), "--out", str(tmp_path / "a.parquet"))
    obj = trainplan("sweep", str(grid), "--out", str(tmp_path / "b.parquet"), "--json")
    want = "has no published batch size; give global_batch (sequences per step"
    assert want in text.stdout and "--global-batch" not in text.stdout, text.stdout
    assert want in obj.stdout and "--global-batch" not in obj.stdout, obj.stdout
    assert "or global_batch_tokens (e.g. 4e6)" in text.stdout


def test_first_k_dense_layers_past_the_layers_names_both_values():
    """(b) The model's own rule (a scenario file's ``[architecture.moe]``): both values named."""
    import dataclasses

    import pytest

    from trainplan.model.errors import InputError
    from trainplan.scenarios.catalogue import get_model

    arch = get_model("deepseek-v3").model.arch
    assert arch is not None and arch.moe is not None and arch.moe.group_limit == 4
    with pytest.raises(InputError) as err:
        dataclasses.replace(arch, moe=dataclasses.replace(arch.moe, first_k_dense_layers=70))
    assert str(err.value) == "moe.first_k_dense_layers: 70 is more than num_layers = 61"
