"""Fidelity against published runs: every configuration of ``scenarios/published.toml``
evaluated with the layout and recipe its paper states, under the roofline time model and, side
by side, the previous single-efficiency model (``time_model = "single"``).

``python -m trainplan.interface.fidelity`` prints the table; ``--markdown`` writes the page
``docs/fidelity-published.md`` is generated from; ``--validation`` the report of the validation
set of published end-to-end runs (:mod:`interface.fidelity.validation_report`; with ``--markdown`` the
page ``docs/fidelity-validation.md``, with ``--json`` its JSON object); ``--residuals`` the step-time
error of the rows that once calibrated the time model's efficiencies. Published end-to-end runs
only validate: nothing is fitted to them here (the former ``--calibrate`` fit of
:data:`model.roofline.GEMM_EFFICIENCY_BY_GENERATION` on these rows is retired; a user fits their
own cluster with ``trainplan calibrate``).

Rows and recipes (each is stated again in the report):

* **Megatron-LM Table 1** (Narayanan et al. 2021, SC'21, arXiv 2104.04473): GPT, s = 2048,
  V = 51200, A100-80GB at 312 TFLOP/s, fp16, full recomputation, TP without sequence
  parallelism, no FlashAttention, no ZeRO (Megatron's DDP all-reduce). §5.1: the interleaved
  schedule with the scatter/gather optimisation. Micro-batch and virtual stages per row from the
  authors' script ``examples/sc21/run_table_1.sh`` in NVIDIA/Megatron-LM. Published "TFLOP/s
  per GPU" is Eq. 3 hardware FLOPs / time: HFU under the ``megatron`` convention. The code of
  2021 ran every tensor-parallel all-reduce synchronously (the asynchronous backward all-reduce,
  ``--async-tensor-model-parallel-allreduce``, came later) and all-reduced gradients after the
  last backward: ``tp_comm_overlap = none``, ``grad_reduce_overlap = false``; its interleaved
  schedule's pipeline sends were blocking (``p2p_overlap = false``; Megatron-LM's
  ``overlap_p2p_comm`` dates from 2023-05), as were those of Korthikanti et al.'s code of 2022.
* **Korthikanti et al. 2022 Table 5** (arXiv 2205.05198): iteration times with selective
  recomputation + sequence parallelism, and with full recomputation (tensor parallelism without
  sequence parallelism, the paper's baseline); TP 8, b and B of Table 3, no data parallelism,
  175B and 530B interleaved with v = 3, no FlashAttention. Megatron-LM of 2022 overlaps the
  backward tensor-parallel collectives with the gradient GEMMs (the default ``async``).
* **Llama 3 Table 4** (arXiv 2407.21783): 405B on H100-SXM at 989.4 TFLOP/s, BF16; FSDP as
  ZeRO-2 with FP32 gradients, tensor parallelism keeping the sequence shard of the blocks' inputs
  (``tp_block_inputs = "sharded"``: the layouts ran, which torchtitan's plan would not fit),
  interleaved v = 8, no activation checkpointing, memory-efficient norms
  (:mod:`interface.fidelity.memory`); context parallelism all-gathers K and V and the gather is
  exposed (§3.3.2): ``cp_kind = all-gather``. MFU counts ``6·N + attention`` with causal
  attention.
"""

from __future__ import annotations

import dataclasses
import statistics
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainplan import scenarios
from trainplan.interface.inputs import build_case
from trainplan.model.estimate import Estimate
from trainplan.model.model_spec import ModelSpec
from trainplan.model.roofline import generation_of
from trainplan.model.specs import Architecture
from trainplan.model.timing import kernel_efficiency_for
from trainplan.optimizer.case import Case
from trainplan.scenarios.catalogue import get_model

__all__ = [
    "PublishedRun",
    "RunResult",
    "published_runs",
    "build_run_case",
    "evaluate_run",
    "evaluate_all",
    "median_abs_error",
    "CALIBRATION_ROWS",
    "CALCULON_TABLE5",
    "residuals",
]

LLAMA3_VIRTUAL_STAGES = 8
"""V of Llama 3's interleaved schedule. Not printed as a number, but §3.3.2 says "the first model
chunk on the first stage has only the embedding, and the last model chunk on the last stage has
only output projection and loss calculation" after one layer was taken from each end stage:
chunks of one layer, 126 layers + 2 empty chunks = 16 × 8."""

