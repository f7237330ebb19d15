"""Does a summary still agree with what it cites? (SCN-009, P4)

A summary is written once and never rewritten, so it goes stale: it may
state a decision as current that a later decision superseded, or cite events
that do not exist or belong to another session. `summary_conflicts` is the
one check, a pure function; `flag_summaries` runs it on the summaries an ACB
is about to pack (build_acb attaches the conflicts to the item, its text says
so, and the summary is listed under an omission-like `conflict` entry), and
`check_tree` runs it over the
files of a whole store for `gitmem verify`.

Conflict kinds:
- superseded_decision: `decisions` names a decision that is superseded
  (by a later decision's `supersedes`, or by `status: superseded`). With
  `stale: true` the summary was right when written and the world moved on
  (a warning for `gitmem verify`); without, it was already wrong (an error);
- unknown_decision: `decisions` names a decision that does not exist;
- missing_ref: `refs` names an id that exists nowhere in the tenant's memory;
- foreign_session_ref: a session summary cites an event of another session.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from gitmem.context import TenantDecisions, resolve_decisions
from gitmem.db import Database
from gitmem.documents import (
    Decision,
    Handoff,
    Summary,
    Task,
    field_line,
    parse_decision,
    parse_handoff,
    parse_summary,
    parse_task,
)
from gitmem.errors import FormatError, UnreadableFileError
from gitmem.records import Event, iter_events, parse_ts
from gitmem.store import iter_store_files, read_regular

NO_SESSION = ""  # a cited record that has no session (decision, task, artifact)


@dataclass(frozen=True)
class SummaryFacts:
    """What the check needs to know about one summary."""

    summary_id: str
    session_id: str
    scope: str
    decisions: tuple[str, ...]
    refs: tuple[str, ...]
    ts: datetime | None = None


# The ways a summary can disagree with what it cites (`summary_conflicts`' kinds).
CONFLICT_KINDS = ("unknown_decision", "superseded_decision", "missing_ref",
                  "foreign_session_ref")


def summary_conflicts(summary: SummaryFacts, chain: TenantDecisions,
                      ref_sessions: Mapping[str, str]) -> list[dict[str, Any]]:
    """Every way `summary` disagrees with the decisions and records it cites.

    `ref_sessions` maps each cited id that exists to its session
    (NO_SESSION for records without one); an id absent from it is missing.
    """
    found: list[dict[str, Any]] = []
    for decision_id in summary.decisions:
        if decision_id not in chain.by_id:
            found.append({"kind": "unknown_decision", "decision": decision_id})
        elif decision_id in chain.superseded_by:
            since = chain.superseded_at.get(decision_id)
            stale = since is None or summary.ts is None or since > summary.ts
            found.append({"kind": "superseded_decision", "decision": decision_id,
                          "superseded_by": chain.superseded_by[decision_id] or None,
                          "stale": stale})
    for ref in summary.refs:
        if ref not in ref_sessions:
            found.append({"kind": "missing_ref", "ref": ref})
            continue
        session = ref_sessions[ref]
        if (summary.scope == "session" and summary.session_id and session != NO_SESSION
                and session != summary.session_id):
            found.append({"kind": "foreign_session_ref", "ref": ref, "session": session})
    return found


def index_conflicts(db: Database, tenant: str, summary_ids: Sequence[str],
                    chain: TenantDecisions) -> dict[str, list[dict[str, Any]]]:
    """Conflicts of the given summaries, read from the index (only those with any)."""
    if not summary_ids:
        return {}
    out: dict[str, list[dict[str, Any]]] = {}
    for row in db.fetchall("summary_sources", {"tenant": tenant, "ids": list(summary_ids)}):
        facts = SummaryFacts(row["summary_id"], row["session_id"], row["scope"],
                             tuple(row["decisions"]), tuple(row["refs"]), row["ts"])
        sessions = {ref: session or NO_SESSION for ref, session in row["ref_sessions"].items()}
        conflicts = summary_conflicts(facts, chain, sessions)
        if conflicts:
            out[facts.summary_id] = conflicts
    return out


def flag_summaries(db: Callable[[], Database], tenant: str, summary_ids: Sequence[str],
                   chain: Callable[[], TenantDecisions]) -> dict[str, list[dict[str, Any]]]:
    """The conflicts of the summaries an ACB is about to pack, by id (those with any):
    their item carries them, and their text says so, counted in the budget.

    The cited event's session stays out: the event may be one the request's channel
    may not load (the ref's id says which, as an omission would). Costs nothing
    without summaries (the fast path)."""
    if not summary_ids:
        return {}
    found = index_conflicts(db(), tenant, sorted(summary_ids), chain())
    return {summary_id: [{k: v for k, v in c.items() if k != "session"} for c in conflicts]
            for summary_id, conflicts in found.items()}


# --------------------------------------------------------------------------- whole tree

@dataclass
class Tree:
    """The records of a store's files, as the checks need them.

    Files that do not parse are listed in `problems` and otherwise skipped.
    """

    events: list[Event] = field(default_factory=list)
    decisions: dict[str, tuple[str, Decision]] = field(default_factory=dict)   # id -> (path, d)
    summaries: dict[str, tuple[str, str, Summary]] = field(default_factory=dict)  # +text
    tasks: dict[str, tuple[str, Task]] = field(default_factory=dict)
    handoffs: dict[str, tuple[str, Handoff]] = field(default_factory=dict)
    ref_sessions: dict[str, dict[str, str]] = field(default_factory=dict)  # tenant -> id -> s
    problems: list[FormatError] = field(default_factory=list)

    def known(self, tenant: str) -> Mapping[str, str]:
        """Every id that exists in `tenant` -> its session (NO_SESSION if none)."""
        return self.ref_sessions.get(tenant, {})

    def chain(self, tenant: str) -> TenantDecisions:
        """The tenant's decisions with supersede chains resolved."""
        return resolve_decisions([
            {"decision_id": d.id, "ts": parse_ts(d.ts), "status": d.status,
             "supersedes": list(d.supersedes)}
            for _, d in self.decisions.values() if d.tenant_id == tenant])


def load_tree(store: Path, default_tenant: str) -> Tree:
    """Parse every record file of a store (events, decisions, summaries, tasks, handoffs)."""
    tree = Tree()

    def exists(tenant: str, record_id: str, session: str = NO_SESSION) -> None:
        tree.ref_sessions.setdefault(tenant, {})[record_id] = session

    for rel, kind in iter_store_files(store):
        try:
            data = read_regular(store / rel)
        except FileNotFoundError:  # gone since it was listed
            continue
        except UnreadableFileError as exc:  # a FIFO, a link to nothing: never opened
            tree.problems.append(FormatError(f"cannot be read: {exc.reason}", path=rel))
            continue
        if kind == "events":
            for _, event in iter_events(data, rel):
                if isinstance(event, FormatError):
                    tree.problems.append(event)
                    continue
                tree.events.append(event)
                exists(event.tenant_id, event.id, event.session_id)
                if "artifact_id" in event.content:
                    exists(event.tenant_id, str(event.content["artifact_id"]))
            continue
        # universal newlines, as a text-mode read gave them
        text = data.decode("utf-8", errors="replace").replace("\r\n", "\n").replace("\r", "\n")
        try:
            if kind == "decision":
                d = parse_decision(text, rel, default_tenant)
                tree.decisions[d.id] = (rel, d)
                exists(d.tenant_id, d.id)
            elif kind == "task":
                t = parse_task(text, rel, default_tenant)
                tree.tasks[t.id] = (rel, t)
                exists(t.tenant_id, t.id)
            elif kind == "summary":
                s = parse_summary(text, rel, default_tenant)
                tree.summaries[s.id] = (rel, text, s)
                exists(s.tenant_id, s.id, s.session_id)
            elif kind == "handoff":
                h = parse_handoff(text, rel, default_tenant)
                tree.handoffs[h.id] = (rel, h)
                exists(h.tenant_id, h.id)
        except FormatError as exc:
            tree.problems += [problem.at(rel, 1) for problem in exc.problems]
    return tree


def tree_conflicts(tree: Tree) -> dict[str, list[dict[str, Any]]]:
    """summary id -> its conflicts, for every summary of the tree that has any."""
    chains: dict[str, TenantDecisions] = {}
    out: dict[str, list[dict[str, Any]]] = {}
    for summary_id, (_, _, s) in sorted(tree.summaries.items()):
        if s.tenant_id not in chains:
            chains[s.tenant_id] = tree.chain(s.tenant_id)
        facts = SummaryFacts(s.id, s.session_id, s.scope, s.decisions, s.refs, parse_ts(s.ts))
        conflicts = summary_conflicts(facts, chains[s.tenant_id], tree.known(s.tenant_id))
        if conflicts:
            out[summary_id] = conflicts
    return out


def check_tree(store: Path, default_tenant: str) -> list[FormatError]:
    """Summary conflicts over the files of a store, for `gitmem verify`.

    Each problem names the summary file and the line of the field at fault
    (files that do not parse are verify's own business and are skipped here).
    """
    tree = load_tree(store, default_tenant)
    problems: list[FormatError] = []
    for summary_id, conflicts in tree_conflicts(tree).items():
        rel, text, _ = tree.summaries[summary_id]
        for conflict in conflicts:
            key = "decisions" if "decision" in conflict else "refs"
            problems.append(FormatError(describe(conflict), path=rel,
                                        line=field_line(text, key), field=key,
                                        severity="warning" if conflict.get("stale")
                                        else "error"))
    return problems


def describe(conflict: Mapping[str, Any]) -> str:
    """One sentence for people, with the next step."""
    kind = conflict["kind"]
    if kind == "superseded_decision":
        by = conflict.get("superseded_by")
        when = ("; it was current when the summary was written" if conflict.get("stale")
                else "; it already was when the summary was written")
        return (f"states {conflict['decision']} as current, but it is superseded"
                + (f" by {by}" if by else "") + when + ": write a new summary")
    if kind == "unknown_decision":
        return f"states {conflict['decision']} as current, but no such decision exists"
    if kind == "missing_ref":
        return f"cites {conflict['ref']}, which exists nowhere in this memory"
    if kind == "foreign_session_ref":
        return (f"is a session summary but cites {conflict['ref']} of session "
                f"{conflict['session']!r}; use scope: episode or cite this session's events")
    return str(kind)
