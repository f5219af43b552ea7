"""A new user's first hours, each ``trainplan`` call its own process (:mod:`tests.cli_runs`), the
web API through its app: Megatron-LM's and torchtitan's spellings of a layout's degrees and batch
(``--tensor-model-parallel-size 2``, ``--parallelism.pipeline_parallel_degree 2``), which click
refused as "No such option" with no hint (or guessed ``--tp`` for ``--fp8``), are refused naming
the framework, where its flag is defined and this command's spelling with the value typed."""

from __future__ import annotations

from tests.cli_runs import refusal, run_many

MEGATRON = "it is Megatron-LM's flag (megatron/training/arguments.py at d98e8a64)"
TORCHTITAN = "it is torchtitan's flag (torchtitan/config/configs.py ParallelismConfig at b5bcd76c)"


def test_a_frameworks_flag_is_refused_with_this_commands_spelling():
    """Each framework flag names this command's flag (pipeline's stage count is ``--stages``),
    with ``=`` or a space before the value; a command without the parameter keeps click's
    refusal (``example`` takes its tabs' parameters through ``--set``)."""
    evaluate = ["evaluate", "--model", "llama3-8b", "--gpus", "8"]
    runs = run_many(
        {
            "tp": [*evaluate, "--tensor-model-parallel-size", "2"],
            "tp_eq": [*evaluate, "--tensor-model-parallel-size=2"],
            "titan": [*evaluate, "--parallelism.pipeline_parallel_degree", "2"],
            "mbs": [*evaluate, "--micro-batch-size", "2"],
            "recompute": [*evaluate, "--recompute-granularity", "full"],
            "search": ["search", "--model", "llama3-8b", "--gpus", "8", "--seq-length", "4096"],
            "stages": ["pipeline", "--pipeline-model-parallel-size", "4"],
            "mfu": ["mfu", "--tensor-model-parallel-size", "2"],
        }
    )
    assert refusal(runs["tp"]) == (
        f"--tensor-model-parallel-size: no such option of trainplan evaluate; {MEGATRON}: "
        "write it --tp: --tp 2"
    )
    assert refusal(runs["tp_eq"]) == refusal(runs["tp"])
    assert refusal(runs["titan"]) == (
        f"--parallelism.pipeline_parallel_degree: no such option of trainplan evaluate; "
        f"{TORCHTITAN}: write it --pp: --pp 2"
    )
    assert refusal(runs["mbs"]).endswith("write it --micro-batch: --micro-batch 2")
    assert refusal(runs["recompute"]).endswith("write it --recompute: --recompute full")
    assert refusal(runs["search"]) == (
        f"--seq-length: no such option of trainplan search; {MEGATRON}: "
        "write it --seq-len: --seq-len 4096"
    )
    assert refusal(runs["stages"]) == (
        f"--pipeline-model-parallel-size: no such option of trainplan pipeline; {MEGATRON}: "
        "write it --stages: --stages 4"
    )
    assert "No such option '--tensor-model-parallel-size'" in refusal(runs["mfu"])


def test_a_frameworks_flag_as_a_web_key_names_the_query_key():
    """The web API's GET query and JSON body name the query key and the value typed, HTTP 422."""
    from fastapi.testclient import TestClient

    from trainplan.interface.web.app import create_app

    client = TestClient(create_app(("testserver",)))
    got = client.get(
        "/api/evaluate",
        params={"model": "llama3-8b", "gpus": "8", "tensor-model-parallel-size": "2"},
    )
    assert got.status_code == 422
    assert got.json()["error"] == (
        f"'tensor-model-parallel-size': no such parameter of evaluate; {MEGATRON}: "
        "write it tp: tp=2"
    )
    body = {"model": "llama3-8b", "gpus": 8, "parallelism.tensor_parallel_degree": 2}
    posted = client.post("/api/evaluate", json=body)
    assert posted.status_code == 422
    assert posted.json()["error"] == (
        f"'parallelism.tensor_parallel_degree': no such parameter of evaluate; {TORCHTITAN}: "
        "write it tp: tp=2"
    )
    staged = client.get("/api/pipeline", params={"pipeline-model-parallel-size": "4"})
    assert staged.status_code == 422
    assert staged.json()["error"].endswith("write it stages: stages=4")


