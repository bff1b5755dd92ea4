"""A finished trial as JSON (`trial --json`): the payload the results store records for it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpuscout.trial.plan import TrialReport


def trial_json(report: TrialReport) -> dict[str, Any]:
    """The plan's facts, every candidate's line, the outcome and the offer to rent, plus the exit code."""
    from gpuscout.api.trial import plan_facts
    from gpuscout.trial.record import trial_payload

    return {**trial_payload(plan_facts(report.plan), report.run, report.decision), "stored_as": report.stored_as,
            "exit_code": report.exit_code}
