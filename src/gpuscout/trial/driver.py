"""The trial driver: launch every candidate at once, run the one script on each, fetch, tear down on every path.

Every candidate's life (wait ready, write its script, run it, fetch what it wrote, tear it down) runs in
a worker thread, so launches and runs overlap in time and share one time window; engines whose boxes
share this machine (`local`) run them one after another instead, so no candidate's timings are
disturbed by another's. The main thread watches: the running bill against `max_usd` and the stop
signals. Whatever ends the trial (every candidate done, a candidate failing, Ctrl-C, SIGTERM, SIGHUP,
the money guard, an exception) ends in `_finish` for every box that was launched: fetch what finished,
then tear down, once. A box that could not be torn down is named with the command that stops it.
"""

from __future__ import annotations

import re
import signal
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from gpuscout.hardware.currency import ExchangeRate
from gpuscout.hardware.offers import Offer
from gpuscout.interrupts import TerminationRequest, deferred_signals, stop_on_signals
from gpuscout.trial.engine import Box, Engine, EngineError, LaunchRequest, RunOutcome, TearDown
from gpuscout.trial.money import elapsed_bill_usd
from gpuscout.trial.script import EXIT_BENCHED, EXIT_MEANINGS, EXIT_RETURN, RESULTS_DIR, trial_script

POLL_S = 0.5  # how often the main thread checks the running bill: a fraction of any billing increment

Event = Callable[[str], None]


@dataclass(frozen=True)
class Candidate:
    name: str  # the box's name: the offer id made safe for a folder or cluster name
    offer: Offer
    predicted_usd: float | None  # the trial's predicted bill on this offer (None: could not be priced)
    predicted_s: float | None = None  # the billed seconds of that prediction
    ssh_target: str | None = None


@dataclass
class CandidateRun:
    """What happened to one candidate; filled in as it goes, read by the decision and the screens."""

    candidate: Candidate
    status: str = "pending"  # pending, launched, running, benched, returned, failed, stopped, timed out
    reason: str = ""
    box: Box | None = None
    outcome: RunOutcome | None = None
    files: tuple[Path, ...] = ()
    teardown: TearDown | None = None
    real_usd: float | None = None  # the elapsed time since launch billed under the offer's rules
    reported_usd: float | None = None  # the engine's (provider's) own figure, where it has one
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    finished: bool = False

    @property
    def results_dir(self) -> Path | None:
        return self.files[0].parent if self.files else None


@dataclass
class TrialRun:
    runs: list[CandidateRun]
    script_sha256: str
    started_at: datetime
    ended_at: datetime | None = None
    stopped_by: int | None = None  # the stop signal that ended the trial early
    guard: str = ""  # why the money guard or the time bound stopped the trial, if it did
    error: str = ""  # an unexpected failure of the driver itself (the boxes were still torn down)

    @property
    def not_torn_down(self) -> list[CandidateRun]:
        return [r for r in self.runs if r.teardown is not None and not r.teardown.done]


@dataclass(frozen=True)
class DriverSettings:
    out_dir: Path
    budget_s: float  # each candidate's wall time from launch to the end of its run
    max_usd: float | None
    rates: tuple[ExchangeRate, ...] = ()
    parallel: bool = True  # False where the boxes share this machine
    disk_gb: int = 50


def safe_name(offer_id: str) -> str:
    """An offer id as a folder and cluster name: lowercase letters, digits and dashes."""
    name = re.sub(r"[^a-z0-9]+", "-", offer_id.lower()).strip("-")
    return name[:40] or "candidate"


def launch_request(candidate: Candidate, settings: DriverSettings) -> LaunchRequest:
    offer = candidate.offer
    return LaunchRequest(candidate=candidate.name, offer_id=offer.id, provider=offer.provider, region=offer.region,
                         instance_type=offer.product, gpu=offer.gpu, gpu_count=offer.gpu_count,
                         spot=offer.tier == "spot", disk_gb=settings.disk_gb, max_wall_s=settings.budget_s,
                         ssh_target=candidate.ssh_target)


