"""The figures the README's and the search guide's sentences quote from a command are what the
command prints today (:mod:`tests.prose_figures`): "ZeRO-3 … takes 7.47 s" stayed in the README
after the command moved to 7.501 s, since only transcripts were checked."""

from __future__ import annotations

import pytest

from tests.prose_figures import QUOTES, Quote, drifted, outputs, printed


def test_every_quoted_sentence_is_on_its_page():
    """A sentence rewritten on its page is re-quoted in :data:`QUOTES` (else its figures would go
    unchecked); each figure has its reader."""
    pages = {q.page for q in QUOTES}
    assert pages == {"README.md", "docs/guides/search.md"}
    for q in QUOTES:
        assert len(q.written()) == q.says.count("{}") == len(q.figures), q.says
        assert q.command.startswith("trainplan "), q.command


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


@pytest.mark.slow
def test_quoted_figures_are_what_their_commands_print():
    stale = drifted(QUOTES, outputs())
    assert not stale, "python -m tests.prose_figures --fix rewrites them:\n" + "\n".join(
        f"{q.page}: {q.says.format(*q.written())!r} -> {q.says.format(*want)!r}"
        for q, want in stale
    )
