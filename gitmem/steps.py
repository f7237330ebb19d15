"""What each step of a scenario does, on a real store: the `Run` of one scenario.

A `Run` is a fresh git repository with a store and its own PostgreSQL schema.
Everything is real: files through the write path, PostgreSQL through the
index, git through the git binary. The clock is the scenario's: each step that
writes takes the current time of the story and moves it on by a second, `at:`
sets it (absolute, or an offset from `now`), `advance:` moves it forward, and
an ACB is built "now" in the story unless the step says otherwise.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from gitmem.config import Config
from gitmem.db import Database
from gitmem.errors import GitError, ScenarioError
from gitmem.memory import Memory
from gitmem.records import TS_RANGE, format_ts
from gitmem.scenario import Scenario, Step, moved, resolve_at, substitute
from gitmem.store import init_store

WRITE_ACTIONS = ("record", "decide", "task", "summary", "handoff")
GIT_IDENTITY = {"GIT_AUTHOR_NAME": "gitmem scenario", "GIT_AUTHOR_EMAIL": "scenario@gitmem.invalid",
                "GIT_COMMITTER_NAME": "gitmem scenario",
                "GIT_COMMITTER_EMAIL": "scenario@gitmem.invalid"}
TICK = timedelta(seconds=1)


class Failure(Exception):
    """An assertion that did not hold: what was expected, what was found, and where."""

    def __init__(self, expected: Any, actual: Any, excerpt: Any = None) -> None:
        self.expected, self.actual, self.excerpt = expected, actual, excerpt
        super().__init__(f"expected {expected}, got {actual}")


@dataclass(frozen=True)
class ClockOut:
    """A write's tick that left the clock's range: the step's, after which of its writes."""

    step: Step | None
    writes: int               # the step's writes so far; the tick after the last left
    first: datetime           # the time of the step's first write
    last: datetime            # the time of its last


@dataclass
class Built:
    """An ACB a step built, with the request that built it."""

    step: str
    request: dict[str, Any]
    acb: dict[str, Any]
    wall_ms: float


