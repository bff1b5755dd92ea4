"""Footnotes: one number per distinct text, printed once under the table that added it, never read as markup."""

from __future__ import annotations

from gpuscout.report.footnotes import Footnotes

from .screens import render


def test_the_same_text_keeps_its_number_and_each_flush_prints_only_new_notes() -> None:
    notes = Footnotes()
    assert [notes.ref("a"), notes.ref("b"), notes.ref("a")] == ["[1]", "[2]", "[1]"]
    assert render(notes.flush(), 40).splitlines() == ["[1] a", "[2] b"]
    assert notes.ref("c") == "[3]" and notes.ref("b") == "[2]"
    assert render(notes.flush(), 40).splitlines() == ["[3] c"]


def test_long_notes_wrap_under_their_text_and_brackets_are_not_markup() -> None:
    notes = Footnotes()
    notes.ref("KV cache: layers [80×full] × values × 2 B, [bold]not bold[/bold] and more words to wrap")
    lines = [line.rstrip() for line in render(notes.flush(), 40).splitlines()]
    assert lines[0].startswith("[1] KV cache: layers [80×full]")
    assert all(line.startswith("    ") for line in lines[1:]) and "[bold]not bold[/bold]" in " ".join(lines)