MEGATRON_SCRIPT = (
    "NVIDIA/Megatron-LM examples/sc21/run_table_1.sh (the authors' script for Table 1)"
)
_MEGATRON_NAMES = {
    1.7: "megatron-1.7b",
    3.6: "megatron-3.6b",
    7.5: "megatron-7.5b",
    18.4: "megatron-18.4b",
    39.1: "megatron-39.1b",
    76.1: "megatron-76.1b",
    145.6: "megatron-145.6b",
    310.1: "megatron-310.1b",
    529.6: "megatron-529.6b",
    1008.0: "megatron-1t",
}
# (micro-batch size, virtual stages) from run_table_1.sh: MBS, and L / (pp · layers per
# virtual stage) where --num-layers-per-virtual-pipeline-stage is given.
_MEGATRON_SCRIPT_ROWS = {
    1.7: (16, 1),
    3.6: (16, 1),
    7.5: (16, 1),
    18.4: (8, 1),
    39.1: (4, 1),
    76.1: (2, 3),
    145.6: (2, 2),
    310.1: (1, 2),
    529.6: (1, 3),
    1008.0: (1, 1),
}

CALIBRATION_ROWS = frozenset(
    {
        "megatron-t1/1.7B",
        "megatron-t1/7.5B",
        "megatron-t1/39.1B",
        "megatron-t1/145.6B",
        "megatron-t1/529.6B",
        "llama3-t4/8192",
    }
)
"""Rows the efficiencies were fitted on (every other Megatron Table 1 row, by size, and Llama 3's
first row for the H100); the same rows for both time models. Everything else is held out: the
other five Megatron rows, all eight Korthikanti rows (a different paper and code base) and two
Llama 3 rows."""

CALCULON_TABLE5 = {
    "22B": (1.72, -3.33),
    "175B": (0.56, 0.81),
    "530B": (-1.72, 8.87),
    "1T": (4.60, 7.62),
}
"""Calculon's errors on Korthikanti Table 5 (full recompute, selective + SP), percent, as its
own validation command prints them (``Delta = 100·(1 − predicted/published)``; mean |error|
3.65%, max 8.87% over the eight): calculon-ai/calculon at commit caa4b11,
``calculon llm-validation``, run in this project's session. For reference only."""


@dataclass(frozen=True, slots=True)
class PublishedRun:
    """One published configuration with its recipe and its published figure."""

    key: str
    """``paper/row``, e.g. ``megatron-t1/1.7B``."""
    paper: str
    label: str
    params: dict[str, Any]
    """Flat parameters for :func:`interface.inputs.build_case` (both time models)."""
    metric: str
    """``hfu`` (hardware FLOPs, Megatron Table 1) or ``mfu``."""
    published_util: float
    """Published utilisation under the paper's convention (fraction of peak)."""
    published_value: float
    published_unit: str
    """``TFLOP/s/GPU`` or ``s/iter``: the figure the paper prints."""
    arch: Architecture | None = None
    """Dimensions when the model is not a catalogue entry."""
    recipe: str = ""
    mechanisms: dict[str, Any] = field(default_factory=dict)
    """The roofline model's overlap mechanisms of the paper's code (``tp_comm_overlap`` …)."""

    @property
    def calibration(self) -> bool:
        return self.key in CALIBRATION_ROWS


@dataclass(frozen=True, slots=True)
class RunResult:
    """A run under the roofline model (``estimate``) and the previous model (``previous``)."""

    run: PublishedRun
    estimate: Estimate
    previous: Estimate

    def _util(self, est: Estimate) -> float:
        util = est.hfu if self.run.metric == "hfu" else est.mfu
        assert util is not None
        return util

    @property
    def predicted_util(self) -> float:
        return self._util(self.estimate)

    @property
    def previous_util(self) -> float:
        return self._util(self.previous)

    def _value(self, est: Estimate) -> float:
        if self.run.published_unit == "s/iter":
            assert est.step_s is not None
            return est.step_s
        return self._util(est) * est.device.peak_flops_per_s / 1e12

    @property
    def predicted_value(self) -> float:
        return self._value(self.estimate)

    @property
    def previous_value(self) -> float:
        return self._value(self.previous)

    @property
    def error_points(self) -> float:
        """Predicted − published utilisation, percentage points (roofline model)."""
        return 100 * (self.predicted_util - self.run.published_util)

    @property
    def previous_error_points(self) -> float:
        return 100 * (self.previous_util - self.run.published_util)

    @property
    def time_error(self) -> float:
        """Predicted / published step time − 1 (roofline model; for a utilisation row the time
        is implied: published util / predicted util − 1)."""
        return self.run.published_util / self.predicted_util - 1

    @property
    def previous_time_error(self) -> float:
        return self.run.published_util / self.previous_util - 1

    @property
    def memory_bytes(self) -> float:
        return float(self.estimate.total_bytes)

    @property
    def fits(self) -> bool:
        return self.estimate.fits


