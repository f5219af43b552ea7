"""The figures the prose of the README and the manual quotes from a command's output — "ZeRO-3
takes 7.50 s", "needs 142 GB per GPU", "within 7.8 % on average" — beside the command that
prints each (:data:`QUOTES`, and the fidelity pages' in :mod:`tests.fidelity_prose`), and the
blocks of a page that are a command's output whole (:class:`Block`: the tables of
``docs/fidelity.md``, the README's validation goals). A transcript shows what a command prints
and is checked as it stands (:mod:`tests.transcripts`); a figure in a sentence is the same claim
in words, often of a command the page does not show, rounded as the sentence reads.

Each :class:`Quote` is the sentence around its figures (``{}`` where each stands; the page's
line breaks and spaces are one space), the command, and for each figure how to read it off the
output and how the sentence rounds it. A command is ``trainplan …`` (run as a transcript runs
it), ``python -m trainplan.interface.fidelity …`` (the fidelity reports, ``--set`` for what a
mechanism moves) or ``cat PAGE`` (a generated page of the repository, as it stands).
``tests/test_prose_figures.py`` checks that every sentence and block is on its page (fast: a
rewritten sentence must be re-quoted here), that those of the published runs' report are what it
prints today (a few seconds: :data:`tests.fidelity_prose.QUICK`), and, marked slow, that the
rest are.

    python -m tests.prose_figures            # run the commands, print the quotes that drifted
    python -m tests.prose_figures --fix      # write today's figures and blocks into the pages
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tests import fresh_process
from tests.transcripts import ROOT, Transcript, run, workdir

Reader = Callable[[str], float]
"""A figure read off a command's output (stdout and stderr together)."""


def printed(regex: str, group: int = 1) -> Reader:
    """The number of ``regex``'s ``group`` (thousands commas dropped) where it first matches
    the output."""

    def read(output: str) -> float:
        found = re.search(regex, output, re.MULTILINE)
        assert found, f"no {regex!r} in the output"
        return float(found.group(group).replace(",", "").replace("−", "-"))

    return read


def every(regex: str) -> Callable[[str], list[float]]:
    """The numbers of ``regex``'s first group wherever it matches the output."""

    def read(output: str) -> list[float]:
        found = re.findall(regex, output, re.MULTILINE)
        assert found, f"no {regex!r} in the output"
        return [float(f.replace(",", "")) for f in found]

    return read


def least(numbers: Callable[[str], Iterable[float]], sign: float = 1) -> Reader:
    """The smallest of ``numbers`` times ``sign`` (−1: the smallest of the negated, e.g. the
    least "too fast" of negative errors)."""
    return lambda output: min(sign * x for x in numbers(output))


def most(numbers: Callable[[str], Iterable[float]], sign: float = 1) -> Reader:
    """The largest of ``numbers`` times ``sign``."""
    return lambda output: max(sign * x for x in numbers(output))


def in_json(*keys: str) -> Reader:
    """The value at ``keys`` of the output read as JSON (a command run with ``--json``)."""

    def read(output: str) -> float:
        value = json.loads(output)
        for key in keys:
            value = value[key]
        return float(value)

    return read


STEP = printed(r"^Step: .* = ([\d.]+) s; MFU")
STEP_OBJECTIVE = printed(r"^objective \(step-time\): ([\d.,]+) s")
"""A search's step time, as its objective line prints it."""
"""The step time a plan prints, s."""
TOTAL = printed(r"= total \(peak: [a-z-]+\)\s+([\d.,]+) GB")
"""The peak memory per GPU a plan prints, GB."""
CAPACITY = printed(r"capacity \([^)]*\)\s+([\d.,]+) GB")
"""What the GPU offers a layout, GB."""


