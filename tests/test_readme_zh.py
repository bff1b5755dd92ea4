"""README.zh-CN.md stays in step with README.md: the same commands, the same sections, linked both ways.

A command is a line of a fenced block with its `#` comment removed (the comments are translated);
every command in one README must be in the other, so a command added to one and not the other fails.
The Layout block (`src/gpuscout/ …`) lists folders with translated descriptions: it holds no command.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^```[a-z]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
COMMENT = re.compile(r"\s+#\s.*$")


def commands(path: Path) -> list[str]:
    lines = []
    for block in FENCE.findall(path.read_text(encoding="utf-8")):
        if block.startswith("src/"):
            continue
        for line in block.splitlines():
            line = " ".join(COMMENT.sub("", line).split())
            if line:
                lines.append(line)
    return lines


def sections(path: Path) -> list[str]:
    return [line for line in path.read_text(encoding="utf-8").splitlines() if line.startswith("## ")]


def test_both_readmes_show_the_same_commands() -> None:
    english, chinese = commands(ROOT / "README.md"), commands(ROOT / "README.zh-CN.md")
    assert len(english) > 20  # the scan finds the commands (a broken pattern would pass vacuously)
    assert sorted(set(english) - set(chinese)) == []
    assert sorted(set(chinese) - set(english)) == []


def test_both_start_with_the_same_two_commands() -> None:
    for name in ("README.md", "README.zh-CN.md"):
        first = FENCE.search((ROOT / name).read_text(encoding="utf-8"))
        assert first is not None and first.group(1).split() == ["make", "demo", "make", "test"], name


def test_both_have_the_same_sections_and_link_to_each_other() -> None:
    assert len(sections(ROOT / "README.md")) == len(sections(ROOT / "README.zh-CN.md"))
    head = "\n".join((ROOT / "README.md").read_text(encoding="utf-8").splitlines()[:5])
    assert "(README.zh-CN.md)" in head
    assert "(README.md)" in "\n".join((ROOT / "README.zh-CN.md").read_text(encoding="utf-8").splitlines()[:5])


def test_the_comment_rule_only_strips_comments() -> None:
    assert commands_of("gpuscout pick --fx CNY=0.14   # yuan in, yuan out") == ["gpuscout pick --fx CNY=0.14"]


def commands_of(text: str) -> list[str]:
    return [" ".join(COMMENT.sub("", line).split()) for line in text.splitlines()]
