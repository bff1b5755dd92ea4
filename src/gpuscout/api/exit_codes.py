"""The exit codes every command shares, and the outcomes that map to them.

A script reads the exit code before it reads any output, so an outcome it must act on is never 0:
a run that measured nothing, or a decision that found no admissible option. The table is written
in docs/design.md §4 (and the READMEs); `EXIT_CODES` is its one source, and tests hold each row to a
real run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpuscout.cost.pick import PickResult
    from gpuscout.results.schema import BenchResult, Case
    from gpuscout.results.verdict import Verdict

OK = 0
USER_ERROR = 1  # bad input: the message says what, why and how to fix it (also click's usage errors are 2)
USAGE_ERROR = 2  # the parser refused the command line (unknown option, bad value); trial: a box not torn down
RETURN_MACHINE = 3  # doctor: the box is not what was paid for
NO_ANSWER = 4  # a decision with no admissible option: nothing ranked, no winner named, doctor inconclusive
MEASURED_NOTHING = 5  # a measuring run in which nothing succeeded: no number to act on
SIGNAL_BASE = 128  # stopped by signal N: 128 + N (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP, 141 a closed pipe)

# (code, meaning) in the order docs/design.md prints them.
EXIT_CODES: tuple[tuple[str, str], ...] = (
    (str(OK), "an answer: the command did what was asked (doctor: keep the box; compare: a winner, or no "
              "meaningful difference)"),
    (str(USER_ERROR), "a user error: bad input, printed as what, why and how to fix it"),
    (str(USAGE_ERROR), "the command line did not parse (unknown option, invalid value); trial: a box could not "
                       "be torn down, or the trial failed"),
    (str(RETURN_MACHINE), "doctor: return the box, it is not what was paid for"),
    (str(NO_ANSWER), "no admissible option: pick excluded every offer; compare or trial named no winner "
                     "(unfair, disturbed or noisy results); doctor inconclusive"),
    (str(MEASURED_NOTHING), "measured nothing: every request of a load failed, or every case of a bench failed"),
    ("128+N", "stopped by signal N (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP; 141 the reader closed the pipe); "
              "what finished is kept"),
)


def pick_exit_code(result: PickResult) -> int:
    """0 when at least one offer is ranked; NO_ANSWER when every offer was excluded (or none was given)."""
    return OK if any(row.excluded is None for row in result.rows) else NO_ANSWER


def compare_exit_code(verdict: Verdict) -> int:
    """0 for a winner or a real tie (either side is fine); NO_ANSWER when the evidence carries no verdict."""
    return OK if verdict.outcome in ("winner", "no difference") else NO_ANSWER


def measured_exit_code(result: BenchResult) -> int:
    """MEASURED_NOTHING when no case of a bench or load result measured anything, else 0."""
    return OK if any(_measured(result.kind, c) for c in result.cases) else MEASURED_NOTHING


def _measured(kind: str, case: Case) -> bool:
    """A load level measured something when one request succeeded (its end-to-end latency has a sample,
    for chat, completions and images alike); a bench case, when no failure replaced its numbers."""
    from gpuscout.results.schema import E2E_S

    if kind == "load":
        return any(m.name == E2E_S and (bool(m.samples) or (m.summary is not None and m.summary.n > 0))
                   for m in case.metrics)
    return case.failure is None