@dataclass(frozen=True)
class Quote:
    """Figures a sentence of ``page`` quotes from ``command``'s output."""

    page: str
    """The page, from the repository's root (``README.md``, ``docs/guides/search.md``)."""
    says: str
    """The sentence around the figures, ``{}`` for each (one space for any run of spaces and
    line breaks on the page)."""
    command: str
    """The command, as a transcript writes it (``trainplan …``)."""
    figures: tuple[tuple[Reader, str], ...]
    """For each ``{}`` in order: how to read the figure off the output, and the format the
    sentence writes it in (``.2f``: 7.501 s is written 7.50)."""

    def pattern(self) -> re.Pattern[str]:
        """The sentence on its page, each figure a group (a sign, + or −, is the figure's)."""
        words = [re.escape(part).replace(r"\ ", " ") for part in self.says.split("{}")]
        text = r"([+−]?[\d.,]+)".join(words)
        return re.compile(re.sub(" +", r"\\s+", text))

    def written(self) -> list[str]:
        """The figures as the page writes them; AssertionError if the sentence is not there
        exactly once."""
        text = (ROOT / self.page).read_text()
        found = self.pattern().findall(text)
        assert len(found) == 1, f"{self.page}: {len(found)} times {self.says!r}"
        return list(found[0]) if isinstance(found[0], tuple) else [found[0]]

    def wanted(self, output: str) -> list[str]:
        """The figures as the sentence should write them, from the command's ``output`` (a
        minus as the pages write it, −)."""
        return [format(read(output), spec).replace("-", "−") for read, spec in self.figures]


@dataclass(frozen=True)
class Block:
    """Lines of ``page`` that are ``command``'s output whole, between the markers
    ``<!-- {name}: {command} -->`` and ``<!-- end {name} -->``."""

    page: str
    name: str
    command: str

    def bounds(self, text: str) -> tuple[int, int]:
        """Where the output stands in ``text``, the page; AssertionError if the markers are not
        there once each."""
        start, end = f"<!-- {self.name}: {self.command} -->\n", f"<!-- end {self.name} -->"
        assert text.count(start) == 1 == text.count(end), f"{self.page}: markers of {self.name}"
        return text.index(start) + len(start), text.index(end)

    def written(self) -> str:
        """The block as the page holds it."""
        text = (ROOT / self.page).read_text()
        at, end = self.bounds(text)
        return text[at:end]

    def write(self, output: str) -> None:
        """Put ``output`` in the block's place (nothing else on the page changes)."""
        path = ROOT / self.page
        text = path.read_text()
        at, end = self.bounds(text)
        path.write_text(text[:at] + output + text[end:])


SEARCH_405B = (
    "trainplan search --model llama3-405b --gpus 16384 --gpu H100-SXM --framework megatron "
    "--framework fsdp2"
)
META_KEYS = "--set memory_efficient_norm=true --set pipeline_frees_stage_tensors=true"
"""The Llama 3 paper's stage inputs freed (§3.3.2)."""
META_SEARCH = f"{SEARCH_405B} --set tp_block_inputs=sharded {META_KEYS} --set compile=true"
"""The README's and the search guide's search of Meta's recipe, less --allocator-retries-ok."""
META_LAYOUT = (
    "trainplan evaluate --model llama3-405b --gpu H100-SXM --tp 8 --pp 16 --dp 128 --seq-len 8192 "
    "--micro-batch 1 --global-batch 2048"
)
"""Meta's published layout (Llama 3 paper, Table 4), given alone."""
FSDP = (
    f"{META_LAYOUT} --framework fsdp2 --zero 2 --set gradient_dtype=fp32 --schedule interleaved "
    f"--virtual-stages 8 {META_KEYS} --mfu-convention 6n+attention"
)
META_RUN = f"{FSDP} --set tp_block_inputs=sharded --set compile=true"
"""The README's evaluate of Meta's layout under its own recipe."""
MEGATRON = f"{META_LAYOUT} --schedule interleaved --virtual-stages 8"
"""Meta's layout and schedule under Megatron-Core."""
ZERO3 = META_RUN.replace("--zero 2", "--zero 3")

