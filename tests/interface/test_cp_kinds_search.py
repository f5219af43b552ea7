"""The CP flavour as a searched dimension and as a constraint (issue 11 item 4).

The worked case of ``tests/model/test_context_parallel.py``: Llama 3 8B at s = 32,768 on 8
H100s, tp 1, pp 1, cp 8, one sequence per step. Every flavour computes the same FLOPs; under the
single time model the exposed cp traffic decides: Ulysses sends 168 MiB per layer, the hybrid
(2 × 4) 240, the ring and the all-gather 336 each — so Ulysses is the fastest, and the ring and
the all-gather tie, broken by the order the flavours are given in. Under the roofline clock the
attention kernels' calls differ too (the longer the call, the faster the kernel).
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from trainplan.interface.cli import cli, register_commands
from trainplan.interface.scenario import build_problem, load_scenario
from trainplan.model.context_parallel import CpKind
from trainplan.model.errors import InfeasibleError, InputError, ScenarioError
from trainplan.optimizer import enumerate as oracle
from trainplan.optimizer.search import prepare, search
from trainplan.optimizer.space import SearchSpace, legal_shapes
from trainplan.scenarios.catalogue import get_model

CASE = {
    "model": "llama3-8b",
    "gpus": "8",
    "gpu": "H100-SXM",
    "seq_len": 32768,
    "global_batch": 1,
    "space": {"tp": [1], "pp": [1], "cp": [8], "recompute": ["none"], "zero": [1]},
    # no runtime reserve: Ulysses' seven all-to-all peers hold 7 · 32 · 12 MiB of NCCL buffers
    # (the ring's two, 768 MiB), which with the 2.15 GiB reserve leave it no room on an H100;
    # these tests compare the flavours' times
    "cluster": {"memory_reserve_gib": 0},
}


def _best(cp_kind=None, cluster=None, gpu=None, **space):
    values = {**CASE, "space": {**CASE["space"], **space}}
    if gpu:
        values["gpu"] = gpu
    if cluster:
        values["cluster"] = {**CASE.get("cluster", {}), **cluster}
    if cp_kind is not None:
        values["space"]["cp_kind"] = cp_kind
    problem = build_problem({}, values)
    result = search(problem)
    tables = prepare(problem)[0]
    found = oracle.best(problem, tables)
    assert found is not None and found[1] == result.best.objective  # CP-SAT = enumeration
    return result.best.estimate.layout


def test_the_search_chooses_among_the_flavours_by_default():
    """Llama 3 8B at s 32,768 on cp 8. Under the single time model (one overlap fraction for
    every flavour) the fewest bytes win: Ulysses' 168 MiB per layer against the ring's 336.
    Under the roofline clock the ring's K/V chunks hide under the attention core while Ulysses'
    all-to-alls gate it, but the kernels differ more: Ulysses runs one causal cuDNN call on the
    whole 32K sequence (0.70 of peak forward), the ring one causal call on its 4K chunk and
    seven unmasked 4K × 2K calls (0.63 together: model.attention_rates.ring_fractions), so
    Ulysses wins on the roofline clock too.

    Run on an H200, whose 141 GB leave both flavours room, so that the choice is by time: on an
    H100 Ulysses no longer fits (above the 85.52 GB usable with no reserve) since the world
    group's NCCL ring (model/terms/comm_memory.py) is counted, and the search takes the ring
    (84.23 GB with NCCL's channel set-up). The H200's cuDNN fractions are the H100's (the same
    Hopper sweep, measured on the H200), and so are every byte above; the step times are 0.594 s
    (Ulysses) and 0.607 s (ring) there, 0.610 and 0.623 s on an H100."""
    lay = _best(cluster={"time_model": "single"}, gpu="H200")
    assert (lay.cp, lay.cp_kind, lay.cp_a2a) == (8, CpKind.ULYSSES, None)
    lay = _best(gpu="H200")
    assert (lay.cp, lay.cp_kind, lay.cp_a2a) == (8, CpKind.ULYSSES, None)


def test_the_flavour_as_a_constraint():
    assert _best(["ring"], gpu="H200").cp_kind is CpKind.RING
    # by bytes (single model) the hybrid's 240 MiB per layer beats the ring's 336; on the
    # roofline clock too: its ring's calls run on 16K chunks (s/(cp/u)), the ring's on 4K ones.
    # Compared on the H200 at u = 2: on the H100 the hybrid (2 × 4) needs 85.71 GB of 85.52
    # since NCCL's channel set-up is counted (model/terms/comm_memory.py): its cp communicator's
    # three NVLink peers, 3 × 32 × 12 = 1,152 MiB, and 196 MiB of set-up; the dp·cp,
    # gradient-statistics and world rings, 24 × 12 + 196 = 484 MiB each: 2,800 MiB (the ring
    # flavour's two peers 964 MiB with the three rings, 2,416 MiB, fitted). With Transformer
    # Engine's placeholder weight gradients (model/terms/dummy_wgrads.py: at tp 1 QKV [6,144,
    # 4,096], proj [4,096, 4,096], FC1 [28,672, 4,096], FC2 [4,096, 14,336] and the output
    # layer [128,256, 4,096] in BF16, 436,207,616 + 1,050,673,152 = 1,486,880,768 B held for
    # the run) no flavour fits the H100 at cp 8: the least, 86.01 GB; the H200 holds them all
    single = {"time_model": "single"}
    hybrid = ["p2p", "a2a+p2p"]
    assert _best(hybrid, cluster=single, gpu="H200", cp_a2a=[2]).cp_kind is CpKind.HYBRID
    assert _best(hybrid, gpu="H200", cp_a2a=[2]).cp_kind is CpKind.HYBRID
    with pytest.raises(InfeasibleError, match="the least any candidate needs is 86.01 GB"):
        _best(hybrid)  # the H100
    # at u = 4 the all-to-all's NCCL peers and the attention output kept twice (the core's
    # copy before the all-to-all back, 32 MiB a layer: 1,073,741,824 B) do not fit the H100's
    # 85.52 GB; the H200 leaves it room
    lay = _best(["a2a+p2p"], cp_a2a=[4], gpu="H200")
    assert (lay.cp_kind, lay.cp_a2a) == (CpKind.HYBRID, 4)


def test_ring_and_all_gather_tie_goes_to_the_one_that_holds_less():
    """Same bytes: under the single time model (one overlap fraction for every flavour) the same
    step time, and the tie goes to the least peak memory (optimizer.rules.tie_keys), the ring:
    the all-gather flavour also keeps each query chunk's attention output (1.07 GB here), which
    with the loss's working set on the one stage (2·S·V: 1.05 GB) needs the room the case's zero
    runtime reserve leaves. Under the roofline clock the ring hides its K/V chunks under the
    attention core while the all-gather waits, so the ring wins on time, in either order. On
    the H200: the H100 holds no cp 8 layout beside Transformer Engine's placeholder weight
    gradients (:func:`test_the_flavour_as_a_constraint`)."""
    single = {"time_model": "single"}
    for order in (["ring", "all-gather"], ["all-gather", "ring"]):
        assert _best(order, cluster=single, gpu="H200").cp_kind is CpKind.RING
        assert _best(order, gpu="H200").cp_kind is CpKind.RING
    ring, gather = (
        build_problem({}, {**CASE, "gpu": "H200", "space": {**CASE["space"], "cp_kind": [k]},
                           "cluster": {**CASE.get("cluster", {}), **single}})
        for k in ("ring", "all-gather")
    )  # fmt: skip
    r, g = (search(p).best for p in (ring, gather))
    assert r.objective == g.objective and r.peak_bytes < g.peak_bytes  # a real tie


def test_legal_shapes_carry_the_flavours_whose_head_rule_holds():
    """Llama 3 8B (a 32, g 8) on 64 GPUs at s 32,768: Ulysses needs cp | 32/tp and cp | 8/tp —
    tp 1: cp 2, 4, 8; tp 2 (4 KV heads a rank): cp 2, 4; tp 4 (2): cp 2; tp 8 (1): none. The
    hybrid's inner u needs the same of u: cp 4 with u 2 at tp 1, 2, 4; cp 8 with u 2 at tp 1, 2,
    4 and u 4 at tp 1, 2. The ring and the all-gather go with every cp; cp 1 has no flavour."""
    entry = get_model("llama3-8b")
    from trainplan.model.specs import TrainingSpec

    training = TrainingSpec(seq_len=32768, global_batch_size=64)
    space = SearchSpace(
        num_gpus=64,
        tp=(1, 2, 4, 8),
        pp=(1,),
        cp=(1, 2, 4, 8),
        micro_batch_size=(1,),
        cp_kinds=tuple(CpKind),
    )
    shapes = legal_shapes(entry.model, training, space)
    kinds = {(s.tp, s.cp, str(s.cp_kind), s.cp_a2a) for s in shapes}
    ulysses = {(tp, cp) for tp, cp, k, _ in kinds if k == "ulysses"}
    assert ulysses == {(1, 2), (1, 4), (1, 8), (2, 2), (2, 4), (4, 2)}
    hybrid = {(tp, cp, u) for tp, cp, k, u in kinds if k == "a2a+p2p"}
    assert hybrid == {(1, 4, 2), (2, 4, 2), (4, 4, 2), (1, 8, 2), (2, 8, 2), (4, 8, 2)} | {
        (1, 8, 4),
        (2, 8, 4),
    }
    for tp in (1, 2, 4, 8):
        for cp in (2, 4, 8):
            assert {(tp, cp, "ring", None), (tp, cp, "all-gather", None)} <= kinds
    assert {k for tp, cp, k, _ in kinds if cp == 1} == {"ring"}


def test_scenario_cp_kind_and_bad_values(tmp_path):
    good = tmp_path / "s.toml"
    good.write_text(
        'model = "llama3-8b"\ngpus = 8\nseq_len = 32768\nglobal_batch = 1\n'
        '[space]\ntp = [1]\npp = [1]\ncp = [8]\ncp_kind = ["ring", "all-gather"]\n'
    )
    problem = build_problem(load_scenario(good), {})
    assert problem.space.cp_kinds == (CpKind.RING, CpKind.ALL_GATHER)
    assert search(problem).best.estimate.layout.cp_kind is CpKind.RING
    bad = tmp_path / "b.toml"
    bad.write_text('model = "llama3-8b"\ngpus = 8\n[space]\ncp_kind = "tree"\n')
    with pytest.raises(ScenarioError, match="cp_kind: 'tree' is not one of ring, all-gather"):
        load_scenario(bad)
    with pytest.raises(InputError, match="cp_kind: 'tree' is not one of"):
        build_problem({}, {**CASE, "space": {"cp_kind": ["tree"]}})


def test_search_cli_cp_kind():
    register_commands()
    args = ["search", "--model", "llama3-8b", "--gpus", "8", "--seq-len", "32768"]
    args += ["--global-batch", "1", "--tp", "1", "--pp", "1", "--cp", "8", "--json"]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    # Ulysses: one causal call on the whole 32K sequence runs the core faster than the ring's
    # chunked calls (model.attention_rates.ring_fractions), more than its exposed all-to-all costs
    assert json.loads(res.stdout)["layout"]["cp_kind"] == "ulysses"
    res = CliRunner().invoke(cli, [*args, "--cp-kind", "all-gather"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["layout"]["cp_kind"] == "all-gather"


def test_a_flavour_the_space_cannot_use_is_refused():
    """--cp-kind with cp 1 only (the search's default) and --cp-a2a without the hybrid would be
    ignored: each is one line naming the option (check_applicable)."""
    with pytest.raises(InputError, match="cp_kind: 'ulysses' does not apply: .* cp is 1"):
        build_problem({}, {**CASE, "space": {"cp_kind": ["ulysses"]}})
    with pytest.raises(InputError, match="cp_a2a: '2' does not apply: .*a2a\\+p2p"):
        build_problem({}, {**CASE, "space": {"cp": [8], "cp_a2a": [2]}})


def test_fsdp2_search_takes_a_flavour_torchtitan_runs():
    """Llama 3 8B on 8 GPUs at s 65,536, cp 2, 4 or 8 under fsdp2 with the default flavours:
    the answer's flavour is one of PyTorch's (before, TE's all-gather at dp 2 cp 4, whose
    0.67 GB of buffers and 58.8 s torchtitan does not run)."""
    problem = build_problem(
        {},
        {"model": "llama3-8b", "gpus": "8", "seq_len": 65536, "global_batch": 32,
         "space": {"cp": [2, 4, 8], "framework": ["fsdp2"]}},
    )  # fmt: skip
    case = problem.jobs[0].case
    assert {s.cp_kind for s in legal_shapes(case.model, case.training,
                                            problem.space) if s.cp > 1} == {
        CpKind.PYTORCH_ALLGATHER, CpKind.PYTORCH_ALLTOALL}  # fmt: skip
    lay = search(problem).best.estimate.layout
    assert lay.cp > 1 and lay.cp_kind in (CpKind.PYTORCH_ALLGATHER, CpKind.PYTORCH_ALLTOALL)
    # Llama 3's all-gather runs under fsdp2 when it is named (the published Llama 3 recipes)
    named = build_problem(
        {},
        {"model": "llama3-8b", "gpus": "8", "seq_len": 65536, "global_batch": 32,
         "space": {"cp": [4], "framework": ["fsdp2"], "cp_kind": ["all-gather"]}},
    )  # fmt: skip
    assert {s.cp_kind for s in legal_shapes(case.model, case.training, named.space)} == {
        CpKind.ALL_GATHER}  # fmt: skip
