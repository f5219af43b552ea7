"""Why ``rlhf-plan`` found no placement (optimizer/rlhf/explain.py): the ZeRO-3 suggestion for a
training role below ZeRO-3 is checked on every pool size a placement may give the role
(optimizer/rlhf/tables.py ``pool_sizes``), with the tables' own fits-alone rule, and names the
pools where it helps — not on the whole cluster alone, where a role fits at ZeRO-3 most easily
(the most dp ranks to shard over) but shares every GPU with the other roles."""

from __future__ import annotations

from unittest.mock import patch

from trainplan.model.hardware import ClusterLinks
from trainplan.model.rlhf.spec import RLHFSpec, Role
from trainplan.optimizer.rlhf import explain as ex
from trainplan.optimizer.rlhf.tables import RLHFProblem, build_tables
from trainplan.scenarios.catalogue import get_model
from trainplan.topology.accelerators import get_accelerator

H100 = get_accelerator("H100-SXM")


def _ppo(zero_stage: int | None) -> RLHFProblem:
    """PPO on Llama 3 70B (actor, critic, reference, reward the same size), deepspeed, 16
    H100s: at deepspeed's ZeRO-1 every GPU holds a training role's BF16 weights whole."""
    model = get_model("llama3-70b").model
    spec = RLHFSpec(
        algorithm="ppo", policy=model, reward="model", prompts=64,
        samples_per_prompt=4, prompt_tokens=1024, completion_tokens=1024,
        framework="deepspeed", zero_stage=zero_stage,
    )  # fmt: skip
    return RLHFProblem(spec, H100, 16, ClusterLinks.from_device(H100))


def test_zero3_is_checked_on_each_pool_the_tables_use() -> None:
    """The pools ``fits_at_zero3`` names are exactly those on which the tables built at ZeRO-3
    hold an option of the actor, and the ZeRO-1 tables hold none anywhere (the case explain
    speaks of). At ZeRO-3 the actor fits on pools of 8 and 16 GPUs (the tables' one option on
    each: tp 1, pp 1, dp 8 or 16, its optimizer state on the host, CPU Adam), not on 1, 2 or
    4: the whole cluster alone would have said "fits" for those too."""
    at1, at3 = build_tables(_ppo(None)), build_tables(_ppo(3))
    assert not any(at1.options[Role.ACTOR].values())
    want = tuple(n for n in at3.sizes if at3.options[Role.ACTOR][n])
    got = ex.fits_at_zero3(at1.problem, Role.ACTOR, at1.sizes)
    assert got == want
    assert got == (8, 16)
    hint = ex.zero3_hint(at1.problem, Role.ACTOR, at1.sizes)
    assert (
        hint
        == " (`zero_stage` 3 shards them over dp too, and then it fits on a pool of 8 GPUs or more)"
    )


def test_zero3_hint_words() -> None:
    """The three wordings: every pool from the smallest that fits up; the cluster alone; pools
    with gaps listed; and nothing where no pool fits."""
    sizes = (1, 2, 4, 8, 16, 24, 32)
    for fits, tail in (
        ((8, 16, 24, 32), "on a pool of 8 GPUs or more)"),
        ((32,), "on the whole cluster's 32 GPUs only)"),
        ((8, 32), "on pools of 8, 32 GPUs)"),
    ):
        with patch.object(ex, "fits_at_zero3", lambda p, r, s, f=fits: f):
            hint = ex.zero3_hint(None, Role.ACTOR, sizes)  # type: ignore[arg-type]
        assert hint == f" (`zero_stage` 3 shards them over dp too, and then it fits {tail}", fits
    with patch.object(ex, "fits_at_zero3", lambda p, r, s: ()):
        assert ex.zero3_hint(None, Role.ACTOR, sizes) == ""  # type: ignore[arg-type]
