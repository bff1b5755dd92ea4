"""The trial advice under a ranking: no trial needed, or what one costs against what is at stake."""

from __future__ import annotations

from rich.text import Text

from gpuscout.cost.trial_price import BENCH_REPEATS, BENCH_RUNS, BENCH_WARMUP, TrialAdvice
from gpuscout.hardware.currency import DisplayCurrency
from gpuscout.report.numbers import duration, money


def trial_lines(advice: TrialAdvice | None, shown: DisplayCurrency) -> list[Text]:
    """One line of verdict; when the leaders overlap, the trial's price on each and its commands."""
    if advice is None:
        return []

    def cash(usd: float) -> str:
        return money(usd / shown.usd_per_unit, shown.code)

    if not advice.needed:
        return [Text(f"No trial needed: the leader's band ({advice.winner_id}) overlaps no other offer's.",
                     style="green")]
    more = f" and {advice.overlapping - 1} more" if advice.overlapping > 1 else ""
    head = (f"≈ {advice.challenger_id}{more} overlap{'s' if not more else ''} the leader, {advice.winner_id}: "
            "the estimate cannot order them.")
    if advice.unpriced:
        return [Text(head, style="yellow"), Text(f"A trial could not be priced: {advice.unpriced}.", style="dim")]
    stake = "an open amount" if advice.stake_usd is None else f"up to {cash(advice.stake_usd)}"
    slices = " + ".join(f"{cash(t.total_usd)} ({duration(t.billed_s)} billed)" for t in advice.trials)
    verdict = "worth it" if advice.pays else "not worth it: take the expected cheapest"
    lines = [Text(head, style="yellow"),
             Text(f"A trial costs {slices} = {cash(advice.trial_usd)} against {stake} at stake: {verdict}.")]
    if advice.pays:
        lines.append(Text(f"Each box: start-up, then {BENCH_RUNS} runs of {BENCH_WARMUP} warm-up and "
                          f"{BENCH_REPEATS} timed steps:", style="dim"))
        for t in advice.trials:
            lines += [Text(line) for line in shell_lines(t.command)]
        lines.append(Text("then, with both results here:", style="dim"))
        lines += [Text(line) for line in shell_lines(advice.compare_command)]
    return lines


def shell_lines(command: str, width: int = 78, indent: str = "  ") -> list[str]:
    """A command cut at spaces into lines of at most `width` with shell continuations (' \\'), so it
    reads at 80 columns and still runs when pasted whole; a word longer than a line stays whole."""
    words: list[str] = []
    for word in command.split(" "):  # a flag stays on the line of its value
        if words and words[-1].startswith("-") and " " not in words[-1] and not word.startswith("-"):
            words[-1] += " " + word
        else:
            words.append(word)
    lines, current = [], indent
    for word in words:
        if current.strip() and len(current) + 1 + len(word) + 2 > width:
            lines.append(current + " \\")
            current = indent + "    " + word
        else:
            current = (current + " " + word) if current.strip() else current + word
    return [*lines, current]