class Driver:
    def __init__(self, engine: Engine, candidates: Sequence[Candidate], body: str, script_sha256: str,
                 settings: DriverSettings, on_event: Event | None = None) -> None:
        self.engine = engine
        self.body = body
        self.settings = settings
        self.trial = TrialRun(runs=[CandidateRun(c) for c in candidates], script_sha256=script_sha256,
                              started_at=datetime.now(UTC))
        self._say = on_event or (lambda _: None)
        self._stop = threading.Event()
        self._events_lock = threading.Lock()

    def say(self, text: str) -> None:
        with self._events_lock:
            self._say(text)

    def run(self) -> TrialRun:
        """Run the trial to its end; every launched box is torn down however it ends."""
        trial = self.trial
        self.settings.out_dir.mkdir(parents=True, exist_ok=True)
        with stop_on_signals(announce=True) as stops:
            try:
                self._launch_all()
                self._run_all()
            except TerminationRequest as stop:
                trial.stopped_by = stop.signum
                self.say(f"stopping on {stop.args[0] if stop.args else 'a signal'}: fetching what finished, "
                         "tearing every box down")
            except KeyboardInterrupt:
                trial.stopped_by = stops.signum or 2
                self.say("stopping on Ctrl-C: fetching what finished, tearing every box down")
            except Exception as exc:  # the boxes come down first; the error is reported with the trial
                trial.error = f"{type(exc).__name__}: {exc}"
                self.say(f"the trial failed ({trial.error}); tearing every box down")
            finally:
                self._stop.set()
                while True:  # a stop signal arriving now still lets every box be torn down
                    try:
                        self._finish_all()
                        break
                    except KeyboardInterrupt as stop:
                        trial.stopped_by = trial.stopped_by or getattr(stop, "signum", None) or signal.SIGINT
                if trial.stopped_by is None and stops.signum is not None:
                    trial.stopped_by = stops.signum
        trial.ended_at = datetime.now(UTC)
        return trial

    # -- the steps --------------------------------------------------------------------------------

    def _launch_all(self) -> None:
        """Ask for every box first, so their launches (and their runs) share one time window."""
        # An engine that can refuse a candidate before anything is rented (skypilot: an offer it cannot pin
        # exactly) does it for all of them here, so no box is launched only to be torn down.
        preflight = getattr(self.engine, "preflight", None)
        if callable(preflight):
            preflight([launch_request(run.candidate, self.settings) for run in self.trial.runs])
        for run in self.trial.runs:
            if self._stop.is_set():
                return
            request = launch_request(run.candidate, self.settings)
            try:
                run.box = self.engine.launch(request)
            except EngineError as exc:
                run.status, run.reason = "failed", f"launch failed: {exc}"
                self.say(f"{run.candidate.name}: launch failed: {exc}")
                continue
            run.status = "launched"
            self.say(f"{run.candidate.name}: launched ({run.candidate.offer.id})")

    def _run_all(self) -> None:
        launched = [r for r in self.trial.runs if r.box is not None]
        workers = len(launched) if self.settings.parallel else 1
        with ThreadPoolExecutor(max_workers=max(workers, 1), thread_name_prefix="trial") as pool:
            futures: list[Future[None]] = [pool.submit(self._lifecycle, r) for r in launched]
            try:
                pending = set(futures)
                while pending:
                    done, pending = wait(pending, timeout=POLL_S, return_when=FIRST_EXCEPTION)
                    for future in done:
                        future.result()  # a bug in a worker ends the trial (the boxes still come down)
                    self._guard_money()
            finally:
                self._stop.set()
                self._finish_all()  # stops the runs in flight, so the workers return

    def _lifecycle(self, run: CandidateRun) -> None:
        box = run.box
        assert box is not None
        try:
            if self._stop.is_set():
                run.status, run.reason = "stopped", "the trial stopped before it ran"
                return
            self.engine.wait_ready(box, self._left_s(box))
            if self._stop.is_set():
                run.status, run.reason = "stopped", "the trial stopped before it ran"
                return
            self.say(f"{run.candidate.name}: ready; running the trial script")
            run.status = "running"
            script = self.settings.out_dir / run.candidate.name / "trial.sh"
            script.parent.mkdir(parents=True, exist_ok=True)
            script.write_text(trial_script(self.body, candidate=run.candidate.name, offer_id=run.candidate.offer.id,
                                           created_at_iso=self._created_at(box)))
            outcome = self.engine.run(box, script, self._left_s(box))
            run.outcome = outcome
            if run.status == "running":  # the trial may have stopped it meanwhile
                run.status, run.reason = _status_of(outcome)
            self.say(f"{run.candidate.name}: {run.status}{f' ({run.reason})' if run.reason else ''}")
        except EngineError as exc:
            run.status, run.reason = "failed", str(exc)
            self.say(f"{run.candidate.name}: failed: {exc}")
        finally:
            self._finish(run)

    def _left_s(self, box: Box) -> float:
        return self.settings.budget_s - (datetime.now(UTC) - self._start(box)).total_seconds()

    def _created_at(self, box: Box) -> str:
        """When the box was created, as the script's doctor takes it; "" for a box rented before the trial (ssh)."""
        if box.engine == "ssh":
            return ""
        return self._start(box).strftime("%Y-%m-%dT%H:%M:%SZ")

    def _start(self, box: Box) -> datetime:
        """When the box became the candidate's: its launch, or, where candidates take turns on this machine,
        the moment its turn came (the wait for the others is no start-up of its own, nor billed)."""
        if self.settings.parallel:
            return box.launched_at
        return box.ready_at or box.launched_at

    def _guard_money(self) -> None:
        """Stop everything when the running bill reaches --max-usd."""
        if self.settings.max_usd is None or self._stop.is_set():
            return
        spent = self.running_usd()
        if spent >= self.settings.max_usd:
            self.trial.guard = (f"the running bill reached ${spent:,.2f}, the --max-usd limit of "
                                f"${self.settings.max_usd:,.2f}")
            self.say(f"stopping: {self.trial.guard}; tearing every box down")
            for run in self.trial.runs:
                if run.status in ("launched", "running"):
                    run.status, run.reason = "stopped", "--max-usd reached"
            self._stop.set()
            self._finish_all()

    def running_usd(self) -> float:
        now = datetime.now(UTC)
        total = 0.0
        for run in self.trial.runs:
            if run.box is None:
                continue
            if not self.settings.parallel and run.box.ready_at is None:
                continue  # still waiting for its turn on this machine
            end = run.box.torn_down_at or now
            total += elapsed_bill_usd(run.candidate.offer, (end - self._start(run.box)).total_seconds(),
                                      self.settings.rates)
        return total

    # -- the end of every path ----------------------------------------------------------------------

    def _finish_all(self) -> None:
        for run in self.trial.runs:
            if run.status in ("launched", "running") and self._stop.is_set() and self.trial.stopped_by is not None:
                run.status, run.reason = "stopped", "stopped by a signal"
            self._finish(run)

    def _finish(self, run: CandidateRun) -> None:
        """Fetch what the box wrote, then tear it down: once per box, from whichever path gets here first."""
        # A stop signal during a tear-down waits for it to end (main thread; workers never take signals):
        # a box is never left half torn down, and the signal then stops the trial as it would have.
        with deferred_signals(), run.lock:
            if run.finished or run.box is None:
                return
            run.finished = True
            box = run.box
            if self._stop.is_set() and run.status in ("launched", "running"):
                run.status, run.reason = "stopped", run.reason or "the trial stopped"
            local = self.settings.out_dir / run.candidate.name / RESULTS_DIR
            try:
                run.files = tuple(self.engine.fetch(box, local))
            except (EngineError, OSError) as exc:
                self.say(f"{run.candidate.name}: could not fetch its results: {exc}")
            try:
                run.teardown = self.engine.tear_down(box)
            except Exception as exc:  # an adapter's failure must not hide the box: it is named below
                run.teardown = TearDown(done=False, message=f"tear-down failed: {type(exc).__name__}: {exc}",
                                        command=_fallback_command(box))
            if box.torn_down_at is None and run.teardown.done:
                box.torn_down_at = datetime.now(UTC)
            if getattr(self.engine, "files_survive_tear_down", False):
                # Stopping the script let it write what finished (a bench stopped mid-run writes its partial
                # result on the way out): where the files outlive the tear-down, fetch them once more.
                try:
                    run.files = tuple(self.engine.fetch(box, local))
                except (EngineError, OSError) as exc:
                    self.say(f"{run.candidate.name}: could not fetch its results after the tear-down: {exc}")
            end = box.torn_down_at or datetime.now(UTC)
            held_s = (end - self._start(box)).total_seconds()
            run.real_usd = elapsed_bill_usd(run.candidate.offer, held_s, self.settings.rates) \
                if self.settings.parallel or box.ready_at is not None else 0.0
            try:
                run.reported_usd = self.engine.reported_cost(box)
            except Exception:  # the provider's figure is set beside ours; its absence is not a failure
                run.reported_usd = None
            word = "torn down" if run.teardown.done else "NOT torn down"
            self.say(f"{run.candidate.name}: {word}: {run.teardown.message}"
                     + (f"; stop it with: {run.teardown.command}" if run.teardown.command else ""))


def _status_of(outcome: RunOutcome) -> tuple[str, str]:
    if outcome.timed_out:
        return "timed out", "the script ran past --budget-minutes and was stopped"
    code = outcome.returncode
    if code == EXIT_BENCHED:
        return "benched", ""
    if code == EXIT_RETURN:
        return "returned", "the doctor said return: the box is not what was paid for"
    if code is not None and code > 128:
        return "stopped", f"the script was stopped by signal {code - 128}"
    return "failed", EXIT_MEANINGS.get(code if code is not None else -1, f"the script exited {code}")


def _fallback_command(box: Box) -> str:
    if box.engine == "skypilot":
        return f"sky down {box.handle.get('cluster', box.request.candidate)}"
    if box.engine == "ssh" and box.request.ssh_target:
        return f"ssh {box.request.ssh_target}  (stop the trial script there, then the box at its provider)"
    return f"check {box.workdir or box.request.candidate} by hand"
