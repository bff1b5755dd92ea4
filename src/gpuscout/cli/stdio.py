"""`-` as a file name: standard input for what a command reads, standard output for what `-o` writes.

The api reads and writes files (atomically, with the checks of `outfile`), so the shell bridges:
standard input is copied once into a private temporary file named `stdin.<ext>` (so labels read
"stdin"; a job spec is parsed at once, so its relative paths resolve from the current folder), and an
output of `-` is written to a private temporary file whose bytes are copied to
standard output when the command is done. The screen then goes to stderr, so standard output holds
exactly the file a script asked for.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, TypeVar

from gpuscout.errors import SpecError

STDIO = "-"
T = TypeVar("T", str, Path, str | None, Path | None)


def is_stdio(value: str | Path | None) -> bool:
    return value is not None and str(value) == STDIO


class Stdio:
    """The temporary files standing in for `-` during one command; closed (and removed) with it."""

    def __init__(self, stack: ExitStack) -> None:
        self._stack = stack
        self._folder: Path | None = None
        self._stdin_read = False
        self.stdout_file: Path | None = None

    def _dir(self) -> Path:
        if self._folder is None:
            self._folder = Path(self._stack.enter_context(tempfile.TemporaryDirectory(prefix="gpuscout-stdio-")))
        return self._folder

    def read(self, value: T, suffix: str, what: str) -> T:
        """`value`, or when it is `-`, a file holding standard input (read once per command)."""
        if not is_stdio(value):
            return value
        if self._stdin_read:
            raise SpecError(f"`-` was given twice for {what}.", "Standard input can be read only once.",
                            "Pass `-` for one input and files for the others.")
        if sys.stdin.isatty():
            raise SpecError(f"`-` reads {what} from standard input, but it is a terminal.",
                            "Nothing was piped in.", "Pipe it in (`cat FILE | gpuscout … -`) or pass the file.")
        self._stdin_read = True
        path = self._dir() / f"stdin{suffix}"
        path.write_bytes(sys.stdin.buffer.read())
        return path if isinstance(value, Path) else str(path)  # type: ignore[return-value]

    def read_job(self, value: str | None) -> Any:
        """The job spec argument, or when it is `-`, the job read from standard input. Its relative paths
        (a model folder) resolve from the current folder, as a spec that lies nowhere has no folder of its own."""
        if not is_stdio(value):
            return value
        from gpuscout import api

        return api.load_job(self.read(value, ".toml", "the job spec"))

    def read_all(self, values: Sequence[T], suffix: str, what: str) -> list[T]:
        return [self.read(v, suffix, what) for v in values]

    def output(self, value: Path | None, name: str) -> Path | None:
        """`value`, or when it is `-`, a file whose bytes go to standard output at the end of the command."""
        if not is_stdio(value):
            return value
        self.stdout_file = self._dir() / name
        return self.stdout_file

    @property
    def to_stdout(self) -> bool:
        return self.stdout_file is not None

    def flush(self) -> None:
        """Copy the output file to standard output (nothing when the command wrote none)."""
        if self.stdout_file is not None and self.stdout_file.is_file():
            sys.stdout.flush()
            with self.stdout_file.open("rb") as written:
                shutil.copyfileobj(written, sys.stdout.buffer)
            sys.stdout.buffer.flush()


@contextmanager
def stdio() -> Iterator[Stdio]:
    """The bridge for one command; the output written to `-` is copied to stdout when the block ends
    (also when it ends early with an exit code, as an interrupted run that kept what finished does)."""
    import typer

    with ExitStack() as stack:
        bridge = Stdio(stack)
        try:
            yield bridge
        except typer.Exit:
            bridge.flush()
            raise
        bridge.flush()


def no_json_with_stdout(bridge: Stdio, as_json: bool) -> None:
    """`--json` and `-o -` both claim standard output."""
    if as_json and bridge.to_stdout:
        raise SpecError("--json and -o - both write to standard output.",
                        "Standard output can hold one document.",
                        "Drop --json (-o - writes the full result JSON), or write the result to a file.")


def emit_beside(bridge: Stdio, payload: Callable[[], Any], renderable: Callable[[], Any], as_json: bool) -> None:
    """`emit`, except that the screen goes to stderr when standard output carries the `-o -` file."""
    if bridge.to_stdout:
        from gpuscout.report.escape import screen_console

        screen_console(stderr=True).print(renderable())
        return
    from gpuscout.cli.output import emit

    emit(payload, renderable, as_json)
