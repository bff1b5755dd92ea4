"""Every citation the product makes resolves inside the repository.

Code, the shipped examples (src/gpuscout/examples) and the README cite `docs/FILE.md §N.M`; each
named file must exist and hold a heading numbered N.M. Nothing may point outside the repository
(the folders the project was built from are not shipped), and the example price sheet's source
codes must be listed in docs/prices.md.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CITING = ("src", "README.md", "README.zh-CN.md", "benchmarks", "scripts", "validation", "Makefile")
CITATION = re.compile(r"docs/([A-Za-z0-9_.-]+\.md)(?: §(\d+(?:\.\d+)*))?")
HEADING = re.compile(r"^#{2,4} (\d+(?:\.\d+)*)[. ]", re.MULTILINE)
OUTSIDE = re.compile(r"\.\./shared|/work/shared|DESIGN\.md|reference/[a-z-]+\.md|\b(?:estimators|costs|benchmarks|"
                     r"prices-observed)\.md")


def citing_files(names: tuple[str, ...] = CITING) -> list[Path]:
    files: list[Path] = []
    for name in names:
        path = ROOT / name
        if path.is_file():
            files.append(path)
        elif path.is_dir():
            files += [p for p in path.rglob("*") if p.is_file() and p.suffix in (".py", ".md", ".toml", ".sh")
                      and "__pycache__" not in p.parts]
    return sorted(set(files))


def citations() -> list[tuple[Path, str, str | None]]:
    found = []
    for path in citing_files():
        for match in CITATION.finditer(path.read_text(encoding="utf-8")):
            found.append((path, match.group(1), match.group(2)))
    return found


def sections(doc: str) -> set[str]:
    return set(HEADING.findall((ROOT / "docs" / doc).read_text(encoding="utf-8")))


def test_the_product_cites_docs() -> None:
    assert len(citations()) > 50  # the scan finds the citations (a broken pattern would pass vacuously)


@pytest.mark.parametrize(("path", "doc", "section"), citations(),
                         ids=lambda v: v.name if isinstance(v, Path) else str(v))
def test_every_docs_citation_resolves_to_a_file_and_section(path: Path, doc: str, section: str | None) -> None:
    assert (ROOT / "docs" / doc).is_file(), f"{path.relative_to(ROOT)} cites docs/{doc}, which does not exist"
    if section is not None:
        assert section in sections(doc), f"{path.relative_to(ROOT)} cites docs/{doc} §{section}: no such heading"


def test_nothing_points_outside_the_repository() -> None:
    offenders = [f"{p.relative_to(ROOT)}:{n}" for p in citing_files((*CITING, "docs"))
                 for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if OUTSIDE.search(line)]
    assert offenders == []


def test_the_example_sheets_source_codes_are_documented() -> None:
    sheet = ROOT / "src" / "gpuscout" / "examples" / "prices.example.toml"
    codes = set(re.findall(r"\bP(\d+)\b", sheet.read_text(encoding="utf-8")))
    listed = set(re.findall(r"\*\*P(\d+)\*\*", (ROOT / "docs" / "prices.md").read_text(encoding="utf-8")))
    assert codes and codes <= listed


def test_the_gpu_catalogs_source_codes_are_listed_in_the_catalog() -> None:
    catalog = tomllib.loads((ROOT / "src" / "gpuscout" / "hardware" / "gpus.toml").read_text(encoding="utf-8"))
    used = {code for gpu in catalog["gpu"] for code in gpu["sources"]}
    assert used <= set(catalog["sources"])