def test_the_framework_flags_are_those_the_plans_write():
    """The Megatron-LM flags read here are those the plan's launch lines write
    (:data:`interface.launch.MEGATRON_ARGUMENTS`, each checked at the same commit), but for
    ``--seq-length`` (an ``add_argument`` call of megatron/training/arguments.py at d98e8a64),
    and torchtitan's are ``parallelism`` keys its fragment writes
    (:data:`interface.launch.TORCHTITAN_KEYS`)."""
    from trainplan.interface.framework_flags import FRAMEWORK_FLAGS
    from trainplan.interface.launch import MEGATRON_ARGUMENTS, TORCHTITAN_KEYS

    megatron = {f for f, (_, whose) in FRAMEWORK_FLAGS.items() if "Megatron-LM" in whose}
    titan = {f for f, (_, whose) in FRAMEWORK_FLAGS.items() if "torchtitan" in whose}
    assert megatron - MEGATRON_ARGUMENTS == {"--seq-length"}
    assert {f.removeprefix("--parallelism.") for f in titan} <= TORCHTITAN_KEYS["parallelism"]
    assert len(megatron) + len(titan) == len(FRAMEWORK_FLAGS) == 14


PACKED_8B = [
    "evaluate", "--model", "llama3-8b", "--seq-len", "8192", "--global-batch", "64", "--dp", "8",
    "--document-length", "2048",
]  # fmt: skip


def test_packed_documents_text_gives_the_mfu_both_ways():
    """``evaluate --help`` says of ``--document-length`` that "MFU is shown both ways"; the text
    gave one. Megatron's convention on packs of 8,192 tokens of 2,048-token documents: the
    documents' model FLOPs 24,452,451,406,970,880, a counter taking each pack for one sequence
    counts the pack's s² attention, 2,533,274,790,395,904 more
    (tests/test_recipes_cli.py::test_packed_documents_mfu_both_ways derives it):
    26,985,726,197,366,784, so its MFU is the documents' × 26,985,726,197,366,784 /
    24,452,451,406,970,880 (48.8 % → 53.9 %). Under 6n no attention is counted, both are one
    figure and the text adds nothing."""
    runs = run_many(
        {
            "text": [*PACKED_8B, "--mfu-convention", "megatron"],
            "json": [*PACKED_8B, "--mfu-convention", "megatron", "--json"],
            "6n": [*PACKED_8B],
        }
    )
    import json

    t, f = (json.loads(runs["json"].stdout)[k] for k in ("time", "flops"))
    assert f["model_flops"] == 24_452_451_406_970_880
    assert f["pack_model_flops"] == 24_452_451_406_970_880 + 2_533_274_790_395_904
    assert t["mfu_pack"] / t["mfu"] == 26_985_726_197_366_784 / 24_452_451_406_970_880
    assert (round(t["mfu"] * 100, 1), round(t["mfu_pack"] * 100, 1)) == (48.8, 53.9)
    step = next(ln for ln in runs["text"].stdout.splitlines() if ln.startswith("Step:"))
    assert "; MFU 48.8% (53.9% counting each pack as one sequence, its s² attention), HFU" in step
    plain = next(ln for ln in runs["6n"].stdout.splitlines() if ln.startswith("Step:"))
    assert "counting each pack" not in plain


def test_a_frontiers_cut_names_the_start_up_its_limit_counted():
    """``--time-limit`` counts from the command's start; the search's note names the start-up
    ("1.03 s of start-up + …"), the frontier's and the per-stage search's notes of a cut did not,
    so a 1 s limit that cut the tables after 0.34 s of them read as cut early. Each now names
    the ``startup_seconds`` its JSON gives (0.01 s: the first block of 64 shapes is never cut,
    the rest always is)."""
    frontier = ["frontier", "--model", "llama3-8b", "--gpus", "8", "--gpu", "H100-SXM"]
    per_stage = ["search", "--model", "llama3-8b", "--gpus", "16", "--gpu", "H100-SXM"]
    runs = run_many(
        {
            "frontier": [*frontier, "--time-limit", "0.01", "--json"],
            "per_stage": [*per_stage, "--per-stage", "--time-limit", "0.01", "--json"],
            "per_stage_text": [*per_stage, "--per-stage", "--time-limit", "0.01"],
        }
    )
    import json

    d = json.loads(runs["frontier"].stdout)
    cut = "the time limit cut the cost tables at 64 of 156 shapes"
    assert d["notes"][0].startswith(cut)
    assert (
        f"; {d['startup_seconds']:.2f} s of start-up counted by the limit: the points"
        in (d["notes"][0])
    )
    ps = json.loads(runs["per_stage"].stdout)["per_stage"]
    assert ps["cut"].startswith("the time limit cut the cost tables at 64 of 228 shapes")
    note = next(ln for ln in runs["per_stage_text"].stdout.splitlines() if ln.startswith("Note:"))
    assert note.startswith(f"Note: {ps['cut']}; ")
    assert note.endswith(" s of start-up counted by the limit: the plans are the best of those "
                         "shapes, not proven")  # fmt: skip