@dataclass
class Run:
    """The state of one scenario while it runs."""

    scenario: Scenario
    dsn: str
    workdir: Path
    schema: str
    root: Path = field(init=False)
    memory: Memory = field(init=False)
    cursor: datetime = field(init=False)
    bindings: dict[str, Any] = field(default_factory=dict)
    named: dict[str, Built] = field(default_factory=dict)
    last: Built | None = None
    builds: list[dict[str, Any]] = field(default_factory=list)
    acbs: list[dict[str, Any]] = field(default_factory=list)   # every ACB built (for not_stored)
    daemon: Any = None
    step_tick: timedelta = TICK
    current: Step | None = None        # the step running, its writes so far and the first's time
    writes: int = 0
    first_write: datetime | None = None
    clock_out: ClockOut | None = None  # the clock's last move left the range

    def __post_init__(self) -> None:
        self.root = self.workdir / "repo"
        self.cursor = self.scenario.now
        init_store(self.root)
        self.git("symbolic-ref", "HEAD", "refs/heads/main")
        for rel, text in self.scenario.setup.items():
            target = self.store / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        self.memory = Memory(self.config)

    # ------------------------------------------------------------------ plumbing

    @property
    def store(self) -> Path:
        """The store directory of the scenario's repository."""
        return self.root / "memory"

    @property
    def config(self) -> Config:
        """The scenario's store on its own schema."""
        return Config(store=self.store, dsn=self.dsn, schema=self.schema)

    def git(self, *args: str, cwd: Path | None = None) -> str:
        """Run git with a fixed identity and the story's clock; its stdout."""
        when = format_ts(self.cursor)
        env = {**os.environ, **GIT_IDENTITY, "GIT_AUTHOR_DATE": when,
               "GIT_COMMITTER_DATE": when}
        result = subprocess.run(["git", *args], cwd=cwd or self.root, env=env,
                                capture_output=True, text=True)
        if result.returncode != 0:
            raise GitError(f"git {' '.join(args)} failed: "
                           f"{(result.stderr or result.stdout).strip()}")
        return result.stdout

    def reopen(self) -> None:
        """A fresh Memory (empty caches, new connections), as a new process would have."""
        self.memory.close()
        self.memory = Memory(self.config)

    def close(self) -> None:
        """Stop what the scenario started and drop its schema."""
        if self.daemon is not None:
            daemon_step(self, "kill")
        self.memory.close()
        with Database(self.dsn, self.schema, max_size=1) as db:
            db.drop_schema()

    def tick(self) -> str:
        """The story's current time for one write; the clock moves on (a second, or
        the step's `every`)."""
        if self.clock_out is not None:  # a write after the last the range could hold
            raise clock_error(self, self.clock_out)
        when = self.cursor
        self.first_write = when if self.writes == 0 else self.first_write
        self.writes += 1
        try:
            self.cursor = moved(when, self.step_tick.total_seconds(), "every", "")
        except ScenarioError:  # only a write still to come would be outside
            self.clock_out = ClockOut(self.current, self.writes, self.first_write or when, when)
        return format_ts(when)

    def resolve(self, value: Any, i: int | None = None) -> Any:
        """`value` with bound names and `{i}` filled in."""
        return substitute(value, self.bindings, i)

    def request(self, fields: Mapping[str, Any]) -> dict[str, Any]:
        """The build_acb request of an `acb:` step."""
        defaults = self.scenario.defaults
        request: dict[str, Any] = {
            "tenant_id": fields.get("tenant", defaults.get("tenant")),
            "session_id": fields.get("session", defaults.get("session")),
            "agent_id": fields.get("agent", defaults.get("agent")),
            "channel": fields.get("channel", defaults.get("channel")),
            "intent": fields.get("intent"), "query_text": fields.get("query"),
            "max_tokens": fields.get("max_tokens", self.scenario.budget_tokens),
            "now": format_ts(resolve_at(fields["now"], self.scenario.now, "now"))
            if fields.get("now") else format_ts(self.cursor),
            "handoff_id": fields.get("handoff"),
        }
        return {k: v for k, v in request.items() if v is not None}

    def build(self, request: Mapping[str, Any], step: str, *, cold: bool = False
              ) -> tuple[dict[str, Any], float]:
        """Build an ACB, timed and recorded for the report: over the daemon's socket
        while one runs, else in process (on a fresh Memory when `cold`)."""
        started = time.perf_counter()
        via = "daemon" if self.daemon is not None and not cold else "local"
        if via == "daemon":
            acb = call(self, "build_acb", dict(request))
        elif cold:
            with Memory(self.config) as fresh:
                acb = fresh.build_acb(dict(request))
        else:
            acb = self.memory.build_acb(dict(request))
        wall = round((time.perf_counter() - started) * 1000, 3)
        prov = acb["provenance"]
        self.builds.append({
            "step": step, "wall_ms": wall, "build_ms": prov["timings_ms"].get("total", 0.0),
            "path": prov.get("path"), "candidate_pool_size": prov.get("candidate_pool_size", 0),
            "token_used_est": acb["token_used_est"], "cold": cold, "via": via,
            "sections": {s["name"]: len(s["items"]) for s in acb["sections"]}})
        self.acbs.append(acb)
        return acb, wall

    def acb(self, name: str | None) -> Built:
        """The ACB an assertion is about: a named one (`acb: $a1`), else the last built."""
        if name:
            key = name.lstrip("$")
            if key not in self.named:
                raise ScenarioError(f"no ACB was built under the name {key!r} "
                                    "(use `as:` on an acb step)")
            return self.named[key]
        if self.last is None:
            raise ScenarioError("this assertion needs an ACB, but no acb step ran before it")
        return self.last


# --------------------------------------------------------------------------- steps

def _actor(value: str | None) -> dict[str, str] | None:
    if not value:
        return None
    kind, sep, name = value.partition(":")
    if not sep:
        raise ScenarioError(f"actor {value!r}: expected TYPE:ID such as human:alice")
    return {"type": kind, "id": name}


def _output(value: Any) -> str:
    if isinstance(value, str):
        return value
    return "".join(value["line"].replace("{n}", str(n)) + "\n"
                   for n in range(1, value["lines"] + 1))


def _event_fields(run: Run, f: Mapping[str, Any]) -> dict[str, Any]:
    """The event-level fields shared by record, decide, task and summary."""
    defaults = run.scenario.defaults
    obj: dict[str, Any] = {"ts": run.tick()}
    for key, target in (("session", "session_id"), ("agent", "agent_id"),
                        ("tenant", "tenant_id")):
        value = f.get(key, defaults.get(key))
        if value:
            obj[target] = value
    for key in ("tags", "refs"):  # a scenario may give one as a string
        if key in f:
            obj[key] = _listed(f[key])
    if "sensitivity" in f:
        obj["sensitivity"] = f["sensitivity"]
    return obj


