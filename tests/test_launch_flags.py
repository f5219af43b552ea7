"""Every flag a launch line writes exists in that framework's code (:data:`interface.launch.
MEGATRON_ARGUMENTS`, :data:`interface.launch.TORCHTITAN_KEYS`, each cited there), and the
torchtitan fragment carries the recipe the plan counted: ``[compile] enable``, and a note for the
pipeline runtime's memory settings torchtitan has no key for."""

from __future__ import annotations

from dataclasses import replace

from trainplan.interface.launch import (
    MEGATRON_ARGUMENTS,
    TORCHTITAN_KEYS,
    megatron_flags,
    torchtitan_toml,
)
from trainplan.model.arch_parts import MoESpec
from trainplan.model.layout import Layout
from trainplan.model.offload import Offload
from trainplan.model.precision import Precision
from trainplan.model.specs import Architecture, TrainingSpec
from trainplan.model.timing import CostOptions

ARCH = Architecture(
    num_layers=8, hidden_size=8, num_attention_heads=2, ffn_hidden_size=32, vocab_size=16
)
TRAINING = TrainingSpec(seq_len=16, global_batch_size=8)
LAYOUTS = [
    Layout(),
    Layout(
        tp=2, sequence_parallel=True, cp=4, cp_kind="a2a+p2p", cp_a2a=2, pp=2, recompute="selective"
    ),
    Layout(cp=2, cp_kind="ring", pp=2, stage_layers=(3, 5), recompute_layers=(2, 3)),
    Layout(pp=2, virtual_stages=2, schedule="interleaved", recompute="sqrt"),
    Layout(pp=4, stage_layers=(1, 2, 3, 2), recompute="full", ep=2),
    Layout(pp=2, schedule="zb-v", virtual_stages=2, framework="fsdp2", zero_stage=3),
    Layout(pp=2, schedule="dualpipe", framework="fsdp2", zero_stage=3),
    Layout(dp=2, framework="megatron", zero_stage=3),
]
TRAININGS = [
    TRAINING,
    replace(
        TRAINING,
        precision=Precision.FP8,
        offload=Offload(optimizer=0.5, activations=("core_attn",)),
        compile=True,
        pipeline_frees_stage_tensors=True,
        pipeline_keeps_outputs=True,
    ),
]


def test_every_flag_exists_in_its_framework() -> None:
    """Megatron-LM's arguments and torchtitan's ``[section] key`` lines, over plans that reach
    every branch of the writers."""
    for lay in LAYOUTS:
        for training in TRAININGS:
            written = megatron_flags(ARCH, lay, 8, training).flags
            assert {f for f in written if f.startswith("--")} <= MEGATRON_ARGUMENTS, lay
            section = ""
            for line in torchtitan_toml(ARCH, lay, training).flags:
                if line.startswith("["):
                    section = line.strip("[]")
                    assert section in TORCHTITAN_KEYS, line
                else:
                    assert line.split(" = ")[0] in TORCHTITAN_KEYS[section], line


def test_compile_and_pipeline_memory_settings() -> None:
    """fsdp2: ``[compile] enable`` as counted (torchtitan's default, false, when unset); the
    pipeline's memory settings said in notes, never an invented key; other frameworks: no
    ``[compile]`` (their layers are fused kernels)."""
    lay = Layout(pp=2, framework="fsdp2", zero_stage=3)
    plain = torchtitan_toml(ARCH, lay, TRAINING)
    assert plain.flags[-2:] == ("[compile]", "enable = false")
    assert plain.notes == (
        "pipeline_keeps_outputs false: torchtitan has no setting for it; its trainer keeps every "
        "micro-batch's logits until e5ef99aab (2025-10-22) and none since; the plan's last stage "
        "keeps no logits",
    )
    meta = torchtitan_toml(ARCH, lay, TRAININGS[1])
    assert meta.flags[-1] == "enable = true"
    assert meta.notes[0].startswith("pipeline_frees_stage_tensors true: torchtitan has no setting")
    assert "[compile]" not in torchtitan_toml(ARCH, Layout(pp=2), TRAININGS[1]).flags
    assert torchtitan_toml(ARCH, Layout(framework="fsdp2", zero_stage=3), TRAINING).notes == ()