R, S = "README.md", "docs/guides/search.md"
FW, P, SW = "docs/concepts/frameworks.md", "docs/guides/python.md", "docs/sweeps.md"
LESS_KEYS = f"{SEARCH_405B} --set tp_block_inputs=sharded --set compile=true"
"""The framework profiles' page: the search of Meta's recipe with the sharded block inputs and
fused kernels alone (Megatron-Core's pp 32 answer)."""
FSDP_70B = "trainplan evaluate --model llama3-70b --gpu H100-SXM --dp 16 --tp 4 --zero 3"
"""The Python guide's Megatron-FSDP layout of Llama 3 70B on 64 H100s."""
UNCHARGED_70B = f"{FSDP_70B} --set nccl_sm_charge=false"
CAL = "docs/guides/calibration.md"
CALIBRATED_18B = (
    "trainplan evaluate --gpu A100-80GB --model megatron-18.4b --tp 8 --dp 32 --micro-batch 8 "
    "--global-batch 1024 --seq-len 2048 --framework megatron --zero 0 --recompute full "
    "--no-sequence-parallel --set gemm_efficiency=0.7495"
)
"""The calibration guide's third run (18.4B on 256 A100s) at the fitted GEMM efficiency its
transcript prints (``--set gemm_efficiency`` in place of ``--calibration``, as calibrate's own
evaluate lines write it), the rest at the planner's defaults."""
AS_RUN_18B = (
    f"{CALIBRATED_18B} --no-flash --set gradient_dtype=bf16 --set tp_comm_overlap=none "
    "--set grad_reduce_overlap=false"
)
"""The same with the settings of the 2021 code that ran it (the measurements file's)."""
RC = "docs/recipes.md"
PLAIN_8B = (
    "trainplan evaluate --model llama3-8b --seq-len 8192 --global-batch 64 --dp 8 "
    "--mfu-convention megatron"
)
"""The recipes page's Llama 3 8B on 8 H100s, each sequence one document."""
PACKED_8B = f"{PLAIN_8B} --document-length 2048"
"""The same in packs of 2,048-token documents."""
MM = "docs/memory-mechanisms.md"
SEARCH_8B = "trainplan search --model llama3-8b --gpus 8 --gpu H100-SXM"
"""The memory mechanisms page's search of Llama 3 8B on 8 H100s (its Megatron-FSDP answer)."""
NOT_OVERLAPPED, EXPOSED = 5, 6
"""Columns of a plan's "Traffic per axis" table: time if not overlapped, exposed."""


def axis_seconds(axis: str, column: int) -> Reader:
    """Seconds in ``column`` of ``axis``'s row of a plan's "Traffic per axis" table (its cells
    are two or more spaces apart; ``ms`` read as thousandths)."""

    def read(output: str) -> float:
        found = re.search(rf"^{axis}\s.*$", output, re.MULTILINE)
        assert found, f"no {axis} row in the output"
        value, unit = re.split(r"\s{2,}", found.group(0).strip())[column].split()
        return float(value.replace(",", "")) / (1000 if unit == "ms" else 1)

    return read