TAKEN_FRAMEWORKS = "'megatron', 'deepspeed', 'fsdp2', 'textbook'"
TAKEN_SCHEDULES = (
    "'gpipe', '1f1b', 'interleaved', 'zb-h1', 'zb-h2', 'zb-v', 'dualpipe', 'dualpipev'"
)


def test_a_frameworks_word_for_a_value_names_the_value_to_write():
    """``--framework torchtitan``, ``--optimizer adamw`` and ``--schedule Interleaved1F1B`` listed
    the values alone; each now names the one that is meant (torchtitan's schedule names are the
    launch fragment's, interface.launch_torchtitan.TORCHTITAN_SCHEDULES), on evaluate and search
    alike; a word no tool uses keeps click's line."""
    evaluate = ["evaluate", "--model", "llama3-8b", "--gpus", "8"]
    runs = run_many(
        {
            "titan": [*evaluate, "--framework", "torchtitan"],
            "adamw": [*evaluate, "--optimizer", "AdamW"],
            "i1f1b": [*evaluate, "--pp", "2", "--schedule", "Interleaved1F1B"],
            "zbv": ["search", "--model", "llama3-8b", "--gpus", "8", "--schedule", "ZBVZeroBubble"],
            "mlm": ["search", "--model", "llama3-8b", "--gpus", "8", "--framework", "megatron-lm"],
            "foo": [*evaluate, "--schedule", "foo"],
        }
    )
    assert refusal(runs["titan"]) == (
        f"--framework: 'torchtitan' is not one of {TAKEN_FRAMEWORKS}: PyTorch's fully_shard "
        "(FSDP2), as torchtitan runs it, is fsdp2; FSDP1's FullyShardedDataParallel has no "
        "profile; write fsdp2"
    )
    assert refusal(runs["adamw"]).endswith(
        ": adam is AdamW, as Megatron-LM's adam decouples the weight decay unless told not to "
        "(megatron/core/optimizer/optimizer_config.py OptimizerConfig.decoupled_weight_decay, "
        "True at d98e8a64): the same two FP32 moments; write adam"
    )
    assert refusal(runs["i1f1b"]) == (
        f"--schedule: 'Interleaved1F1B' is not one of {TAKEN_SCHEDULES}: torchtitan's "
        "Interleaved1F1B is interleaved; write interleaved"
    )
    assert refusal(runs["zbv"]).endswith(": torchtitan's ZBVZeroBubble is zb-v; write zb-v")
    assert refusal(runs["mlm"]).endswith(
        ": Megatron-LM and Megatron-Core are megatron; write megatron"
    )
    assert refusal(runs["foo"]) == f"--schedule: 'foo' is not one of {TAKEN_SCHEDULES}."


def test_a_frameworks_word_as_a_web_value_names_the_value_to_write():
    """The web API parses the query by the same options: HTTP 422, the same words."""
    from fastapi.testclient import TestClient

    from trainplan.interface.web.app import create_app

    client = TestClient(create_app(("testserver",)))
    got = client.get(
        "/api/evaluate", params={"model": "llama3-8b", "gpus": "8", "framework": "fsdp"}
    )
    assert got.status_code == 422
    assert got.json()["error"].startswith(f"framework: 'fsdp' is not one of {TAKEN_FRAMEWORKS}: ")
    assert got.json()["error"].endswith("; write fsdp2")
    body = {"model": "llama3-8b", "gpus": 8, "optimizer": "adamw"}
    posted = client.post("/api/search", json=body)
    assert posted.status_code == 422
    assert posted.json()["error"].endswith("the same two FP32 moments; write adam")


def test_the_web_placement_search_gives_startup_seconds_as_the_command_does():
    """``rlhf-plan --json`` with ``--time-limit`` gives ``startup_seconds``, as the web's
    ``/api/search`` does (0.0: the web's limit counts from the search's start); the web's
    ``/api/rlhf-plan`` left the key out, so its object was not the command's key for key.
    Without a limit neither gives it."""
    from fastapi.testclient import TestClient

    from trainplan.interface.web.app import create_app

    client = TestClient(create_app(("testserver",)))
    query = {"algorithm": "grpo", "model": "qwen2.5-7b", "reward": "rule", "gpus": "16"}
    limited = client.get("/api/rlhf-plan", params={**query, "time-limit": "0.2"}).json()
    assert limited["time_limit_seconds"] == 0.2 and limited["startup_seconds"] == 0.0
    searched = client.get(
        "/api/search", params={"model": "llama3-8b", "gpus": "8", "time-limit": "60"}
    ).json()
    assert searched["startup_seconds"] == 0.0
    unlimited = client.get("/api/rlhf-plan", params=query).json()
    assert "startup_seconds" not in unlimited and unlimited["time_limit_seconds"] is None