def test_megatron_fsdp_and_whole_layer_offload_are_written_as_counted() -> None:
    """Megatron-FSDP's main gradients in the dtype the plan counted (FP32 by default: the
    ``megatron`` profile's 4 B; Megatron-LM's own ``auto`` is the parameters' BF16) and
    ``cpu_offloading_num_layers`` (Megatron-LM sets ``cpu_offloading`` from it)."""
    lay = Layout(dp=2, framework="megatron", zero_stage=3)
    flags = megatron_flags(ARCH, lay, 8, replace(TRAINING, cpu_offloading_num_layers=2)).flags
    assert "--use-megatron-fsdp" in flags
    at = flags.index("--megatron-fsdp-main-grads-dtype")
    assert flags[at + 1] == "fp32"
    assert flags[flags.index("--cpu-offloading-num-layers") + 1] == "2"
    bf16 = megatron_flags(ARCH, lay, 8, replace(TRAINING, gradient_bytes=2)).flags
    assert bf16[bf16.index("--megatron-fsdp-main-grads-dtype") + 1] == "bf16"


def test_the_overlaps_the_step_time_assumes_are_written() -> None:
    """Megatron-LM leaves --overlap-grad-reduce and --overlap-param-gather off (arguments.py,
    store_true): the distributed optimizer's plan writes both, DDP the first, Megatron-FSDP
    both once (they also size its gradient buckets: training.py resolve_ddp_bucket_size); an
    interleaved plan writes the warm-up flush when the figure
    assumes it and --no-overlap-p2p-communication when it assumes blocking sends."""
    zero1 = megatron_flags(ARCH, Layout(dp=2, zero_stage=1), 8).flags
    assert "--overlap-grad-reduce" in zero1 and "--overlap-param-gather" in zero1
    ddp = megatron_flags(ARCH, Layout(dp=2, zero_stage=0), 8).flags
    assert "--overlap-grad-reduce" in ddp and "--overlap-param-gather" not in ddp
    fsdp = megatron_flags(ARCH, Layout(dp=2, zero_stage=3), 8).flags
    assert fsdp.count("--overlap-grad-reduce") == 1 and fsdp.count("--overlap-param-gather") == 1
    off = megatron_flags(ARCH, Layout(dp=2), 8, options=CostOptions(grad_reduce_overlap=False))
    assert "--overlap-grad-reduce" not in off.flags
    inter = Layout(pp=2, virtual_stages=2, schedule="interleaved")
    assert "--overlap-p2p-communication-warmup-flush" not in megatron_flags(ARCH, inter, 8).flags
    flush = megatron_flags(ARCH, inter, 8, options=CostOptions(p2p_warmup_flush=True))
    assert "--overlap-p2p-communication-warmup-flush" in flush.flags
    blocking = megatron_flags(ARCH, inter, 8, options=CostOptions(p2p_overlap=False))
    assert "--no-overlap-p2p-communication" in blocking.flags
    old = megatron_flags(ARCH, inter, 8, options=CostOptions(p2p_forward_send_wait=False))
    assert any("before 0.18" in n for n in old.notes)


def test_fp8_flags_follow_what_the_plan_counted():
    """``--fp8-recipe`` where the plan timed a recipe other than Megatron-Core's default delayed
    (``TransformerConfig.fp8_recipe``), and ``--fp8-param-gather`` (``DistributedDataParallel
    Config.fp8_param_gather``) only where the plan counted FP8 primary weights: without it
    Transformer Engine caches every layer's FP8 weight copy, which the memory counts."""
    fp8 = replace(TRAINING, precision=Precision.FP8)

    def fp8_flags(t: TrainingSpec) -> list[str]:
        flags = megatron_flags(ARCH, Layout(dp=8, zero_stage=3), 8, t).flags
        return [x for x in flags if "fp8" in x or x in ("hybrid", "tensorwise", "mxfp8")]

    assert fp8_flags(fp8) == ["--fp8-format", "hybrid"]
    assert fp8_flags(replace(fp8, fp8_recipe="tensorwise")) == [
        "--fp8-format", "hybrid", "--fp8-recipe", "tensorwise",
    ]  # fmt: skip
    assert fp8_flags(replace(fp8, fp8_param_gather=True)) == [
        "--fp8-format", "hybrid", "--fp8-param-gather",
    ]  # fmt: skip
    assert fp8_flags(TRAINING) == []