def _rows(data: dict[str, Any], table: str) -> list[dict[str, Any]]:
    tab = data[table][0]
    return [dict(zip(tab["columns"], row, strict=True)) for row in tab["rows"]]


def _gpt(layers: int, hidden: int, heads: int) -> Architecture:
    base = get_model("megatron-1t").model.arch
    assert base is not None
    return dataclasses.replace(
        base,
        num_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        ffn_hidden_size=4 * hidden,
    )


def _megatron_rows(data: dict[str, Any]) -> list[PublishedRun]:
    runs = []
    for r in _rows(data, "megatron_table1"):
        b, v = _MEGATRON_SCRIPT_ROWS[r["params_b"]]
        params: dict[str, Any] = {
            "model": _MEGATRON_NAMES[r["params_b"]],
            "gpu": "A100-80GB",
            "tp": r["tp"],
            "pp": r["pp"],
            "dp": r["gpus"] // (r["tp"] * r["pp"]),
            "num_gpus": r["gpus"],
            # Megatron-LM 2021: DDP (no ZeRO), fp16 gradients reduced in fp16 (its default
            # without --accumulate-allreduce-grads-in-fp32), scatter/gather pipeline sends (§4.1)
            "framework": "megatron",
            "zero_stage": 0,
            "gradient_dtype": "bf16",
            "pipeline_scatter_gather": True,
            "recompute": "full",
            "micro_batch_size": b,
            "global_batch_size": r["batch"],
            "seq_len": 2048,
            "sequence_parallel": False,
            "flash_attention": False,
            "mfu_convention": "megatron",
        }
        if v > 1:
            params |= {"schedule": "interleaved", "virtual_stages": v}
        runs.append(
            PublishedRun(
                key=f"megatron-t1/{r['params_b']:g}B",
                paper="Megatron-LM Table 1",
                label=f"{r['params_b']:g}B, {r['gpus']} GPUs",
                params=params,
                metric="hfu",
                published_util=r["tflops_per_gpu"] / 312,
                published_value=r["tflops_per_gpu"],
                published_unit="TFLOP/s/GPU",
                recipe=f"full recompute, TP {r['tp']} PP {r['pp']} v {v}, b {b}, no SP",
                mechanisms={
                    "tp_comm_overlap": "none",
                    "grad_reduce_overlap": False,
                    "p2p_overlap": False,
                    "grad_clip_scaling": "above_limit",  # 0fa7175f09: if clip_coeff < 1.0
                    "loss_scaling": True,  # examples/sc21/CONFIG.sh: --fp16 --loss-scale 8192
                },
            )
        )
    return runs


