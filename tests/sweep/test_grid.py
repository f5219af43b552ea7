"""The grid file of ``trainplan sweep``: the points it stands for, the project's number grammar,
and one line naming the key, the value and the rule for every bad input (exit code 2)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from fractions import Fraction

import pytest

from tests.cli_runs import refusal, trainplan
from trainplan.interface.sweep.grid import parse_grid
from trainplan.model.errors import ScenarioError
from trainplan.model.hardware import DeviceSpec

GRID = """
objective = "time-to-train"
tokens = "15e12"
gpu_hour_price = { H100-SXM = 2.5, H200 = 3.2 }
[sweep]
model = ["llama3-8b", "llama3-70b"]
gpu = ["H100-SXM", "h200"]
gpus = ["16,384", "64..128"]
[what_if]
hbm_capacity = [1, 1.5]
"""


def grid(text: str = GRID):
    return parse_grid(tomllib.loads(text), "grid.toml")


def test_every_combination_in_order():
    g = grid()
    # 2 models × 2 parts × (16,384 and the range's 64, 96, 128) × 2 multipliers
    assert len(g.points) == 2 * 2 * 4 * 2
    first, second, last = g.points[0], g.points[1], g.points[-1]
    assert first.values == (("model", "llama3-8b"), ("gpu", "H100-SXM"), ("gpus", 16384))
    assert first.what_if == ()  # ×1 is the catalogue part
    assert second.what_if == (("hbm_capacity", Fraction(3, 2)),)
    assert g.part_name(second) == "H100-SXM[hbm×1.5]"
    assert last.values == (("model", "llama3-70b"), ("gpu", "H200"), ("gpus", 128))
    assert [p.index for p in g.points] == list(range(32))
    assert [p.get("gpus") for p in g.points[:8:2]] == [16384, 64, 96, 128]


def test_number_grammar_thousands_separators_are_one_number():
    g = grid('[sweep]\ngpus = ["16,384", 2048, "4e3"]\nseq_len = ["8,192"]')
    assert [p.get("gpus") for p in g.points] == [16384, 2048, 4000]
    assert {p.get("seq_len") for p in g.points} == {8192}


def test_number_grammar_lists_take_the_semicolon_never_the_comma():
    """As on the command line: ``64;128`` is two counts, ``2048,4096`` is refused (a comma only
    groups thousands)."""
    g = grid('[sweep]\ngpus = ["64;128", 256]\nseq_len = ["4096;8192"]')
    assert [p.get("gpus") for p in g.points[::2]] == [64, 128, 256]
    assert [p.get("seq_len") for p in g.points[:2]] == [4096, 8192]
    with pytest.raises(ScenarioError, match=r"sweep\.gpus: '2048,4096' is not a number"):
        grid('[sweep]\ngpus = ["2048,4096"]')


def test_a_step_time_point_leaves_the_token_budget_to_the_sweep():
    """The search refuses ``tokens`` under --objective step-time; the sweep keeps it for its own
    time-to-train and cost columns, so a step-time point's scenario has none."""
    g = grid('objective = "step-time"\ntokens = 1e12\n[sweep]\ngpus = [64]')
    assert "tokens" not in g.scenario(g.points[0]) and g.base["tokens"] == 1e12
    assert grid().scenario(grid().points[0])["tokens"] == "15e12"  # time-to-train keeps it


def test_a_point_is_a_scenario():
    g = grid()
    plain = g.scenario(g.points[0])
    assert plain["gpu"] == "H100-SXM" and plain["gpus"] == 16384
    assert plain["gpu_hour_price"] == 2.5  # the part's price from the table
    assert plain["objective"] == "time-to-train"
    what_if = g.scenario(g.points[1])["gpu"]
    assert isinstance(what_if, DeviceSpec) and what_if.name == "H100-SXM[hbm×1.5]"
    assert g.price(g.points[1]) == 2.5  # a what-if part costs what its catalogue part costs


def test_recipes_and_listed_points():
    g = grid(
        """
        model = "llama3-8b"
        [sweep]
        gpus = [64]
        recipe = ["bf16", "fp8"]
        [recipe.bf16]
        precision = "bf16"
        [recipe.fp8]
        precision = "fp8"
        optimizer_dtype = "bf16"
        [[point]]
        gpus = 128
        recipe = "fp8"
        what_if = { peak_flops = 2, nvlink_domain = 9 }
        """
    )
    assert [p.recipe for p in g.points] == ["bf16", "fp8", "fp8"]
    assert g.scenario(g.points[1])["cluster"] == {"precision": "fp8", "optimizer_dtype": "bf16"}
    assert g.part_name(g.points[2]) == "H100-SXM[nvlink×9,flops×2]"
    assert g.what_ifs == ("nvlink_domain", "peak_flops")


