"""The write path: one `record` operation used by the CLI, the socket and scenarios.

validate -> privacy (refuse `secret`, redact patterns) -> id, ts, hash -> excerpt
large tool output into a content-addressed artifact -> append one line per event
under an exclusive lock, flush, fsync (`recovery.append_batch`: all the lines of a
write or none, across day files too). Files that come with an event (artifact,
decision, task, summary) are staged as temporary files first and moved into
place only after the line is durable, so a failed write changes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gitmem import ids
from gitmem.appends import discard, place_staged, stage_file
from gitmem.derived import RecordFiles, Staged, Staging
from gitmem.documents import Handoff, handoff_to_text, parse_handoff
from gitmem.errors import (
    DatabaseError,
    FormatError,
    NotFoundError,
    PrivacyError,
    StoreError,
    ValidationError,
    json_kind,
    shown,
)
from gitmem.policies import Policies
from gitmem.records import (
    EVENT_FIELDS,
    Event,
    check_filled,
    check_name,
    check_storable,
    check_text,
    check_texts,
    content_hash,
    format_ts,
    given_list,
    name_or,
    parse_event,
    parse_ts,
)
from gitmem.recovery import GRACE_S, append_batch, finish_tasks, settle, staged_prefix
from gitmem.retries import Recorded, Repeated, answered, retried
from gitmem.rows import Announced, Appended
from gitmem.store import (
    Placed,
    content_digest,
    day_file_rel,
    exclusive,
    file_stat,
    refuse_linked,
)

DEFAULT_ACTOR = {"type": "human", "id": "user"}
TASK_EVENT_CHANGES = ("refs", "tags", "sensitivity")  # what a task update adds or raises
# event fields a task write names as its caller gave them
_TASK_ARGS = {"content.title": "title", "content.text": "details", "content.owner": "owner",
              "content.status": "status"}


def default_actor(kind: object, agent_id: object, content: object) -> dict[str, object]:
    """Who an event is by when it names no actor: a tool call is its agent's, a tool's
    result the tool's (`content.tool`), anything else the user's."""
    if kind == "tool_call":
        return {"type": "agent", "id": agent_id}
    if kind == "tool_result":
        tool = content.get("tool") if isinstance(content, dict) else None
        return {"type": "tool", "id": tool if isinstance(tool, str) and tool else "tool"}
    return dict(DEFAULT_ACTOR)

logger = logging.getLogger(__name__)


@dataclass
class _Prepared:
    event: Event
    files: list[Staged] = field(default_factory=list)


def _now() -> datetime:
    return datetime.now(UTC)


def _redact(value: Any, policies: Policies) -> Any:
    """`value` as it may be stored: strings and object keys through the redaction
    patterns, what a key naming a secret holds replaced (`Privacy.redact_value`)."""
    return policies.privacy.redact_value(value)


class Recorder:
    """Appends events (and the files they carry) to one store."""

    def __init__(self, store: Path, policies: Policies, *, now: Any = _now) -> None:
        self.store = store
        self.policies = policies
        self.files = RecordFiles(store, policies)
        self._now = now
        # Told of each durable append (store-relative path, what was written): the
        # daemon hands it to its indexer, which then need not decode those lines.
        self.on_append: Callable[[str, Appended], None] | None = None
        # Told before each append (the file's stat then, its size once the lines are
        # in; None: the append failed), so that its file event is known as the writer's
        self.on_appending: Callable[[str, Announced | None], None] | None = None
        # Told of the files put in place (`store.Placed`: path, stat right after, digest,
        # tenant), so the daemon queues them for indexing before the write is answered.
        self.on_place: Callable[[list[Placed]], None] | None = None
        # Asked before a write that names its own event ids: which of them are recorded
        # already (id -> tenant, ts, hash), so that no id repeats (the index knows them).
        # `fresh`: the index caught up with the files first (which costs a sync without
        # the daemon): so asked for ids a write names; cited ids ask fresh last.
        self.recorded: Callable[[list[str], bool], Mapping[str, Recorded]] | None = None

    # ------------------------------------------------------------------ public API

    def record(self, obj: Mapping[str, Any]) -> Event:
        """Validate and durably append one event; returns it with id, ts and hash."""
        with self._task_lock([obj]):
            known = self._known([obj])
            prepared = self._prepare(obj, {}, known, {})
            try:
                todo = self._new([prepared], [obj], known)
            except Repeated as exc:
                raise exc.error from None
            self._commit(todo)
        return answered([prepared.event], [obj], {todo[0].event.id} if todo else set(), known)[0]

    @contextmanager
    def _task_lock(self, objs: Sequence[Mapping[str, Any]]) -> Iterator[None]:
        """Serialize task updates: each reads its task file, changes it, writes it back."""
        if not any(isinstance(o, Mapping) and o.get("kind") == "task_update" for o in objs):
            yield
            return
        directory = self.store / "tasks"
        with ExitStack() as held:
            try:
                directory.mkdir(parents=True, exist_ok=True)
                held.enter_context(exclusive(directory))
            except OSError as exc:
                raise StoreError(f"cannot lock {directory} for a task update: "
                                 f"{exc.strerror or exc}; nothing was written") from exc
            settle(self.store)  # a crashed write's lines go first, then an earlier
            finish_tasks(self.store)  # update's file left staged (placed if its line stayed)
            yield

    def record_many(self, objs: Iterable[Mapping[str, Any]], source: str = "<input>",
                    lines: Sequence[int] | None = None) -> list[Event]:
        """Append many events: all are validated before any byte is written.

        An invalid object is reported as `source:N`: its line in `lines`, else
        its 1-based position.
        """
        if isinstance(objs, str | bytes | Mapping) or not isinstance(objs, Iterable):
            raise ValidationError(f"expected a list of event objects, got {json_kind(objs)}")
        objs = list(objs)
        prepared: list[_Prepared] = []
        staging: Staging = {}
        with self._task_lock(objs):
            known = self._known(objs)
            written: dict[str, str] = {}  # this write's events so far (id -> tenant)
            for position, obj in enumerate(objs):
                number = lines[position] if lines is not None else position + 1
                try:
                    prepared.append(self._prepare(obj, staging, known, written))
                    written[prepared[-1].event.id] = prepared[-1].event.tenant_id
                except FormatError as exc:
                    raise exc.at(source, number) from None
                except (PrivacyError, NotFoundError) as exc:  # a task to update not there
                    raise type(exc)(f"{source}:{number}: {exc}") from None
            try:
                todo = self._new(prepared, objs, known)
            except Repeated as exc:
                number = lines[exc.position] if lines is not None else exc.position + 1
                raise exc.error.at(source, number) from None
            self._commit(todo)
        return answered([p.event for p in prepared], objs, {p.event.id for p in todo}, known)

    def _known(self, objs: Sequence[Mapping[str, Any]]) -> Mapping[str, Recorded]:
        """Which of the event ids these objects name, or cite, the index holds already."""
        if self.recorded is None:
            return {}
        named = {o["id"] for o in objs
                 if isinstance(o, Mapping) and isinstance(o.get("id"), str) and o["id"]}
        cited = {ref for o in objs if isinstance(o, Mapping)
                 and isinstance(refs := o.get("refs"), list | tuple)  # else: named later
                 for ref in refs if isinstance(ref, str) and ref.startswith("evt_")}
        asked = sorted(named | cited)
        try:
            return self.recorded(asked, bool(named)) if asked else {}
        except DatabaseError:
            return {}  # the index out of reach: the write goes ahead (`gitmem verify`)

    def _require_events(self, refs: Iterable[str], tenant_id: str,
                        known: Mapping[str, Recorded], written: Mapping[str, str]) -> None:
        """Every event an event cites is one of its tenant's that was recorded: indexed
        (`known`), earlier in this write, or in its day file (written elsewhere a moment
        ago). A line is never rewritten, so a mistyped ref would dangle for good; and its
        file would stay out of the daemon's commits, which carry only what `gitmem
        verify` accepts. Without an index to ask (`recorded` unset), `gitmem verify`
        checks them."""
        if self.recorded is None:
            return
        for ref in refs:
            if not ref.startswith("evt_"):
                continue
            tenant = (known[ref][0] if ref in known else written.get(ref)
                      or self.files.event_tenant(ref))
            if tenant is None:  # an older event the index has not caught up with?
                try:
                    found = self.recorded([ref], True).get(ref)
                except DatabaseError:
                    continue  # the index out of reach: the write goes ahead (`gitmem verify`)
                tenant = found[0] if found else None
            if tenant != tenant_id:  # none, or another's: tenants never see each other's ids
                raise ValidationError(f"{ref} is not in the store (a dangling reference); "
                                      "cite an event that was recorded", field="refs")

    def _new(self, prepared: list[_Prepared], objs: Sequence[Mapping[str, Any]],
             known: Mapping[str, Recorded]) -> list[_Prepared]:
        """The prepared events to write: an id the caller chose must not be another
        event's (in this batch or recorded already: `known`); the same event again
        (same id, tenant, time and content: a retried write) is not written twice."""
        named = {p.event.id: n for n, (p, obj) in enumerate(zip(prepared, objs, strict=True))
                 if obj.get("id")}
        if not named:
            return prepared
        first: dict[str, int] = {}
        for n, p in enumerate(prepared):
            if first.setdefault(p.event.id, n) != n:
                raise Repeated(n, ValidationError(
                    f"{p.event.id} is also event {first[p.event.id] + 1} of this write; "
                    "event ids never repeat", field="id"))
        for event_id in named.keys() & known.keys():
            event = prepared[named[event_id]].event
            if not retried(objs[named[event_id]], event, known[event_id], event.hash):
                tenant, ts, held = known[event_id]
                other = (f"at another time ({ts.isoformat()})" if (tenant, held) == (
                    event.tenant_id, event.hash) else "with other content")
                raise Repeated(named[event_id], ValidationError(
                    f"{event_id} is already recorded {other}; event ids never "
                    "repeat (leave `id` out and one is assigned)", field="id"))
        return [p for p in prepared if p.event.id not in known or p.event.id not in named]

    def decide(self, text: str, refs: list[str], *, supersedes: Iterable[str] = (),
               rationale: Iterable[str] = (), title: str | None = None, scope: str = "project",
               constraints: Iterable[str] = (), alternatives: Iterable[str] = (),
               consequences: Iterable[str] = (), confidence: float | None = None,
               decision_id: str | None = None, **event_fields: Any) -> Event:
        """Record a decision: a `decision` event plus its `decisions/dec_*.md`
        (`decision_id`: its id, chosen by the caller as an event's may be; default new).
        What is given is stored or refused: an empty title is never dropped unsaid."""
        content: dict[str, Any] = {"text": text, "scope": scope}
        if decision_id is not None:
            content["decision_id"] = decision_id
        if title is not None:
            content["title"] = check_text(title, "title")
        for key, values in (("supersedes", check_texts(supersedes, "supersedes")),
                            ("rationale", check_texts(rationale, "rationale")),
                            ("constraints", check_texts(constraints, "constraints")),
                            ("alternatives", check_texts(alternatives, "alternatives")),
                            ("consequences", check_texts(consequences, "consequences")),
                            ("confidence", confidence)):
            if values not in ([], None):
                content[key] = values
        return self.record({**event_fields, "kind": "decision", "refs": refs,
                            "content": content, "actor": event_fields.get("actor")
                            or {"type": "agent", "id": event_fields.get("agent_id", "agent")}})

    def task(self, title: str | None = None, *, status: str | None = None,
             task_id: str | None = None, details: str | None = None,
             owner: str | None = None, **event_fields: Any) -> Event:
        """Create or update a task (`task_id`: the task's, new or existing): a
        `task_update` event plus `tasks/tsk_*.md`. What an update does not give (None:
        the title too) stays as it was, and "" clears details or owner; a new task needs
        a title, and its `status` is open. An update that changes nothing is refused: its
        event would say the task was updated, and cite it, for nothing."""
        given = (title, status, details, owner)
        if task_id and all(v is None for v in given) and not any(
                event_fields.get(name) for name in TASK_EVENT_CHANGES):
            raise ValidationError(f"nothing to change in task {task_id}; give one of title, "
                                  "status, details, owner, refs, tags or sensitivity")
        if title is not None:
            check_text(title, "title")
        elif task_id is None:
            raise ValidationError("a new task needs a title", field="title")
        content: dict[str, Any] = {} if title is None else {"title": title}
        if status is not None:
            content["status"] = status
        if task_id is not None:  # "" is refused, never read as "a new task"
            content["task_id"] = task_id
        if details is not None:
            content["text"] = details
        if owner is not None:
            content["owner"] = owner
        try:
            return self.record({**event_fields, "kind": "task_update", "content": content})
        except ValidationError as exc:
            raise _named_as_given(exc, _TASK_ARGS) from None

    def handoff(self, to_agent: str, task: str, *, from_agent: str | None = None,
                constraints: Iterable[str] = (), decisions: Iterable[str] = (),
                required_files: Iterable[str] = (), open_questions: Iterable[str] = (),
                refs: Iterable[str] = (), tenant_id: str | None = None,
                ts: str | None = None) -> Handoff:
        """Write a handoff packet `handoffs/hof_*.yaml` (never overwrites); `from_agent`
        left out (None, or "" as the scenario steps give it) is unknown, given it is a
        name as `to_agent` is."""
        agents = [("to_agent", to_agent)] + ([] if from_agent is None
                                             else [("from_agent", from_agent)])
        check_text(task, "task")
        for name, value in agents:
            check_text(value, name)
        constraints, decisions = (check_texts(constraints, "constraints"),
                                  check_texts(decisions, "decisions"))
        required_files = check_texts(required_files, "required_files")
        open_questions, refs = (check_texts(open_questions, "open_questions"),
                                check_texts(refs, "refs"))
        self._no_secret_names([("tenant_id", tenant_id), *agents])
        for name, value in agents:  # after the secret check: a name's error quotes it
            check_name(value, name)
        when = self._now() if ts is None else parse_ts(ts)
        redact = self.policies.privacy.redact  # every free-text field, as for events
        packet = Handoff(
            id=ids.new_id("hof", when), ts=format_ts(when),
            tenant_id=name_or(tenant_id, self.policies.manifest.default_tenant, "tenant_id"),
            to_agent=to_agent, task=redact(task), from_agent=from_agent or "",
            constraints=tuple(map(redact, constraints)), decisions=tuple(decisions),
            required_files=tuple(map(redact, required_files)),
            open_questions=tuple(map(redact, open_questions)), refs=tuple(refs))
        text = handoff_to_text(packet)
        rel = f"handoffs/{packet.id}.yaml"
        _check_packet(text, rel, packet.tenant_id)
        for dec in packet.decisions:
            self.files.require_decision(dec, "decisions", packet.tenant_id, {})
        # what it cites is there, and its tenant's: as for an event's refs
        self.files.require_records(packet.refs, {}, packet.tenant_id)
        self._require_events(packet.refs, packet.tenant_id, {}, {})
        self._publish([Staged(self.store / rel, text.encode())])
        return packet

    # ------------------------------------------------------------------ preparation

    def _complete(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """The event with every field: a field left out or null takes its default;
        any other value is the caller's, checked here or by `parse_event` (so an
        empty string or a 0 is refused, never taken for "the default")."""
        if not isinstance(obj, Mapping):
            raise ValidationError(f"expected a JSON object, got {json_kind(obj)}")
        unknown = sorted(set(obj) - set(EVENT_FIELDS))
        if unknown:
            raise ValidationError(f"unknown field; expected only {', '.join(EVENT_FIELDS)}",
                                  field=unknown[0])
        # NUL, lone surrogates, deep nesting: refused before anything walks the values
        check_storable(dict(obj))
        given = {name: value for name, value in obj.items() if value is not None}
        for name in ("id", "ts", "tenant_id", "session_id", "agent_id", "channel", "kind",
                     "sensitivity", "hash"):  # some are used before parse_event checks them
            if name in given and not isinstance(given[name], str):
                raise ValidationError(f"expected a string, got {json_kind(given[name])}",
                                      field=name)
        content = given.get("content", {})
        for name in ("decision_id", "task_id", "summary_id"):  # an id given is never minted
            value = content.get(name) if isinstance(content, dict) else None
            if value is not None and not (isinstance(value, str) and value):
                raise ValidationError(f"expected an id, got {shown(value)}",
                                      field=f"content.{name}")
        when = parse_ts(given["ts"]) if "ts" in given else self._now()
        full = {
            "id": given["id"] if "id" in given else ids.new_id("evt", when),
            "ts": given["ts"] if "ts" in given else format_ts(when),
            "tenant_id": given.get("tenant_id", self.policies.manifest.default_tenant),
            "session_id": given.get("session_id", "default"),
            "agent_id": given.get("agent_id", "agent"),
            "channel": given.get("channel", "private"),
            "actor": given.get("actor"),
            "kind": given.get("kind", "message"),
            "content": content,
            "refs": given_list(given.get("refs"), "refs"),
            "tags": given_list(given.get("tags"), "tags"),
            "sensitivity": given.get("sensitivity", "none"),
            "hash": "sha256:" + "0" * 64,
        }
        check_filled(full["tags"], "tags")
        if full["actor"] is None:
            full["actor"] = default_actor(full["kind"], full["agent_id"], content)
        elif isinstance(full["actor"], str):
            kind, _, name = full["actor"].partition(":")
            full["actor"] = {"type": kind, "id": name}
        digest = given.get("hash")
        if digest is not None and isinstance(full["content"], dict):
            expected = content_hash(str(full["kind"]), full["content"])
            if digest != expected:
                raise ValidationError(f"does not match the content (expected {expected})",
                                      field="hash")
        return full

    def _prepare(self, obj: Mapping[str, Any], staging: Staging,
                 known: Mapping[str, Recorded], written: Mapping[str, str]) -> _Prepared:
        full = self._complete(obj)
        if full["sensitivity"] in self.policies.privacy.never_store:
            raise PrivacyError(
                f"sensitivity {full['sensitivity']!r} is never stored "
                "(policies/privacy.yaml store.never_store_sensitivity); nothing was written. "
                "Record a redacted version with a lower sensitivity instead.")
        if not isinstance(full["content"], dict):
            raise ValidationError(f"expected an object, got {json_kind(full['content'])}",
                                  field="content")
        actor = full["actor"]
        self._no_secret_names([
            ("tenant_id", full["tenant_id"]), ("session_id", full["session_id"]),
            ("agent_id", full["agent_id"]),
            ("actor.id", actor.get("id") if isinstance(actor, dict) else None)])
        full["content"] = _redact(full["content"], self.policies)
        full["tags"] = _redact(full["tags"], self.policies)
        staged: list[Staged] = []
        kind = full["kind"]
        id_field = {"decision": "decision_id", "task_update": "task_id"}.get(kind)
        minted = id_field is not None and not full["content"].get(id_field)
        if kind in ("tool_result", "artifact"):
            claimed = full["content"].get("artifact_id")
            made = (self.files.excerpt if kind == "tool_result"
                    else self.files.artifact)(full["content"])
            if claimed is not None and (not made or full["content"]["artifact_id"] != claimed):
                # an artifact is named by the output this write stores, never by the
                # caller: a named one could be another tenant's
                raise ValidationError("is set by the write path from the output it stores; "
                                      "leave it out and give `output` (`data` for an "
                                      "artifact)", field="content.artifact_id")
            staged += made
        elif kind == "task_update" and not full["content"].get("task_id"):
            full["content"]["task_id"] = self.files.new_task_id(full)  # given a title
        event = parse_event(full)  # every type and enum checked before files are derived
        self.files.require_records(event.refs, staging, event.tenant_id)
        derive = {"decision": self.files.decision, "task_update": self.files.task,
                  "summary": self.files.summary}.get(kind)
        if derive is not None and retried(obj, event, known.get(event.id),
                                           digest := content_hash(kind, full["content"])):
            # the same event written again (a retry): its file is there already, and
            # a decision or summary is never written twice
            return _Prepared(replace(event, hash=digest))
        if derive is not None:
            item = derive(full, parse_ts(full["ts"]), staging)  # may add its id to the content
            staging[item.target] = item
            item.fresh = minted
            staged.append(item)
        self._require_events(event.refs, event.tenant_id, known, written)
        full["hash"] = content_hash(kind, full["content"])
        if derive is None:  # the content is as validated: only the hash is new
            return _Prepared(replace(event, hash=full["hash"]), staged)
        return _Prepared(parse_event(full), staged)

    def _no_secret_names(self, named: Sequence[tuple[str, Any]]) -> None:
        """Refuse a secret in a field that names something (redacting it would merge
        two sessions or agents into one): such fields are stored as given."""
        for name, value in named:
            pattern = self.policies.privacy.find_secret(value) if isinstance(value, str) else None
            if pattern is not None:
                raise PrivacyError(f"field '{name}' matches the redaction pattern {pattern!r} "
                                   "of policies/privacy.yaml: a name is never redacted, so "
                                   "nothing was written; use a name that is not a secret")

    # ------------------------------------------------------------------ commit

    def _require_store(self, paths: Iterable[Path] = ()) -> None:
        """Refuse to write where the store was (moved or deleted under the daemon: a new,
        partial store), or through a symbolic link to a folder (`store.refuse_linked`)."""
        if not (self.store / "manifest.json").is_file():
            raise StoreError(f"the store {self.store} is gone (moved or deleted?): nothing "
                             "was written; stop the daemon serving it (`gitmem daemon "
                             "stop`) and start one from where the store is now")
        refuse_linked(self.store, paths)

    def _commit(self, prepared: list[_Prepared]) -> None:
        by_file: dict[str, list[Event]] = {}
        days: dict[str, str] = {}  # the timestamp's date part -> its day file
        for p in prepared:
            rel = days.get(p.event.ts[:10])
            if rel is None:
                rel = days[p.event.ts[:10]] = day_file_rel(p.event.when)
            by_file.setdefault(rel, []).append(p.event)
        self._require_store(self.store / rel for rel in by_file)
        # Every line of every file is encoded before the first byte is written (what was
        # validated encodes: check_storable refuses unpaired surrogates)
        encoded = {rel: [e.to_line().encode("utf-8") for e in events]
                   for rel, events in by_file.items()}
        temps = self._stage(_last_per_target(prepared))
        try:
            ids_by_file = {rel: [e.id for e in events] for rel, events in by_file.items()}
            written = append_batch(self.store, encoded, ids_by_file, self.on_appending)
        except BaseException:
            discard([tmp for tmp, _ in temps])
            raise
        appends = [(rel, Appended(offset, data, tuple(by_file[rel]), stat, before))
                   for rel, offset, data, before, stat in written]
        for target, reason in self._place(temps).items():  # the write has happened
            logger.error("the event is recorded, but putting %s in place failed: %s; "
                         "`gitmem sync` puts it in place once it is %.0f s old", target,
                         reason, GRACE_S)
        for rel, appended in appends:  # told after the files, so both are indexed together
            if self.on_append is not None:
                try:
                    self.on_append(rel, appended)
                except Exception:  # the lines are durable: the indexer reads them
                    logger.exception("handing %s's new lines to the indexer failed", rel)

    def _publish(self, staged: list[Staged]) -> None:
        """Put files that come with no event in place (a handoff). With no event line to
        commit them, a file that cannot be put in place is removed and the call fails."""
        self._require_store()
        temps = self._stage([(item, staged_prefix(item.target)) for item in staged])
        failed = self._place(temps)
        if failed:
            discard([tmp for tmp, item in temps if item.target in failed])
            target, reason = next(iter(failed.items()))
            raise StoreError(f"putting {target} in place failed: {reason}; nothing was "
                             "written")

    def _stage(self, staged: list[tuple[Staged, str]]) -> list[tuple[Path, Staged]]:
        """Each file written and fsynced under a temporary name beginning with its
        prefix, beside its target (`appends.stage_file`); none left when one fails."""
        temps: list[tuple[Path, Staged]] = []
        refuse_linked(self.store, (item.target for item, _ in staged))
        try:
            for item, prefix in staged:
                if item.target.exists() and not item.replace_existing:
                    if item.target.parent.name != item.target.name[:2]:  # not an artifact
                        raise StoreError(f"{item.target} already exists; ids never repeat, "
                                         "so this is a clash: retry the write")
                    continue  # content-addressed artifact already present
                temps.append((stage_file(item.target, item.data, prefix), item))
        except BaseException:
            discard([tmp for tmp, _ in temps])
            raise
        return temps

    def _place(self, temps: list[tuple[Path, Staged]]) -> dict[Path, str]:
        """Put the staged files in place (`appends.place_staged`) and tell `on_place`;
        why each target that could not be put in place was not."""
        failed = place_staged([(tmp, item.target) for tmp, item in temps])
        placed = [item for _, item in temps if item.target not in failed]
        if self.on_place is None or not placed:
            return failed
        stats = ((item, file_stat(item.target)) for item in placed)
        told = [Placed(item.target.relative_to(self.store).as_posix(), st,
                       content_digest(item.data), item.tenant, item.fresh)
                for item, st in stats if st is not None]  # None: gone already
        try:
            self.on_place(told)
        except Exception:  # the files are durable: their file events queue them
            logger.exception("handing the files put in place to the indexer failed")
        return failed


