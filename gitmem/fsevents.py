"""The store's file events: a watchdog observer, filtered down to the paths gitmem indexes.

The handler only filters (store paths the watcher queues: temporary, swap and
backup files, `.git` and artifacts never match `store.classify`) and hands them
to its listener, the daemon's `Watcher`, which batches and indexes them. A
directory moved or deleted, and an inotify queue overflow (watchdog only logs
one), ask the listener for a full reconcile instead; a barrier file tells it how
far the events have come. Where inotify is unavailable (the watch limit
reached), the store is polled every second.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from watchdog.events import (
    DirDeletedEvent,
    DirMovedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver
from watchdog.observers.polling import PollingObserver

from gitmem.handover import Handover
from gitmem.store import classify

logger = logging.getLogger(__name__)

BARRIER_PREFIX = ".gitmem-barrier-"
_WATCHDOG_LOGGERS = ("watchdog.observers.inotify", "watchdog.observers.inotify_c")
# The events the handler acts on; every observer (inotify or polling) drops the
# others before they reach it. Asking for these alone also keeps inotify from
# reporting every open and close — the writer's appends and the indexer's own
# reads of each file it indexes.
_EVENTS = [FileCreatedEvent, FileModifiedEvent, FileDeletedEvent, FileMovedEvent,
           DirMovedEvent, DirDeletedEvent]


class Listener(Protocol):
    """What the events go to (the daemon's `Watcher`)."""

    store: Path
    handover: Handover

    def enqueue(self, paths: Iterable[str]) -> None:
        """Queue changed store paths."""

    def request_reconcile(self, reason: str) -> None:
        """Ask for a full reconcile."""

    def barrier_seen(self, number: int) -> None:
        """Barrier file `number` has been seen: every earlier event is queued."""

    def folder_lost(self) -> None:
        """The store folder itself was removed or moved: its watch is gone with it."""


def watched(rel: str) -> bool:
    """Whether the watcher queues changes of the store file `rel` (not of temporary
    files, artifacts, or files of no known kind)."""
    kind = classify(rel)
    return kind is not None and kind != "artifact"


class FileEvents:
    """A watchdog observer on the listener's store, feeding the listener."""

    def __init__(self, listener: Listener) -> None:
        self.listener = listener
        self._observer: BaseObserver | None = None
        self._alarm = _OverflowAlarm(listener)

    def start(self) -> str:
        """Start observing; how: `inotify`, `native` (another platform's) or `polling`."""
        for name in _WATCHDOG_LOGGERS:
            logging.getLogger(name).addHandler(self._alarm)
        handler = _Handler(self.listener)
        store = str(self.listener.store)
        try:
            observer: BaseObserver = Observer()
            observer.schedule(handler, store, recursive=True, event_filter=_EVENTS)
            observer.start()
            mode = "inotify" if type(observer).__name__ == "InotifyObserver" else "native"
        except OSError as exc:  # e.g. inotify watch limit reached
            logger.warning("native file events unavailable (%s); polling %s every second",
                           exc, store)
            observer = PollingObserver(timeout=1.0)
            observer.schedule(handler, store, recursive=True, event_filter=_EVENTS)
            observer.start()
            mode = "polling"
        self._observer = observer
        return mode

    def stop(self) -> None:
        """Stop observing (waits up to 5 s for the observer's threads)."""
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout=5)
            self._observer = None
        for name in _WATCHDOG_LOGGERS:
            logging.getLogger(name).removeHandler(self._alarm)


class _Handler(FileSystemEventHandler):
    """Filters file events down to store paths and queues them; nothing else."""

    def __init__(self, listener: Listener) -> None:
        self.listener = listener
        self.prefix = str(listener.store) + os.sep
        self.barrier = f"{BARRIER_PREFIX}{os.getpid()}-"

    def _relative(self, path: bytes | str) -> str | None:
        text = os.fsdecode(path)
        if not text.startswith(self.prefix):
            return None
        rel = text[len(self.prefix):].replace(os.sep, "/")
        name = rel.rsplit("/", 1)[-1]
        if name.startswith(self.barrier):
            self.listener.barrier_seen(int(name[len(self.barrier):]))
            return None
        return rel if watched(rel) else None

    def on_any_event(self, event: FileSystemEvent) -> None:
        """Queue the store paths an event touches (a directory move: a reconcile)."""
        if event.is_directory:
            if event.event_type in ("moved", "deleted"):
                rel = os.fsdecode(event.src_path)
                if rel + os.sep == self.prefix:
                    self.listener.folder_lost()
                elif rel.startswith(self.prefix) and "/.git" not in rel:
                    self.listener.request_reconcile("a directory was moved or deleted")
            return
        paths = [self._relative(event.src_path)]
        if event.event_type == "moved":
            paths.append(self._relative(event.dest_path))
        wanted = [p for p in paths
                  if p is not None and not self.listener.handover.placed_as_is(p)]
        if wanted:
            self.listener.enqueue(wanted)


class _OverflowAlarm(logging.Handler):
    """watchdog only logs an inotify queue overflow; that means events were lost."""

    def __init__(self, listener: Listener) -> None:
        super().__init__(logging.WARNING)
        self.listener = listener

    def emit(self, record: logging.LogRecord) -> None:
        """Ask for a reconcile when watchdog reports an overflow."""
        if "overflow" in record.getMessage().lower():
            self.listener.request_reconcile("the inotify queue overflowed")
