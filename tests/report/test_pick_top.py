"""A big catalog's ranking stays legible: the top offers, the Pareto frontier, and a count of the rest."""

from __future__ import annotations

import io
from datetime import date

from rich.console import Console

from gpuscout import api
from gpuscout.report.pick import pick_screen, shown_rows


def screen(top: int) -> str:
    result = api.pick(None, today=date(2026, 12, 1)).pick
    out = io.StringIO()
    Console(file=out, width=120).print(pick_screen(result, top=top))
    return out.getvalue()


def test_only_the_top_offers_and_the_frontier_are_shown_with_a_count_of_the_rest() -> None:
    result = api.pick(None, today=date(2026, 12, 1)).pick
    ranked = [r for r in result.rows if r.excluded is None]
    rows, hidden = shown_rows(result, wide=False, top=3)
    assert [r.offer_id for r in rows[:3]] == [r.offer_id for r in ranked[:3]]
    assert all(r.pareto for r in rows[3:]) and hidden == len(ranked) - len(rows) > 0
    assert f"… {hidden:,} more ranked offers not shown (--top 0 shows all" in screen(3)
    assert shown_rows(result, wide=False, top=0) == (tuple(ranked), 0)
    assert "more ranked offers not shown" not in screen(0)
