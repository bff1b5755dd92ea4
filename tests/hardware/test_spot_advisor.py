"""A Spot Advisor–style file: read from a real file, its bands normalised, and every mistake a
clear error that names the file, the band and the fix (docs/cost.md §2.11)."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest

from gpuscout.errors import SpecError
from gpuscout.hardware.spot_advisor import FREQUENCY_BANDS, load_spot_advisor

HEAD = 'observed_at = 2026-11-30\nsource = "aws.amazon.com/ec2/spot/instance-advisor/"\n'


def band(instance: str = "p4d.24xlarge", region: str = "us-east-1", frequency: str = ">20%") -> str:
    return f'\n[[band]]\ninstance_type = "{instance}"\nregion = "{region}"\nfrequency = "{frequency}"\n'


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "advisor.toml"
    path.write_text(text, encoding="utf-8")
    return path


def error(path: Path) -> SpecError:
    with pytest.raises(SpecError) as err:
        load_spot_advisor(path)
    return err.value


def test_a_file_is_read_with_its_dating_and_the_default_exposure(tmp_path: Path) -> None:
    advisor = load_spot_advisor(write(tmp_path, HEAD + band() + band("g5.xlarge", "eu-west-1", "5–10 %")))
    assert advisor.observed_at == date(2026, 11, 30) and advisor.exposure_hours == 24.0
    assert [(b.instance_type, b.region, b.frequency) for b in advisor.bands] == [
        ("p4d.24xlarge", "us-east-1", ">20%"), ("g5.xlarge", "eu-west-1", "5-10%")]  # en dash and spaces accepted


def test_the_five_bands_are_the_advisors() -> None:
    assert list(FREQUENCY_BANDS) == ["<5%", "5-10%", "10-15%", "15-20%", ">20%"]


def test_an_unknown_band_lists_the_five(tmp_path: Path) -> None:
    err = error(write(tmp_path, HEAD + band(frequency="30%")))
    assert "not a valid Spot Advisor file" in err.what
    assert "band #1.frequency" in err.why and "'30%'" in err.why and '">20%"' in err.why
    assert "Value error" not in err.why
    assert '"15-20%"' in err.fix


def test_a_missing_file_names_the_path_and_the_format(tmp_path: Path) -> None:
    err = error(tmp_path / "nowhere.toml")
    assert "nowhere.toml" in err.what and "docs/cost.md §2.11" in err.fix


def test_an_undated_file_asks_for_its_date_and_source(tmp_path: Path) -> None:
    err = error(write(tmp_path, band()))
    assert "observed_at" in err.why and "observed_at = YYYY-MM-DD" in err.fix


def test_two_bands_for_one_pool_are_refused(tmp_path: Path) -> None:
    err = error(write(tmp_path, HEAD + band() + band(region="US-EAST-1", frequency="<5%")))
    assert "has two bands" in err.what and ">20%" in err.what and "<5%" in err.what


def test_the_same_band_twice_is_harmless(tmp_path: Path) -> None:
    assert len(load_spot_advisor(write(tmp_path, HEAD + band() + band())).bands) == 2


@pytest.mark.parametrize(("text", "words"), [
    (HEAD, "no [[band]] tables"),
    (HEAD + "bands = 1\n" + band(), "unknown top-level keys: bands"),
    (HEAD + "exposure_hours = 0.5\n" + band(), "exposure_hours"),
    (HEAD + "exposure_hours = 800\n" + band(), "exposure_hours"),
    (HEAD + band(instance=""), "band #1.instance_type"),
    (HEAD + band() + "colour = 'red'\n", "band #1.colour"),
])
def test_other_mistakes_say_where(tmp_path: Path, text: str, words: str) -> None:
    err = error(write(tmp_path, text))
    assert words in err.what + err.why
