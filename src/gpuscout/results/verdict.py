"""The verdict of a comparison: who wins on the user's objective, and only when the evidence carries it.

The objective is total job cost, with time as the tie-breaker. Before any winner is named, in
this order (docs/measurement.md §1.4):

1. unfair — fixed variables differ and --allow-diff was not given;
2. disturbed — telemetry saw a side throttle, run on a degraded link, share its GPU or lose CPU
   to other tenants (docs/measurement.md §1.13), and --allow-diff was not given;
3. inconclusive — noisy: the headline metric's runs disagree or its repeats spread too much;
4. then a winner only when its lead is real on the headline metric (the two-level 95% interval
   excludes 1, the effect passes the minimum effect, and the noise floor when a side ran once)
   or its cost range lies below every other's.

`Verdict.reasons` lists, one line each, why no winner was named (or the caveats of a winner).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, Protocol

from gpuscout.frozen import Frozen
from gpuscout.results.compare import Comparison, Headline, short_name
from gpuscout.results.ratios import DECISIVE, Ratio

Outcome = Literal["winner", "no difference", "unfair", "disturbed", "inconclusive"]


class PricedSide(Protocol):
    """One machine's bill, priced by the cost layer (`cost.verdict.CostPoint`): results know nothing of
    prices, so the decision on total cost is the bill's own, given the comparison and every side's bill."""

    def cost_verdict(self, comparison: Comparison, costs: Sequence[Any]) -> tuple[str | None, str]: ...


class Verdict(Frozen):
    winner: str | None  # a machine label, or None
    objective: Literal["total cost", "time"]
    outcome: Outcome = "winner"
    text: str
    reasons: tuple[str, ...] = ()


def decide(comparison: Comparison, costs: Sequence[PricedSide] | None = None) -> Verdict:
    """One paragraph: the winner on total cost (time breaks ties), or on time when there are no prices."""
    objective: Literal["total cost", "time"] = "total cost" if costs else "time"
    if comparison.kind == "doctor":
        return doctor_verdict(comparison, objective)
    gate = _gate(comparison, objective)
    if gate is not None:
        return gate
    caution = _caution(comparison)
    winner, text = costs[0].cost_verdict(comparison, costs) if costs else _time_verdict(comparison)
    reasons = _tie_reasons(comparison) if winner is None else ()
    return Verdict(winner=winner, objective=objective, outcome="winner" if winner else "no difference",
                   text=caution + text, reasons=reasons)


def _gate(comparison: Comparison, objective: Literal["total cost", "time"]) -> Verdict | None:
    """A verdict with no winner when the evidence cannot carry one, else None."""
    fairness, allowed = comparison.fairness, comparison.allow_diff
    if not fairness.fair and not allowed:
        fields = ", ".join(d.field for d in fairness.differences)
        return Verdict(winner=None, objective=objective, outcome="unfair",
                       text=f"No winner: the results differ in fixed variables ({fields}).",
                       reasons=tuple(f"{d.field}: {' vs '.join(d.values)}" for d in fairness.differences))
    disturbed = [f"{m.label}: {line}" for m in comparison.machines for line in m.disturbances]
    if disturbed and not allowed:
        sides = sorted({line.split(":", 1)[0] for line in disturbed})
        return Verdict(winner=None, objective=objective, outcome="disturbed", reasons=tuple(disturbed),
                       text=(f"No winner: the telemetry shows {' and '.join(sides)} disturbed while measuring "
                             f"({disturbed[0].split(': ', 1)[1]}{'; …' if len(disturbed) > 1 else ''}), so the timings "
                             "are not comparable. Re-run on a machine that stays at full speed, or pass --allow-diff "
                             "to compare anyway."))
    noisy = _noisy_headline(comparison)
    if noisy:
        return Verdict(winner=None, objective=objective, outcome="inconclusive", reasons=tuple(noisy),
                       text=("Inconclusive — noisy: " + "; ".join(noisy) + ". Run more times (--runs 5 or more), on "
                             "a quieter machine, and check the telemetry in each result before deciding."))
    return None


def doctor_verdict(comparison: Comparison, objective: Literal["total cost", "time"]) -> Verdict:
    """Doctor results compared: each machine's own verdict decides keep or return; the per-check ratios
    show how the machines differ. The one machine to keep among others that are not is the winner."""
    fairness = comparison.fairness
    if not fairness.fair and not comparison.allow_diff:
        fields = ", ".join(d.field for d in fairness.differences)
        return Verdict(winner=None, objective=objective, outcome="unfair",
                       text=f"No winner: the doctor runs differ in {fields} (pass --allow-diff to compare anyway).",
                       reasons=tuple(f"{d.field}: {' vs '.join(d.values)}" for d in fairness.differences))
    machines = comparison.machines
    sides = [f"{short_name(m)}: {m.doctor or 'no verdict'}" + (f" ({m.doctor_lines[0]})" if m.doctor_lines else "")
             for m in machines]
    keep = [m for m in machines if m.doctor == "keep"]
    reasons = tuple(f"{m.label}: {line}" for m in machines for line in m.doctor_lines)
    if len(keep) == 1 and len(machines) > 1:
        others = [side for m, side in zip(machines, sides, strict=True) if m is not keep[0]]
        return Verdict(winner=keep[0].label, objective=objective, outcome="winner", reasons=reasons,
                       text=f"Keep {short_name(keep[0])}: its doctor run found nothing wrong; " + "; ".join(others)
                            + ".")
    if len(keep) == len(machines):
        return Verdict(winner=None, objective=objective, outcome="no difference", reasons=reasons,
                       text="Every machine is one to keep: doctor found nothing wrong on any (" + "; ".join(sides)
                            + "). The per-check ratios show how they differ; bench the job to choose.")
    return Verdict(winner=None, objective=objective, outcome="inconclusive", reasons=reasons,
                   text=("No single machine to keep: " if keep else "None of these is one to keep: ")
                        + "; ".join(sides) + ".")


def _caution(comparison: Comparison) -> str:
    notes = [f"{m.label}'s doctor result says {m.doctor} ({m.doctor_lines[0] if m.doctor_lines else 'see it'})"
             for m in comparison.machines if m.doctor in ("return", "inconclusive")]
    if not comparison.fairness.fair:
        fields = ", ".join(d.field for d in comparison.fairness.differences)
        notes.append(f"compared with --allow-diff although {fields} differ; this is not a like-for-like comparison")
    if any(m.disturbances for m in comparison.machines):
        notes.append("compared with --allow-diff although the telemetry saw a side disturbed")
    # The disturbance gate could not run on a side without telemetry: never counted as a clean side.
    # (A load test's machine is the remote server, which the client's telemetry never sees.)
    unwatched = [m.label for m in comparison.machines if not m.telemetry_runs] if comparison.kind != "load" else []
    if unwatched:
        notes.append(f"{' and '.join(unwatched)} recorded no telemetry, so throttling, a degraded link or another "
                     f"tenant during {'its' if len(unwatched) == 1 else 'their'} runs was not checked")
    return "".join(f"Caution: {n}. " for n in notes)


def _noisy_headline(comparison: Comparison) -> list[str]:
    """Each side whose headline figure is too noisy, by its label ("job_s: B's runs disagree: …")."""
    hl = comparison.headline
    if hl is None:
        return []
    return [f"{hl.metric}: {line}" for line in hl.noise if line]


def _tie_reasons(comparison: Comparison) -> tuple[str, ...]:
    hl = comparison.headline
    if hl is None:
        return ("no whole-job throughput is common to all results",)
    found = [r for row in hl.advantage for r in row if r.finding not in DECISIVE and r.finding != "baseline"]
    return tuple(dict.fromkeys(f"{hl.metric}: {r.finding} ({r.reason})" for r in found))


def than(comparison: Comparison, j: int) -> str:
    """" than A", or nothing when there are only two machines."""
    return "" if len(comparison.machines) == 2 else f" than {comparison.machines[j].label}"


def _time_verdict(comparison: Comparison) -> tuple[str | None, str]:
    hl, machines = comparison.headline, comparison.machines
    if hl is None:
        return None, ("No whole-job throughput is common to all results, so no winner on time; "
                      "see the per-metric ratios.")
    best = max(range(len(machines)), key=lambda j: hl.advantage[0][j].advantage or 0.0)
    others = [j for j in range(len(machines)) if j != best]
    tied = [j for j in others if hl.advantage[j][best].finding != "better"]
    speed = " and ".join(speed_phrase(hl, best, j, than(comparison, j)) for j in others)
    basis = f", from the measured {hl.metric}{' (extrapolated to full depth)' if hl.extrapolated else ''} " \
            f"of case {hl.case}{_runs_note(hl)}"
    if tied:
        names = " and ".join(short_name(machines[j]) for j in (best, *tied))
        word = tie_word([hl.advantage[j][best] for j in tied])
        return None, (f"No {word} difference in speed between {names}: {machines[best].label} {speed}{basis}. "
                      "Add prices (--offers) to decide on total cost.")
    return machines[best].label, f"{short_name(machines[best])} {speed}{basis}."


def _runs_note(hl: Headline) -> str:
    runs = sorted({n for row in hl.advantage for r in row for n in r.runs})
    return f" ({'/'.join(str(n) for n in runs)} run{'s' if runs != [1] else ''} per side)"


def tie_word(ratios: Sequence[Ratio]) -> str:
    """"measurable" when every interval includes 1, else "meaningful" (below the minimum effect or the floor)."""
    return "measurable" if all(r.finding == "no measurable difference" for r in ratios) else "meaningful"


def speed_phrase(hl: Headline, i: int, j: int, than: str) -> str:
    """How machine i's job time compares with machine j's, from the throughput advantage of i over j."""
    r = hl.advantage[j][i]
    if r.advantage is None:
        return f"cannot be set against {than.removeprefix(' than ') or 'the other'}: {r.reason}"
    if r.ci95_low is None or r.ci95_high is None:
        return f"finishes the job {r.advantage:.2f}× as fast{than.replace('than', 'as')} (single readings, no CI)"
    ci = f"95% CI {r.ci95_low:.2f}–{r.ci95_high:.2f}×"
    if r.finding == "better":
        return f"finishes the job {r.advantage:.2f}× sooner{than} ({ci})"
    if r.finding == "worse":
        return (f"takes {1 / r.advantage:.2f}× as long{than.replace('than', 'as')} "
                f"(95% CI {1 / r.ci95_high:.2f}–{1 / r.ci95_low:.2f}×)")
    return f"shows {_no_difference(r)}{than.replace('than', 'from')} ({r.advantage:.2f}×, {ci}: {r.reason})"


def _no_difference(r: Ratio) -> str:
    return {"no measurable difference": "no measurable difference in speed",
            "no meaningful difference": "no meaningful difference in speed",
            "below the noise floor": "no difference in speed above the noise floor"}.get(
        r.finding, "no difference in speed the evidence carries")
