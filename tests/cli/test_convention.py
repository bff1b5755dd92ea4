"""One convention across commands (docs/design.md §4.8), checked on the real app and by real runs.

`--json` on every command, `-` for standard input and `-o -` for standard output, `--version`, and
the exit-code table: a load in which every request failed and a pick that excluded every offer do not
exit 0 (a real fake server on 127.0.0.1 that refuses every request; a price sheet where every offer is
excluded).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer.main

from gpuscout.api.exit_codes import EXIT_CODES, MEASURED_NOTHING, NO_ANSWER
from gpuscout.cli.app import app

sys.path.insert(0, str(Path(__file__).parent.parent / "loadgen"))

from fake_openai import FakeConfig, serve_in_thread

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "src" / "gpuscout" / "examples"


def gpuscout(*args: str, stdin: str | None = None, env: dict[str, str] | None = None, cwd: Path = ROOT,
             ) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "COLUMNS": "100", **(env or {})}
    return subprocess.run([sys.executable, "-m", "gpuscout", *args], capture_output=True, text=True, timeout=300,
                          input=stdin if stdin is not None else "", env=environ, cwd=cwd)


def leaf_commands() -> list[tuple[str, Any]]:
    """Every command a user can run, by its full name (`results list`). Typer carries its own copy of
    click's classes, so a group is known by its subcommands, an option by its kind."""
    root = typer.main.get_command(app)
    found: list[tuple[str, Any]] = []

    def walk(prefix: str, command: Any) -> None:
        if hasattr(command, "commands"):
            for name, sub in command.commands.items():
                walk(f"{prefix} {name}".strip(), sub)
        else:
            found.append((prefix, command))
    walk("", root)
    return found


def test_the_walk_finds_every_command() -> None:
    names = {name for name, _ in leaf_commands()}
    assert {"estimate", "pick", "compare", "load", "bench", "doctor", "trial", "report", "results list",
            "results export", "gpus", "examples"} <= names


