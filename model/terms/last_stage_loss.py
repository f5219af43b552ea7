"""The loss on a pipeline's last stage: the bytes per local logit a profile's loss keeps for
backward and holds beyond them at its peak (:mod:`model.loss_memory`, with the recipe's
``cross_entropy_fusion_impl``), and what the last stage holds of the output layer's logits
besides — read by :func:`model.terms.activations.stage_activations_term`."""

from __future__ import annotations

from typing import Any

from trainplan.model.loss_memory import (
    loss_kept_bytes_per_element,
    loss_peak_bytes_per_element,
    output_chunks_bytes,
    pipeline_pred_bytes,
)
from trainplan.model.specs import TrainingSpec
from trainplan.model.terms.activation_fields import end_stages
from trainplan.model.terms.fields import Context, Fields
from trainplan.model.terms.pipeline_buffers import torch_pipelining
from trainplan.model.xp import where

__all__ = ["last_stage_loss", "loss_extra", "loss_kept"]


def last_stage_loss(c: Context, f: Fields, tokens: Any, vocab: Any) -> tuple[Any, Any, Any]:
    """(the loss's working set beyond its kept bytes, the output chunks PyTorch pipelining
    keeps, the output its stage holds until the micro-batch's backward ends) on the last
    stage, 0 elsewhere: :func:`loss_extra` per local logit (with the held output),
    :func:`model.loss_memory.output_chunks_bytes` where ``pipeline_keeps_outputs``, else
    :func:`model.loss_memory.pipeline_pred_bytes` (held with the loss and every layer's
    backward)."""
    t = c.training
    extra = f.lookup(loss_extra, (t,), "framework", "tp", "cp", "pp")
    last = end_stages(f)[1]
    torch_pp = f.lookup(torch_pipelining, (t,), "framework")
    keeps = torch_pp * (1 if t.pipeline_keeps_outputs else 0)
    beta = t.activation_bytes
    chunks = output_chunks_bytes("fsdp2", f.pp, f.m, tokens, vocab, f.tp, beta)
    pred = (torch_pp - keeps) * pipeline_pred_bytes("fsdp2", f.pp, tokens, vocab, f.tp, beta)
    pred = where(last, pred, 0)
    return (
        where(last, extra * tokens * vocab / f.tp, 0) + pred,
        where(last, keeps * chunks, 0),
        pred,
    )


def loss_kept(training: TrainingSpec, framework: Any) -> int:
    """Bytes per local logit that backward keeps of the profile's loss
    (:func:`model.loss_memory.loss_kept_bytes_per_element`, with the recipe's
    ``cross_entropy_fusion_impl``)."""
    impl, beta = training.cross_entropy_fusion_impl, training.activation_bytes
    return loss_kept_bytes_per_element(framework, impl, beta)


def loss_extra(training: TrainingSpec, framework: Any, tp: int, cp: int, pp: int) -> int:
    """Bytes per local logit the profile's loss holds beyond what backward keeps of it
    (:func:`model.loss_memory.loss_peak_bytes_per_element` less :func:`loss_kept`)."""
    impl, beta = training.cross_entropy_fusion_impl, training.activation_bytes
    peak = loss_peak_bytes_per_element(framework, tp, impl, beta, cp, pp)
    return peak - loss_kept(training, framework)
