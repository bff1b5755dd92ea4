"""`-o`: output paths are checked before any work, and written atomically or refused, never replaced."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuscout.errors import GpuscoutError, SpecError
from gpuscout.outfile import check_output_path, clean_stale_temps, write_atomic
from gpuscout.results.store import save_result

from .outputs import ACCEPTED, KINDS, judge_output


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_of_output_path(kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # "" and "." must not touch the repository
    folder = tmp_path / "case"
    folder.mkdir()
    verdict = judge_output(kind, folder)
    assert verdict.outcome == ("parsed" if kind in ACCEPTED else "error"), verdict.detail


@settings(max_examples=100, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.text(min_size=0, max_size=300))
def test_any_file_name_is_written_or_refused_cleanly(name: str, tmp_path: Path) -> None:
    """check_output_path and write_atomic agree, and a refusal is a GpuscoutError."""
    path = tmp_path / "names" / name
    try:
        checked = check_output_path(path, "result file")
    except GpuscoutError:
        with pytest.raises(GpuscoutError):
            write_atomic(path, "{}")
        return
    write_atomic(checked, "{}")
    assert checked.read_text() == "{}"
    assert not list(checked.parent.glob(".*.tmp"))
    checked.unlink()


def test_device_node_is_never_replaced(tmp_path: Path) -> None:
    """`-o /dev/full` replaced the device when run as root; a device node is refused before writing."""
    device = tmp_path / "full"
    try:
        os.mknod(device, stat.S_IFCHR | 0o666, os.makedev(1, 7))
    except PermissionError:
        pytest.skip("creating a device node needs root")
    with pytest.raises(SpecError, match="is a device"):
        check_output_path(device, "result file")
    with pytest.raises(SpecError, match="is a device"):
        write_atomic(device, "{}")
    assert stat.S_ISCHR(os.lstat(device).st_mode)


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, SystemExit, OSError])
def test_a_failed_write_leaves_the_old_file_and_no_temporary(interrupt: type[BaseException], tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "run.json"
    target.write_text("old")

    def fail(fd: int) -> None:
        raise interrupt(28, "No space left on device") if interrupt is OSError else interrupt()

    monkeypatch.setattr(os, "fsync", fail)
    with pytest.raises(SpecError if interrupt is OSError else interrupt):
        write_atomic(target, "new")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]


def test_stale_temporaries_of_a_killed_write_are_removed(tmp_path: Path) -> None:
    target = tmp_path / "run.json"
    (tmp_path / ".run.json.abcd1234.tmp").write_text("half a result")
    (tmp_path / ".other.json.abcd1234.tmp").write_text("another file's")
    (tmp_path / ".run.json.notatemp").write_text("not ours")
    write_atomic(target, "{}")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".other.json.abcd1234.tmp", ".run.json.notatemp", "run.json"]
    assert clean_stale_temps(target) == 0


def test_long_names_get_short_temporaries(tmp_path: Path) -> None:
    """A 255-byte name is legal; its temporary name must be too, and is still cleaned up."""
    target = tmp_path / ("é" * 125 + ".json")  # 255 bytes in UTF-8
    (tmp_path.joinpath(".placeholder")).write_text("")
    write_atomic(target, "{}")
    assert target.read_text() == "{}"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".placeholder", target.name]


def test_an_existing_file_keeps_its_mode(tmp_path: Path) -> None:
    target = tmp_path / "run.json"
    target.write_text("old")
    target.chmod(0o640)
    write_atomic(target, "new")
    assert stat.S_IMODE(target.stat().st_mode) == 0o640


def test_a_missing_folder_is_created_under_a_writable_one(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "run.json"
    assert check_output_path(target, "result file") == target
    write_atomic(target, "{}")
    assert target.read_text() == "{}"


def test_save_result_goes_through_the_same_checks(tmp_path: Path) -> None:
    from gpuscout.results.schema import BenchResult

    from .corpus import result_seed

    result = BenchResult.model_validate(result_seed())
    (tmp_path / "dir.json").mkdir()
    with pytest.raises(SpecError, match="result file"):
        save_result(result, tmp_path / "dir.json")
    save_result(result, tmp_path / "ok.json")
    assert (tmp_path / "ok.json").stat().st_size > 0
