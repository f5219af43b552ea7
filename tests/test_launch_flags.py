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
from trainplan.interface.launch_torchtitan_head import TORCHTITAN_HEAD_FIELDS, torchtitan_config
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
            toml = torchtitan_toml(ARCH, lay, training)
            assert toml.flags[0].startswith("# torchtitan e347b1e5e (2026-02-15)")
            for line in toml.flags[1:]:
                if line.startswith("["):
                    section = line.strip("[]")
                    assert section in TORCHTITAN_KEYS, line
                else:
                    assert line.split(" = ")[0] in TORCHTITAN_KEYS[section], line
            head = torchtitan_config(toml, lay).flags
            assert head[0].startswith("# torchtitan b5bcd76c (2026-08-21)")
            for line in head[2:]:
                path, value = line.split(" = ")
                _, section, *field = path.split(".")
                if section == "activation_checkpoint":
                    assert (
                        value == "None"
                        or value.removesuffix(".Config()") in (TORCHTITAN_HEAD_FIELDS[section])
                    ), line
                else:
                    assert field[0] in TORCHTITAN_HEAD_FIELDS[section], line


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
    # validate_args (arguments.py at d98e8a64, under use_megatron_fsdp): "Megatron-FSDP requires
    # the `fsdp_dtensor` checkpointing format"; TrainingConfig.ckpt_format's default is torch_dist
    assert flags[flags.index("--ckpt-format") + 1] == "fsdp_dtensor"
    assert "--ckpt-format" not in megatron_flags(ARCH, Layout(dp=2, zero_stage=1), 8).flags
    assert "--ckpt-format" not in megatron_flags(ARCH, lay.with_(framework="fsdp2"), 8).flags


def test_the_environment_validate_args_asserts_is_written():
    """``validate_args`` (Megatron-LM d98e8a64 ``arguments.py``): at tp > 1 or cp > 1 on a device
    of compute capability below 10 it asserts ``CUDA_DEVICE_MAX_CONNECTIONS == "1"``, except
    under Megatron-FSDP (which asserts it is not 1) and with
    ``--overlap-moe-expert-parallel-comm`` (a warning); Blackwell (B200: 10.0) has no rule."""
    from trainplan.model.moe_run import MoERun

    def env(lay: Layout, part: str | None = "H100-SXM", t: TrainingSpec = TRAINING):
        out = megatron_flags(ARCH, lay, 8, t, part=part)
        return out.env, out.notes

    assert env(Layout(tp=2))[0] == ("CUDA_DEVICE_MAX_CONNECTIONS=1",)
    assert env(Layout(cp=2))[0] == ("CUDA_DEVICE_MAX_CONNECTIONS=1",)
    assert env(Layout(tp=2), part=None)[0] == ("CUDA_DEVICE_MAX_CONNECTIONS=1",)
    assert env(Layout(tp=2), part="A100-80GB")[0] == ("CUDA_DEVICE_MAX_CONNECTIONS=1",)
    assert env(Layout(tp=2), part="B200") == ((), ())
    assert env(Layout(dp=2, pp=2)) == ((), ())  # tp 1, cp 1: no rule
    fsdp, notes = env(Layout(tp=2, dp=2, zero_stage=3))
    assert fsdp == () and any("unset or above 1" in n for n in notes)
    moe = replace(ARCH, moe=MoESpec(num_experts=4, experts_per_token=2, expert_ffn_hidden_size=32))
    overlap = replace(TRAINING, moe_run=MoERun(ep_overlap="overlap_moe_expert_parallel_comm"))
    out = megatron_flags(moe, Layout(tp=2, ep=2, dp=2), 8, overlap, part="H100-SXM")
    assert out.env == () and any("only warns" in n for n in out.notes)


