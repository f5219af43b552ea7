"""Memory checks of the published-runs report: Korthikanti et al. 2022 Appendix B's per-stage
activations of the 530B model, and what makes Llama 3 405B's published layout fit on 8,192 GPUs
(one mechanism at a time)."""

from __future__ import annotations

from dataclasses import dataclass, field

from trainplan.interface.fidelity.published import build_run_case, published_runs
from trainplan.interface.inputs import build_case

__all__ = [
    "AppendixB",
    "APPENDIX_B_ASSUMPTIONS",
    "appendix_b_530b",
    "MemoryStep",
    "LLAMA3_WALK",
    "llama3_memory_walk",
]


# ---------------------------------------------------------------------------------------------
# Korthikanti et al. 2022, Appendix B: activation memory per pipeline rank of the 530B model.


@dataclass(frozen=True, slots=True)
class AppendixB:
    """Activation bytes per GPU on the first and last pipeline stage of the 530B model."""

    first_stage_bytes: float
    first_stage_deallocated_bytes: float
    last_stage_bytes: float
    per_stage_bytes: tuple[float, ...]
    per_stage_deallocated_bytes: tuple[float, ...]
    published_first_gib: float = 13.0
    """The paper's first-stage figure, read off its per-rank plot (±0.5), in GiB: the plot is a
    Megatron-LM measurement, and Megatron-LM reports memory in binary units
    (``megatron/utils.py`` ``report_memory`` at 55ba1f7b, May 2022: bytes ÷ 1024², printed as
    "MB")."""
    published_first_deallocated_gib: float = 10.5
    """The same with the pipeline outputs deallocated, GiB."""
    published_last_gib: float = 1.5
    """The last stage's, GiB."""
    assumptions: tuple[str, ...] = field(default=())


APPENDIX_B_ASSUMPTIONS = (
    "530B GPT (L 105, h 20480, a 128, V 51200), s 2048, b 1, TP 8, PP 35, 1F1B without "
    "interleaving: rank i holds 35 − i micro-batches",
    "full recomputation without sequence parallelism (the paper's baseline, Table 2's "
    "2·s·b·h per layer): three 2·s·b·h layer inputs per micro-batch",
    "no deallocation: each micro-batch in flight also keeps the stage's 2·s·b·h output after "
    "the send; deallocation (Megatron-LM deallocate_pipeline_outputs) frees it: 2·s·b·h·(35 − i)",
    "plus one layer recomputed in backward (s·b·h·(10 + 24/t + 5·a·s/(h·t)) less its input), "
    "the input-embedding dropout mask (s·b·h per micro-batch, first rank) and the output layer "
    "(final LayerNorm and projection inputs, FP32 logits 4·s·b·V/t, last rank)",
    "the figures are read off the paper's per-rank plot (±0.5), in GiB: the plot is a "
    "Megatron-LM measurement, and Megatron-LM reports memory in binary units (megatron/utils.py "
    "report_memory: bytes ÷ 1024²); a measured peak also holds backward gradient buffers the "
    "model does not count",
)


def appendix_b_530b() -> AppendixB:
    """Per-stage activation bytes of Korthikanti et al. Appendix B's 530B configuration.

    The per-rank slope of the paper's figure (≈ (13 − 1.5)/34 = 0.34 GiB per micro-batch in
    flight; its end points also hold the first rank's and the last rank's own tensors) is close
    to 4 × 2·s·b·h = 0.3125 GiB: three checkpointed layer inputs and the stage output of a
    3-layer stage, without sequence parallelism — the full-recomputation baseline, not the
    selective + SP recipe (that one holds 34·s·b·h/t per layer: 18.7 GB on the first rank).
    The paper's figures are GiB (:attr:`AppendixB.published_first_gib`).
    """
    base = {
        "model": "megatron-529.6b",
        "gpu": "A100-80GB",
        "tp": 8,
        "pp": 35,
        "dp": 1,
        "zero_stage": 0,
        "recompute": "full",
        "micro_batch_size": 1,
        "global_batch_size": 35,
        "seq_len": 2048,
        "sequence_parallel": False,
        "flash_attention": False,
    }

    def acts(dealloc: bool) -> tuple[float, ...]:
        est = build_case(base | {"deallocate_pipeline_outputs": dealloc}).evaluate()
        return tuple(float(st.activations.total_bytes) for st in est.stages if st.activations)

    kept, freed = acts(False), acts(True)
    return AppendixB(
        first_stage_bytes=kept[0],
        first_stage_deallocated_bytes=freed[0],
        last_stage_bytes=kept[-1],
        per_stage_bytes=kept,
        per_stage_deallocated_bytes=freed,
        assumptions=APPENDIX_B_ASSUMPTIONS,
    )


# ---------------------------------------------------------------------------------------------
# Llama 3 405B on 8,192 GPUs: what brings the published layout toward a fit


@dataclass(frozen=True, slots=True)
class MemoryStep:
    """One recipe of the walk: its peak per GPU on the busiest stage."""

    recipe: str
    source: str
    virtual_stages: int
    memory_efficient_norm: bool
    busiest_stage: int
    microbatches_in_flight: float
    activation_bytes: float
    total_bytes: float
    capacity_bytes: float

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.capacity_bytes


LLAMA3_WALK = (
    (
        "Megatron-LM interleaving with v = 4 (chunks of 2 layers; the first and last hold 1)",
        "Narayanan et al. 2021 §2.2.2; Megatron-LM warm-up 2·(pp − i − 1) + (v − 1)·pp",
        4,
        False,
    ),
    (
        "v = 8: chunks of one layer, the first holding only the embedding and the last only the "
        "output layer",
        'Llama 3 §3.3.2: "the first model chunk on the first stage has only the embedding"',
        8,
        False,
    ),
    (
        "v = 8 and memory-efficient norms (nothing keeps a stage's input: it is freed)",
        "Llama 3 §3.3.2: stage inputs and outputs deallocated; Apex memory_efficient norms",
        8,
        True,
    ),
)
"""(recipe, source, v, memory_efficient_norm) of :func:`llama3_memory_walk`, in order."""


def llama3_memory_walk() -> tuple[MemoryStep, ...]:
    """Llama 3 405B at 8K on 8,192 H100s (TP 8, PP 16, DP 64, m 32, no recomputation), one
    mechanism at a time: the peak per GPU on the busiest pipeline stage."""
    run = next(r for r in published_runs() if r.key == "llama3-t4/8192")
    out = []
    for recipe, source, v, me in LLAMA3_WALK:
        est = build_run_case(run, virtual_stages=v, memory_efficient_norm=me).evaluate()
        st = est.peak
        assert st.activations is not None
        out.append(
            MemoryStep(
                recipe=recipe,
                source=source,
                virtual_stages=v,
                memory_efficient_norm=me,
                busiest_stage=st.stage,
                microbatches_in_flight=float(st.activations.microbatches_in_flight),
                activation_bytes=float(st.activations.layers_bytes),
                total_bytes=float(est.total_bytes),
                capacity_bytes=float(est.capacity_bytes),
            )
        )
    return tuple(out)