def test_a_negative_document_spread_is_named_not_the_mean():
    """``--document-length 1024 --set document_length_spread=-1`` said "--document-length: 1,024
    must be at least 1 token, its spread at least 0": the mean named, and its value, though the
    spread was wrong. Each is named on its own, on the command line and the web."""
    from fastapi.testclient import TestClient

    from trainplan.interface.web.app import create_app

    evaluate = ["evaluate", "--model", "llama3-8b", "--gpus", "8", "--seq-len", "4096"]
    runs = run_many(
        {
            "spread": [
                *evaluate,
                "--document-length",
                "1024",
                "--set",
                "document_length_spread=-1",
            ],
            "mean": [*evaluate, "--document-length", "0"],
        }
    )
    assert refusal(runs["spread"]) == "--set document_length_spread: -1 must be at least 0 tokens"
    assert refusal(runs["mean"]) == "--document-length: 0 must be at least 1 token"
    client = TestClient(create_app(("testserver",)))
    query = {"model": "llama3-8b", "gpus": "8", "document-length": "1024"}
    got = client.get("/api/evaluate", params={**query, "document-length-spread": "-1"})
    assert got.status_code == 422
    assert got.json()["error"] == "document-length-spread: -1 must be at least 0 tokens"


def test_an_mfu_objective_names_the_objectives_that_rank_as_mfu():
    """``--objective mfu`` listed the objectives alone; MFU is the model's FLOPs per token over
    the GPU-seconds per token and the accelerator's peak, so with the GPUs and batch fixed the
    shortest step ranks layouts as MFU does, and over a range of GPU counts on one accelerator
    the fewest GPU-seconds per token (tokens-per-gpu) do."""
    search = ["search", "--model", "llama3-8b", "--gpus", "8..64"]
    runs = run_many({"mfu": [*search, "--objective", "MFU"]})
    assert refusal(runs["mfu"]) == (
        "--objective: 'MFU' is not one of 'step-time', 'tokens-per-gpu', 'time-to-train', "
        "'cost', 'params': with the GPU count and batch fixed the shortest step is the highest "
        "MFU, and over a range of GPU counts on one accelerator the fewest GPU-seconds per token "
        "are (a model's FLOPs per token are fixed); write step-time or tokens-per-gpu"
    )


def test_the_catalogue_endpoints_refuse_a_server_path_and_say_they_take_nothing():
    """``/api/gpus?file=/etc/passwd`` answered the whole table, the key read and dropped (the
    web app reads no files on the server: ``gpus --file PATH.toml`` is refused there as the
    other paths are, naming ``accelerator=``); ``/api/models?family=llama`` said "its parameters
    are " and nothing: a command without parameters says it takes none."""
    from fastapi.testclient import TestClient

    from trainplan.interface.web.app import create_app

    client = TestClient(create_app(("testserver",)))
    path = client.get("/api/gpus", params={"file": "/etc/passwd"})
    assert path.status_code == 422
    assert path.json()["error"] == (
        "file: '/etc/passwd' does not apply here: it names a file on the server (gpus --file "
        "PATH.toml); the web app reads none: /api/evaluate takes the part's keys as a JSON "
        "object in accelerator="
    )
    for name, key in (("models", "family"), ("gpus", "foo")):
        got = client.get(f"/api/{name}", params={key: "x"})
        assert got.status_code == 422
        assert got.json()["error"] == f"{key}: no such parameter of {name}; it takes none"
    assert client.get("/api/gpus").status_code == 200


def test_a_frameworks_field_name_as_a_planner_parameter_names_the_one_to_write():
    """The Python API and ``example --set`` read planner parameter names; Megatron-LM's field
    (``tensor_model_parallel_size``) or torchtitan's (``pipeline_parallel_degree``) was "not a
    planner parameter" with no hint. Each names the framework's flag and the parameter."""
    import pytest

    import trainplan
    from trainplan.model.errors import InputError

    runs = run_many(
        {"example": ["example", "llama3-405b", "--set", "tensor_model_parallel_size=4"]}
    )
    assert refusal(runs["example"]) == (
        f"--set tensor_model_parallel_size: not a planner parameter; "
        f"--tensor-model-parallel-size is {MEGATRON.removeprefix('it is ')}: write tp "
        "(docs/guides/python.md#parameter-names lists them)"
    )
    with pytest.raises(InputError) as err:
        trainplan.evaluate(model="llama3-8b", num_gpus=8, pipeline_parallel_degree=2)
    assert str(err.value) == (
        f"pipeline_parallel_degree: not a planner parameter; "
        f"--parallelism.pipeline_parallel_degree is {TORCHTITAN.removeprefix('it is ')}: write "
        "pp (docs/guides/python.md#parameter-names lists them)"
    )