def test_the_torchtitan_fragment_writes_every_value_the_plan_fixes():
    """Every value the plan fixes, not torchtitan's defaults (e347b1e5e job_config.py:
    local_batch_size 8, seq_len 2048, pipeline_parallel_microbatch_size 1, ep 1, etp 1).
    Hand derivation, a MoE model on dp 4 × tp 2 × pp 2, ep 4, etp 1, b 2, B 64, s 4096,
    interleaved v = 2 (torchtitan's own split of 8 layers into 4 chunks of 2: no fqn list), full
    recomputation: m = B/(b·dp) = 64/(2·4) = 8; at pp > 1 one step of m pipeline micro-batches,
    local_batch_size = b·m = 16. At HEAD (b5bcd76c, tokens): b·s = 8192 a micro-batch,
    B·s = 262144 a step, 8 pipeline micro-batches; no etp there (experts whole: etp 1 is it)."""
    moe = replace(ARCH, moe=MoESpec(num_experts=4, experts_per_token=2, expert_ffn_hidden_size=32))
    lay = Layout(
        dp=4, tp=2, pp=2, ep=4, etp=1, micro_batch_size=2, schedule="interleaved",
        virtual_stages=2, recompute="full", framework="fsdp2", zero_stage=2,
    )  # fmt: skip
    training = TrainingSpec(seq_len=4096, global_batch_size=64)
    toml = torchtitan_toml(moe, lay, training)
    assert toml.flags == (
        "# torchtitan e347b1e5e (2026-02-15), its last TOML format: --job.config_file FILE",
        "[parallelism]",
        "tensor_parallel_degree = 2",
        "pipeline_parallel_degree = 2",
        "context_parallel_degree = 1",
        "data_parallel_shard_degree = 4",
        "pipeline_parallel_microbatch_size = 2",
        "expert_parallel_degree = 4",
        "expert_tensor_parallel_degree = 1",
        'pipeline_parallel_schedule = "Interleaved1F1B"',
        "[training]",
        "local_batch_size = 16",
        "global_batch_size = 64",
        "seq_len = 4096",
        "[activation_checkpoint]",
        'mode = "full"',
        "[compile]",
        "enable = false",
    )
    head = torchtitan_config(toml, lay)
    assert head.flags[2:] == (
        "config.parallelism.tensor_parallel_degree = 2",
        "config.parallelism.pipeline_parallel_degree = 2",
        "config.parallelism.context_parallel_degree = 1",
        "config.parallelism.data_parallel_shard_degree = 4",
        "config.parallelism.expert_parallel_degree = 4",
        "config.parallelism.pipeline_parallel_schedule = 'Interleaved1F1B'",
        "config.parallelism.num_pp_microbatches = 8",
        "config.training.num_tokens_per_microbatch_per_dp_rank = 8192",
        "config.training.num_tokens_per_train_step = 262144",
        "config.training.max_context_length = 4096",
        "config.activation_checkpoint = FullAC.Config()",
        "config.compile.enable = False",
    )
    # pp 1: local_batch_size is the micro-batch; train.py accumulates B/(b·dp) = 8 of them
    flat = torchtitan_toml(ARCH, Layout(dp=4, micro_batch_size=2, framework="fsdp2"), training)
    assert flat.flags[-7:-4] == ("local_batch_size = 2", "global_batch_size = 64", "seq_len = 4096")
    # an expert tp torchtitan cannot run (etp neither 1 nor tp) is said, not written
    odd = torchtitan_toml(moe, Layout(dp=4, tp=4, ep=4, etp=2), training)
    assert not any(f.startswith("expert_tensor") for f in odd.flags)
    assert any(n.startswith("expert tp 2: torchtitan runs") for n in odd.notes)


def test_another_frameworks_plan_says_what_torchtitan_runs_instead():
    """A megatron plan's fragment says it is not a launch of the plan (torchtitan runs FSDP2 over
    dp whatever the plan's ZeRO stage: ZeRO-3 without pp, ZeRO-2 with it), as the Megatron-LM
    line does under an fsdp2 plan; its every-N-th-block option is named as e347b1e5e's (gone in
    114151ad4), and the HEAD form runs FullAC with a note."""
    lay = Layout(pp=2, stage_layers=(3, 5), recompute_layers=(1, 0))  # megatron ZeRO-1
    toml = torchtitan_toml(ARCH, lay, TRAINING)
    assert toml.notes[0].startswith("framework megatron: the plan's memory and traffic are")
    assert "(ZeRO-1); torchtitan runs FSDP2 over dp (ZeRO-2 here" in toml.notes[0]
    assert 'selective_ac_option = "3"' in toml.flags  # stage 0: 1 of 3 layers
    assert any("until 114151ad4 (2026-03-23)" in n for n in toml.notes)
    head = torchtitan_config(toml, lay)
    assert head.flags[-1] == "config.activation_checkpoint = FullAC.Config()"
    assert any('selective_ac_option "3"' in n and "FullAC" in n for n in head.notes)
    fsdp2 = torchtitan_toml(ARCH, Layout(dp=2, framework="fsdp2", zero_stage=3), TRAINING)
    assert not any(n.startswith("framework") for n in fsdp2.notes)


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
    every = megatron_flags(
        ARCH,
        Layout(dp=8, zero_stage=3),
        8,
        replace(fp8, fp8_recipe="tensorwise", fp8_param_gather=True),
    ).flags
    assert {f for f in every if f.startswith("--")} <= MEGATRON_ARGUMENTS


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


