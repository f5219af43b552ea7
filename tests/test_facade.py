"""The Python facade (``trainplan.evaluate``, ``trainplan.search``, ``trainplan.Layout``,
``trainplan.Case``, ``trainplan.Scenario``) as a user imports it: ``import trainplan`` loads neither numpy nor OR-Tools,
the figures are the command line's, and a parameter it does not know is refused, not dropped."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import trainplan
from tests.cli_runs import trainplan as run_cli
from trainplan.api import SEARCH_PARAMETERS, Scenario
from trainplan.interface.commands import search_problem
from trainplan.model.errors import InputError, PlannerError
from trainplan.model.layout import Layout
from trainplan.optimizer.case import Case


def test_import_trainplan_stays_cheap():
    code = "import sys, trainplan; print(sorted({'numpy', 'ortools', 'pandas'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stderr


def test_version_is_read_when_asked_for():
    """``import trainplan`` reads no distribution metadata (``importlib.metadata``: a tenth of a
    second a command that never prints the version paid); ``trainplan.__version__`` is still the
    installed distribution's (pyproject.toml's ``version``)."""
    code = (
        "import sys, trainplan; print('importlib.metadata' in sys.modules); "
        "print(trainplan.__version__)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.split() == ["False", "0.1.0"], done.stderr


def test_evaluate_loads_no_numpy():
    """``trainplan evaluate`` (one layout, exact Python numbers) loads neither numpy nor OR-Tools
    nor pandas: the search's objectives (:mod:`optimizer.objectives`) and its objective's units
    (``interface.search_commands``) no longer bring in the search's shapes."""
    code = (
        "import sys; sys.argv = ['trainplan', 'evaluate', '--model', 'llama3-8b']; "
        "from trainplan.interface.cli import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(sorted({'numpy', 'ortools', 'pandas'} & set(sys.modules)), file=sys.stderr)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stderr.strip().splitlines()[-1] == "[]", done.stderr


def test_the_facade_names_are_the_projects():
    assert trainplan.Layout is Layout and trainplan.Case is Case and trainplan.Scenario is Scenario
    assert {"evaluate", "search", "Layout", "Case", "Scenario"} <= set(trainplan.__all__)
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        _ = trainplan.nothing


def test_evaluate_gives_the_command_lines_figures():
    """Llama 3 70B, dp 2 · tp 4 · pp 8 on H100: the same bytes and step time as
    ``trainplan evaluate --json`` (the example of the Python API page: 75,843,371,008 bytes,
    75,453,300,736 before one layer's backward working set was counted on stage 0, which has
    no loss phase: 301,989,888 B = 288 MiB, the QKV projection's backward under Megatron-Core
    at tp 4 with sequence parallelism, s 8192, h 8192 (model/backward_working.py): output
    gradient n = 2·s·h/4 (32 MiB), dQ (32), dK and dV (4 + 4), the re-gathered norm output and
    the dgrad 2·s·h each (128 + 128), the reduce-scatter's output (32), less Q, K, V and the
    output projection's input it releases (32 + 4 + 4 + 32)); the fused attention's FP32
    softmax statistics, 4·64/4 heads·8,192 = 524,288 B a layer, over stage 0's 10 layers × 8
    micro-batches in flight: 41,943,040 B more; and 46,137,344 B = 44 MiB more since NCCL's
    channels are counted by placement with their set-up (model/terms/comm_memory.py
    ``collective_channels``): the tp and dp rings inside a node 24 channels × 12 MiB + (32 × 3 +
    2) × 2 MiB = 484 MiB each (were 384), the gradient-statistics and world rings across 8 nodes
    16 × 12 + (16 × 3 + 2) × 2 = 292 MiB each (were 384), the pipeline neighbour 4 × 12 + (4 × 3
    + 2) × 2 = 76 MiB (was 48): 2 × 100 − 2 × 92 + 28 = 44 MiB; and 306,184,192 B = 292 MiB
    more for the model-parallel group Megatron-LM's train_step all-reduces over at every ZeRO
    stage (model/terms/comm_groups.py ``megatron_rings``: the tp block of 4 at each pp stride of
    8, 4 ranks a node on 8 nodes, 16 channels, 192 + 100 MiB): 76,149,555,200 bytes; and
    NVLink SHARP's credits, 10 MiB (below): 76,160,040,960 bytes; and Transformer Engine's
    placeholder weight gradients on stage 0 (model/terms/dummy_wgrads.py, one BF16 tensor per
    distinct weight shape at tp 4: QKV [2,560, 8,192], proj [8,192, 2,048], FC1 [14,336,
    8,192], FC2 [8,192, 7,168]), 427,819,008 B: 76,587,859,968 bytes."""
    e = trainplan.evaluate(model="llama3-70b", gpu="H100-SXM", dp=2, tp=4, pp=8)
    args = ["evaluate", "--model", "llama3-70b", "--gpu", "H100-SXM", "--dp", "2", "--tp", "4"]
    cli = json.loads(run_cli(*args, "--pp", "8", "--json").stdout)
    work = (32 + 32 + 4 + 4 + 128 + 128 + 32 - (32 + 4 + 4 + 32)) * 2**20
    assert work == 301_989_888 == int(e.peak.activations.backward_working_bytes)
    lse = 10 * 8 * 4 * 64 // 4 * 8192
    assert lse == 41_943_040
    nccl = (2 * 100 - 2 * 92 + 28) * 2**20
    assert 75_453_300_736 + work + lse + nccl == 75_843_371_008
    # the model-parallel ring, 292 MiB; NVLink SHARP (model/terms/nvls_memory.py): tp 4 and dp 2
    # in a node 2 MiB of credits each (NCCL's tuner runs their all-reduces as rings,
    # model/nccl_search.py: no buffers; 2 + 128 and 2 + 64 MiB were counted before), the
    # gradient-statistics, world and model-parallel rings (≥ 2 ranks a node) 2 each: 10 MiB
    total = 75_843_371_008 + (292 + 2 + 2 + 3 * 2) * 2**20
    assert total == 76_160_040_960
    dummies = 2 * 8192 * (2560 + 2048 + 14336 + 7168)
    assert dummies == 427_819_008
    total += dummies
    assert int(e.peak.total_bytes) == total == cli["memory"]["total_bytes"] == 76_587_859_968
    assert e.step_s == pytest.approx(cli["time"]["step_s"], rel=1e-12)


def test_search_refuses_a_parameter_it_does_not_know():
    with pytest.raises(InputError, match="^max_pt: not a search parameter"):
        trainplan.search(model="llama3-8b", gpus=8, max_pt=4)


def test_every_search_parameter_reaches_the_search():
    """Each name the facade accepts is one ``search_problem`` reads (a name it let through but
    the search ignored would be a silently dropped option)."""
    problem = search_problem({"model": "llama3-8b", "gpus": 8, "max_tp": 4, "headroom": 0.1})
    assert problem.space.max_tp == 4 and problem.constraints.headroom == 0.1  # a cap on divisors
    assert "max_tp" in SEARCH_PARAMETERS and "per_stage" not in SEARCH_PARAMETERS


PINNED = (
    "deepseek-v3-dualpipe",
    {"tp": [1], "pp": [16], "ep": [64], "zero": [1], "micro_batch": [1]},
)
"""DeepSeek-V3's pre-training job (the package's published scenario) pinned to its published
layout, as docs/pipeline-schedules.md runs it."""


@pytest.mark.slow  # one search launch (about 2 s of CPU) beside one in-process search
def test_a_published_scenario_gives_the_command_lines_figures():
    """``Scenario.from_name(...).search()`` is ``trainplan search --scenario FILE … --json``:
    79,980,703,328 bytes on the end ranks (79.98 GB, the page's transcript) and 20.097 s (19.670
    before DualPipe's mirror ranks' gradient all-reduce, model.terms.traffic.pair_reduce_bytes:
    ranks 0 and 15 both hold stages 0 and 15, 5,343,228,928 parameters × 4 B of FP32 gradients
    = 21.37 GB, a 2-rank all-reduce sending 2·(1/2) of it on the 50 GB/s scale-out link after
    the flush, exposed whole: + 0.42746 s, tests/interface/test_dualpipe_mirror.py; the
    textbook profile's optimizer step unchanged; 19.664 before the dispatch carried each token's routing indices and weights,
    ``model.moe_dispatch.side_bytes``; 18.801 before DeepEP's φ was the H200's measured 0.249 in
    place of 20/132: + 8.841 s of hidden all-to-all × (0.24911 − 0.15152) = + 0.863 s)."""
    name, options = PINNED
    result = Scenario.from_name(name, **options).search()
    e = result.best.estimate
    flags = ["--tp", "1", "--pp", "16", "--ep", "64", "--zero", "1", "--micro-batch", "1"]
    cli = json.loads(
        run_cli("search", "--scenario", f"scenarios/{name}.toml", *flags, "--json").stdout
    )
    assert int(e.peak.total_bytes) == 79_980_703_328 == cli["memory"]["total_bytes"]
    assert e.step_s == pytest.approx(cli["time"]["step_s"], rel=1e-12)
    assert round(e.step_s, 3) == 20.097 and result.status == "optimal"


def test_a_scenario_is_the_files_typed_form():
    """The file's values by table, the options over them; its one job's case."""
    s = Scenario.from_name("deepseek-v3-dualpipe", gpus=1024)
    assert s.request.values["gpus"] == 1024 and s.request.values["global_batch"] == 15360
    assert s.request.space["recompute"] == ["selective"]
    assert s.request.cluster["moe_dispatcher"] == "deepep"
    assert (s.case.model.name, s.case.device.name) == ("deepseek-v3", "H800")
    assert Scenario.names() == ["deepseek-v3-dualpipe"]


def test_a_scenario_refuses_what_it_does_not_know(tmp_path):
    with pytest.raises(InputError, match="^scenario: 'deepseek' is not a published scenario"):
        Scenario.from_name("deepseek")
    with pytest.raises(InputError, match="^max_pt: not a search parameter"):
        Scenario.from_name("deepseek-v3-dualpipe", max_pt=4)
    bad = tmp_path / "bad.toml"
    bad.write_text('model = "llama3-8b"\nseq_lenn = 4096\n')
    with pytest.raises(PlannerError, match="seq_lenn"):
        Scenario.load(bad)