@pytest.mark.parametrize("name,command", leaf_commands(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_command_takes_json_and_every_output_takes_stdout(name: str, command: Any) -> None:
    flags = {opt: p for p in command.params if p.param_type_name == "option" for opt in p.opts}
    assert "--json" in flags, f"{name} has no --json"
    output = flags.get("--output")
    if output is not None and name != "trial":  # trial's -o is the folder of every box's files, not one file
        assert re.search(r"- for stdout", output.help or ""), f"{name} -o does not say that - writes to stdout"


def test_version() -> None:
    done = gpuscout("--version")
    assert done.returncode == 0 and re.fullmatch(r"gpuscout \d+\.\d+\.\d+\S*\n", done.stdout), done


def test_the_design_doc_table_is_the_exit_code_table() -> None:
    text = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| (\d+|128\+N) \| (.+?) \|$", text, re.MULTILINE))
    assert rows == dict(EXIT_CODES)
    for readme in ("README.md", "README.zh-CN.md"):  # the READMEs list every code
        codes = re.findall(r"^\| (\d+|128\+N) \|", (ROOT / readme).read_text(encoding="utf-8"), re.MULTILINE)
        assert codes == [code for code, _ in EXIT_CODES], readme


def refusing_every_request() -> FakeConfig:
    return FakeConfig(api_key="the-right-key")  # the client sends another key: HTTP 401 on every request


def test_a_load_in_which_every_request_failed_exits_measured_nothing() -> None:
    with serve_in_thread(refusing_every_request()) as srv:
        done = gpuscout("load", srv.url, "--model", "M", "--concurrency", "2", "--requests", "6", "--runs", "1",
                        "--output-tokens", "4", "--no-store", "-o", "-", env={"OPENAI_API_KEY": "a-wrong-key"})
        seen = len(srv.seen)
    assert seen == 6  # the requests were sent: the server refused them, the client did not skip them
    assert done.returncode == MEASURED_NOTHING == 5, done.stderr
    assert "every request failed" in done.stderr
    result = json.loads(done.stdout)  # -o -: stdout holds the result file, the screen went to stderr
    assert result["kind"] == "load" and result["cases"][0]["name"] == "concurrency 2"
    assert "ok/sent" in done.stderr and not (ROOT / "-").exists()


def test_the_same_load_with_the_right_key_exits_0() -> None:
    """The control: the same server and command, with the key it accepts."""
    with serve_in_thread(refusing_every_request()) as srv:
        done = gpuscout("load", srv.url, "--model", "M", "--concurrency", "2", "--requests", "6", "--runs", "1",
                        "--output-tokens", "4", "--no-store", "--json", env={"OPENAI_API_KEY": "the-right-key"})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["cases"][0]["name"] == "concurrency 2"


def test_a_pick_that_excluded_every_offer_exits_no_answer(tmp_path: Path) -> None:
    sheet = tmp_path / "tiny-hosts.toml"  # every offer's host holds 0.5 GB of RAM: no job's host fits
    text = re.sub(r"^ram_gb = .*\n", "", (EXAMPLES / "prices.example.toml").read_text(), flags=re.MULTILINE)
    text, count = re.subn(r"^(gpu_count = .*\n)", r"\1ram_gb = 0.5\n", text, flags=re.MULTILINE)
    assert count > 5
    sheet.write_text(text)
    done = gpuscout("pick", "llama3-8b-qlora", "--offers", str(sheet), "--no-store", "--json")
    assert done.returncode == NO_ANSWER == 4, done.stderr
    rows = json.loads(done.stdout)["pick"]["rows"]
    assert rows and all(r["excluded"] for r in rows)
    control = gpuscout("pick", "llama3-8b-qlora", "--no-store", "--json")  # the bundled sheet ranks offers
    assert control.returncode == 0, control.stderr
    assert any(not r["excluded"] for r in json.loads(control.stdout)["pick"]["rows"])


def test_a_job_spec_from_stdin_is_the_same_job() -> None:
    spec = (EXAMPLES / "tiny-finetune.toml").read_text()  # its model is a folder beside it: ./tiny-llama
    piped = gpuscout("estimate", "-", "--json", stdin=spec, cwd=EXAMPLES)  # resolved from the current folder
    named = gpuscout("estimate", str(EXAMPLES / "tiny-finetune.toml"), "--json")
    assert piped.returncode == 0 and named.returncode == 0, piped.stderr + named.stderr
    assert json.loads(piped.stdout)["screening"] == json.loads(named.stdout)["screening"]


def test_stdin_is_read_once_and_never_from_a_terminal_prompt() -> None:
    done = gpuscout("compare", "-", "-")
    assert done.returncode == 1 and "`-` was given twice" in done.stderr and "Traceback" not in done.stderr


def test_compare_reads_stdin_and_takes_json(tmp_path: Path) -> None:
    from results import bench_result, write

    a = write(bench_result("A"), tmp_path)
    b = write(bench_result("B"), tmp_path)
    by_flag = gpuscout("compare", "-", str(b), "--json", stdin=a.read_text())
    by_format = gpuscout("compare", str(a), str(b), "--format", "json")
    assert by_flag.returncode == by_format.returncode, by_flag.stderr + by_format.stderr
    assert json.loads(by_flag.stdout)["verdict"] == json.loads(by_format.stdout)["verdict"]
    clash = gpuscout("compare", str(a), str(b), "--json", "--format", "md")
    assert clash.returncode == 1 and "two formats" in clash.stderr


def test_json_and_stdout_output_are_refused_together() -> None:
    done = gpuscout("load", "http://127.0.0.1:9", "--model", "M", "-o", "-", "--json")
    assert done.returncode == 1 and "both write to standard output" in done.stderr and done.stdout == ""


OTHER_PROGRAMS_FLAGS = {"--no-index", "--find-links"}  # trial --pip-args passes pip's own flags through


def test_every_flag_an_option_help_names_exists() -> None:
    """An option's help that names a flag names one its command has (`cost --help` once sent users to a
    --budget only pick takes), or another command's, written after that command's name (`pick --load`)."""
    commands = leaf_commands()
    names = {part for name, _ in commands for part in name.split()}
    wrong = []
    for name, command in commands:
        flags = {opt for p in command.params for opt in getattr(p, "opts", [])}
        for param in command.params:
            for m in re.finditer(r"(?:(\w+) )?(--[a-z][a-z0-9-]*)", getattr(param, "help", None) or ""):
                if m[2] not in flags and m[1] not in names and m[2] not in OTHER_PROGRAMS_FLAGS:
                    wrong.append(f"{name} {param.opts[0] if param.opts else param.name}: {m[0]}")
    assert wrong == []


def test_a_stored_run_goes_through_pipes_export_to_report(tmp_path: Path) -> None:
    """`results export ID -o -` writes the result file to stdout; `report - -o -` reads it from stdin and
    writes the page to stdout: neither leaves a file named '-'."""
    store = str(tmp_path / "runs.sqlite")
    with serve_in_thread(refusing_every_request()) as srv:
        done = gpuscout("load", srv.url, "--model", "M", "--concurrency", "2", "--requests", "6", "--runs", "1",
                        "--output-tokens", "4", "--store", store, env={"OPENAI_API_KEY": "the-right-key"})
    assert done.returncode == 0, done.stderr
    exported = gpuscout("results", "export", "1", "-o", "-", "--store", store, cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr
    assert json.loads(exported.stdout)["kind"] == "load"
    page = gpuscout("report", "-", "-o", "-", stdin=exported.stdout, cwd=tmp_path)
    assert page.returncode == 0, page.stderr
    assert page.stdout.startswith("<!DOCTYPE html>") and "concurrency 2" in page.stdout
    assert not (tmp_path / "-").exists()
