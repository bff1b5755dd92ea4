"""Docs that run: every `gpuscout …` command line in the READMEs, docs/ and the example scripts' docstrings
parses against the real command line (its options exist, its values are valid), without running it.

Each line goes through click's own parser (`typer.main.get_command(app)` → `make_context(…,
resilient_parsing=False)`): an option the CLI does not have, a value of the wrong type or out of range,
a choice it does not offer, or a missing required argument fails here with the document and line.
A synopsis's optional parts (`[--budget 50]`) are parsed as if given (the first of `[A | B]`);
placeholders in capitals (`ID`, `URL`, `S`) stand for any value, so they are passed as `1`, which every
option type accepts. A command named alone in prose (`gpuscout load`) must exist; its arguments are
not asked for. Planned commands (docs/design.md §3.6, "Rooms for the next wings") are not built yet.
"""

from __future__ import annotations

import ast
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import typer.main

from gpuscout.cli.app import app

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", ROOT / "README.zh-CN.md", *sorted((ROOT / "docs").glob("*.md"))]
SCRIPTS = sorted((ROOT / "src" / "gpuscout" / "examples").glob("*.py"))
FENCE = re.compile(r"^```[a-z]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
INLINE = re.compile(r"(?<!`)`(gpuscout [^`\n]+)`(?!`)")
SHELL_SPLIT = re.compile(r"\s*;\s+|\s(?:&&|\|\||\|)\s")
PLACEHOLDER = re.compile(r"[A-Z][A-Z0-9_]*")
PLANNED = re.compile(r"^### 3\.6 Rooms for the next wings$.*?(?=^##)", re.MULTILINE | re.DOTALL)
COMMENT = re.compile(r"\s+#(?:\s.*)?$")


def command_lines(text: str, inline: bool = True) -> list[str]:
    """Every `gpuscout …` command in a Markdown text: the lines of fenced blocks, and inline code."""
    found = []
    text = PLANNED.sub("", text)
    for block in FENCE.findall(text):
        joined = re.sub(r"\\\n\s*", " ", block)  # a command continued with a backslash is one line
        joined = re.sub(r"^(gpuscout .*)\n\s+(?=[\[-])", r"\1 ", joined, flags=re.MULTILINE)  # or indented
        for line in joined.splitlines():
            found += commands_in(line)
    if inline:
        for span in INLINE.findall(FENCE.sub("", text)):
            found += commands_in(span)
    return found


def commands_in(line: str) -> list[str]:
    """The gpuscout commands of one shell line: comments, prompts and pipes around them removed."""
    line = COMMENT.sub("", line.strip()).removeprefix("$ ")
    line = re.sub(r"\[([^\[\]|]*?)\s+\|\s+[^\[\]]*\]", r"[\1]", line)  # [A | B] → [A]
    out = []
    for part in SHELL_SPLIT.split(line):
        part = part.strip().removeprefix("$(").strip()
        if (part.startswith("gpuscout ") or part == "gpuscout") and " — " not in part:  # not a screen's title
            out.append(part)
    return out


def script_commands(path: Path) -> list[str]:
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    return [c for line in doc.splitlines() for c in commands_in(line)]


def cases() -> list[tuple[str, str]]:
    found = []
    for path in DOCS:
        found += [(path.relative_to(ROOT).as_posix(), c) for c in command_lines(path.read_text(encoding="utf-8"))]
    for path in SCRIPTS:
        found += [(path.relative_to(ROOT).as_posix(), c) for c in script_commands(path)]
    return found


def words(command: str) -> list[str]:
    """The argument words of a command line: its synopsis brackets opened, its redirections dropped."""
    text = command.removeprefix("gpuscout").replace("…", " ").replace("...", " ")
    text = re.sub(r"\[([^\[\]]*)\]", r" \1 ", text)  # [--deadline 12h] → --deadline 12h
    text = re.sub(r"\s(?:\d?>>?|<)\s*\S+", " ", text)  # > out.json, 2> err.log, < in.json
    text = text.replace(")", " ")
    return ["1" if PLACEHOLDER.fullmatch(w) else w for w in shlex.split(text)]


def parse(argv: list[str]) -> None:
    """Parse argv as `gpuscout` would, down to the leaf command, without running anything. A line that
    only names a command (`gpuscout results`, `gpuscout load`) checks that the command exists."""
    command: Any = typer.main.get_command(app)
    names_only = all(not w.startswith("-") for w in argv) and len(argv) <= 2 and not any(
        "." in w or "/" in w or w.isdigit() for w in argv)
    ctx = command.make_context("gpuscout", list(argv), resilient_parsing=names_only)
    while hasattr(command, "commands"):
        rest = [*getattr(ctx, "_protected_args", getattr(ctx, "protected_args", [])), *ctx.args]
        if not rest:
            return  # `gpuscout results` alone prints its help
        name, command, args = command.resolve_command(ctx, rest)
        if command is None:
            raise LookupError(f"No such command {rest[0]!r}")
        ctx = command.make_context(name, args, parent=ctx, resilient_parsing=names_only)


CASES = cases()


def test_the_scan_finds_the_commands() -> None:
    """A broken pattern would find nothing and pass vacuously."""
    docs = {doc for doc, _ in CASES}
    assert len(CASES) > 80 and {"README.md", "README.zh-CN.md", "docs/design.md"} <= docs
    assert any(doc.endswith("diffusers_images_server.py") for doc in docs)
    assert commands_in("cat j.toml | gpuscout pick - --json > p.json  # rank") == ["gpuscout pick - --json > p.json"]
    assert words("gpuscout pick JOB.toml [--deadline 12h] > p.json") == ["pick", "JOB.toml", "--deadline", "12h"]
    assert words("gpuscout results show ID") == ["results", "show", "1"]
    assert commands_in("gpuscout doctor [--offers F --offer ID | --gpu NAME] [--quick]") == [
        "gpuscout doctor [--offers F --offer ID] [--quick]"]


@pytest.mark.parametrize("doc,command", CASES, ids=[f"{d}:{c[:60]}" for d, c in CASES])
def test_every_documented_command_parses(doc: str, command: str) -> None:
    argv = words(command)
    if "--version" in argv or "--help" in argv:
        return  # eager options that print and exit: nothing else on the line to check
    try:
        parse(argv)
    except Exception as exc:  # click's UsageError, BadParameter, NoSuchOption …, from typer's copy of click
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        pytest.fail(f"{doc}: `{command}` does not parse: {type(exc).__name__}: {message}")


@pytest.mark.parametrize("argv,error", [
    (["probe", "http://h", "--download", "http://x"], "No such option"),
    (["load", "http://h", "-m", "M", "--concurrency", "1,2,4"], "valid integer"),
    (["cost", "--hours", "six"], "valid number"),
    (["results", "nosuch"], "No such command"),
    (["estimate", "job.toml", "--margin"], "requires an argument"),
    (["nosuchcommand"], "No such command"),
])
def test_the_check_fails_on_what_the_docs_got_wrong(argv: list[str], error: str) -> None:
    """The checker itself: the mistakes the docs once held are caught (a checker that passes everything
    would pass this suite)."""
    with pytest.raises(Exception) as caught:
        parse(argv)
    assert error in getattr(caught.value, "format_message", lambda: str(caught.value))()
