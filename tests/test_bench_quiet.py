"""The benchmark's quiet gate (bench/speed.py): `--quiet-probe MS|auto`, and bad values."""

from __future__ import annotations

import argparse

import pytest

from bench import speed


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench")
    speed.add_quiet_options(parser)
    return parser.parse_args(list(argv))


def test_quiet_probe_takes_milliseconds_or_auto() -> None:
    assert parse("--quiet-probe", "25").quiet_probe == 25.0
    assert parse("--quiet-probe", " Auto ").quiet_probe == speed.AUTO
    assert parse().quiet_probe == 0.0  # no wait


@pytest.mark.parametrize(("value", "said"), [
    ("nope", "expected milliseconds or 'auto', got 'nope'"),
    ("-3", "expected milliseconds >= 0, got '-3'"),
    ("nan", "expected milliseconds >= 0, got 'nan'"),  # it waited the whole wait, always
    ("", "expected milliseconds or 'auto', got ''")])
def test_a_bad_quiet_probe_is_refused_naming_the_value(
        value: str, said: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        parse("--quiet-probe", value)
    assert exited.value.code == 2
    assert f"argument --quiet-probe: {said}" in capsys.readouterr().err


def test_auto_waits_for_a_reading_near_the_fastest_seen() -> None:
    first = speed.Quiet(probe_ms=speed.AUTO, longest=0.0)
    assert first.reached()  # its first reading is the fastest it has seen
    assert first.fastest < float("inf")
    near = speed.Quiet(probe_ms=speed.AUTO, longest=0.0)
    near.note(first.fastest * 1000)  # a slow reading noted earlier sets no bar
    assert near.reached()
    far = speed.Quiet(probe_ms=speed.AUTO, longest=0.0)
    assert far.note(0.001) == 0.001  # a reading no real probe comes within 1.25x of
    assert not far.reached()
    waited = speed.wait_quiet(far)  # waits at most `longest`, then goes on, and says so
    assert waited == speed.Waited(0.0, reached=False)
    assert waited.said() == "gave up waiting for a quiet machine after 0 s"
    extra: dict[str, object] = {}
    waited.noted(extra)
    assert extra == {"quiet_not_reached": True}
    assert speed.wait_quiet(speed.Quiet()).said() == ""


def test_a_bound_in_ms_and_no_bound() -> None:
    assert speed.Quiet(probe_ms=1e9).reached()
    assert not speed.Quiet(probe_ms=0.001).reached()
    assert speed.Quiet().reached()  # nothing waited for
