"""The figures the README's and the manual's sentences quote from a command are what the
command prints today (:mod:`tests.prose_figures`, :mod:`tests.fidelity_prose`): "ZeRO-3 … takes
7.47 s" stayed in the README after the command moved to 7.501 s, and the Fidelity page kept
Korthikanti Table 5 at "6.0 % / 12.2 %" after the report moved to 7.1 % / 13.5 %, since only
transcripts were checked."""

from __future__ import annotations

import pytest

from tests.fidelity_prose import QUICK
from tests.prose_figures import (
    FIDELITY,
    QUOTES,
    Block,
    Quote,
    axis_seconds,
    drifted,
    everything,
    outputs,
    printed,
    stale_blocks,
)

ALL_QUOTES, BLOCKS = everything()


def test_every_quoted_sentence_is_on_its_page():
    """A sentence rewritten on its page is re-quoted (else its figures would go unchecked); each
    figure has its reader; every block's markers stand once on its page."""
    pages = {q.page for q in ALL_QUOTES}
    assert {"README.md", "docs/guides/search.md", "docs/fidelity.md"} <= pages
    assert {q.page for q in QUOTES} == {
        "README.md",
        "docs/guides/search.md",
        "docs/concepts/frameworks.md",
        "docs/guides/python.md",
        "docs/guides/calibration.md",
        "docs/sweeps.md",
        "docs/recipes.md",
        "docs/memory-mechanisms.md",
    }
    for q in ALL_QUOTES:
        assert len(q.written()) == q.says.count("{}") == len(q.figures), q.says
        assert q.command.startswith(("trainplan ", FIDELITY, "cat docs/")), q.command
    assert {b.page for b in BLOCKS} == {"README.md", "docs/fidelity.md"}
    for b in BLOCKS:
        b.written()


def test_a_quote_reads_its_figure_as_the_sentence_rounds_it(tmp_path, monkeypatch):
    """7.501 s written to two decimals is 7.50; a sentence that says 7.47 has drifted."""
    import tests.prose_figures as pf

    monkeypatch.setattr(pf, "ROOT", tmp_path)
    (tmp_path / "p.md").write_text("ZeRO-3, takes\n7.47 s: its gathers")
    step = printed(r"^Step: .* = ([\d.]+) s; MFU")
    q = Quote("p.md", "ZeRO-3, takes {} s", "trainplan evaluate", ((step, ".2f"),))
    output = "Step: compute 4.962 s + bubble 646.2 ms = 7.501 s; MFU 35.0%\n"
    assert q.written() == ["7.47"] and q.wanted(output) == ["7.50"]
    assert drifted((q,), {"trainplan evaluate": output}) == [(q, ["7.50"])]
    pf.fix([(q, ["7.50"])])
    assert (tmp_path / "p.md").read_text() == "ZeRO-3, takes\n7.50 s: its gathers"


def test_a_traffic_row_read_by_its_column():
    """The Python guide's Megatron-FSDP row of Llama 3 70B at dp 16 × tp 4 (as ``evaluate``
    prints it): dp's time if not overlapped 199.080 s and exposed 29.938 s; uncharged, 218.5 ms
    exposed, read as 0.2185 s (thousandths of a second)."""
    row = (
        "axis    collective                  group    bytes/step    link       time if not "
        "overlapped    exposed\n"
        "dp      reduce-scatter (fp32) per micro-batch + all-gather per micro-batch (fwd, bwd)  "
        "16       16,934.85 GB  scale-out  199.080 s                 {}\n"
        "tp      all-gather + reduce-scatter  4        10,372.36 GB  nvlink     33.603 s  23.651 s\n"
    )
    assert axis_seconds("dp", 5)(row.format("29.938 s")) == 199.080
    assert axis_seconds("dp", 6)(row.format("29.938 s")) == 29.938
    assert axis_seconds("dp", 6)(row.format("218.5 ms")) == 0.2185
    assert axis_seconds("tp", 6)(row.format("1 s")) == 23.651


def test_a_signed_figure_and_a_block(tmp_path, monkeypatch):
    """A figure's sign is the figure's (the pages write a minus −): Korthikanti's 22B selective
    row at −1.7 % (the report prints -1.7%) then +1.2 %. A block is the command's output whole
    between its markers, rewritten in place."""
    import tests.prose_figures as pf

    monkeypatch.setattr(pf, "ROOT", tmp_path)
    page = tmp_path / "f.md"
    start, end = f"<!-- goals: {FIDELITY} --goals -->\n", "<!-- end goals -->"
    page.write_text(f"moves from −1.7 % (too fast)\n\n{start}| a |\n{end}\nafter\n")
    err = printed(r"^\| 22B \| ([+-][\d.]+)%")
    q = Quote("f.md", "moves from {} % (too fast)", "x", ((err, "+.1f"),))
    assert q.written() == ["−1.7"] and q.wanted("| 22B | -1.7% |") == ["−1.7"]
    assert drifted((q,), {"x": "| 22B | +1.2% |"}) == [(q, ["+1.2"])]
    b = Block("f.md", "goals", f"{FIDELITY} --goals")
    assert b.written() == "| a |\n"
    assert stale_blocks((b,), {b.command: "| b |\n"}) == [(b, "| b |\n")]
    pf.fix([(q, ["+1.2"])])
    b.write("| b |\n")
    assert page.read_text() == f"moves from +1.2 % (too fast)\n\n{start}| b |\n{end}\nafter\n"


def _stale(quotes: tuple[Quote, ...], blocks: tuple[Block, ...]) -> list[str]:
    done = outputs([q.command for q in quotes] + [b.command for b in blocks])
    return [
        f"{q.page}: {q.says.format(*q.written())!r} -> {q.says.format(*want)!r}"
        for q, want in drifted(quotes, done)
    ] + [f"{b.page}: the block {b.name!r}" for b, _ in stale_blocks(blocks, done)]


def test_the_published_runs_figures_and_tables_are_the_reports():
    """The Fidelity page's tables and the figures quoted from the published runs' report and the
    real-layers page (:data:`tests.fidelity_prose.QUICK`: a few seconds)."""
    quotes = tuple(q for q in ALL_QUOTES if q.command in QUICK)
    assert len(quotes) >= 20
    stale = _stale(quotes, tuple(b for b in BLOCKS if b.command in QUICK))
    assert not stale, "python -m tests.prose_figures --fix rewrites them:\n" + "\n".join(stale)


@pytest.mark.slow
def test_quoted_figures_are_what_their_commands_print():
    stale = _stale(
        tuple(q for q in ALL_QUOTES if q.command not in QUICK),
        tuple(b for b in BLOCKS if b.command not in QUICK),
    )
    assert not stale, "python -m tests.prose_figures --fix rewrites them:\n" + "\n".join(stale)
