"""Human units both ways."""

import pytest

from dlprobe.units import format_bytes, parse_bytes, parse_duration


def test_format_bytes():
    assert format_bytes(None) == "not measured"  # never a "-" placeholder for a missing reading
    assert format_bytes(512) == "512 B"
    assert format_bytes(1536) == "1.5 KiB"
    assert format_bytes(-3 * 1024**3) == "-3.0 GiB"


@pytest.mark.parametrize(
    ("text", "expected"),
    [("200 MB", 200_000_000), ("1.5GiB", 1610612736), ("64 MiB", 64 * 1024**2), ("10kb", 10_000)],
)
def test_parse_bytes(text, expected):
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("text", ["200", "-5 MB", "lots", "5 parsecs"])
def test_parse_bytes_rejects_bare_negative_and_unknown(text):
    with pytest.raises(ValueError):
        parse_bytes(text)


def test_parse_duration():
    assert parse_duration("90s") == 90.0
    assert parse_duration("2m") == 120.0
    assert parse_duration("500ms") == 0.5
    with pytest.raises(ValueError):
        parse_duration("90")