def _last_per_target(prepared: Sequence[_Prepared]) -> list[tuple[Staged, str]]:
    """The files a write stages, each with the name it is staged under: one per target,
    as the write's last event leaves it (a task created, then updated in the same write,
    is staged once, new), named for that event and its day file, so that what a crash
    leaves is put in place or removed by `recovery.finish` whole."""
    last: dict[Path, tuple[Staged, str]] = {}
    for p in prepared:
        for item in p.files:
            before = last.get(item.target)
            if before is not None and before[0].fresh and not item.fresh:
                item = replace(item, fresh=True)
            last[item.target] = (item, staged_prefix(item.target, p.event.id, p.event.ts[:10]))
    return list(last.values())


def _named_as_given(exc: ValidationError, names: Mapping[str, str]) -> FormatError:
    """`exc` with each problem of the write's own (no path: not a file on disk) named by
    the caller's argument (`names`: event field -> argument), not the event's field."""
    if exc.path or not any(p.field in names for p in exc.problems):
        return exc
    first, *rest = [ValidationError(p.detail, field=names.get(p.field or "", p.field))
                    for p in exc.problems]
    return first.with_others(rest)


def _check_packet(text: str, rel: str, tenant: str) -> None:
    """The packet as its file would be read back, each problem named by the caller's
    field alone: the file is never written, so a `path:line` would point nowhere."""
    try:
        parse_handoff(text, rel, tenant)
    except FormatError as exc:
        first, *rest = [ValidationError(p.detail, field=p.field) for p in exc.problems]
        raise first.with_others(rest) from None