def _korthikanti_rows(data: dict[str, Any]) -> list[PublishedRun]:
    catalogue = {"530B": "megatron-529.6b", "1T": "megatron-1t"}
    table = data["korthikanti_table5"][0]
    runs = []
    for full in (False, True):
        for r in _rows(data, "korthikanti_table5"):
            v = 3 if r["model"] in ("175B", "530B") else 1
            params = {
                "model": catalogue.get(r["model"], "megatron-1t"),
                "gpu": "A100-80GB",
                "tp": r["tp"],
                "pp": r["pp"],
                "dp": 1,
                "num_gpus": r["gpus"],
                "framework": "megatron",  # Megatron-LM 2022: dp = 1, DDP
                "zero_stage": 0,
                "recompute": "full" if full else "selective",
                "micro_batch_size": r["micro_batch"],
                "global_batch_size": r["global_batch"],
                "seq_len": 2048,
                "sequence_parallel": not full,
                # Megatron-LM 2022 still split pipeline sends over tp without sequence
                # parallelism (--scatter-gather-tensors-in-pipeline, on by default)
                "pipeline_scatter_gather": full,
                "flash_attention": False,
                "mfu_convention": "megatron",
            }
            if v > 1:
                params |= {"schedule": "interleaved", "virtual_stages": v}
            arch = (
                _gpt(r["layers"], r["hidden"], r["heads"]) if r["model"] not in catalogue else None
            )
            seconds = r["iter_s_full_recompute" if full else "iter_s_selective_sp"]
            runs.append(
                PublishedRun(
                    key=f"korthikanti-t5/{r['model']}" + ("-full" if full else ""),
                    paper="Korthikanti Table 5",
                    label=f"{r['model']}, {r['gpus']} GPUs, " + ("full" if full else "selective"),
                    params=params,
                    metric="mfu",
                    # the paper's MFU (Appendix A model FLOPs) scales with 1/time
                    published_util=r["mfu"] * r["iter_s_selective_sp"] / seconds,
                    published_value=seconds,
                    published_unit="s/iter",
                    arch=arch,
                    # Megatron-LM of 2022: batched blocking pipeline sends (overlap_p2p_comm came
                    # with f9283c5a, 2023-05-31); clip_coeff < 1.0 alone scales (5d2e13a66b)
                    mechanisms={"p2p_overlap": False, "grad_clip_scaling": "above_limit"},
                    recipe=("full recompute, no SP" if full else "selective + SP")
                    + f", TP {r['tp']} PP {r['pp']} v {v}, b {r['micro_batch']}",
                )
            )
    assert table["columns"][9] == "iter_s_full_recompute"
    return runs


def _llama3_params(r: dict[str, Any]) -> dict[str, Any]:
    """The evaluate parameters of one Llama 3 Table 4 row ``r`` (``published.toml``'s
    ``llama3_table4``): the layout Meta published and the recipe §3.3 describes."""
    s = r["seq_len"]
    return {
        "model": "llama3-405b",
        "gpu": "H100-SXM",
        "tp": r["tp"],
        "cp": r["cp"],
        # §3.3.2: K and V all-gathered, then attention on the local query chunks
        **({"cp_kind": "all-gather"} if r["cp"] > 1 else {}),
        "pp": r["pp"],
        "dp": r["dp"],
        "num_gpus": r["gpus"],
        # FSDP, optimizer states and gradients sharded, no reshard after forward (§3.3.1),
        # FP32 gradient accumulation and reduce-scatter (§3.3.4)
        "framework": "fsdp2",
        "zero_stage": 2,
        "recompute": "none",
        "micro_batch_size": 1,
        "global_batch_size": r["dp"] * r["batch_per_dp"],
        "seq_len": s,
        "schedule": "interleaved",
        "virtual_stages": LLAMA3_VIRTUAL_STAGES,
        "memory_efficient_norm": True,
        # Meta's pipeline frees each stage's input and output tensors (§3.3.2), which
        # PyTorch's pipelining (the fsdp2 profile's default) keeps, and its FSDP does not
        # reshard after forward (§3.3.1) where PyTorch's multi-stage runtime frees chunks
        "pipeline_frees_stage_tensors": True,
        # Meta's tensor parallelism keeps the sequence shard of the blocks' inputs, as
        # Megatron-Core does: under torchtitan's DTensor plan (the fsdp2 profile's default)
        # the all-gathered QKV and FC1 inputs would need 141 GB per GPU here, and the
        # published layouts ran
        "tp_block_inputs": "sharded",
        # Meta's stack is not torchtitan's eager model code: its elementwise passes are
        # counted as fused kernels, as before the fsdp2 profile had an eager mode
        # (model.elementwise)
        "compile": True,
        "gradient_dtype": "fp32",
        "flash_attention": True,
        "mfu_convention": "6n+attention",
        "causal_attention_flops": True,
    }


