"""The figures the fidelity pages' prose quotes (``docs/fidelity.md``, the README's fidelity
section, ``docs/concepts/limits.md``, ``docs/time-model-sources.md``), each beside the fidelity
report that prints it (:mod:`tests.prose_figures` has the mechanism), and the blocks of those
pages that are a report's output whole. "Korthikanti Table 5 … 6.0 % / 12.2 %" stayed on the
Fidelity page after NCCL's SM charge moved the report to 7.1 % / 13.5 %, and "all 21 published
layouts fit" after FSDP2's whole FP32 gradients under pp made two Llama 3 rows not fit, since
nothing held the page to the report.

The counterfactual figures ("without the charge", "at cuBLASLt's large-GEMM rate") are read off
the report run with ``--set``, the model as it stands with one key changed, so they move with the
model too."""

from __future__ import annotations

import re
from collections.abc import Callable

from tests.prose_figures import FIDELITY, Block, Quote, Reader, every, least, most, printed

GOALS = f"{FIDELITY} --goals"
"""The published runs' goals and rows, as ``docs/fidelity.md`` shows them."""
PAGE = f"{FIDELITY} --markdown"
"""The published runs' page (``docs/fidelity-published.md``): memory, the fit, Appendix B."""
NO_CHARGE = f"{GOALS} --set nccl_sm_charge=false"
CUBLAS = f"{GOALS} --set gemm_efficiency=0.83"
"""Every published run at the A100's large-GEMM rate cuBLASLt publishes, 0.83 of peak with the
wave and depth rules divided out (the Fidelity page says where it comes from)."""
VALIDATION = f"{FIDELITY} --validation"
VALIDATION_GOALS = f"{VALIDATION} --goals"
VALIDATION_NO_CHARGE = f"{VALIDATION_GOALS} --set nccl_sm_charge=false"
LAYERS = "cat docs/fidelity-layers.md"
"""The real-layers page (``python -m tests.fidelity.report``, checked by ``tests/fidelity``)."""
QUICK = frozenset({GOALS, PAGE, LAYERS})
"""The commands the checker runs outside the slow tests: the published runs' report as it stands
(two processes of a second or two) and a page; the validation set and the ``--set`` runs are
checked with the slow ``trainplan`` ones."""

_ERR = r"([+-][\d.]+) pts, ([+-][\d.]+)% time"
Numbers = Callable[[str], list[float]]


def row(label: str, group: int = 4) -> Reader:
    """A figure of ``--goals``' row ``label``: group 1 and 2 the single model's error in points
    and % of step time, 3 and 4 the roofline model's (signed: + slower than published)."""
    return printed(rf"^\| {re.escape(label)} \| [^|]+ \| {_ERR} \| {_ERR} \|", group)


def rows(paper: str, group: int = 4, role: str = "[a-z ]+", but: str = "") -> Numbers:
    """``row``'s figure on every row of ``paper`` in ``role`` (``held out``, ``calibration``),
    less the row whose label starts ``but``."""
    skip = f"(?!{re.escape(but)})" if but else ""
    regex = rf"^\| {re.escape(paper)}: {skip}[^|]+ \| [^|]+ \| {_ERR} \| {_ERR} \| {role} \|$"

    def read(output: str) -> list[float]:
        found = re.findall(regex, output, re.MULTILINE)
        assert found, f"no {regex!r} in the output"
        return [float(f[group - 1]) for f in found]

    return read


def goal(measure: str, column: int, part: int = 1) -> Reader:
    """A figure of ``--goals``' table of goals, the row starting ``measure``: column 1 the single
    model, 2 the roofline model; ``part`` 1 the mean (or the one figure), 2 the max."""
    cell = r"([\d.]+)(?: %| points)?(?: / ([\d.]+) %)?"
    regex = rf"^\| {re.escape(measure)}(?:[^|\\]|\\\|)* \| {cell} \| {cell} \| [^|]+ \|$"
    return printed(regex, 2 * (column - 1) + part)


def run_errors(*keys: str) -> Numbers:
    """The validation runs' step-time errors (%, signed) as ``--validation`` prints them."""
    names = "|".join(re.escape(k) for k in keys)
    return every(rf"^(?:{names})\s+yes\s+\S+\s+[\d.,]+\s+[\d.,]+\s+([+-][\d.]+)%")


def magnitudes(numbers: Numbers) -> Numbers:
    """``numbers`` without their signs."""
    return lambda output: [abs(x) for x in numbers(output)]


def peak(label: str, group: int = 1) -> Reader:
    """A published run's peak GB per GPU (group 2: what its GPU leaves it) off the page's row
    ``label``."""
    return printed(rf"^\| {re.escape(label)} \|.*\| ([\d.]+) / ([\d.]+) \| (?:yes|NO) \|$", group)


