"""The trial as the results store keeps it: the plan, every candidate's fate, the bills, the decision.

The comparison, its verdict and the whole-job costs sit at the top level in the shape `compare
--format json` writes, so `gpuscout report` draws a stored trial as it draws a comparison; the
`trial` block holds what only a trial has (the predicted and real bills, start-up, tear-downs).
"""

from __future__ import annotations

from typing import Any

from gpuscout.trial.decision import TrialDecision
from gpuscout.trial.driver import TrialRun


def trial_payload(plan: dict[str, Any], run: TrialRun, decision: TrialDecision) -> dict[str, Any]:
    lines = [{"candidate": x.name, "offer_id": x.offer_id, "status": x.status, "reason": x.reason,
              "predicted_usd": x.predicted_usd, "real_usd": x.real_usd, "reported_usd": x.reported_usd,
              "startup_s": x.startup_s, "doctor": x.doctor, "torn_down": x.torn_down, "teardown": x.teardown,
              "teardown_command": x.teardown_command, "bench": str(x.bench) if x.bench else None,
              "doctor_file": str(x.doctor_file) if x.doctor_file else None} for x in decision.lines]
    payload: dict[str, Any] = {
        "kind": "trial", "name": f"trial {plan.get('job', '')}",
        "created_at": run.started_at.isoformat(),
        "job": {"name": decision.comparison.job_name if decision.comparison else plan.get("job", "")},
        "complete": run.stopped_by is None and not run.guard and not run.error,
        "trial": {"plan": plan, "candidates": lines, "outcome": decision.outcome, "rent": decision.rent,
                  "text": decision.text, "notes": list(decision.notes), "deviations": list(decision.deviations),
                  "compared": list(decision.compared), "script_sha256": run.script_sha256,
                  "started_at": run.started_at.isoformat(),
                  "ended_at": run.ended_at.isoformat() if run.ended_at else None,
                  "stopped_by": run.stopped_by, "guard": run.guard, "error": run.error},
    }
    if decision.comparison is not None and decision.verdict is not None:
        payload |= {"comparison": decision.comparison.model_dump(mode="json"),
                    "verdict": decision.verdict.model_dump(mode="json"),
                    "costs": [c.model_dump(mode="json") for c in decision.costs],
                    "warnings": list(decision.notes)}
    return payload