QUOTES = (
    # README: the search of Meta's recipe and what it says about the other answers
    Quote(R, "at {} % MFU counting attention FLOPs as the paper does",
          f"{META_SEARCH} --allocator-retries-ok",
          ((printed(r"(\d+\.\d)% with attention FLOPs, 6n\+attention"), ".1f"),)),
    Quote(R, "(published: 41 %), {} s a step", f"{META_SEARCH} --allocator-retries-ok",
          ((STEP, ".2f"),)),
    Quote(R, "the weights too, ZeRO-3, takes {} s", ZERO3, ((STEP, ".2f"),)),
    Quote(R, "PyTorch's eager operators, {} s a step", FSDP + " --set tp_block_inputs=sharded",
          ((STEP, ".2f"),)),
    Quote(R, "It fits with {} GB to spare, but the all-gather stream's idle pool takes PyTorch's "
          "reserved bytes {} GB past the memory", META_RUN,
          ((lambda out: CAPACITY(out) - TOTAL(out), ".2f"),
           (printed(r"exceed the capacity by ([\d.]+) GB"), ".2f"))),
    Quote(R, "answers an `fsdp2` ZeRO-2 layout at dp 64 × tp 8 × pp 32, {} s a step",
          META_SEARCH, ((STEP, ".2f"),)),
    Quote(R, "inputs whole on every tp rank: Meta's layout then needs {} GB per GPU",
          FSDP + " --set compile=true", ((TOTAL, ".0f"),)),
    Quote(R, "an `fsdp2` dp 256 × tp 8 × pp 8 layout with full recomputation, {} s a step",
          f"{SEARCH_405B} {META_KEYS} --set compile=true --allocator-retries-ok",
          ((STEP, ".2f"),)),
    Quote(R, "Megatron-Core's pp 32 layout above, {} s)",
          f"{SEARCH_405B} --set pipeline_frees_stage_tensors=true --set compile=true "
          "--allocator-retries-ok", ((STEP, ".3f"),)),
    Quote(R, "keeps its norms' inputs and needs {} GB per GPU, {} GB over an H100", MEGATRON,
          ((TOTAL, ".2f"), (printed(r"over by ([\d.]+) GB"), ".2f"))),
    Quote(R, "with full recomputation it fits, at {} s a step", f"{MEGATRON} --recompute full",
          ((STEP, ".2f"),)),
    Quote(R, "(it would take {} s if it fitted", MEGATRON, ((STEP, ".2f"),)),
    # README: Meta's layout given alone, then as Meta ran it
    Quote(R, "does not fit and runs at {} % MFU", META_LAYOUT,
          ((printed(r"MFU (\d+\.\d)% \(6n;"), ".0f"),)),
    Quote(R, "the plain 1F1B schedule ({} micro-batches of activations held on the busiest "
          "stage, a {} % bubble)", META_LAYOUT,
          ((printed(r"(\d+) micro-batches in flight on the busiest stage"), ".0f"),
           (printed(r"bubble_fraction ([\d.]+)% of the step"), ".0f"))),
    Quote(R, "(at 8K context attention adds {} %", META_LAYOUT + " --json",
          ((lambda out: 100 * (in_json("time", "mfu_with_attention")(out)
                               / in_json("time", "mfu")(out) - 1), ".0f"),)),
    Quote(R, "at 128K {} %)",
          META_LAYOUT.replace("8192", "131072").replace("2048", "128") + " --json",
          ((lambda out: 100 * (in_json("time", "mfu_with_attention")(out)
                               / in_json("time", "mfu")(out) - 1), ".0f"),)),
    Quote(R, "which keeps the gathered input: {} GB, does not fit", FSDP + " --set compile=true",
          ((TOTAL, ".0f"),)),
    # the search guide says the same at more digits
    Quote(S, "Meta's layout then needs {} GB per GPU and does not fit an H100",
          FSDP + " --set compile=true", ((TOTAL, ".2f"),)),
    Quote(S, "{} % MFU counting attention FLOPs as Table 4 does",
          f"{META_SEARCH} --allocator-retries-ok",
          ((printed(r"(\d+\.\d)% with attention FLOPs, 6n\+attention"), ".1f"),)),
    Quote(S, "Sharding the weights too (ZeRO-3) takes {} s", ZERO3, ((STEP, ".3f"),)),
    Quote(S, "on by default; {} s uncharged)", f"{ZERO3} --set nccl_sm_charge=false",
          ((STEP, ".3f"),)),
    Quote(S, "fits with {} GB to spare, but FSDP2's all-gather stream keeps an idle pool that "
          "takes PyTorch's reserved bytes {} GB past the memory", META_RUN,
          ((lambda out: CAPACITY(out) - TOTAL(out), ".2f"),
           (printed(r"exceed the capacity by ([\d.]+) GB"), ".2f"))),
    Quote(S, "layout at dp 64 × tp 8 × pp 32, {} s a step", META_SEARCH, ((STEP, ".2f"),)),
    Quote(S, "keeps its norms' inputs and needs {} GB per GPU, {} GB over an H100", MEGATRON,
          ((TOTAL, ".2f"), (printed(r"over by ([\d.]+) GB"), ".2f"))),
    Quote(S, "recomputation it fits, at {} s a step", f"{MEGATRON} --recompute full",
          ((STEP, ".2f"),)),
    Quote(S, "Were it to fit as it is, it would take {} s", MEGATRON, ((STEP, ".2f"),)),
    # the framework profiles' page says which options the search of Meta's recipe needs
    Quote(FW, "--allocator-retries-ok` finds Meta's own layout (dp 128 × tp 8 × pp 16, interleaved "
          "v = 8) under FSDP2 ZeRO-2, {} s a step", f"{META_SEARCH} --allocator-retries-ok",
          ((STEP, ".3f"),)),
    Quote(FW, "interleaved v = 4, {} s (under a pipeline schedule", LESS_KEYS, ((STEP, ".3f"),)),
    Quote(FW, "`--allocator-retries-ok` it answers `fsdp2` at dp 64 × tp 8 × pp 32, {} s",
          META_SEARCH, ((STEP, ".2f"),)),
    Quote(FW, "under which Meta's layout needs {} GB per GPU", FSDP + " --set compile=true",
          ((TOTAL, ".0f"),)),
    # the Python guide's worked example: Megatron-FSDP's dp 16 × tp 4 with and without the charge
    Quote(P, "hides {} s of per-micro-batch reduce-scatters", FSDP_70B,
          ((axis_seconds("dp", NOT_OVERLAPPED), ".1f"),)),
    Quote(P, "rings on 8 blocks, φ = {}; its tp 4 collectives on a node's 24, φ = {}:", FSDP_70B,
          ((printed(r"φ dp ([\d.]+)"), ".3f"), (printed(r"φ dp [\d.]+, tp ([\d.]+)"), ".3f"))),
    Quote(P, "which leaves {} s of its dp traffic exposed", FSDP_70B,
          ((axis_seconds("dp", EXPOSED), ".1f"),)),
    Quote(P, "exposed, against {} s uncharged", UNCHARGED_70B,
          ((axis_seconds("dp", EXPOSED), ".1f"),)),
    Quote(P, "and {} s of its asynchronous tp collectives'", FSDP_70B,
          ((axis_seconds("tp", EXPOSED), ".1f"),)),
    Quote(P, "tp collectives', against {} s:", UNCHARGED_70B,
          ((axis_seconds("tp", EXPOSED), ".1f"),)),
    Quote(P, "s: {} s a step, against", FSDP_70B, ((STEP, ".1f"),)),
    Quote(P, "against {} s when nothing charged them", UNCHARGED_70B, ((STEP, ".1f"),)),
    # the calibration guide: the fitted run's prediction, and the same at today's defaults
    Quote(CAL, "evaluate prints the {} s the fit predicted", AS_RUN_18B, ((STEP, ".3f"),)),
    Quote(CAL, "the same layout is a step of {} s, not the one that was measured",
          CALIBRATED_18B, ((STEP, ".3f"),)),
    # the recipes page: packed documents' step and MFU both ways
    Quote(RC, "in packs of 2,048-token documents steps in {} s instead of", PACKED_8B,
          ((STEP, ".2f"),)),
    Quote(RC, "s instead of {} s; under Megatron's convention", PLAIN_8B, ((STEP, ".2f"),)),
    Quote(RC, "its MFU is {} %, where a counter taking each pack for one sequence would report "
          "{} %", PACKED_8B, ((printed(r"MFU ([\d.]+)% \("), ".1f"),
                             (printed(r"\(([\d.]+)% counting each pack"), ".1f"))),
    # the memory mechanisms page: the search's Megatron-FSDP answer for Llama 3 8B on 8 H100s
    Quote(MM, "at tp 1 ({} s per step of 2,048 sequences with the NCCL SM charge", SEARCH_8B,
          ((STEP_OBJECTIVE, ".0f"),)),
    Quote(MM, "SM charge, {} s without;", f"{SEARCH_8B} --set nccl_sm_charge=false",
          ((STEP_OBJECTIVE, ".0f"),)),
    Quote(MM, "s without; {} GB), the layout Megatron Bridge's", SEARCH_8B, ((TOTAL, ".1f"),)),
    # the sweeps page: point 93's time to train in days
    Quote(SW, "({} s is {} days.)", "trainplan sweep docs/sweeps/study.toml --point 93",
          ((printed(r"time_to_train_s\s+([\d.]+)"), ",.0f"),
           (lambda out: printed(r"time_to_train_s\s+([\d.]+)")(out) / 86400, ".1f"))),
)  # fmt: skip
"""Every figure the README's, the search guide's, the framework profiles', the Python guide's, the
calibration guide's and the sweeps page's prose quotes from a command."""


