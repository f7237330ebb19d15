"""The assertions a scenario can make, each a check over real files, index and ACBs.

`evaluate` runs one assertion of a scenario (its `$names` resolved) and
returns None when it holds, else a failure naming the assertion, what was
expected, what was found and an excerpt of the ACB it looked at.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import traceback
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from gitmem import consistency, indexer
from gitmem.config import Config
from gitmem.errors import GitmemError, ScenarioError
from gitmem.harness import percentile, timing_stats
from gitmem.memory import Memory
from gitmem.packing import within_caps
from gitmem.records import Event, canonical_json, event_text
from gitmem.scenario import ASSERTIONS
from gitmem.steps import Failure, Run

Check = Callable[[Run, dict[str, Any]], None]
EXCERPT_TEXT = 100


def evaluate(run: Run, spec: Mapping[str, Any], where: str) -> dict[str, Any] | None:
    """None if the assertion holds, else a failure record for the report."""
    kind = str(spec["type"])
    params: dict[str, Any] = {k: v for k, v in spec.items() if k not in ("type", "name")}
    failure: dict[str, Any] = {"where": where, "assertion": kind, "params": params}
    if spec.get("name"):
        failure["name"] = spec["name"]
    try:
        resolved = run.resolve({k: v for k, v in params.items() if k != "acb"})
        if "acb" in params:  # names an ACB (`as:` of an acb step), not an id
            resolved["acb"] = params["acb"]
        CHECKS[kind](run, resolved)
    except Failure as exc:
        failure.update(expected=exc.expected, actual=exc.actual)
        if exc.excerpt is not None:
            failure["excerpt"] = exc.excerpt
        return failure
    except GitmemError as exc:
        failure["error"] = f"{type(exc).__name__}: {exc}"
        return failure
    except Exception as exc:  # a harness or product bug: report it with its origin
        failure["error"] = f"{type(exc).__name__}: {exc}"
        failure["traceback"] = traceback.format_exc(limit=-4)
        return failure
    return None


# --------------------------------------------------------------------------- ACB helpers

def excerpt(acb: Mapping[str, Any], section: str | None = None) -> dict[str, Any]:
    """A compact view of an ACB for failure messages: items per section, omissions."""
    sections = {}
    for s in acb["sections"]:
        if section and s["name"] != section:
            continue
        sections[s["name"]] = [
            f"{item['id']} [{item['type']}] {item['text'][:EXCERPT_TEXT]!r}"
            + (f" conflicts={item['conflicts']}" if item.get("conflicts") else "")
            for item in s["items"]]
    omissions = [{k: (v[:10] if isinstance(v, list) else v) for k, v in o.items()}
                 for o in acb["omissions"]]
    return {"acb_id": acb["acb_id"], "token_used_est": acb["token_used_est"],
            "path": acb["provenance"].get("path"), "sections": sections,
            "omissions": omissions}


def _items(acb: Mapping[str, Any], section: str | None) -> list[dict[str, Any]]:
    if section:
        found = [s for s in acb["sections"] if s["name"] == section]
        if not found:
            raise Failure(f"a section {section!r}", [s["name"] for s in acb["sections"]],
                          excerpt(acb))
        return list(found[0]["items"])
    return [item for s in acb["sections"] for item in s["items"]]


def _cites(item: Mapping[str, Any], ref: str) -> bool:
    return ref in (item["id"], item.get("source_id")) or ref in item.get("refs", ())


def _matches(item: Mapping[str, Any], p: Mapping[str, Any]) -> bool:
    return (("contains" not in p or str(p["contains"]) in item["text"])
            and ("id" not in p or p["id"] in (item["id"], item.get("source_id")))
            and ("item_type" not in p or item["type"] == p["item_type"]))


def _acb(run: Run, p: Mapping[str, Any]) -> dict[str, Any]:
    return run.acb(p.get("acb")).acb


def acb_max_tokens(run: Run, p: dict[str, Any]) -> None:
    """The bundle (and the sum of its items) stays within `max` tokens."""
    acb = _acb(run, p)
    summed = sum(item["token_est"] for s in acb["sections"] for item in s["items"])
    used = max(acb["token_used_est"], summed)
    if used > p["max"]:
        raise Failure(f"token_used_est <= {p['max']}", used, excerpt(acb))


def acb_within_caps(run: Run, p: dict[str, Any]) -> None:
    """No section over its policy's cap (the caps scaled to the budget bound the first
    pass only); the whole under max_tokens - reserve."""
    acb = _acb(run, p)
    budget = acb["provenance"]["budget"]
    caps = {name: c.max_tokens for name, c in run.memory.policies.budgets.sections.items()}
    over = {s["name"]: s["token_est"] for s in acb["sections"]
            if s["name"] in caps and not within_caps(s, caps[s["name"]])}
    if over or acb["token_used_est"] > budget["available"]:
        raise Failure({"caps": {n: caps[n] for n in over}, "available": budget["available"]},
                      {"sections": over, "token_used_est": acb["token_used_est"]})


def acb_section_contains(run: Run, p: dict[str, Any]) -> None:
    """An item in `section` (or any) matches contains/id/item_type (exactly `count` if
    given)."""
    acb = _acb(run, p)
    found = [i for i in _items(acb, p.get("section")) if _matches(i, p)]
    if ("count" in p and len(found) != p["count"]) or ("count" not in p and not found):
        wanted = {k: p[k] for k in ("section", "contains", "id", "item_type") if k in p}
        raise Failure(f"{p.get('count', '>= 1')} item(s) matching {wanted}",
                      f"{len(found)} item(s)", excerpt(acb, p.get("section")))


def acb_section_not_contains(run: Run, p: dict[str, Any]) -> None:
    """No item in `section` (or any) matches contains/id/item_type."""
    acb = _acb(run, p)
    found = [i for i in _items(acb, p.get("section")) if _matches(i, p)]
    if found:
        wanted = {k: p[k] for k in ("section", "contains", "id", "item_type") if k in p}
        raise Failure(f"no item matching {wanted}", [i["id"] for i in found],
                      excerpt(acb, p.get("section")))


def acb_contains_ref(run: Run, p: dict[str, Any]) -> None:
    """Some item is, or cites, `ref`."""
    acb = _acb(run, p)
    if not any(_cites(i, p["ref"]) for i in _items(acb, p.get("section"))):
        raise Failure(f"an item that is or cites {p['ref']}", "none", excerpt(acb))


def acb_not_contains_ref(run: Run, p: dict[str, Any]) -> None:
    """No item is, or cites, `ref`."""
    acb = _acb(run, p)
    found = [i["id"] for i in _items(acb, p.get("section")) if _cites(i, p["ref"])]
    if found:
        raise Failure(f"no item that is or cites {p['ref']}", found, excerpt(acb))


def acb_sections(run: Run, p: dict[str, Any]) -> None:
    """Non-empty sections are among `only`; each of `non_empty` has items."""
    acb = _acb(run, p)
    filled = [s["name"] for s in acb["sections"] if s["items"]]
    stray = [n for n in filled if "only" in p and n not in p["only"]]
    empty = [n for n in p.get("non_empty", []) if n not in filled]
    if stray or empty:
        raise Failure({"only": p.get("only"), "non_empty": p.get("non_empty")},
                      {"non_empty_sections": filled}, excerpt(acb))


def acb_path(run: Run, p: dict[str, Any]) -> None:
    """The build took the `fast`, `retrieval` or `handoff` path."""
    acb = _acb(run, p)
    if acb["provenance"].get("path") != p["path"]:
        raise Failure(f"path {p['path']!r}", acb["provenance"].get("path"), excerpt(acb))


def item_max_tokens(run: Run, p: dict[str, Any]) -> None:
    """No item (of `item_type`, in `section`) is larger than `max` tokens."""
    acb = _acb(run, p)
    big = {i["id"]: i["token_est"] for i in _items(acb, p.get("section"))
           if i["token_est"] > p["max"]
           and ("item_type" not in p or i["type"] == p["item_type"])}
    if big:
        raise Failure(f"every item <= {p['max']} tokens", big, excerpt(acb))


def acb_candidate_scan_max(run: Run, p: dict[str, Any]) -> None:
    """Retrieval looked at no more than `max` candidates."""
    acb = _acb(run, p)
    size = acb["provenance"].get("candidate_pool_size", 0)
    if size > p["max"]:
        raise Failure(f"candidate_pool_size <= {p['max']}", size)


def no_duplicates(run: Run, p: dict[str, Any]) -> None:
    """No id appears twice in the bundle, and no text but as turns of the recent window
    (each an event of its own: "no" to two questions is two answers)."""
    acb = _acb(run, p)
    seen_ids: dict[str, int] = {}
    seen_text: dict[str, tuple[str, bool]] = {}  # text -> the first id, whether a turn
    twice: list[str] = []
    for part in acb["sections"]:
        turn = part["name"] == "recent_window"
        for item in part["items"]:
            seen_ids[item["id"]] = seen_ids.get(item["id"], 0) + 1
            if seen_ids[item["id"]] == 2:
                twice.append(f"id {item['id']}")
            first, was_turn = seen_text.setdefault(item["text"], (item["id"], turn))
            if first != item["id"] and not (turn and was_turn):
                twice.append(f"text of {first} again in {item['id']}")
    if twice:
        raise Failure("every item once", twice, excerpt(acb))


def omission(run: Run, p: dict[str, Any]) -> None:
    """An omission with `reason` (naming `ref`; with a stored artifact) exists, or not."""
    acb = _acb(run, p)
    entries = [o for o in acb["omissions"] if o["reason"] == p["reason"]]
    if "ref" in p:
        entries = [o for o in entries if p["ref"] in o["candidates"]]
    if p.get("artifact"):
        entries = [o for o in entries if o.get("artifact_id")]
        for entry in entries:
            size = len(run.memory.get_artifact(entry["artifact_id"]))
            limit = run.memory.policies.budgets.max_excerpt_bytes
            if size <= limit:
                raise Failure(f"artifact {entry['artifact_id']} holding the full output "
                              f"(> {limit} bytes)", f"{size} bytes")
    count = sum(o.get("count", len(o["candidates"])) for o in entries)
    wanted = {k: p[k] for k in ("reason", "ref", "artifact") if k in p}
    if p.get("present", True):
        if not entries or count < p.get("min", 1):
            raise Failure(f"an omission {wanted} with >= {p.get('min', 1)} candidate(s)",
                          acb["omissions"] or "no omissions", excerpt(acb))
    elif entries:
        raise Failure(f"no omission {wanted}", entries, excerpt(acb))


def pinned_included(run: Run, p: dict[str, Any]) -> None:
    """Every pinned item the channel may load is in the bundle (or just `refs`)."""
    built = run.acb(p.get("acb"))
    acb, request = built.acb, built.request
    expected = list(p["refs"]) if "refs" in p else _pinned(run, request)
    if not expected:
        raise Failure("at least one pinned item to check", "nothing is pinned")
    ids = {i["id"] for i in _items(acb, None)} | {i.get("source_id") for i in _items(acb, None)}
    missing = [ref for ref in expected if ref not in ids]
    if missing:
        raise Failure(f"pinned {expected}", f"missing {missing}", excerpt(acb))


def _pinned(run: Run, request: Mapping[str, Any]) -> list[str]:
    memory = run.memory
    channel = request.get("channel", "private")
    rule = memory.policies.privacy.rule(channel)
    tenant = request.get("tenant_id") or memory.policies.manifest.default_tenant
    out = []
    for view in memory.cache.views():
        if view.pinned and view.path not in rule.suppress_views and (
                view.sensitivity not in rule.suppress_sensitivity) and (
                not view.channels or channel in view.channels):
            out += [f"{view.path}#{chunk.anchor}" for chunk in view.chunks]
    for row in memory.cache.pinned(tenant):
        if rule.loads_event(row["sensitivity"], row["channel"]):
            out.append(row["chunk_id"])
    return out


# --------------------------------------------------------------------------- the files

def _tree(run: Run) -> consistency.Tree:
    return consistency.load_tree(run.store, run.memory.policies.manifest.default_tenant)


def _event_matches(event: Event, where: Mapping[str, Any]) -> bool:
    for key, want in where.items():
        if key == "id":
            ok = event.id == want
        elif key in ("kind", "channel", "sensitivity"):
            ok = getattr(event, key) == want
        elif key in ("session", "agent", "tenant"):
            ok = getattr(event, f"{key}_id") == want
        elif key == "actor":
            ok = want in (event.actor.id, f"{event.actor.type}:{event.actor.id}")
        elif key == "tag":
            ok = want in event.tags
        elif key == "ref":
            ok = want in event.refs
        elif key == "contains":
            ok = str(want) in event_text(event) or str(want) in canonical_json(event.content)
        elif key == "content":
            ok = isinstance(want, dict) and all(event.content.get(k) == v
                                                for k, v in want.items())
        else:
            raise ScenarioError(f"event_exists: unknown where key {key!r}; expected id, kind, "
                                "channel, sensitivity, session, agent, tenant, actor, tag, "
                                "ref, contains, content")
        if not ok:
            return False
    return True


def event_exists(run: Run, p: dict[str, Any]) -> None:
    """Events in the files (the ground truth) match `where`: count / min / max."""
    where = p.get("where") or {}
    found = [e for e in _tree(run).events if _event_matches(e, where)]
    n = len(found)
    if ("count" in p and n != p["count"]) or n < p.get("min", 0 if "count" in p else 1) or (
            "max" in p and n > p["max"]):
        bounds = {k: p[k] for k in ("count", "min", "max") if k in p} or {"min": 1}
        raise Failure(f"events matching {where}: {bounds}", n)


def traceability(run: Run, p: dict[str, Any]) -> None:
    """Decisions and summaries cite ids that exist; ACB items carry refs and a source."""
    target = p.get("target", "all")
    if target not in ("decision", "summary", "acb", "all"):
        raise ScenarioError(f"traceability: target {target!r}; expected decision, summary, "
                            "acb or all")
    tree = _tree(run)
    problems = [str(e) for e in tree.problems]
    must = p.get("must_have_refs", True)
    records: list[tuple[str, str, Iterable[str], str]] = []
    if target in ("decision", "all"):
        records += [(path, d.id, (*d.refs, *d.supersedes), d.tenant_id)
                    for path, d in tree.decisions.values()]
    if target in ("summary", "all"):
        records += [(path, s.id, (*s.refs, *s.decisions), s.tenant_id)
                    for path, _, s in tree.summaries.values()]
    for path, record_id, refs, tenant in records:
        refs = list(refs)
        if must and not refs:
            problems.append(f"{path}: {record_id} cites nothing")
        known = tree.known(tenant)
        problems += [f"{path}: {record_id} cites {r}, which does not exist"
                     for r in refs if r not in known]
    if target in ("acb", "all") and (target == "acb" or run.last is not None):
        acb = _acb(run, p)
        for item in _items(acb, None):
            if must and not item.get("refs"):
                problems.append(f"ACB item {item['id']} has no refs")
            if not item.get("source"):
                problems.append(f"ACB item {item['id']} has no source")
            rel = str(item.get("source", "")).split("#")[0].rsplit(":", 1)[0]
            if rel and not (run.store / rel).is_file():
                problems.append(f"ACB item {item['id']}: source {item['source']} is no file")
    if problems:
        raise Failure(f"every {target} record cites existing ids", problems[:20])


def decision_active(run: Run, p: dict[str, Any]) -> None:
    """The decision exists and is active."""
    row = _decision(run, p)
    if row["status"] != "active":
        raise Failure(f"{p['decision']} active", f"{row['status']}, superseded by "
                      f"{row['superseded_by']}")


def decision_superseded(run: Run, p: dict[str, Any]) -> None:
    """The decision is superseded (by `by`, the latest of its chain, if given)."""
    row = _decision(run, p)
    if row["status"] != "superseded" or ("by" in p and row["superseded_by"] != p["by"]):
        raise Failure(f"{p['decision']} superseded" + (f" by {p['by']}" if "by" in p else ""),
                      f"{row['status']} (superseded_by {row['superseded_by']})")


def _decision(run: Run, p: dict[str, Any]) -> dict[str, Any]:
    """The decision an assertion names, among its tenant's (the scenario's default)."""
    decision_id = p["decision"]
    tenant = p.get("tenant", run.scenario.defaults.get("tenant"))
    for row in run.memory.query_decisions(tenant, active_only=False):
        if row["decision_id"] == decision_id:
            return row
    raise Failure(f"decision {decision_id} in the index", "no such decision")


def conflict_flagged(run: Run, p: dict[str, Any]) -> None:
    """The summary is flagged (in the ACB and/or by verify's check), or not."""
    where = p.get("where", "both")
    present = p.get("present", True)
    summary = p["summary"]
    want = {k: p[k] for k in ("kind", "decision", "ref") if k in p}

    def fits(conflicts: Iterable[Mapping[str, Any]]) -> bool:
        return any(all(c.get(k) == v for k, v in want.items()) for c in conflicts)

    if where in ("acb", "both"):
        acb = _acb(run, p)
        items = [i for i in _items(acb, None) if i["id"] == summary]
        listed = any(o["reason"] == "conflict" and summary in o["candidates"]
                     for o in acb["omissions"])
        if present and not items:
            raise Failure(f"{summary} packed and flagged", "not in the ACB", excerpt(acb))
        flagged = bool(items) and fits(items[0].get("conflicts", [])) and listed
        if present != flagged:
            raise Failure(f"{summary} {'flagged' if present else 'not flagged'} {want}",
                          {"conflicts": items[0].get("conflicts") if items else None,
                           "conflict_omission": listed}, excerpt(acb))
    if where in ("verify", "both"):  # what `gitmem verify` reports over the files
        from gitmem.verify import verify_tree

        problems = [str(p) for p in verify_tree(run.store, run.memory.policies)
                    if summary in p.path]
        said = _VERIFY_SAYS.get(str(p.get("kind")), "").format(**{"decision": "", "ref": "",
                                                                  **p})
        if present != any(said in problem for problem in problems):
            raise Failure(f"gitmem verify {'flags' if present else 'does not flag'} {summary}"
                          f" {want}", problems or "no problem with it")


_VERIFY_SAYS = {  # how consistency.describe words each kind
    "superseded_decision": "states {decision} as current, but it is superseded",
    "unknown_decision": "states {decision} as current, but no such decision exists",
    "missing_ref": "cites {ref}, which exists nowhere",
    "foreign_session_ref": "cites {ref} of session",
}


def not_stored(run: Run, p: dict[str, Any]) -> None:
    """`text` is in no file, no git object, no index row and no ACB built so far."""
    text = p["text"]
    needle = text.encode()
    found: list[str] = []
    for path in sorted(run.root.rglob("*")):
        if path.is_file() and ".git" not in path.relative_to(run.root).parts \
                and needle in path.read_bytes():
            found.append(f"file {path.relative_to(run.root)}")
    if run.git("rev-list", "--all").strip() and text in run.git("log", "--all", "-p",
                                                                 "--format=%H %B"):
        found.append("git history")
    run.memory.sync()
    found += [f"index {r['table']} {r['id']}" for r in run.memory.db.fetchall(
        "index_text_search", {"text": text})]
    found += [f"ACB {a['acb_id']}" for a in run.acbs if text in json.dumps(a,
                                                                          ensure_ascii=False)]
    if found:
        raise Failure(f"{text!r} stored nowhere", found)


# --------------------------------------------------------------------------- the index

def index_fresh(run: Run, p: dict[str, Any]) -> None:
    """`gitmem status` says the index reflects every file."""
    status = run.memory.status()
    if not status["clean"] or status["pending"]:
        raise Failure("a clean index", {"stale": status["stale"], "pending": status["pending"]})


def index_equivalent(run: Run, p: dict[str, Any]) -> None:
    """The incremental index equals a reindex of a fresh `git clone` (P2, G1)."""
    dirty = run.git("status", "--porcelain", "--untracked-files=all", "--", "memory").strip()
    if dirty:
        raise Failure("memory/ committed (add a `git: commit` step first)", dirty.splitlines())
    run.memory.sync()
    mine = indexer.index_digest(run.memory.db)
    clone = Path(tempfile.mkdtemp(prefix="gitmem-clone-", dir=run.workdir))
    try:
        run.git("clone", "-q", str(run.root), str(clone / "repo"), cwd=clone)
        config = Config(store=clone / "repo" / "memory", dsn=run.dsn,
                        schema=run.schema[:50] + "_clone")
        with Memory(config) as other:
            try:
                other.reindex()
                theirs = indexer.index_digest(other.db)
            finally:
                other.db.drop_schema()
    finally:
        shutil.rmtree(clone, ignore_errors=True)
    differ = {t: {"incremental": mine.get(t, "")[:16], "reindex": theirs.get(t, "")[:16]}
              for t in sorted(set(mine) | set(theirs)) if mine.get(t) != theirs.get(t)}
    if differ:
        raise Failure("equal digests of every table", differ)


def deterministic(run: Run, p: dict[str, Any]) -> None:
    """The same request gives the same ACB again (fresh caches / after a reindex too)."""
    built = run.acb(p.get("acb"))

    def key(acb: Mapping[str, Any]) -> str:
        return canonical_json({"acb_id": acb["acb_id"], "sections": acb["sections"],
                               "omissions": acb["omissions"]})

    want = key(built.acb)
    attempts = [("again", False)]
    if p.get("fresh"):
        attempts.append(("fresh caches", True))
    if p.get("after_reindex"):
        attempts.append(("after reindex", False))
    for label, cold in attempts:
        if label == "after reindex":
            run.memory.reindex()
        acb, _ = run.build(built.request, f"deterministic ({label})", cold=cold)
        if key(acb) != want:
            raise Failure(f"{label}: the ACB {built.acb['acb_id']}", _difference(built.acb, acb),
                          excerpt(acb))


def _difference(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"acb_id": b["acb_id"]}
    for left, right in zip(a["sections"], b["sections"], strict=False):
        if left != right:
            out[left["name"]] = {"before": [i["id"] for i in left["items"]],
                                 "after": [i["id"] for i in right["items"]]}
    if a["omissions"] != b["omissions"]:
        out["omissions"] = {"before": a["omissions"], "after": b["omissions"]}
    return out


def _latency(run: Run, p: dict[str, Any], statistic: str) -> None:
    built = run.acb(p.get("acb"))
    runs = p.get("runs", 20)
    times = [run.build(built.request, f"latency run {n}", cold=bool(p.get("cold")))[1]
             for n in range(1, runs + 1)]
    value = percentile(times, 95) if statistic == "p95" else max(times)
    if value > p["max"]:
        raise Failure(f"{statistic} <= {p['max']} ms over {runs} builds",
                      timing_stats(times))


def acb_build_latency_p95_ms(run: Run, p: dict[str, Any]) -> None:
    """The p95 wall time of `runs` builds of the same request is <= `max` ms."""
    _latency(run, p, "p95")


def acb_build_latency_max_ms(run: Run, p: dict[str, Any]) -> None:
    """Every one of `runs` builds of the same request takes <= `max` ms."""
    _latency(run, p, "max")


# every assertion type of the format is the function of the same name here
CHECKS: dict[str, Check] = {name: globals()[name] for name in ASSERTIONS}
