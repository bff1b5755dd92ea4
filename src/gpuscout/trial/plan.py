"""A trial as planned (the candidates and the predicted bill, before anything is launched) and as it ended."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from gpuscout.hardware.currency import ExchangeRate
from gpuscout.hardware.price_sheet import PriceSheet
from gpuscout.trial.decision import TrialDecision
from gpuscout.trial.driver import Candidate, TrialRun
from gpuscout.trial.script import ScriptSettings


@dataclass(frozen=True)
class TrialPlan:
    job: str  # the spec's path
    sheet_path: Path
    sheet: PriceSheet
    rates: tuple[ExchangeRate, ...]
    engine: str
    candidates: tuple[Candidate, ...]
    settings: ScriptSettings
    budget_s: float
    max_usd: float | None
    out_dir: Path
    deviations: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def predicted_usd(self) -> float | None:
        bills = [c.predicted_usd for c in self.candidates]
        return None if any(b is None for b in bills) else sum(b for b in bills if b is not None)


@dataclass(frozen=True)
class TrialReport:
    plan: TrialPlan
    run: TrialRun
    decision: TrialDecision
    stored_as: int | None = None
    store_warning: str = ""
    events: tuple[str, ...] = field(default=())

    @property
    def exit_code(self) -> int:
        """0 an offer is named to rent, 4 no verdict (nothing compared, unfair, inconclusive), 2 a box could
        not be torn down or the trial itself failed, 128 + the signal when stopped."""
        if self.run.not_torn_down or self.run.error:
            return 2
        if self.run.stopped_by is not None:
            return 128 + self.run.stopped_by
        return 0 if self.decision.rent is not None else 4


