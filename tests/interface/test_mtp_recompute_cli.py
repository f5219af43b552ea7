"""Recompute ``sqrt`` of a model with MTP modules under ``megatron`` as a user meets it
(:func:`model.mtp_rules.mtp_recompute_rule`; the hand derivation is in
tests/model/test_mtp_recompute.py): each command its own process, one line naming the flag, its
value and the rule, exit 2. DeepSeek-V3 at pp 8 holds 8 decoder layers on its busiest ranks (the
MTP block, with the last rank's 7, is not counted: Megatron-Core checkpoints it apart), so √n
cuts segments of round(√8) = 3, which Megatron-Core's MTP layer refuses."""

from __future__ import annotations

from tests.cli_runs import refusal, run_many

LINE = "--recompute: sqrt with --framework megatron and 1 MTP module checkpoints 3 layers a segment"

EVALUATE = (
    "--dp 16 --ep 8 --etp 1 --zero 1 --global-batch 1024 --seq-len 4096 --no-sequence-parallel"
)


def test_cli_refuses_in_one_line_in_fresh_processes() -> None:
    common = ["--model", "deepseek-v3", "--gpu", "H100-SXM", "--recompute", "sqrt", "--pp", "8"]
    done = run_many(
        {
            "evaluate": ["evaluate", *common, *EVALUATE.split()],
            "search": ["search", *common, "--gpus", "128", "--time-limit", "60"],
        }
    )
    assert refusal(done["evaluate"]).startswith(LINE)
    assert refusal(done["search"]).startswith(LINE)


def test_sqrt_launch_line_counts_decoder_layers_only() -> None:
    """The launch line's ``--recompute-num-layers`` under ``sqrt`` reads the decoder layers a rank
    holds, as the model's segment does (:func:`model.recompute_counts.decoder_segment`): the small
    model (4 layers and an MTP block, pp 2) puts 2 decoder layers on each rank, round(√2) = 1,
    where counting the MTP block on the last rank (3, round(√3) = 2) would write 2."""
    import dataclasses

    from tests.archs import llama_like
    from trainplan.interface.launch import megatron_flags
    from trainplan.model.model_spec import ModelSpec
    from trainplan.optimizer.case import Case

    arch = dataclasses.replace(llama_like(4, 2048, 16, 5504, 32000), mtp_layers=1)
    case = Case.of(
        model=ModelSpec(name="small-mtp", source="test", arch=arch), pp=2, tp=2,
        seq_len=2048, global_batch_size=8, device="H100-SXM",
    )  # fmt: skip
    flags = megatron_flags(arch, case.layout.with_(recompute="sqrt"), 2).flags
    assert flags[-6:] == ("--recompute-granularity", "full", "--recompute-method", "uniform",
                          "--recompute-num-layers", "1")  # fmt: skip
