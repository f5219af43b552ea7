"""The offload sentences of the answer's assumptions (:func:`interface.render.assumptions.
assumptions`): optimizer and parameter offload with the CPU Adam step's rate and threads
(:func:`model.offload.host_step_bytes_per_s`), and activation offload."""

from __future__ import annotations

from trainplan.model.estimate import Estimate
from trainplan.model.offload import (
    CPU_ADAM_BYTES_PER_CORE_S,
    host_step_bytes_per_s,
    host_threads_per_rank,
)

__all__ = ["offload_sentence"]


def _activation_offload_sentence(est: Estimate) -> list[str]:
    """Which activations are offloaded and how their copies are timed; nothing without."""
    mods, d = est.training.offload.activations, est.device
    if not mods:
        return []
    return [
        f"activation offload: the tensors {', '.join(mods)} save for backward go to the host "
        "after each layer's forward and come back before its backward (Megatron-Core "
        "--fine-grained-activation-offloading); two layers' worth stays on the GPU (the group "
        "never offloaded, one in transit); copies at "
        f"{(d.host_link_bytes_per_s or 0) / 1e9:g} GB/s per direction overlap the next layer's "
        "forward / the previous layer's backward, the excess exposed (activation_offload_s, in "
        "the compute and pipeline term)"
    ]


def offload_sentence(est: Estimate) -> list[str]:
    """What is offloaded, where it lives and what it costs; nothing without offload."""
    off, d = est.training.offload, est.device
    if not off.active:
        return _activation_offload_sentence(est)
    share = "" if off.optimizer == 1 else f"{float(off.optimizer):g} of "
    what = (
        "parameter shards, their gradients and the optimizer"
        if off.params
        else f"{share}the optimizer state and its step"
    )
    return [
        f"offload: {what} on the host ({d.host_memory_bytes and d.host_memory_bytes / 1e9:g} GB "
        f"per GPU, {d.gpus_per_node} GPUs per node; {d.host_source or 'given'}); transfers over "
        f"the host link at {(d.host_link_bytes_per_s or 0) / 1e9:g} GB/s per direction and "
        f"{_cpu_step(est)}, all exposed (no delayed parameter update, no overlap with backward)",
        *_activation_offload_sentence(est),
    ]


def _cpu_step(est: Estimate) -> str:
    """The CPU Adam step's rate and the threads it assumes (:func:`model.offload.host_step_bytes_per_s`)."""
    d, threads = est.device, host_threads_per_rank(est.device)
    rate, peak = (host_step_bytes_per_s(d) or 0) / 1e9, (d.host_memory_bytes_per_s or 0) / 1e9
    if threads is None:
        return f"the CPU Adam step at {peak:g} GB/s of host memory (the host's cores unknown)"
    how = (
        "deepspeed --bind_cores_to_rank sets it"
        if est.layout.framework == "deepspeed"
        else "export it before torchrun, which sets 1 when it is unset"
    )
    return (
        f"the CPU Adam step at {rate:.4g} GB/s per GPU ({threads:g} cores per GPU × "
        f"{CPU_ADAM_BYTES_PER_CORE_S / 1e9:.3g} GB/s per core, ZeRO-Offload's CPU-Adam on a DGX-2; "
        f"host memory peak {peak:g} GB/s) with OMP_NUM_THREADS={threads:g} per rank ({how})"
    )