FIDELITY = "python -m trainplan.interface.fidelity"
"""The fidelity reports' command (:mod:`interface.fidelity`), quoted as the pages write it."""


def output_of(command: str, cwd: Path) -> str:
    """What ``command`` prints (module docstring): a ``trainplan`` command as a transcript runs
    it, the fidelity report in its own process (stdout and stderr together), a page as it
    stands."""
    if command.startswith("cat "):
        return (ROOT / command.removeprefix("cat ")).read_text()
    if command.startswith(FIDELITY + " ") or command == FIDELITY:
        args = shlex.split(command)[3:]
        cmd = [sys.executable, "-m", "trainplan.interface.fidelity", *args]
        if fresh_process.enabled():  # its own process (tests.fresh_process)
            module = "trainplan.interface.fidelity"
            return fresh_process.run_module(cmd, module, args, cwd, 600, True).stdout
        proc = subprocess.run(
            cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600
        )
        return proc.stdout
    return run(Transcript(ROOT, 0, command, (), 0), cwd)


def outputs(commands: Iterable[str]) -> dict[str, str]:
    """Each distinct command's output, two at a time, each its own process."""
    distinct = sorted(set(commands))
    with workdir() as tmp, ThreadPoolExecutor(2) as pool:
        done = pool.map(lambda c: output_of(c, Path(tmp)), distinct)
        return dict(zip(distinct, done, strict=True))


