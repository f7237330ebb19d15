"""The writer's hand-over: which changes of a day file are the writer's own, on real files."""

from __future__ import annotations

import os
from pathlib import Path

from gitmem.appends import append_lines
from gitmem.handover import Handover
from gitmem.rows import Announced, Appended
from gitmem.store import stat_key

DAY = "events/2026-03/2026-03-01.jsonl"


def write(store: Path, line: bytes, announced: list[Announced] | None = None) -> Appended:
    """The writer's append of one line (as the recorder makes it), what it announced."""
    offset, data, stat = append_lines(store / DAY, [line],
                                      None if announced is None else announced.append)
    return Appended(offset, data, (), stat)


def test_a_day_file_between_the_writers_write_and_its_hand_over_is_the_writers(
        tmp_path: Path) -> None:
    """Until the writer hands an append over (after its fsync), the file as that append
    leaves it is the writer's: its stat before the append is the last one handed over,
    and its size the one announced."""
    handover = Handover(tmp_path, 1 << 20)
    handover.append(DAY, write(tmp_path, b'{"n": 1}\n'), keep=True)
    assert handover.as_written(DAY, handover.last_write[DAY])
    announced: list[Announced] = []
    second = write(tmp_path, b'{"n": 2}\n', announced)  # written; not handed over yet
    handover.announce(DAY, announced[0])
    assert handover.as_written(DAY, handover.last_write[DAY])
    handover.append(DAY, second, keep=True)
    assert handover.appending == {} and handover.as_written(DAY, handover.last_write[DAY])


def test_bytes_of_someone_else_before_the_writers_append_are_not_the_writers(
        tmp_path: Path) -> None:
    """A line appended by hand just before the writer's append, or an append that failed,
    leaves a file that is not the writer's: a read makes its barrier for it."""
    handover = Handover(tmp_path, 1 << 20)
    handover.append(DAY, write(tmp_path, b'{"n": 1}\n'), keep=True)
    with open(tmp_path / DAY, "ab") as handle:  # by hand
        handle.write(b'{"n": "by hand"}\n')
    announced: list[Announced] = []
    write(tmp_path, b'{"n": 2}\n', announced)
    handover.announce(DAY, announced[0])
    assert announced[0][0] != handover.last_write[DAY][1]  # the stat it began on differs
    assert not handover.as_written(DAY, handover.last_write[DAY])

    other = Handover(tmp_path, 1 << 20)
    other.append(DAY, write(tmp_path, b'{"n": 3}\n'), keep=True)
    before = stat_key(os.stat(tmp_path / DAY))
    other.announce(DAY, (before, before[0] + 9))
    other.announce(DAY, None)  # the write failed
    with open(tmp_path / DAY, "ab") as handle:  # and someone else's 9 bytes came
        handle.write(b'{"n": 4}\n')
    assert not other.as_written(DAY, other.last_write[DAY])


def test_bytes_of_someone_else_during_the_writers_fsync_are_not_the_writers(
        tmp_path: Path) -> None:
    """The stat after an append is taken after its fsync: a line appended by hand
    meanwhile is in it, past the writer's lines. The file was taken for the writer's
    own, and a read answered without waiting for that line."""
    handover = Handover(tmp_path, 1 << 20)
    handover.append(DAY, write(tmp_path, b'{"n": 1}\n'), keep=True)
    ours = write(tmp_path, b'{"n": 2}\n')
    with open(tmp_path / DAY, "ab") as handle:  # by hand, while the writer's fsync runs
        handle.write(b'{"n": "by hand"}\n')
    after = stat_key(os.stat(tmp_path / DAY))  # what the writer's fstat then reads
    handover.append(DAY, Appended(ours.offset, ours.data, (), after), keep=True)
    assert not handover.as_written(DAY, handover.last_write[DAY])
    assert DAY not in handover.accounted