def test_a_megatron_fsdp_plans_lines_launch_it_as_planned():
    """The new-user command (Mixtral 8x7B on 64 H100, ``--framework megatron``, ep 4 or 8,
    ``--per-stage``), each form in its own process: its Megatron-FSDP line names the checkpoint
    format ``validate_args`` requires (``--ckpt-format fsdp_dtensor``) and no
    ``CUDA_DEVICE_MAX_CONNECTIONS=1`` (which Megatron-FSDP refuses); both torchtitan fragments
    name their commit and carry the plan's degrees, batch, micro-batch, sequence and ep — read
    back from the JSON's layout, the plan itself."""
    import json
    import tomllib

    from tests.cli_runs import trainplan

    # ZeRO-3, the plan's: the other ZeRO stages' searches are not under test
    args = (
        "search", "--model", "mixtral-8x7b", "--gpus", "64", "--gpu", "H100-SXM",
        "--framework", "megatron", "--ep", "4", "--ep", "8", "--per-stage", "--zero", "3",
    )  # fmt: skip
    done = trainplan(*args, "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    d = json.loads(done.stdout)
    lay, launch = d["layout"], d["launch"]
    assert lay["zero_stage"] == 3 and lay["framework"] == "megatron"
    line = launch["megatron"]
    assert line[line.index("--ckpt-format") + 1] == "fsdp_dtensor"
    assert "--use-megatron-fsdp" in line and launch["megatron_env"] == []
    assert any(
        "CUDA_DEVICE_MAX_CONNECTIONS unset or above 1" in n for n in launch["megatron_notes"]
    )
    toml = tomllib.loads("\n".join(launch["torchtitan"]))
    assert launch["torchtitan"][0].startswith("# torchtitan e347b1e5e")
    b, big_b, s = lay["micro_batch_size"], lay["global_batch_size"], lay["seq_len"]
    m = lay["num_microbatches"]
    par = toml["parallelism"]
    assert (par["data_parallel_shard_degree"], par["tensor_parallel_degree"]) == (
        lay["dp"],
        lay["tp"],
    )
    assert (par["pipeline_parallel_degree"], par["context_parallel_degree"]) == (
        lay["pp"],
        lay["cp"],
    )
    assert (par["expert_parallel_degree"], par["expert_tensor_parallel_degree"]) == (
        lay["ep"], lay["etp"],
    )  # fmt: skip
    assert toml["training"] == {
        "local_batch_size": b if lay["pp"] == 1 else b * m,
        "global_batch_size": big_b,
        "seq_len": s,
    }
    assert big_b == b * m * lay["dp"]
    head = launch["torchtitan_head"]
    assert head[0].startswith("# torchtitan b5bcd76c")
    assert f"config.training.num_tokens_per_microbatch_per_dp_rank = {b * s}" in head
    assert f"config.training.num_tokens_per_train_step = {big_b * s}" in head
    text = trainplan(*args)
    assert text.returncode == 0, text.stderr[-2000:]
    assert "--ckpt-format fsdp_dtensor" in text.stdout
    assert "Megatron-LM environment:" not in text.stdout
    assert "  # torchtitan e347b1e5e (2026-02-15)" in text.stdout
    assert "torchtitan HEAD (Python configuration):" in text.stdout
    assert f"  seq_len = {s}" in text.stdout


def test_a_tensor_parallel_plans_line_runs_under_the_environment_it_needs():
    """A plan at tp > 1 on H100 (Llama 3 8B on 16 GPUs at 64k tokens needs tp or cp) prints
    ``CUDA_DEVICE_MAX_CONNECTIONS=1`` as the line's environment, in text and JSON; on B200
    (compute capability 10.0) it prints none."""
    import json

    from tests.cli_runs import trainplan

    # tp 2 and pp 1 (the answer's over every pp): the environment is under test, not the search
    args = ("search", "--model", "llama3-8b", "--gpus", "16", "--seq-len", "65536",
            "--global-batch", "16", "--framework", "megatron", "--zero", "1", "--tp", "2",
            "--pp", "1", "--per-stage")  # fmt: skip
    done = trainplan(*args, "--gpu", "H100-SXM", "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    d = json.loads(done.stdout)
    lay = d["layout"]
    assert lay["tp"] > 1 or lay["cp"] > 1, lay
    assert d["launch"]["megatron_env"] == ["CUDA_DEVICE_MAX_CONNECTIONS=1"]
    text = trainplan(*args, "--gpu", "H100-SXM")
    assert "Megatron-LM environment: CUDA_DEVICE_MAX_CONNECTIONS=1" in text.stdout
    blackwell = json.loads(trainplan(*args, "--gpu", "B200", "--json").stdout)
    if blackwell["layout"]["tp"] > 1 or blackwell["layout"]["cp"] > 1:
        assert blackwell["launch"]["megatron_env"] == []