def drifted(quotes: tuple[Quote, ...], done: dict[str, str]) -> list[tuple[Quote, list[str]]]:
    """The quotes whose figures are not what their commands print, with the figures they
    should read."""
    out = []
    for q in quotes:
        want = q.wanted(done[q.command])
        if q.written() != want:
            out.append((q, want))
    return out


def fix(stale: list[tuple[Quote, list[str]]]) -> None:
    """Write each stale quote's figures into its page's sentence (nothing else changes)."""
    for q, want in stale:
        path = ROOT / q.page
        text = path.read_text()
        found = q.pattern().search(text)
        assert found
        parts, at = [], found.start()
        for i, figure in enumerate(want, 1):
            parts += [text[at : found.start(i)], figure]
            at = found.end(i)
        path.write_text(text[: found.start()] + "".join(parts) + text[at:])


def stale_blocks(blocks: Iterable[Block], done: dict[str, str]) -> list[tuple[Block, str]]:
    """The blocks that are not what their commands print, with what they print."""
    return [(b, done[b.command]) for b in blocks if b.written() != done[b.command]]


def everything() -> tuple[tuple[Quote, ...], tuple[Block, ...]]:
    """Every quote and block the checker holds: :data:`QUOTES`, and the fidelity pages'
    (:mod:`tests.fidelity_prose`)."""
    from tests.fidelity_prose import BLOCKS, FIDELITY_QUOTES

    return QUOTES + FIDELITY_QUOTES, BLOCKS


def main(argv: list[str]) -> int:
    quotes, blocks = everything()
    done = outputs([q.command for q in quotes] + [b.command for b in blocks])
    stale, moved = drifted(quotes, done), stale_blocks(blocks, done)
    for q, want in stale:
        print(f"--- {q.page}: {q.says.format(*q.written())!r} -> {q.says.format(*want)!r}")
        print(f"    $ {q.command}")
    for b, _ in moved:
        print(f"--- {b.page}: the block {b.name!r} is not what {b.command} prints")
    if argv[:1] == ["--fix"]:
        fix(stale)
        for b, output in moved:
            b.write(output)
        return 0
    return 1 if stale or moved else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