def over(output: str) -> list[float]:
    """GB the two Llama 3 Table 4 runs the model calls too big stand over what their GPU leaves."""
    return [peak(label)(output) - peak(label, 2)(output) for label in (LLAMA_8K, LLAMA_128K)]


def walk(recipe: str, group: int) -> Reader:
    """The Llama 3 405B memory walk's row starting ``recipe``: group 1 the micro-batches in
    flight, 2 the layers' activations GB, 3 the total GB."""
    cells = r" \| [^|]+ \| \d+ \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|"
    return printed(rf"^\| {re.escape(recipe)}[^|]*{cells}", group)


def layer_median(kind: str, group: int = 1) -> Reader:
    """The real-layers page's median |error| for ``kind``, %: group 1 the ``paper`` convention,
    2 ``pytorch``."""
    return printed(rf"^\| {re.escape(kind)} \| ([\d.]+)% \| ([\d.]+)% \|$", group)


def me_cases(output: str) -> float:
    """The cases of the real-layers page's memory-efficient norms table."""
    section = output.split("## Memory-efficient norms", 1)[1].split("\n## ", 1)[0]
    return float(sum(line.startswith("| ") and "%" in line for line in section.splitlines()))


T1_1T_S = (
    96 * 3072 * 2048 * 128 * 25_600**2 * (1 + 2048 / (6 * 25_600) + 51_200 / (16 * 128 * 25_600))
) / (163e12 * 3072)
"""Megatron-LM Table 1's 1T step, s: Eq. 3's 96·B·s·l·h²·(1 + s/6h + V/16lh) hardware FLOPs
(B 3,072, s 2,048, l 128, h 25,600, V 51,200) at the published 163 TFLOP/s on each of 3,072
GPUs, 102.63 s."""
K_1T_FULL_S = 94.42
"""Korthikanti Table 5's 1T step with full recomputation, s, as published."""


def model_1t_gain(output: str) -> float:
    """How much faster, %, the model runs Korthikanti's 1T (full recomputation) than Table 1's
    1T, the same work per replica: each published step time times (1 + the model's error)."""
    t1 = T1_1T_S * (1 + row("Megatron-LM Table 1: 1008B, 3072 GPUs")(output) / 100)
    k = K_1T_FULL_S * (1 + row("Korthikanti Table 5: 1T, 512 GPUs, full")(output) / 100)
    return 100 * (t1 / k - 1)


K_SEL, K_ALL = "Korthikanti Table 5, selective + SP", "Korthikanti Table 5, all eight"
F, R, L, T, C = (
    "docs/fidelity.md",
    "README.md",
    "docs/concepts/limits.md",
    "docs/time-model-sources.md",
    "docs/guides/calibration.md",
)
LLAMA_8K, LLAMA_128K = (
    "Llama 3 Table 4: 405B, 8192 GPUs, s 8K",
    "Llama 3 Table 4: 405B, 16384 GPUs, s 128K",
)
TT = "torchtitan-2024-12-h100/"
QWEN = ("megatron-bridge-25.11/h100-qwen3-30b-a3b", "megatron-bridge-25.11/b200-qwen3-30b-a3b")
LONG_CP = tuple(
    TT + k for k in ("t2-8b-cp4-128k", "t2-8b-cp8-256k", "t6-405b-cp4-128k", "t6-405b-cp8-256k")
)
MPT_LONG = ("llm-foundry-mpt/h100-13b-32k-8", "llm-foundry-mpt/a100-7b-64k-8")
V_DENSE = printed(r"^\| step time, dense models:.*\| ([\d.]+) % \(\d+ runs\) \|")
V_MOE = printed(r"^\| step time, MoE models:.*\| ([\d.]+) % \(\d+ runs\) \|")
V_BEYOND = printed(r"^\| step time: runs beyond 15 % \| none \| (\d+) of \d+ \|")
V_COUNTED = printed(r"^\| step time: runs beyond 15 % \| none \| \d+ of (\d+) \|")

