"""The attention kernel each framework runs by default times its attention core
(:func:`trainplan.model.attention_rates.default_attention_kernel`): DeepSpeed's FlashAttention-2
(PyTorch SDPA's own order, the flash-attn package), torchtitan's and Megatron-Core's cuDNN on
Hopper. The default must be the figure a user gets by naming that kernel, and only the attention
core may differ between the kernels."""

from trainplan.optimizer.case import Case


def _step(framework: str, **options: object) -> float:
    case = Case.of(
        "llama3-8b", "H100-SXM", dp=8, framework=framework, zero_stage=1, micro_batch_size=1,
        global_batch_size=8, seq_len=8192, **options,
    )  # fmt: skip
    return float(case.evaluate().step_s)


def test_deepspeed_default_is_flash_attention_2_on_hopper() -> None:
    default = _step("deepspeed")
    assert default == _step("deepspeed", attention_kernel="flash-attention-2")
    # cuDNN's H200 sweep runs 128-dim causal attention faster than FlashAttention-2 on H100, so
    # the step timed on it is shorter: the default is not the Megatron-Core kernel
    assert _step("deepspeed", attention_kernel="cudnn") < default


def test_megatron_default_is_cudnn_on_hopper() -> None:
    assert _step("megatron") == _step("megatron", attention_kernel="cudnn")