def _llama3_rows(data: dict[str, Any]) -> list[PublishedRun]:
    runs = []
    for r in _rows(data, "llama3_table4"):
        s = r["seq_len"]
        params = _llama3_params(r)
        runs.append(
            PublishedRun(
                key=f"llama3-t4/{r['gpus']}" + ("-128k" if s > 8192 else ""),
                paper="Llama 3 Table 4",
                label=f"405B, {r['gpus']} GPUs, s {s // 1024}K",
                params=params,
                metric="mfu",
                published_util=r["bf16_mfu"],
                published_value=r["tflops_per_gpu"],
                published_unit="TFLOP/s/GPU",
                recipe=(
                    f"no recompute, FSDP2 ZeRO-2 (no reshard after forward, FP32 "
                    f"reduce-scatter per micro-batch), tp keeping the sequence shard, "
                    f"memory-efficient norms, "
                    f"TP {r['tp']} CP {r['cp']}{' (all-gather)' if r['cp'] > 1 else ''} PP {r['pp']} "
                    f"v {LLAMA3_VIRTUAL_STAGES}, b 1, "
                    f"m {r['batch_per_dp']}"
                ),
            )
        )
    return runs


def published_runs(path: Path | str | None = None) -> tuple[PublishedRun, ...]:
    """Every published configuration, with the recipe each paper states: from the package's
    ``scenarios/published.toml`` (:func:`trainplan.scenarios.data`), or from ``path``."""
    data = scenarios.data("published") if path is None else tomllib.loads(Path(path).read_text())
    return tuple(_megatron_rows(data) + _korthikanti_rows(data) + _llama3_rows(data))


def _hidden(run: PublishedRun) -> int:
    arch = run.arch or get_model(run.params["model"]).model.arch
    assert arch is not None
    return arch.hidden_size


def build_run_case(run: PublishedRun, time_model: str = "roofline", **overrides: Any) -> Case:
    """The :class:`Case` of a published run under ``time_model`` (``overrides`` go to
    ``build_case``): the roofline model with the paper's code's mechanisms, or the single model
    with its kernel-efficiency rule."""
    params = dict(run.params)
    if time_model == "single":
        params["time_model"] = "single"
        if run.arch is not None and "kernel_efficiency" not in overrides:
            params["kernel_efficiency"] = kernel_efficiency_for(run.params["gpu"], _hidden(run))
    else:
        params |= run.mechanisms
    case = build_case(params | overrides)
    if run.arch is not None:
        case = dataclasses.replace(
            case, model=ModelSpec(name=run.label, source=run.paper, arch=run.arch)
        )
    return case


def evaluate_run(run: PublishedRun, **overrides: Any) -> RunResult:
    """Evaluate one run under both time models (``overrides`` apply to the roofline one)."""
    return RunResult(
        run,
        build_run_case(run, **overrides).evaluate(),
        build_run_case(run, "single").evaluate(),
    )


def evaluate_all(
    runs: Iterable[PublishedRun] | None = None, **overrides: Any
) -> tuple[RunResult, ...]:
    return tuple(evaluate_run(r, **overrides) for r in (runs or published_runs()))


def median_abs_error(
    results: Iterable[RunResult], calibration: bool | None = None, previous: bool = False
) -> float:
    """Median |predicted − published| utilisation in points over the chosen rows
    (``calibration`` True: the calibration rows; False: held out; None: all), of the roofline
    model or, with ``previous``, the single model."""
    errs = [
        abs(r.previous_error_points if previous else r.error_points)
        for r in results
        if calibration is None or r.run.calibration == calibration
    ]
    return statistics.median(errs)


# ---------------------------------------------------------------------------------------------
# Residuals (published runs validate; nothing is fitted to them)


def residuals(runs: Sequence[PublishedRun] | None = None) -> dict[str, dict[str, float]]:
    """The step-time error (%, positive: the model is slower) of every published row marked
    as a former calibration row (:data:`CALIBRATION_ROWS`), by accelerator generation, under the
    figures in force. Fits nothing: the project's time constants come from per-operation
    sources (``docs/time-model-sources.md``), and end-to-end runs only validate them; a user
    fits their own cluster with ``trainplan calibrate``."""
    out: dict[str, dict[str, float]] = {}
    for r in evaluate_all(runs):
        if r.run.calibration:
            gen = generation_of(r.run.params["gpu"]) or r.run.params["gpu"]
            out.setdefault(gen, {})[r.run.key] = round(100 * r.time_error, 2)
    return out