def test_the_fingerprint_follows_the_meaning():
    assert grid().fingerprint == grid().fingerprint
    assert grid().fingerprint != grid(GRID.replace("15e12", "16e12")).fingerprint


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("[sweep]\nmodle = ['x']", "sweep.modle: not an axis"),
        ("speed = 1\n[sweep]\ngpus = [8]", "unknown key 'speed'"),
        ("[sweep]\ngpus = [8]\n[space]\ntpp = [2]", "unknown key 'tpp'"),
        ("[sweep]\ngpus = [8]\n[what_if]\nhbm = [2]", "what_if.hbm: unknown"),
        ("[sweep]\ngpus = [8]\n[recipe.x]\nfoo = 1", "recipe.x: unknown key 'foo'"),
        ("[[point]]\ngpus = 8\nspeed = 2", "point 1: unknown key 'speed'"),
        (
            "command = 'evaluate'\n[sweep]\ngpus = [8]\n[layout]\nfoo = 1",
            "layout: unknown key 'foo'",
        ),
        ("[sweep]\ngpus = 64", "sweep.gpus: 64 must be a non-empty TOML array"),
        ("[sweep]\ngpus = [0]", "sweep.gpus: 0 must be at least 1"),
        ("[sweep]\ngpus = ['1e30']", "sweep.gpus: 1e30 is above the limit of 16,777,216 GPUs"),
        ("[sweep]\nseq_len = ['8k']", "sweep.seq_len: '8k' is ambiguous: write 8192 (8 × 1,024)"),
        (
            "[sweep]\ngpus = [8]\n[what_if]\npeak_flops = [0]",
            "what_if.peak_flops: 0 must be a multiplier above 0",
        ),
        ("gpus = [8, 16]\n[sweep]\nmodel = ['llama3-8b']", "gpus: [8, 16] must be one value"),
        ("gpus = 8\n[sweep]\ngpus = [16]", "gpus: given at the top level and swept"),
        ("[sweep]\ngpus = [8, 8]", "point 1 repeats point 0"),
        ("[sweep]\ngpus = [8]\nrecipe = ['fp8']", "recipe: 'fp8' is not a [recipe.NAME] table"),
        (
            "[sweep]\ngpus = [8]\n[recipe.fp8]\nprecision = 'fp8'",
            "recipe.fp8 is defined and no point takes it",
        ),
        (
            "[sweep]\ngpus = [8]\n[recipe.fp8]\nprecision = 'fp9'",
            "recipe.fp8: precision: 'fp9' is not one of bf16, fp8",
        ),
        (
            "objective = 'params'\n[sweep]\ngpus = [8]",
            "objective: 'params' is not taken in a sweep",
        ),
        ("per_stage = true\n[sweep]\ngpus = [8]", "per_stage: not taken in a sweep"),
        (
            "[sweep]\ngpus = [8]\n[cluster]\nscaleout_gbps = 50\n[what_if]\nscaleout_bandwidth = [2]",
            "[cluster] scaleout_gbps replaces it",
        ),
        (
            "gpu_hour_price = { H100 = 2 }\n[sweep]\ngpus = [8]",
            "gpu_hour_price: 'H100' is not a part of this grid",
        ),
        (
            "command = 'evaluate'\n[sweep]\ngpus = [8]\n[space]\ntp = [2]",
            "space: command evaluate runs one layout",
        ),
        (
            "[sweep]\ngpus = [8]\n[layout]\ntp = 2",
            'layout: only command = "evaluate" takes a [layout]',
        ),
        (
            "command = 'train'\n[sweep]\ngpus = [8]",
            "command: 'train' is not one of search, evaluate",
        ),
        ("description = 'nothing'", "nothing to sweep"),
        (
            "[sweep]\nmodel = ['llama3-8bb']\ngpus = [8]",
            "sweep.model: unknown model 'llama3-8bb'; did you mean llama3-8b",
        ),
        ("[sweep]\ngpu = ['H100-SXMM']\ngpus = [8]", "sweep.gpu: unknown gpu 'H100-SXMM'"),
        ("model = 'llama3-8bb'\n[sweep]\ngpus = [8]", "model: unknown model 'llama3-8bb'"),
        ("[[point]]\nmodel = 'llama3-8bb'\ngpus = 8", "point 1: model: unknown model"),
    ],
)
def test_bad_input_is_one_line_naming_the_key_value_and_rule(text, line):
    with pytest.raises(ScenarioError) as err:
        grid(text)
    message = str(err.value)
    assert message.startswith("grid grid.toml: ") and "\n" not in message
    assert line in message


def test_the_command_refuses_bad_grids_with_exit_code_2(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("[sweep]\nmodel = ['llama3-8b']\ngpus = ['16,384', 0]\n")
    proc = subprocess.run(
        [sys.executable, "-m", "trainplan", "sweep", str(path)], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert proc.stderr == f"Error: grid {path}: sweep.gpus: 0 must be at least 1\n"
    assert not (tmp_path / "bad.parquet").exists()


def test_a_misspelled_model_is_refused_before_any_point_runs(tmp_path):
    """A typo in the grid's model is one line and exit 2 before the pool starts (it was run at
    every point and reported per point, exit 0)."""
    path = tmp_path / "bad1.toml"
    path.write_text("[sweep]\nmodel = ['llama3-8bb', 'llama3-8b']\ngpus = [64]\n")
    line = refusal(trainplan("sweep", str(path), cwd=tmp_path))
    assert line == (
        f"grid {path}: sweep.model: unknown model 'llama3-8bb'; "
        "did you mean llama3-8b, llama3-70b, llama3-405b?"
    )
    assert list(tmp_path.iterdir()) == [path]  # no results file
    path.write_text("[sweep]\nmodel = ['llama3-8b']\ngpus = [8]\n")
    done = trainplan("sweep", str(path), "--workers", "1", cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.startswith(f"Swept 1 point of {path} ")