def test_moe_layouts_write_the_expert_tensor_parallel_size() -> None:
    """A MoE model's line always says the expert tensor-parallel degree the plan counted
    (``--expert-tensor-parallel-size``): absent, Megatron-LM takes tp (``validate_args``,
    ``megatron/training/arguments.py``: ``expert_tensor_parallel_size = tensor_model_parallel_size``
    when None), not the plan's under ``etp`` 1 or the deepspeed profile (experts whole on every tp
    rank); a dense model's line has no expert flags."""
    moe = replace(ARCH, moe=MoESpec(num_experts=4, experts_per_token=2, expert_ffn_hidden_size=32))

    def expert_flags(arch: Architecture, lay: Layout) -> list[str]:
        flags = list(megatron_flags(arch, lay, 8).flags)
        return [
            f"{flag} {flags[i + 1]}" for i, flag in enumerate(flags) if flag.startswith("--expert")
        ]

    assert expert_flags(moe, Layout(tp=2, ep=2, dp=2)) == [
        "--expert-model-parallel-size 2",
        "--expert-tensor-parallel-size 2",  # the default (tp), written
    ]
    assert expert_flags(moe, Layout(tp=2, dp=4, ep=4, etp=1)) == [
        "--expert-model-parallel-size 4",
        "--expert-tensor-parallel-size 1",
    ]
    assert expert_flags(moe, Layout(tp=2)) == ["--expert-tensor-parallel-size 2"]  # ep 1
    assert expert_flags(moe, Layout(tp=2, dp=2, ep=2, framework="deepspeed")) == [
        "--expert-model-parallel-size 2",
        "--expert-tensor-parallel-size 1",  # DeepSpeed's MoE layers keep experts whole over tp
    ]
    assert expert_flags(ARCH, Layout(tp=2)) == []
    written = megatron_flags(moe, Layout(tp=2, dp=4, ep=4, etp=1), 8).flags
    assert {f for f in written if f.startswith("--")} <= MEGATRON_ARGUMENTS