FIDELITY_QUOTES = (
    # docs/fidelity.md, Real layers: the real-layers page's medians
    *(Quote(F, f"| {kind} | {{}}% | {{}}% |", LAYERS,
            ((layer_median(kind), ".2f"), (layer_median(kind, 2), ".2f")))
      for kind in ("GPT (eager softmax)", "GPT (SDPA)", "Llama (eager softmax)", "Llama (SDPA)",
                   "MoE (SDPA)", "MoE + shared expert (SDPA)")),
    Quote(F, "every layer kind and mode ({} cases, √n stacks included): median error `paper` {}%",
          LAYERS, ((me_cases, ".0f"), (printed(r"Median \|error\|: paper ([\d.]+)%"), ".2f"))),
    # docs/fidelity.md, Published runs: the bullets under the generated tables
    Quote(F, "pp 1 (22B) {} % and {} %, pp 8 (175B) {} % and {} %, pp 35 (530B) {} % and {} %, "
          "pp 64 (1T) {} % and {} % (selective, full)", GOALS,
          tuple((row(f"Korthikanti Table 5: {m}, {c}"), "+.1f") for m in ("22B, 8 GPUs", "175B, 64 GPUs",
                                                    "530B, 280 GPUs", "1T, 512 GPUs")
                for c in ("selective", "full"))),
    Quote(F, "run with the 2021 code) is within {} %: for", GOALS,
          ((lambda out: abs(row("Megatron-LM Table 1: 1008B, 3072 GPUs")(out)), ".1f"),)),
    Quote(F, "of which the model accounts for about {} %", GOALS, ((model_1t_gain, ".0f"),)),
    Quote(F, "would make all eight rows {}–{} % fast", CUBLAS,
          ((least(rows("Korthikanti Table 5"), -1), ".0f"),
           (most(rows("Korthikanti Table 5"), -1), ".0f"))),
    Quote(F, "and Table 1 {}–{} points fast", CUBLAS,
          ((least(rows("Megatron-LM Table 1", 3)), ".0f"),
           (most(rows("Megatron-LM Table 1", 3)), ".0f"))),
    Quote(F, "the selective rows stand at {} % / {} % and all eight at {} % / {} %, with it",
          NO_CHARGE, ((goal(K_SEL, 2, 1), ".1f"), (goal(K_SEL, 2, 2), ".1f"),
                      (goal(K_ALL, 2, 1), ".1f"), (goal(K_ALL, 2, 2), ".1f"))),
    Quote(F, "with it at {} % / {} % and {} % / {} %, and the 22B's", GOALS,
          ((goal(K_SEL, 2, 1), ".1f"), (goal(K_SEL, 2, 2), ".1f"),
           (goal(K_ALL, 2, 1), ".1f"), (goal(K_ALL, 2, 2), ".1f"))),
    Quote(F, "selective row moves from {} % to", NO_CHARGE,
          ((row("Korthikanti Table 5: 22B, 8 GPUs, selective"), "+.1f"),)),
    Quote(F, "% to {} % (too slow). Megatron-LM", GOALS, ((row("Korthikanti Table 5: 22B, 8 GPUs, selective"), "+.1f"),)),
    Quote(F, "**Megatron-LM's 1T** ({} points) is the pp-64 trend above; every other held-out "
          "Table 1 row is within {} points", GOALS,
          ((row("Megatron-LM Table 1: 1008B, 3072 GPUs", 3), "+.1f"),
           (most(magnitudes(rows("Megatron-LM Table 1", 3, "held out", "1008B"))), ".1f"))),
    Quote(F, "its held-out rows are within {} points, the 128K row the furthest ({} points: "
          "predicted fast)", GOALS,
          ((goal("Llama 3 Table 4 held out", 2), ".1f"), (row(LLAMA_128K, 3), "+.1f"))),
    # docs/fidelity.md, Published layouts fit
    Quote(F, "**{} of {} published layouts fit**", PAGE,
          ((printed(r"layouts that fit: (\d+) of \d+"), ".0f"),
           (printed(r"layouts that fit: \d+ of (\d+)"), ".0f"))),
    Quote(F, "on 16,384 GPUs at 128K, {} and {} GB against the {} GB an H100 leaves the run",
          PAGE, ((peak(LLAMA_8K), ".1f"), (peak(LLAMA_128K), ".1f"), (peak(LLAMA_8K, 2), ".1f"))),
    Quote(F, "| Megatron interleaving, v = 4 | {} (of 8 layers) | {} GB: does not fit |", PAGE,
          ((walk("Megatron-LM interleaving with v = 4", 1), ".2f"),
           (walk("Megatron-LM interleaving with v = 4", 3), ".1f"))),
    Quote(F, "only the output layer (Llama 3 §3.3.2) | {} | {} GB: does not fit |", PAGE,
          ((walk("v = 8: chunks of one layer", 1), ".3f"), (walk("v = 8: chunks of one layer", 3), ".1f"))),
    Quote(F, "which §3.3.2 frees | {}, two tensors fewer per layer | {} GB: does not fit |", PAGE,
          ((walk("v = 8 and memory-efficient norms", 1), ".3f"),
           (walk("v = 8 and memory-efficient norms", 3), ".1f"))),
    Quote(F, "it leaves the run {} GB over the usable capacity", PAGE,
          ((printed(r"That is ([\d.]+) GB over the usable capacity"), ".1f"),)),
    Quote(F, "one-layer chunk's input would give {} GB.", PAGE,
          ((printed(r"equal norm inputs\) would give ([\d.]+) GB"), ".1f"),)),
    Quote(F, "530B per-stage activations come out {} / {} (outputs deallocated) / {} GiB", PAGE,
          ((printed(r"^\| first, outputs kept \| ([\d.]+) \|"), ".1f"),
           (printed(r"^\| first, outputs deallocated \| ([\d.]+) \|"), ".1f"),
           (printed(r"^\| last \| ([\d.]+) \|"), ".1f"))),
    # the README's and the limits page's summary of the published runs
    Quote(R, "the papers' held-out iteration times within {} % on average ({} % at worst)", GOALS,
          ((goal(K_ALL, 2, 1), ".1f"), (goal(K_ALL, 2, 2), ".1f"))),
    Quote(L, "iteration times are within {} % on average, {} % at worst", GOALS,
          ((goal(K_ALL, 2, 1), ".1f"), (goal(K_ALL, 2, 2), ".1f"))),
    Quote(C, "the model's worst error on published runs it was not fitted to ({} %;", GOALS,
          ((goal(K_ALL, 2, 2), ".1f"),)),
    # the README's fidelity section: the validation set
    Quote(R, "(Qwen3-30B-A3B on H100 and B200, {}–{} % too fast)", VALIDATION,
          ((least(run_errors(*QWEN), -1), ".0f"), (most(run_errors(*QWEN), -1), ".0f"))),
    Quote(R, "(128K–256K tokens at cp 4–8, {}–{} % too fast)", VALIDATION,
          ((least(run_errors(*LONG_CP), -1), ".0f"), (most(run_errors(*LONG_CP), -1), ".0f"))),
    Quote(R, "with llm-foundry's Triton attention ({}–{} % too fast)", VALIDATION,
          ((least(run_errors(*MPT_LONG), -1), ".0f"), (most(run_errors(*MPT_LONG), -1), ".0f"))),
    Quote(R, "With it the validation improves: dense {} %, MoE {} %, {} runs beyond 15 %",
          VALIDATION_GOALS, ((V_DENSE, ".1f"), (V_MOE, ".1f"), (V_BEYOND, ".0f"))),
    Quote(R, "runs beyond 15 % ({} %, {} %, {} without it)", VALIDATION_NO_CHARGE,
          ((V_DENSE, ".1f"), (V_MOE, ".1f"), (V_BEYOND, ".0f"))),
    Quote(R, "are counted {}–{} GB over what their 80 GB GPU leaves a run", PAGE,
          ((least(over), ".0f"), (most(over), ".0f"))),
    # the limits page: the validation set and what it leaves uncharged
    Quote(L, "on the validation set of {} runs dense models are within {} % on average and MoE "
          "models {} %, with {} runs beyond 15 %", VALIDATION_GOALS,
          ((V_COUNTED, ".0f"), (V_DENSE, ".1f"), (V_MOE, ".1f"), (V_BEYOND, ".0f"))),
    Quote(L, "(runs with many small experts per GPU, Qwen3-30B-A3B's, come out {}–{} % too fast;",
          VALIDATION,
          ((least(run_errors(*QWEN), -1), ".0f"), (most(run_errors(*QWEN), -1), ".0f"))),
    Quote(L, "(128K–256K tokens at cp 4–8) come out {}–{} % too fast", VALIDATION,
          ((least(run_errors(*LONG_CP), -1), ".0f"), (most(run_errors(*LONG_CP), -1), ".0f"))),
    # docs/time-model-sources.md, section 2: the charge today
    Quote(T, "the current model measures dense {} %, MoE {} %, {} of {} beyond 15 % with the "
          "charge", VALIDATION_GOALS,
          ((V_DENSE, ".1f"), (V_MOE, ".1f"), (V_BEYOND, ".0f"), (V_COUNTED, ".0f"))),
    Quote(T, "with the charge and {} %, {} %, {} of {} without it", VALIDATION_NO_CHARGE,
          ((V_DENSE, ".1f"), (V_MOE, ".1f"), (V_BEYOND, ".0f"), (V_COUNTED, ".0f"))),
)  # fmt: skip
"""Every figure the fidelity pages' prose quotes from a report."""

BLOCKS = (
    Block(F, "published goals", GOALS),
    Block(R, "validation goals", VALIDATION_GOALS),
)
"""The blocks that are a report's output whole: the Fidelity page's goals and rows, the
README's validation goals (``tests/test_validation.py`` holds the latter too)."""