def _channel(run: Run, f: Mapping[str, Any], obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` with the step's channel, else the scenario's default (record, summary)."""
    channel = f.get("channel", run.scenario.defaults.get("channel"))
    return {**obj, "channel": channel} if channel else obj


def _record_object(run: Run, f: Mapping[str, Any]) -> dict[str, Any]:
    kind = f.get("kind") or ("tool_result" if "output" in f else
                             "tool_call" if "tool" in f else "message")
    content = dict(f.get("content") or {})
    if "text" in f:
        content.setdefault("text", f["text"])
    if kind in ("tool_call", "tool_result"):
        content.setdefault("tool", f.get("tool", "tool"))
    for key in ("path", "args"):
        if key in f:
            content[key] = f[key]
    if "output" in f:
        content["output"] = _output(f["output"])
    obj = _channel(run, f, _event_fields(run, f))
    obj.update(kind=kind, content=content)
    actor = _actor(f.get("actor") or (f"tool:{content['tool']}" if kind == "tool_result"
                                      else run.scenario.defaults.get("actor")))
    if actor:
        obj["actor"] = actor
    return obj


def _write_one(run: Run, action: str, f: Mapping[str, Any]) -> str:
    memory = run.memory
    if action == "decide":
        options = {k: f[k] if k in ("title", "scope", "confidence") else _listed(f[k])
                   for k in ("supersedes", "rationale", "title", "scope", "constraints",
                             "alternatives", "consequences", "confidence") if k in f}
        fields = _without(_event_fields(run, f), "refs")
        if run.daemon is not None and not {"tags", "sensitivity"} & set(fields):
            answer = call(run, "decide", {"text": f["text"], "refs": _listed(f["refs"]),
                                          **options, **fields})
            return str(answer["decision_id"])
        event = memory.decide(f["text"], _listed(f["refs"]), **options, **fields)
        return str(event.content["decision_id"])
    if action == "task":
        options = {k: f[k] for k in ("status", "task_id", "details", "owner") if k in f}
        event = memory.task(f.get("title"), **options, **_event_fields(run, f))
        return str(event.content["task_id"])
    if action == "summary":
        obj = _channel(run, f, _event_fields(run, f))
        content: dict[str, Any] = {"text": f["text"], "scope": f.get("scope", "session")}
        if "decisions" in f:
            content["decisions"] = list(_listed(f["decisions"]))
        event = memory.record({**obj, "kind": "summary", "content": content})
        return str(event.content["summary_id"])
    if action == "handoff":
        options = {k: list(_listed(f[k])) for k in ("constraints", "decisions",
                   "required_files", "open_questions", "refs") if k in f}
        packet = memory.create_handoff(
            f["to_agent"], f["task"], from_agent=f.get("from_agent"),
            tenant_id=f.get("tenant", run.scenario.defaults.get("tenant")), ts=run.tick(),
            **options)
        return packet.id
    raise ScenarioError(f"unknown write action {action!r}")


def _listed(value: Any) -> list[Any]:
    return [value] if isinstance(value, str) else list(value)


def _without(data: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k != key}


def _store_path(run: Run, rel: str) -> Path:
    return run.store / rel


def execute(run: Run, step: Step) -> None:
    """Do what one step says (all its repetitions); bind what it produced."""
    if step.at is not None:
        run.cursor, run.clock_out = resolve_at(step.at, run.scenario.now), None
    run.current, run.writes, run.first_write = step, 0, None
    if step.advance:  # one step's moves fit the calendar; all the steps' may not
        try:
            written = step.clock.get("advance", (f"{step.advance:g}s", None))[0]
            run.cursor = moved(run.cursor, step.advance, "advance", written)
        except ScenarioError as exc:
            raise _located(run, step, "advance", str(exc)) from None
    run.step_tick = timedelta(seconds=step.every)
    times = step.repeat or 1
    numbers = range(1, times + 1) if step.repeat else [None]
    action = step.action
    produced: list[Any] = []
    if action == "record":
        objs = [_record_object(run, run.resolve(step.fields, i)) for i in numbers]
        if run.daemon is not None:
            produced = [call(run, "record_event", obj)["event_id"] for obj in objs]
        else:
            events = run.memory.record_many(objs, step.label) if len(objs) > 1 else [
                run.memory.record(objs[0])]
            produced = [e.id for e in events]
    elif action in WRITE_ACTIONS:
        produced = [_write_one(run, action, run.resolve(step.fields, i)) for i in numbers]
    elif action == "acb":
        for i in numbers:
            fields = run.resolve(step.fields, i)
            request = run.request(fields)
            acb, wall = run.build(request, step.label, cold=bool(fields.get("cold")))
            run.last = Built(step.label, request, acb, wall)
            produced.append(run.last)
        if step.bind:
            run.named[step.bind] = run.last  # type: ignore[assignment]
            return
    else:
        for i in numbers:
            _other(run, action, run.resolve(step.fields, i))
    if step.bind:
        run.bindings[step.bind] = produced if step.repeat else (
            produced[0] if produced else None)


def _located(run: Run, step: Step, key: str, message: str) -> ScenarioError:
    """`message` at the line of the step's `key` (its own line when the file has none)."""
    line = step.clock[key][1] if key in step.clock else step.line
    where = f"{run.scenario.path}:{line}" if line else str(run.scenario.path)
    return ScenarioError(f"{where}: {step.label}: {message}")


def clock_error(run: Run, out: ClockOut) -> ScenarioError:
    """A write refused because a write's tick moved the clock out of its range, said in
    the file's terms: the `every:` as written, or the default tick the step has instead."""
    step, by = run.current, out.step
    outside = f"outside {TS_RANGE}, the range ids and the index can hold"
    if step is None or by is None:  # not from a step: nothing in the file to cite
        return ScenarioError(f"the clock is {outside}")
    every = by.clock.get("every", ("", None))[0]
    if by is step:
        writes = step.repeat or 1
        each = (f"field 'every': {every!r} for each of its {writes} writes moves" if every
                else f"its {writes} writes at 1 s each (the default: the step has no "
                "`every:`) move")
        return _located(run, step, "every", f"{each} the clock from {format_ts(out.first)} "
                        f"{outside}: write {out.writes + 1} of {writes} would be "
                        f"{every or '1 s'} after {format_ts(out.last)}")
    every_line, by_line = by.clock.get("every", ("", None))[1], by.line
    tick = (f"its `every: {every}`" + (f" (line {every_line})" if every_line else "") if every
            else "1 s, the default tick (it has no `every:`)")
    return _located(run, step, "", f"its write would be {outside}: {by.label}"
                    + (f" (line {by_line})" if by_line else "") + " moved the clock past "
                    f"its end after its last write, at "
                    f"{format_ts(out.last)}, by {tick}; give this step an `at:`")


def _other(run: Run, action: str, f: Mapping[str, Any]) -> None:
    if action == "write":
        target = _store_path(run, f["path"])
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(f["text"], encoding="utf-8")
    elif action == "edit":
        target = _store_path(run, f["path"])
        text = target.read_text(encoding="utf-8")
        for old, new in f["replace"].items():
            if str(old) not in text:
                raise ScenarioError(f"edit {f['path']}: {old!r} does not occur in the file")
            text = text.replace(str(old), str(new))
        target.write_text(text, encoding="utf-8")
    elif action == "delete":
        _store_path(run, f["path"]).unlink()
    elif action == "git":
        _git(run, f)
    elif action == "reindex":
        if f.get("drop"):
            run.memory.db.drop_schema()
            run.reopen()
        run.memory.reindex()
    elif action == "sync":
        run.memory.sync()
    elif action == "reopen":
        run.reopen()
    elif action == "daemon":
        daemon_step(run, f["action"])


def daemon_step(run: Run, action: str) -> None:
    """Start, stop, kill (SIGKILL) or restart the store's daemon (gitmem.daemon).

    While it runs, `record`, `decide` and `acb` steps go through its socket, as an
    agent's calls would; everything else works on the files directly.
    """
    from gitmem import daemon

    config = run.config
    if action in ("stop", "restart"):
        if daemon.stop(config) is None and action == "stop":
            raise ScenarioError("daemon stop: no daemon serves this store")
        run.daemon = None
    elif action == "kill":
        pid = daemon.running_pid(config)
        if pid is None or pid <= 0:
            raise ScenarioError("daemon kill: no daemon serves this store")
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while daemon.running_pid(config) is not None and time.monotonic() < deadline:
            time.sleep(0.02)
        run.daemon = None
    if action in ("start", "restart"):
        run.daemon = daemon.start(config, daemon.DaemonOptions(autocommit=False))


def call(run: Run, method: str, params: Any) -> Any:
    """One JSON-RPC call to the scenario's daemon; its errors raised as the local ones."""
    from gitmem import client
    from gitmem.errors import RpcError

    try:
        return client.call(run.config.socket_path, method, params)
    except RpcError as exc:
        raise client.local_error(exc) from None


def _git(run: Run, f: Mapping[str, Any]) -> None:
    if "commit" in f:
        run.git("add", "-A", ".")
        run.git("commit", "-q", "--allow-empty", "-m", str(f["commit"]))
    elif "branch" in f:
        run.git("checkout", "-q", "-b", str(f["branch"]))
    elif "checkout" in f:
        run.git("checkout", "-q", str(f["checkout"]))
    elif "merge" in f:
        run.git("merge", "-q", "--no-edit", str(f["merge"]))