def test_a_moe_plans_launch_line_names_its_expert_tensor_parallel_size() -> None:
    """``search --per-stage`` of Mixtral 8x7B (a MoE model) in its own process: the Megatron-LM
    line it prints writes ``--expert-tensor-parallel-size`` with the plan's expert tp, after
    ``--expert-model-parallel-size``."""
    import json

    from tests.cli_runs import trainplan

    done = trainplan(
        "search", "--per-stage", "--model", "mixtral-8x7b", "--gpus", "16",
        "--per-stage-shapes", "1", "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    d = json.loads(done.stdout)
    lay, line = d["layout"], d["launch"]["megatron"]
    expert_tp = lay["etp"] if lay["etp"] is not None else lay["tp"]
    i = line.index("--expert-tensor-parallel-size")
    assert line[i + 1] == str(expert_tp)
    assert line[i - 2 : i] == ["--expert-model-parallel-size", str(lay["ep"])]


def test_torchtitan_cp_writes_the_rotate_method_torchtitan_runs() -> None:
    """torchtitan's ``context_parallel_rotate_method`` (``torchtitan/config/job_config.py`` at
    248aca2: ``"allgather"``, the default, or ``"alltoall"``) picks PyTorch's context_parallel
    rotater, all torchtitan runs. PyTorch's two flavours are written as planned; a flavour
    torchtitan has not (Llama 3's all-gather counted as Transformer Engine's, verl's Ulysses) is
    written as the default torchtitan runs anyway, with a note that names the flavour whose
    figures that run has; cp 1 writes none."""
    lay = Layout(cp=4, framework="fsdp2", zero_stage=3)
    want = {
        "pytorch-allgather": ("allgather", False),
        "pytorch-alltoall": ("alltoall", False),
        "all-gather": ("allgather", True),
        "ulysses-kv-repeat": ("allgather", True),
    }
    for kind, (rotate, noted) in want.items():
        out = torchtitan_toml(ARCH, lay.with_(cp_kind=kind), TRAINING)
        assert f'context_parallel_rotate_method = "{rotate}"' in out.flags, kind
        said = [n for n in out.notes if n.startswith(f"cp_kind {kind}: ")]
        assert bool(said) == noted, (kind, out.notes)
        if noted:
            assert "plan it with cp_kind pytorch-allgather" in said[0]
    single = torchtitan_toml(ARCH, Layout(framework="fsdp2", zero_stage=3), TRAINING).flags
    assert not any(f.startswith("context_parallel_rotate_method") for f in single)


def test_deepspeed_at_pp_1_names_the_model_the_plan_counts():
    """Megatron-DeepSpeed builds GPTModel only with ``--no-pipeline-parallel`` (4efb479d
    pretrain_gpt.py model_provider); the plan at pp 1 counts that model, and says so."""
    one = megatron_flags(ARCH, Layout(dp=2, framework="deepspeed", zero_stage=1), 8).notes
    two = megatron_flags(ARCH, Layout(pp=2, framework="deepspeed", zero_stage=1), 8).notes
    assert any("only with --no-pipeline-parallel" in n for n in one)
    assert not any("--no-pipeline-parallel" in n for n in two)


def test_the_line_writes_the_run_the_plan_counts():
    """The data loader's [b, 1, s, s] causal mask is off (the plan counts none), and a MoE
    model's line names the dispatcher, grouped GEMMs and the fused permutation and router whose
    buffers the plan counts (Megatron-LM's defaults are the allgather dispatcher and unfused
    kernels)."""
    dense = megatron_flags(ARCH, Layout(), 8, TRAINING).flags
    assert "--no-create-attention-mask-in-dataloader" in dense
    assert not any(f.startswith("--moe-") for f in dense)
    moe_arch = replace(
        ARCH, moe=MoESpec(num_experts=4, experts_per_token=2, expert_ffn_hidden_size=32)
    )
    flags = megatron_flags(moe_arch, Layout(ep=2, dp=2), 8, TRAINING).flags
    i = flags.index("--moe-token-dispatcher-type")
    assert flags[i + 1] == "alltoall"
    assert {"--moe-grouped-gemm", "--moe-permute-fusion", "--moe-router-fusion"} <= set(flags)


def test_selective_modules_are_written():
    """A plan whose selective recomputation drops more than the attention core names its modules
    (``--recompute-modules``, ``TransformerConfig.recompute_modules``, nargs "+"): without them
    Megatron-LM recomputes ``core_attn`` only and keeps what the plan counted as recomputed.
    The default module and other recompute modes write none."""
    training = replace(TRAINING, recompute_modules=("layernorm", "mlp"))
    flags = megatron_flags(ARCH, Layout(recompute="selective"), 8, training).flags
    i = flags.index("--recompute-modules")
    assert flags[i + 1 : i + 3] == ("layernorm", "mlp")
    assert {f for f in flags if f.startswith("--")} <= MEGATRON_ARGUMENTS
    default = megatron_flags(ARCH, Layout(recompute="selective"), 8, TRAINING).flags
    assert "--recompute-modules" not in default
    assert (
        "--recompute-modules"
        not in megatron_flags(ARCH, Layout(recompute="none"), 8, training).flags
    )


def test_the_all_to_all_overlap_the_plan_times_is_written():
    """``overlap_moe_expert_parallel_comm`` (``ModelParallelConfig``) and
    ``moe_shared_expert_overlap`` (``TransformerConfig``) are off by default in Megatron-LM: a
    plan timed with either writes its flag; without one the line writes neither."""
    from trainplan.model.moe_run import MoERun

    moe_arch = replace(
        ARCH, moe=MoESpec(num_experts=4, experts_per_token=2, expert_ffn_hidden_size=32)
    )
    lay = Layout(ep=2, dp=2)
    for overlap, flag in (
        ("overlap_moe_expert_parallel_comm", "--overlap-moe-expert-parallel-comm"),
        ("moe_shared_expert_overlap", "--moe-shared-expert-overlap"),
    ):
        training = replace(TRAINING, moe_run=MoERun(ep_overlap=overlap))
        flags = megatron_flags(moe_arch, lay, 8, training).flags
        assert flag in flags
        assert {f for f in flags if f.startswith("--")} <= MEGATRON_ARGUMENTS
    plain = megatron_flags(moe_arch, lay, 8, TRAINING).flags
    assert not {"--overlap-moe-expert-parallel-comm", "--moe-shared-expert-overlap"} & set(plain)
