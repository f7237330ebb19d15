"""`gitmem verify`: the pre-commit checks over a whole store, every problem as path:line."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path

import pytest

from gitmem import ids, tokens
from gitmem.config import Config
from gitmem.documents import field_line
from gitmem.errors import StoreError
from gitmem.memory import Memory
from gitmem.packing import ITEM_SEPARATOR_TOKENS
from gitmem.policies import load_policies
from gitmem.prompt import header_tokens
from gitmem.records import content_hash
from gitmem.store import day_file_rel
from gitmem.supersession import supersede_loops
from gitmem.verify import verify_tree
from tests.conftest import Cli, git
from tests.daemons import append, event_line

DAY = "events/2026-03/2026-03-01.jsonl"


def test_a_fresh_store_with_records_has_no_problems(cli: Cli, memory: Memory) -> None:
    cited = memory.record({"content": {"text": "why"}}).id
    decision = memory.decide("Use files as the truth", [cited]).content["decision_id"]
    memory.decide("Use files, and git", [cited], supersedes=[decision])
    memory.task("Review", refs=[cited])
    memory.record({"kind": "tool_result", "content": {"tool": "t", "output": "z" * 10000}})
    result = cli("verify")
    assert result.output.rstrip().endswith(": no problems")  # no warning either


@pytest.mark.parametrize("rel", ["policies/budgets.yaml", "policies/privacy.yaml",
                                 "policies/channels.yaml"])
def test_a_directory_in_place_of_a_policy_file_is_named_not_a_traceback(
        cli: Cli, config: Config, rel: str) -> None:
    """Named as a FIFO or a link to nothing there is (regular_files' wording), not with
    the system's errno text ("Is a directory")."""
    policy = config.store / rel
    policy.unlink()
    policy.mkdir()
    for command in (("verify",), ("status",), ("record", "hello"), ("acb", "hello")):
        result = cli(*command, ok=False)
        assert result.exit_code == 1, command
        assert f"{rel}: cannot be read: a directory, not a file" in result.output, command
        assert "Is a directory" not in result.output and "Traceback" not in result.output


def test_a_link_to_a_folder_in_the_store_is_named_by_verify_as_status_lists_it(
        cli: Cli, config: Config, tmp_path: Path) -> None:
    """`gitmem status` listed a symbolic link to a folder as ignored (never entered) and
    `gitmem verify` said nothing of it: the files behind it were neither read nor checked."""
    store = config.store
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "2026-01").mkdir(parents=True)
    _, line = event_line("s", "out of the store", number=1)
    (elsewhere / "2026-01" / "2026-01-05.jsonl").write_text(line)
    (store / "events" / "2026-01").symlink_to(elsewhere / "2026-01")
    (store / "views" / "team").symlink_to(elsewhere)
    status = cli("status", ok=False)
    assert "ignored events/2026-01: ignored: a link to a folder, not entered" in status.output
    assert "ignored views/team: ignored: a link to a folder, not entered" in status.output
    result = cli("verify", ok=False)
    assert result.exit_code == 1 and "Traceback" not in result.output
    for rel, target in (("events/2026-01", elsewhere / "2026-01"), ("views/team", elsewhere)):
        assert (f"memory/{rel}: a symbolic link to a folder ({target}): gitmem never enters "
                "it, so none of its files is read (and git keeps only the link); move the "
                "files into the store, or remove the link") in result.output
    assert "2 problem(s)" in result.output


def test_an_event_ref_whose_day_file_is_a_link_to_nothing_names_that_file(
        cli: Cli, config: Config, tmp_path: Path) -> None:
    """The citing line said `... is not in the store (a dangling reference)`, naming
    neither the day file that may hold the event nor what is in its place."""
    store = config.store
    cited, _ = event_line("s", "cited", number=1)
    _, citing = event_line("s", "cites it", number=2, refs=[cited])
    append(store / DAY, citing)
    when = ids.time_of(cited)
    assert when is not None
    rel = day_file_rel(when)  # where the cited event would be: its id's own date
    gone = tmp_path / "moved-away.jsonl"
    (store / rel).parent.mkdir(parents=True)
    (store / rel).symlink_to(gone)
    result = cli("verify", ok=False)
    assert (f"memory/{DAY}:1: field 'refs': {cited} cannot be looked for: memory/{rel}: "
            f"cannot be read: a symbolic link to nothing ({gone}); mend the file, or cite "
            "another event") in result.output
    assert "dangling reference" not in result.output


def test_every_problem_is_listed_as_path_line(cli: Cli, config: Config,
                                               repo: Path) -> None:
    store = config.store
    _, good = event_line("s", "committed words", number=1)
    append(store / DAY, good)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    (store / DAY).write_text(good.replace("committed words", "rewritten words"))
    _, bad_kind = event_line("s", "x", number=2, kind="chat")
    _, dangling = event_line("s", "cites a ghost", number=3,
                             refs=["evt_01KHBYB0000000000000000099"])
    append(store / DAY, bad_kind + dangling + '{"torn": ')
    view = store / "views" / "glossary.md"
    view.write_text(view.read_text() + "\nDeploy token = abc123secretvalue\n")
    digest = hashlib.sha256(b"original").hexdigest()
    artifact = store / "artifacts" / digest[:2] / digest
    artifact.parent.mkdir(parents=True)
    artifact.write_bytes(b"edited")
    result = cli("verify", ok=False)
    assert result.exit_code == 1
    out = result.output
    assert ("memory/events/2026-03/2026-03-01.jsonl:1: events files are append-only, but "
            "this line differs from HEAD's version; put it back as `git show HEAD:memory/events"
            "/2026-03/2026-03-01.jsonl` has it (`git checkout HEAD -- memory/events/2026-03/"
            "2026-03-01.jsonl` would also drop the 2 line(s) appended since), and record a "
            "correction as a new event") in out
    assert "memory/events/2026-03/2026-03-01.jsonl:2: field 'kind'" in out
    assert ("memory/events/2026-03/2026-03-01.jsonl:3: field 'refs': "
            "evt_01KHBYB0000000000000000099 is not in the store") in out
    assert "memory/events/2026-03/2026-03-01.jsonl:4: the last line has no newline" in out
    line = view.read_text().splitlines().index("Deploy token = abc123secretvalue") + 1
    assert f"memory/views/glossary.md:{line}: matches the redaction pattern" in out
    assert "abc123secretvalue" not in out
    assert f"memory/artifacts/{digest[:2]}/{digest}: content does not match its name" in out
    assert "problem(s)" in out


def test_a_checkout_with_crlf_line_endings_is_not_a_rewrite(cli: Cli, config: Config,
                                                              repo: Path) -> None:
    """core.autocrlf=true checks LF files out with CRLF, and git commits them back as
    they were: only the line endings differ from HEAD's, and no line is rewritten."""
    _, first = event_line("s", "committed words", number=1)
    append(config.store / DAY, first)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    path = config.store / DAY
    path.write_bytes(path.read_bytes().replace(b"\n", b"\r\n"))
    _, second = event_line("s", "appended with LF", number=2)
    append(path, second)
    assert cli("verify").output.rstrip().endswith(": no problems")
    _, changed = event_line("s", "rewritten words", number=1)
    path.write_bytes(changed.replace("\n", "\r\n").encode() + second.encode())
    out = cli("verify", ok=False).output
    assert f"memory/{DAY}:1: events files are append-only, but this line differs" in out


def test_a_line_verify_cannot_hash_is_named_beside_the_other_problems(
        cli: Cli, config: Config) -> None:
    """A number beyond a float's range, or a key given twice: named at its line, and
    the other lines' problems are still reported."""
    _, first = event_line("s", "first", number=1)
    _, second = event_line("s", "second", number=2, sensitivity="bogus")
    _, third = event_line("s", "third", number=3)
    _, fourth = event_line("s", "fourth", number=4)
    append(config.store / DAY, first.replace('"first"}', '"first", "score": 1e999}') + second
           + third.replace('"channel": "private"', '"channel": "private", "channel": "public"')
           + fourth)
    out = cli("verify", ok=False).output
    assert f"memory/{DAY}:1: malformed JSON: 1e999 is beyond a float's range" in out
    assert f"memory/{DAY}:2: field 'sensitivity'" in out
    assert f"memory/{DAY}:3: malformed JSON: key 'channel' is given twice" in out
    assert f"memory/{DAY}:4" not in out


def test_a_record_file_gitmem_would_never_read_is_a_problem(cli: Cli, config: Config) -> None:
    """A decision saved as decisions/use-fts.md is never indexed: verify says so (and so
    the pre-commit hook refuses it); dot files (.gitkeep, an editor's swap file) are not."""
    store = config.store
    (store / "decisions" / "use-fts.md").write_text("---\nid: x\n---\nUse full-text search.\n")
    (store / "events" / "notes.txt").write_text("scratch\n")
    (store / "decisions" / ".use-fts.md.swp").write_text("swap\n")
    out = cli("verify", ok=False).output
    assert ("memory/decisions/use-fts.md: gitmem never reads this file: it is not named "
            "decisions/dec_<ULID>.md; rename it, or move it out of decisions/") in out
    assert "memory/events/notes.txt: gitmem never reads this file" in out
    assert ".swp" not in out


def test_a_nul_a_yaml_escape_puts_in_a_record_is_a_problem(cli: Cli, memory: Memory) -> None:
    """`title: "a\\0b"` parses, but the index refuses the NUL and leaves the file out: verify
    and the pre-commit hook passed such decisions and handoffs."""
    store = memory.store
    evt = memory.record({"content": {"text": "source event"}}).id
    (store / "decisions" / "dec_01KGZR0Z5800000000000000D1.md").write_text(
        "---\nid: dec_01KGZR0Z5800000000000000D1\nts: 2026-02-09T00:00:00Z\n"
        f'tenant_id: default\ntitle: "a\\0b"\nrefs: [{evt}]\n---\nBody\n')
    (store / "handoffs").mkdir(exist_ok=True)
    (store / "handoffs" / "hof_01KGZR0Z5800000000000000H1.yaml").write_text(
        "id: hof_01KGZR0Z5800000000000000H1\nts: 2026-02-09T05:23:00Z\ntenant_id: default\n"
        'from_agent: planner\nto_agent: coder\ntask: "a\\0b"\n')
    out = cli("verify", ok=False).output
    assert "decisions/dec_01KGZR0Z5800000000000000D1.md:5: field 'title': contains a NUL" in out
    assert "handoffs/hof_01KGZR0Z5800000000000000H1.yaml:6: field 'task': contains a NUL" in out


def test_a_broken_policy_file_is_a_problem_too(config: Config) -> None:
    policies = load_policies(config.store)
    assert verify_tree(config.store, policies, display="memory/") == []
    (config.store / "policies" / "channels.yaml").write_text("defaults: [\n")
    problems = verify_tree(config.store, policies, display="memory/")
    assert [p.path for p in problems] == ["memory/policies/channels.yaml"]
    assert problems[0].line is not None


def test_verify_warns_about_a_stale_summary_and_fails_on_a_wrong_one(cli: Cli,
                                                                     memory: Memory) -> None:
    evt = memory.record({"content": {"text": "Deploy with Ansible"}, "session_id": "s1",
                         "ts": "2026-02-01T00:00:00+00:00"}).id
    old = memory.decide("Deploy with Ansible", [evt],
                        ts="2026-02-01T01:00:00+00:00").content["decision_id"]
    memory.record({"kind": "summary", "session_id": "s1", "refs": [evt],
                   "ts": "2026-02-02T00:00:00+00:00",
                   "content": {"text": "We deploy with Ansible", "decisions": [old]}})
    memory.decide("Deploy with Helm", [evt], supersedes=[old], ts="2026-02-03T00:00:00+00:00")
    stale = cli("verify")
    assert "warning:" in stale.output and "current when the summary was written" in stale.output
    memory.record({"kind": "summary", "session_id": "s1", "refs": [evt],
                   "ts": "2026-02-04T00:00:00+00:00",
                   "content": {"text": "We still deploy with Ansible", "decisions": [old]}})
    wrong = cli("verify", ok=False)
    assert wrong.exit_code == 1 and "already was when the summary was written" in wrong.output


def test_a_decision_superseding_or_a_handoff_citing_another_tenants_decision_fails(
        config: Config, memory: Memory) -> None:
    """Written by hand (the write path refuses both), a decision that supersedes another
    tenant's decision and a handoff that hands one over are problems at the field."""
    cited = memory.record({"content": {"text": "why"}, "tenant_id": "acme"}).id
    theirs = memory.decide("Use NATS", [cited], tenant_id="acme").content["decision_id"]
    mine = memory.record({"content": {"text": "why not"}}).id
    decision = memory.decide("Use Kafka", [mine]).content["decision_id"]
    packet = memory.create_handoff("coder", "Carry on")
    policies = load_policies(config.store)
    assert verify_tree(config.store, policies, display="memory/") == []
    path = config.store / "decisions" / f"{decision}.md"
    head, rest = path.read_text().split("\n", 1)  # after the frontmatter's first line
    path.write_text(f"{head}\nsupersedes:\n- {theirs}\n{rest}")
    handoff = config.store / "handoffs" / f"{packet.id}.yaml"
    handoff.write_text(handoff.read_text() + f"decisions:\n- {theirs}\n")
    problems = {str(p) for p in verify_tree(config.store, policies, display="memory/")}
    assert any(f"memory/decisions/{decision}.md:2: field 'supersedes': {theirs} is a decision "
               "of another tenant" in p for p in problems), problems
    assert any(f"memory/handoffs/{packet.id}.yaml" in p and "field 'decisions'" in p
               and "another tenant" in p for p in problems), problems
    assert len(problems) == 2


def test_a_ref_to_another_tenants_record_or_event_fails(config: Config, memory: Memory) -> None:
    """Only a decision's `supersedes` and a handoff's `decisions` were checked for their
    tenant: an event line written by hand citing another tenant's event, decision, task,
    summary or handoff, and a summary stating another tenant's decision, passed, though
    a ref must be one of its own tenant's (docs/FORMATS.md)."""
    evt = memory.record({"content": {"text": "why"}, "tenant_id": "acme"}).id
    theirs = [evt, memory.decide("Use NATS", [evt], tenant_id="acme").content["decision_id"],
              memory.task("acme's task", tenant_id="acme").content["task_id"],
              memory.record({"kind": "summary", "refs": [evt], "tenant_id": "acme",
                             "content": {"text": "acme's summary"}}).content["summary_id"],
              memory.create_handoff("coder", "acme's", tenant_id="acme").id]
    mine = memory.record({"content": {"text": "ours"}}).id
    summary = memory.record({"kind": "summary", "refs": [mine],
                             "content": {"text": "our summary"}}).content["summary_id"]
    policies = load_policies(config.store)
    assert verify_tree(config.store, policies, display="memory/") == []
    _, line = event_line("s", "cites theirs", refs=[mine, *theirs])
    append(config.store / "events" / "2026-03" / "2026-03-01.jsonl", line)  # its ts's
    path = config.store / "summaries" / "session" / f"{summary}.md"
    head, rest = path.read_text().split("\n", 1)
    path.write_text(f"{head}\ndecisions:\n- {theirs[1]}\n{rest}")
    problems = [str(p) for p in verify_tree(config.store, policies, display="memory/")]
    for target, what in zip(theirs, ("an event", "a decision", "a task", "a summary",
                                     "a handoff"), strict=True):
        assert any(f"field 'refs': {target} is {what} of another tenant than 'default'" in p
                   for p in problems), problems
    assert any(f"summaries/session/{summary}.md:2: field 'decisions': {theirs[1]}" in p
               for p in problems), problems
    assert len(problems) == 7  # and the summary's own check: no such decision (its tenant's)


def test_secrets_under_secret_names_and_in_keys_are_never_stored_and_verify_flags_them(
        cli: Cli, config: Config, memory: Memory) -> None:
    """The write path redacts a value under a key naming a secret, a secret used as a key
    and env-style assignments; the same content appended by hand is a problem at its
    line, and so is such an assignment in a view, without printing the secret."""
    key = "sk-" + "K" * 32
    contents = [("tool_call", {"tool": "login", "args": {"user": "bob",
                                                         "db_password": "hunter2-Pr0d!"}}),
                ("tool_call", {"tool": "http", "args": {"env": {key: "enabled"}}}),
                ("message", {"text": "export OPENAI_API_KEY=sk-proj-Ab3dEf6hIj9kLm2nOp5q"}),
                ("tool_call", {"tool": "vault", "args": {"user": "ann", "pin_code_password":
                                                         48151623, "remember": True}})]
    secrets = ["hunter2-Pr0d!", key, "Ab3dEf6hIj9kLm2nOp5q", "48151623"]
    for kind, content in contents:
        memory.record({"kind": kind, "session_id": "s1", "content": content})
    stored = b"".join(p.read_bytes() for p in config.store.rglob("*") if p.is_file())
    acb = json.dumps(memory.build_acb({"session_id": "s1"}))
    assert [s for s in secrets if s.encode() in stored or s in acb] == []
    assert "enabled" in acb and "bob" in acb and "ann" in acb  # only the secrets went
    assert "no problems" in cli("verify").output
    for number, (kind, content) in enumerate(contents, start=1):
        append(config.store / DAY, event_line("s2", "", number=number, kind=kind,
                                              content=content,
                                              hash=content_hash(kind, content))[1])
    view = config.store / "views" / "glossary.md"
    view.write_text(view.read_text() + "\nRun with OPENAI_API_KEY=sk-proj-Ab3dEf6hIj9kLm2nOp5q\n")
    out = cli("verify", ok=False).output
    assert f"memory/{DAY}:1: key 'db_password' names a secret (store.redact_keys)" in out
    assert f"memory/{DAY}:2: matches the redaction pattern '\\\\bsk-" in out
    assert f"memory/{DAY}:3: matches the redaction pattern" in out
    assert f"memory/{DAY}:4: key 'pin_code_password' names a secret" in out
    line = view.read_text().splitlines().index(
        "Run with OPENAI_API_KEY=sk-proj-Ab3dEf6hIj9kLm2nOp5q") + 1
    assert f"memory/views/glossary.md:{line}: matches the redaction pattern" in out
    assert [s for s in secrets if s in out] == []
    assert "5 problem(s)" in out


def test_verify_json_lists_each_problem_once_on_stdout(cli: Cli, config: Config) -> None:
    _, bad = event_line("s", "wrong channel", number=1, channel="radio")
    append(config.store / DAY, bad)
    result = cli("verify", "--json", ok=False)
    assert result.exit_code == 1
    [problem] = json.loads(result.stdout)
    assert (problem["path"], problem["line"], problem["field"]) == (f"memory/{DAY}", 1,
                                                                     "channel")
    assert "field 'channel'" not in result.stderr  # not listed a second time for people


def test_lines_cut_from_the_end_are_named_as_gone_with_the_way_back(cli: Cli, config: Config,
                                                                     repo: Path) -> None:
    lines = [event_line("s", f"said {n}", number=n)[1] for n in (1, 2, 3)]
    append(config.store / DAY, "".join(lines))
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "three")
    (config.store / DAY).write_text(lines[0])
    out = cli("verify", ok=False).output
    assert (f"memory/{DAY}:2: events files are append-only, but lines 2-3 of HEAD's version "
            f"are gone; restore memory/{DAY} with `git checkout HEAD -- memory/{DAY}`") in out
    (config.store / DAY).write_text(lines[0] + lines[1])
    out = cli("verify", ok=False).output
    assert f"memory/{DAY}:3: events files are append-only, but line 3 of HEAD's version " \
        "is gone" in out
    (config.store / DAY).write_text("".join(lines))
    cli("verify")


def test_an_id_repeated_with_other_content_is_named_with_the_way_out(cli: Cli,
                                                                      config: Config) -> None:
    event_id, line = event_line("s", "said once", number=1)
    _, other = event_line("s", "said otherwise", number=1)
    append(config.store / DAY, line)
    append(config.store / DAY, other)
    out = cli("verify", ok=False).output
    assert (f"memory/{DAY}:2: field 'id': {event_id} is also memory/{DAY}:1 with other "
            "content; ids never repeat: remove this line and record it again without its id, "
            "which mints a new one") in out


def test_a_secret_in_a_name_of_a_hand_written_line_fails(cli: Cli, config: Config) -> None:
    secret = "sk-" + "Z" * 30
    _, line = event_line(secret, "a plain note", number=1)  # the session id
    append(config.store / DAY, line)
    out = cli("verify", ok=False).output
    assert f"memory/{DAY}:1: matches the redaction pattern" in out and secret not in out


def test_an_event_in_two_day_files_or_in_another_days_file_fails(cli: Cli,
                                                                 config: Config) -> None:
    """The index keeps one copy of an event: removing the file of that copy would lose
    it, though another file still holds it. An event lives in its ts's day file only."""
    store = config.store
    event_id, line = event_line("s", "said once", number=1)  # ts 2026-03-01
    append(store / DAY, line)
    append(store / "events/2026-03/2026-03-02.jsonl", line)  # copied into another day
    _, early = event_line("s", "filed a day late", number=2, ts="2026-02-28T23:30:00+00:00")
    append(store / DAY, early)
    _, offset = event_line("s", "its own date", number=3, ts="2026-03-01T23:30:00-02:00")
    append(store / "events/2026-03/2026-03-01.jsonl", offset)  # UTC 03-02, local 03-01
    out = cli("verify", ok=False).output
    assert (f"memory/events/2026-03/2026-03-02.jsonl:1: field 'id': {event_id} is also "
            f"memory/{DAY}:1") in out
    assert (f"memory/events/2026-03/2026-03-02.jsonl:1: field 'ts': {event_id} belongs in "
            f"{DAY}") in out  # the copy is misfiled too
    assert f"memory/{DAY}:2: field 'ts':" in out and "belongs in events/2026-02/2026-02-28" in out
    assert f"memory/{DAY}:3" not in out


def test_a_wrong_hash_a_conflict_marker_and_a_record_never_placed_fail(
        cli: Cli, memory: Memory) -> None:
    store = memory.store
    cited = memory.record({"content": {"text": "the staging cluster is in Frankfurt"}})
    decided = memory.decide("Stage in Frankfurt", [cited.id]).content["decision_id"]
    lost = memory.decide("Stage in Berlin", [cited.id]).content["decision_id"]
    (store / "decisions" / f"{lost}.md").unlink()  # as a crash before the rename leaves it
    _, copy = event_line("s", "a line claiming another's hash", number=7)
    append(store / DAY, copy.replace(json.loads(copy)["hash"], cited.hash))
    path = store / "decisions" / f"{decided}.md"
    text = path.read_text()
    path.write_text(text + "<<<<<<< HEAD\nUse red\n=======\nUse green\n>>>>>>> branch\n")
    out = cli("verify", ok=False).output
    assert f"memory/{DAY}:1: field 'hash': does not match the content" in out
    marker = len(text.splitlines()) + 1
    assert f"memory/decisions/{decided}.md:{marker}: an unresolved merge conflict" in out
    assert f"field 'content.decision_id': this event wrote {lost}" in out
    assert f"this event wrote {decided}" not in out


def test_a_store_missing_default_redaction_patterns_gets_a_warning(cli: Cli,
                                                                   config: Config) -> None:
    """A store keeps the patterns it was made with; verify says which of today's defaults
    it lacks (a warning: exit 0), and nothing once they are copied in."""
    privacy = config.store / "policies" / "privacy.yaml"
    current = privacy.read_text()
    kept = [line for line in current.splitlines(keepends=True)
            if "earer" not in line and "eyJ" not in line]
    privacy.write_text("".join(kept))
    result = cli("verify")
    [warning] = [line for line in result.output.splitlines() if line.startswith("warning:")]
    assert warning.startswith("warning: memory/policies/privacy.yaml:11: field "
                              "'store.redact_patterns': 3 of gitmem's default redaction "
                              "patterns are not in this store's list ('\\\\b[Aa]uthorization")
    assert "(1 warning(s))" in result.output
    privacy.write_text(current)
    assert "warning" not in cli("verify").output


def test_a_section_budgets_yaml_gives_no_cap_gets_a_warning(cli: Cli, config: Config) -> None:
    """Without its entry, a section never holds anything: a handoff's packet, with
    `handoff` deleted, would be left out of every handoff's bundle with no word."""
    budgets = config.store / "policies" / "budgets.yaml"
    text = budgets.read_text()
    budgets.write_text("".join(line for line in text.splitlines(keepends=True)
                               if not line.lstrip().startswith("handoff:")))
    result = cli("verify")
    [warning] = [line for line in result.output.splitlines() if line.startswith("warning:")]
    line = text.splitlines().index("sections:                   # filled in priority order "
                                   "(higher first)") + 1
    assert warning.startswith(f"warning: memory/policies/budgets.yaml:{line}: field 'sections': "
                              "section 'handoff' has no entry under sections")
    budgets.write_text(text)
    assert "warning" not in cli("verify").output


def test_a_budgets_yaml_that_does_not_load_is_its_own_one_problem(cli: Cli,
                                                                   config: Config) -> None:
    """A value YAML cannot build read the whole file as empty: every pinned view was then
    said to be cut to fit a section that "holds 0"."""
    budgets = config.store / "policies" / "budgets.yaml"
    budgets.write_text(budgets.read_text().replace("max_excerpt_bytes: 8192",
                                                   "max_excerpt_bytes: 0x_"))
    lines = [line for line in cli("verify", ok=False).output.splitlines()
             if line.startswith(("memory/", "warning:"))]
    assert len(lines) == 1 and "budgets.yaml" in lines[0] and "'0x_'" in lines[0]
    budgets.unlink()
    lines = [line for line in cli("verify", ok=False).output.splitlines()
             if line.startswith(("memory/", "warning:"))]
    assert lines == ["memory/policies/budgets.yaml: missing; run `gitmem init` to create the "
                     "default"]


def test_a_literal_redaction_pattern_does_not_make_privacy_yaml_a_secret(
        cli: Cli, config: Config) -> None:
    """A pattern naming a codename matched its own line: verify and the pre-commit hook
    refused privacy.yaml, the file that defines the patterns."""
    privacy = config.store / "policies" / "privacy.yaml"
    privacy.write_text(privacy.read_text().replace(
        "  redact_patterns:\n", "  redact_patterns:\n    - 'ProjectNightjar'\n", 1))
    assert "no problems" in cli("verify").output
    with privacy.open("a") as handle:  # any other line is scanned as every file's is
        handle.write("# deploy token ghp_abcdefghijklmnopqrstuvwxyz0123456789AB\n")
    lines = privacy.read_text().count("\n")
    assert f"memory/policies/privacy.yaml:{lines}: matches the redaction pattern" in cli(
        "verify", ok=False).output
    privacy.write_text("".join(privacy.read_text().splitlines(keepends=True)[:-1]))
    append(config.store / DAY, event_line("s", "the codename is ProjectNightjar")[1])
    out = cli("verify", ok=False).output
    assert f"memory/{DAY}:1: " in out and "matches the redaction pattern" in out


def test_two_decisions_superseding_one_are_a_fork_verify_warns_about(cli: Cli,
                                                                     memory: Memory) -> None:
    """Two branches that each replaced a decision leave, once merged, two active ones:
    verify warns (exit 0) on the second, naming the first."""
    evt = memory.record({"content": {"text": "where to deploy"}}).id
    old = memory.decide("Deploy from Frankfurt", [evt]).content["decision_id"]
    berlin = memory.decide("Deploy from Berlin", [evt], supersedes=[old])
    paris = memory.decide("Deploy from Paris", [evt], supersedes=[old])
    first, second = sorted([berlin.content["decision_id"], paris.content["decision_id"]])
    result = cli("verify")
    assert result.exit_code == 0
    assert (f"memory/decisions/{second}.md:" in result.output
            and f"field 'supersedes': {old} is also superseded by {first}: both are active"
            in result.output and "warning" in result.output)


def test_a_fork_settled_either_way_docs_allow_is_not_warned_about(
        cli: Cli, memory: Memory, config: Config) -> None:
    """docs/FORMATS.md: a person sets `status: superseded` on one of the two, or a later
    decision supersedes one or both; then at most one of them is active, and verify
    stops warning."""
    evt = memory.record({"content": {"text": "where to deploy"}}).id
    old = memory.decide("Deploy from Frankfurt", [evt]).content["decision_id"]
    berlin = memory.decide("Deploy from Berlin", [evt], supersedes=[old])
    paris = memory.decide("Deploy from Paris", [evt], supersedes=[old])
    fork = "both are active"
    assert fork in cli("verify").output
    path = config.store / "decisions" / f"{paris.content['decision_id']}.md"
    text = path.read_text()
    assert "status: active" in text
    path.write_text(text.replace("status: active", "status: superseded"))
    settled = cli("verify")
    assert fork not in settled.output and settled.output.rstrip().endswith(": no problems")
    path.write_text(text)
    assert fork in cli("verify").output
    memory.decide("Deploy from Berlin and Paris", [evt],
                  supersedes=[berlin.content["decision_id"], paris.content["decision_id"]])
    assert fork not in cli("verify").output


def test_a_decision_naming_what_it_supersedes_twice_is_no_fork(
        cli: Cli, memory: Memory, config: Config) -> None:
    """A hand-written `supersedes: [A, A]` (the write path refuses it): one decision that
    supersedes A, not two active ones."""
    evt = memory.record({"content": {"text": "where to deploy"}}).id
    old = memory.decide("Deploy from Frankfurt", [evt]).content["decision_id"]
    new = memory.decide("Deploy from Berlin", [evt], supersedes=[old]).content["decision_id"]
    path = config.store / "decisions" / f"{new}.md"
    text = path.read_text()
    assert f"supersedes:\n- {old}\n" in text
    path.write_text(text.replace(f"supersedes:\n- {old}\n",
                                 f"supersedes:\n- {old}\n- {old}\n"))
    result = cli("verify")
    assert "both are active" not in result.output
    assert result.output.rstrip().endswith(": no problems")


def test_a_view_no_bundle_loads_is_warned_about(cli: Cli, config: Config) -> None:
    """Seed 000 §5: views are always candidates for the ACB. One neither pinned nor in
    any channel's default_load_views is never loaded (retrieval does not search views):
    verify says so, at the view; pinned or listed, it says nothing."""
    view = config.store / "views" / "deploy.md"
    body = "section: rules\ntitle: Deploy runbook\n---\n# Deploy runbook\n\nNever on Fridays.\n"
    view.write_text("---\n" + body)
    result = cli("verify")
    assert result.exit_code == 0
    assert ("warning: memory/views/deploy.md:1: field 'pinned': views/deploy.md is neither "
            "pinned nor in any channel's default_load_views (policies/channels.yaml): no "
            "ACB loads it; pin it (pinned: true) or list it") in result.output
    view.write_text("---\npinned: true\n" + body)
    assert cli("verify").output.rstrip().endswith(": no problems")
    view.write_text("---\n" + body)
    channels = config.store / "policies" / "channels.yaml"
    channels.write_text(channels.read_text().replace("views/identity.md, views/rules.project.md]",
                                                     "views/identity.md, views/rules.project.md,"
                                                     " views/deploy.md]", 1))
    assert cli("verify").output.rstrip().endswith(": no problems")


def test_an_impossible_unquoted_date_is_named_and_skipped_and_the_rest_still_works(
        cli: Cli, memory: Memory, config: Config) -> None:
    """YAML reads an unquoted `ts: 2026-02-30T...` as a timestamp it cannot build: every
    command used to end in a ValueError naming no file."""
    cited = memory.record({"content": {"text": "the reason"}}).id
    kept = memory.decide("Deploy on Tuesdays", [cited]).content["decision_id"]
    bad = "dec_01KHBYB0000000000000000009"
    rel = f"decisions/{bad}.md"
    (config.store / rel).write_text(f"---\nid: {bad}\nts: 2026-02-30T00:00:00Z\n"
                                    f"refs: [{cited}]\n---\nDeploy on Fridays.\n")
    named = (f"{rel}:3: field 'ts': '2026-02-30T00:00:00Z' is not a date and time "
             "(day is out of range for month); expected RFC 3339")
    verify = cli("verify", ok=False)
    assert verify.exit_code == 1 and f"memory/{named}" in verify.output
    assert named in cli("sync").stderr
    assert named in cli("reindex").stderr
    assert f"error   {named}" in cli("status").stdout
    acb = json.loads(cli("acb", "when do we deploy?").stdout)
    assert kept in json.dumps(acb) and bad not in json.dumps(acb)


def _supersede(path: Path, *ids: str) -> None:
    """Give a decision file (by hand) a `supersedes` list, on its second line."""
    head, rest = path.read_text().split("\n", 1)
    path.write_text(head + "\nsupersedes:\n" + "".join(f"- {i}\n" for i in ids) + rest)


def test_a_decision_superseding_itself_or_a_loop_of_supersedes_fails(cli: Cli,
                                                                      memory: Memory) -> None:
    """Every decision on a loop is superseded and none is active: all leave the ACB, and
    only a `superseded` omission said so. Each is an error at its `supersedes` line,
    naming the loop and the entry that closes it (an older decision's, superseding a
    newer one, which no write does)."""
    evt = memory.record({"content": {"text": "where to deploy"}}).id
    old = memory.decide("Deploy from Frankfurt", [evt],
                        ts="2026-02-01T00:00:00+00:00").content["decision_id"]
    new = memory.decide("Deploy from Berlin", [evt], supersedes=[old],
                        ts="2026-02-02T00:00:00+00:00").content["decision_id"]
    selfish = memory.decide("Deploy on Fridays", [evt]).content["decision_id"]
    decisions = memory.store / "decisions"
    new_line = field_line((decisions / f"{new}.md").read_text(), "supersedes")
    _supersede(decisions / f"{old}.md", new)
    _supersede(decisions / f"{selfish}.md", selfish)
    result = cli("verify", ok=False)
    out = result.output
    loop = (f"is on a loop of supersedes ({{}} -> {{}} -> {{}}, each superseding the next): "
            "none of them is active, so all have left every ACB; remove the entry that closes "
            f"the loop: {new} from the supersedes of memory/decisions/{old}.md:2 ({old} is not "
            f"newer than {new}, and a decision supersedes older ones)")
    assert (f"memory/decisions/{old}.md:2: field 'supersedes': {old} "
            + loop.format(old, new, old)) in out
    assert (f"memory/decisions/{new}.md:{new_line}: field 'supersedes': {new} "
            + loop.format(new, old, new)) in out
    assert (f"memory/decisions/{selfish}.md:2: field 'supersedes': {selfish} supersedes "
            "itself, so it is never active and has left every ACB; remove it from its own "
            "supersedes") in out
    assert "3 problem(s)" in out


def test_supersede_loops_name_the_shortest_loop_through_each_decision() -> None:
    chains = {"a": ["b"], "b": ["c"], "c": ["a", "d"], "d": [], "e": ["a"], "f": ["f", "x"],
              "g": ["h"], "h": ["g", "b"]}
    assert supersede_loops(chains) == {"a": ["a", "b", "c"], "b": ["b", "c", "a"],
                                       "c": ["c", "a", "b"], "f": ["f"], "g": ["g", "h"],
                                       "h": ["h", "g"]}
    assert supersede_loops({"a": [], "b": ["a"], "c": ["a", "b"]}) == {}


def test_a_policy_view_path_that_matches_no_view_file_gets_a_warning(cli: Cli,
                                                                     config: Config) -> None:
    """`suppress_views: [views/prefs.md]` for views/preferences.md shows the view the rule
    meant to suppress; a default view misspelt is never loaded. Each is a warning at its
    line (exit 0), in either form of channels.yaml."""
    policies = config.store / "policies"
    privacy = policies / "privacy.yaml"
    text = privacy.read_text()
    privacy.write_text(text.replace("suppress_views: [views/preferences.md]",
                                    "suppress_views: [views/prefs.md]", 1))
    channels = policies / "channels.yaml"
    channels.write_text(channels.read_text().replace("views/glossary.md]",
                                                     "views/glossary.md, views/plan.md]", 1))
    result = cli("verify")
    warnings = [line for line in result.output.splitlines() if line.startswith("warning:")]
    prefs = privacy.read_text().splitlines().index("      suppress_views: [views/prefs.md]") + 1
    assert warnings == [
        "warning: memory/policies/channels.yaml:5: field 'channels.private.default_load_views': "
        "'views/plan.md' matches no file in views/, so no view is loaded by it on this "
        "channel; name a view file, or remove the entry",
        f"warning: memory/policies/privacy.yaml:{prefs}: field 'load.channel_rules.public."
        "suppress_views': 'views/prefs.md' matches no file in views/ (did you mean "
        "views/preferences.md?), so the view meant is not suppressed on this channel; name a "
        "view file, or remove the entry"]
    assert "(2 warning(s))" in result.output
    channels.write_text("channels:\n- name: team\n  default_load_views:\n"
                        "  - views/identity.md\n  - views/rules.md\n")
    privacy.write_text(text)
    [warning] = [line for line in cli("verify").output.splitlines()
                 if line.startswith("warning:") and "matches no file" in line]
    assert warning.startswith("warning: memory/policies/channels.yaml:5: field 'channels.team."
                              "default_load_views': 'views/rules.md' matches no file")


def test_verify_reports_every_policy_problem_and_still_checks_the_records(
        cli: Cli, config: Config, memory: Memory) -> None:
    """Two bad values in budgets.yaml, two in privacy.yaml, one in channels.yaml and a
    decision's status: verify stopped at the first (policies were loaded before any
    check ran); now each is listed, as the help says."""
    evt = memory.record({"content": {"text": "why"}}).id
    decision = memory.decide("Use files", [evt]).content["decision_id"]
    policies = config.store / "policies"
    edits = {"budgets.yaml": [("acb_total_max_tokens: 65000", "acb_total_max_tokens: -1"),
                              ("alpha: 0.7", "alpha: x")],
             "privacy.yaml": [("'\\bAIza[0-9A-Za-z_-]{35}'", "'(unclosed'"),
                              ("    team:\n", "    radio:\n")],
             "channels.yaml": [("  agent:", "  robot:")]}
    for name, pairs in edits.items():
        text = (policies / name).read_text()
        for old, new in pairs:
            assert old in text
            text = text.replace(old, new)
        (policies / name).write_text(text)
    path = config.store / "decisions" / f"{decision}.md"
    path.write_text(path.read_text().replace("status: active", "status: maybe"))

    def line(name: str, needle: str) -> int:
        return (policies / name).read_text().split(needle)[0].count("\n") + 1

    out = cli("verify", ok=False).output
    for where in [f"budgets.yaml:{line('budgets.yaml', 'acb_total')}: field "
                  "'acb_total_max_tokens': expected an integer >= 1, got -1",
                  f"budgets.yaml:{line('budgets.yaml', 'alpha: x')}: field "
                  "'retrieval.weights.alpha': expected a number from 0 to 1,000,000, got 'x'",
                  f"privacy.yaml:{line('privacy.yaml', '(unclosed')}: field "
                  "'store.redact_patterns': invalid regular expression '(unclosed'",
                  f"privacy.yaml:{line('privacy.yaml', 'radio')}: field "
                  "'load.channel_rules.radio': unknown channel",
                  f"channels.yaml:{line('channels.yaml', 'robot')}: field "
                  "'channels.robot': unknown channel"]:
        assert f"memory/policies/{where}" in out, where
    assert f"memory/decisions/{decision}.md:" in out and "field 'status'" in out
    assert "6 problem(s)" in out
    (policies / "channels.yaml").unlink()
    out = cli("verify", ok=False).output
    assert ("memory/policies/channels.yaml: missing; run `gitmem init` to create the "
            "default") in out
    assert "field 'status'" in out and "6 problem(s)" in out


def test_a_pinned_view_larger_than_its_sections_cap_gets_a_warning(cli: Cli,
                                                                   config: Config) -> None:
    """Every bundle would show it cut to fit, at the full budget too: a warning (exit 0)
    naming the file, the view's size and the cap; none once it fits, or is not pinned."""
    identity = config.store / "views" / "identity.md"
    body = "# Identity\n\nYou are Atlas, the billing assistant of Acme.\n" + "".join(
        f"Guideline {n}: be careful with invoices and double-check totals. "
        for n in range(1, 131)) + "\n"
    identity.write_text(f"---\nsection: identity\npinned: true\n---\n{body}")
    result = cli("verify")
    [warning] = [line for line in result.output.splitlines() if line.startswith("warning:")]
    size = header_tokens("identity") + tokens.count(body.strip()) + ITEM_SEPARATOR_TOKENS
    assert warning == (
        f"warning: memory/views/identity.md:3: field 'pinned': a pinned view of {size} tokens, "
        "but its section identity holds 1200 (sections.identity.max_tokens in "
        "policies/budgets.yaml): every bundle shows it cut to fit; shorten it, move a part "
        "of it to a view of its own, or raise that cap")
    assert result.exit_code == 0 and "(1 warning(s))" in result.output
    identity.write_text(f"---\nsection: identity\npinned: false\n---\n{body}")
    assert "warning" not in cli("verify").output
    identity.write_text("---\nsection: identity\npinned: true\n---\n# Identity\n\nYou are Atlas.\n")
    assert "warning" not in cli("verify").output


@pytest.mark.parametrize(("cap", "said"), [(36, "shows it cut to fit"), (24, "leaves it out")])
def test_a_pinned_view_a_little_over_a_small_cap_is_cut_or_named_as_left_out(
        cli: Cli, config: Config, memory: Memory, cap: int, said: str) -> None:
    """The note of a cut alone took ~24 tokens: a view of 48 under a cap of 36 was left
    out of every bundle while verify said it was shown cut to fit. A short note now
    leaves room; where even that leaves too little, verify says the view is left out."""
    identity = config.store / "views" / "identity.md"
    identity.write_text("---\nsection: identity\npinned: true\n---\n# Identity\n\n"
                        + "You are Atlas, the billing assistant of the Acme company. " * 3)
    budgets = config.store / "policies" / "budgets.yaml"
    budgets.write_text(budgets.read_text().replace("identity:           {max_tokens: 1200",
                                                   f"identity:           {{max_tokens: {cap}"))
    assert f"every bundle {said}" in cli("verify").output
    memory.sync()
    shown = memory.build_acb({"now": "2026-03-01T12:00:00+00:00"})["sections"]
    identity_items = next(s["items"] for s in shown if s["name"] == "identity")
    assert bool(identity_items) == (said == "shows it cut to fit")
    assert all(i["truncated"] and i["text"].startswith("# Identity\n\nYou are Atlas")
               for i in identity_items)


def test_a_fifo_and_links_to_nothing_are_named_not_read(cli: Cli, config: Config) -> None:
    """verify hung opening a FIFO, and crashed on a link to nothing (FileNotFoundError in
    consistency.load_tree) or a loop of links."""
    store = config.store
    _, good = event_line("s", "still checked", number=1, kind="chat")
    append(store / DAY, good)
    fifos = [store / "events/2026-03/2026-03-09.jsonl", store / "views" / "fifo.md"]
    for fifo in fifos:
        os.mkfifo(fifo)
    (store / "views" / "dangling.md").symlink_to("/nonexistent/x.md")
    (store / "views" / "l1.md").symlink_to("l2.md")
    (store / "views" / "l2.md").symlink_to("l1.md")
    pool = ThreadPoolExecutor(1)
    try:
        problems = pool.submit(verify_tree, store).result(timeout=20)
    except FutureTimeout:
        pytest.fail("verify blocked opening a FIFO")
    finally:
        for fifo in fifos:  # let a reader blocked on it go
            with contextlib.suppress(OSError):
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pool.shutdown(wait=True)
    named = {p.path: p.detail.split(";")[0] for p in problems}
    assert {path: said for path, said in named.items() if "cannot be read" in said} == {
        "memory/events/2026-03/2026-03-09.jsonl":
            "cannot be read: a FIFO (named pipe), not a regular file",
        "memory/views/fifo.md": "cannot be read: a FIFO (named pipe), not a regular file",
        "memory/views/dangling.md": "cannot be read: a symbolic link to nothing "
                                    "(/nonexistent/x.md)",
        "memory/views/l1.md": "cannot be read: a loop of symbolic links",
        "memory/views/l2.md": "cannot be read: a loop of symbolic links"}
    assert f"memory/{DAY}" in named  # the rest is still checked (its kind 'chat')
    for fifo in fifos:
        fifo.unlink()
    result = cli("verify", ok=False)
    assert "memory/views/dangling.md: cannot be read: a symbolic link to nothing" \
        in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("top", ["views", "events", "decisions", "tasks", "summaries",
                                 "handoffs", "artifacts"])
def test_a_record_folder_that_is_a_link_is_never_entered_by_any_command(
        cli: Cli, config: Config, memory: Memory, tmp_path: Path, top: str) -> None:
    """A whole record folder made a link (`mv memory/views /tmp/v; ln -s /tmp/v
    memory/views`) was followed by sync, reindex and the ACB, while status listed
    nothing and verify checked none of its files (warning that the views the policies
    name match no file): one rule now, as for a link to a folder within one."""
    store = config.store
    cited = memory.record({"content": {"text": "the zebra cluster is named Orion"}}).id
    memory.decide("Name the zebra cluster Orion", [cited])
    memory.task("Rename the zebra cluster", refs=[cited])
    output = memory.record({"kind": "tool_result",
                            "content": {"tool": "t", "output": "z" * 10000}})
    memory.create_handoff("agent-b", "Keep the zebra cluster named Orion")
    cli("sync")
    outside = tmp_path / "elsewhere"
    (store / top).rename(outside)
    (store / top).symlink_to(outside, target_is_directory=True)
    status = cli("status", ok=False)
    assert f"ignored {top}: ignored: a link to a folder, not entered" in status.output
    assert cli("sync").exit_code == 0
    cli("reindex")
    counted = cli("status", ok=False).output
    result = cli("verify", ok=False)
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert (f"memory/{top}: a symbolic link to a folder ({outside}): gitmem never enters "
            "it, so none of its files is read (and git keeps only the link); move the "
            "files into the store, or remove the link") in result.output
    assert "matches no file in views/" not in result.output
    behind = {"views": "4 views", "events": "2 events", "decisions": "1 decisions",
              "tasks": "1 tasks", "summaries": "", "handoffs": "1 handoffs",
              "artifacts": ""}[top]
    if behind:  # indexed before the link, never after
        assert behind.replace(behind.split()[0], "0", 1) in counted, counted
    if top == "artifacts":  # nor read through the link
        with pytest.raises(StoreError, match=f"cannot be read: {store / top} is a symbolic "
                           f"link \\(to {outside}\\), which gitmem never writes, reads"):
            memory.get_artifact(str(output.content["artifact_id"]))


@pytest.mark.parametrize("what", ["directory", "fifo", "dangling"])
def test_something_else_in_the_manifests_place_is_named_not_called_deleted(
        cli: Cli, config: Config, tmp_path: Path, what: str) -> None:
    """Every command said "holds a store's files but no manifest.json (deleted?)" of a
    directory (or a FIFO, a link to nothing) named manifest.json."""
    manifest = config.store / "manifest.json"
    manifest.unlink()
    reason, remove = {"directory": ("a directory, not a file", f"rm -r {manifest}"),
                      "fifo": ("a FIFO (named pipe), not a regular file", f"rm {manifest}"),
                      "dangling": (f"a symbolic link to nothing ({tmp_path / 'gone'})",
                                   f"rm {manifest}")}[what]
    if what == "directory":
        manifest.mkdir()
    elif what == "fifo":
        os.mkfifo(manifest)
    else:
        manifest.symlink_to(tmp_path / "gone")
    for command in (("verify",), ("status",), ("record", "hello")):
        result = cli(*command, ok=False)
        assert result.exit_code == 1 and "Traceback" not in result.output, command
        assert (f"{config.store} holds a store's files but its manifest.json cannot be read: "
                f"{manifest} is {reason}; remove it (`{remove}`), then restore it (`git "
                f"checkout -- memory/manifest.json` in {config.root})") in result.output
        assert "deleted?" not in result.output


def test_status_says_how_to_take_out_a_torn_line_as_verify_does(cli: Cli,
                                                                 memory: Memory) -> None:
    """A write a crash cut short leaves a torn line, which the next write ends with a
    newline: verify says how to take it out (gitmem/recovery.py `torn_hint`), and
    `gitmem status` said the index's bare "malformed JSON"."""
    day = memory.store / "events/2026-10/2026-10-01.jsonl"
    memory.record({"content": {"text": "answered"}, "ts": "2026-10-01T09:00:00Z"})
    cli("sync")  # indexed: the lines after it are read as an append (at their offset)
    size = day.stat().st_size
    append(day, day.read_text()[:120])  # the start of a line as gitmem writes it
    memory.record({"content": {"text": "answered later"}, "ts": "2026-10-01T10:00:00Z"})
    cli("sync", ok=False)
    status = cli("status", ok=False).output
    [said] = [line for line in status.splitlines() if line.startswith("  error ")]
    assert said.startswith("  error   events/2026-10/2026-10-01.jsonl:2: malformed JSON")
    assert said.endswith(
        f"; it stops mid-record (bytes {size}-{size + 120}), as a write a crash cut short "
        "leaves it (never answered, and no event: never indexed); if so, and it is not "
        "committed (`gitmem verify` tells), removing it loses nothing: delete that line, "
        "with no gitmem writer running"), said
    cli("reindex", ok=False)  # a whole file's parse says the same
    assert said in cli("status", ok=False).output.splitlines()
    [verified] = [p.detail for p in verify_tree(memory.store, memory.policies)]
    assert f"(bytes {size}-{size + 120})" in verified and "delete that line" in verified
    lines = day.read_bytes().split(b"\n")
    day.write_bytes(b"\n".join(lines[:1] + lines[2:]))  # taken out as it says
    cli("sync")
    assert "error" not in cli("status").output


def test_a_link_to_a_file_or_policies_made_a_link_is_named_as_the_hook_names_it(
        cli: Cli, config: Config, tmp_path: Path) -> None:
    """verify said "no problems" of a view that is a link to a file, a manifest that is
    one, and policies/ made a link to a folder, all of which the pre-commit hook refuses
    (git keeps only the link). gitmem still reads through them; verify names them."""
    store = config.store
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "linked.md").write_text("# Linked\n\nA view kept outside the store.\n")
    (store / "views" / "linked.md").symlink_to(outside / "linked.md")
    (store / "manifest.json").rename(outside / "manifest.json")
    (store / "manifest.json").symlink_to(outside / "manifest.json")
    (store / "policies").rename(outside / "policies")
    (store / "policies").symlink_to(outside / "policies", target_is_directory=True)
    result = cli("verify", ok=False)
    assert result.exit_code == 1 and "Traceback" not in result.output
    for rel in ("views/linked.md", "manifest.json"):
        assert (f"memory/{rel}: a symbolic link ({outside / rel.split('/')[-1]}), not a "
                "file: gitmem reads the file it points to, but git keeps only the link, so "
                "the file itself is not versioned or reviewed") in result.output
    assert (f"memory/policies: a symbolic link to a folder ({outside / 'policies'}) in place "
            "of the policies folder: gitmem reads the policy files through it, but git "
            "keeps only the link") in result.output
    assert "3 problem(s)" in result.output and "missing" not in result.output
    assert cli("sync").exit_code == 0  # still read
    (store / "policies").unlink()
    (store / "policies").symlink_to(tmp_path / "gone")
    result = cli("verify", ok=False)
    assert (f"memory/policies: a symbolic link to no folder ({tmp_path / 'gone'}) in place "
            "of the policies folder: no policy file can be read") in result.output
    assert "policies/budgets.yaml" not in result.output


class _Files:
    """A tree of files held in memory (`Owners` reads no more than this)."""

    def __init__(self, files: dict[str, bytes]) -> None:
        self.files = files

    def paths(self) -> list[str]:
        return sorted(self.files)

    def read(self, rel: str) -> bytes | None:
        return self.files.get(rel)


def test_the_tenants_of_many_cited_events_of_a_large_day_file_are_found_in_one_pass() -> None:
    """Each cited event was looked for by searching its day file from the start (and
    counting its lines there): a commit citing 10k events of an 8.6 MB day file spent
    ~55 s in the pre-commit hook. Now the file is read for its ids once; what each
    lookup answers is as before: the tenant of the first line whose event it is (a line
    citing it, or one that does not parse, is never taken for it)."""
    from gitmem.records import find_event
    from gitmem.ref_owners import Owners

    count, lines = 8000, []
    ts = "2026-03-01T10:00:00+00:00"
    event_ids = [event_line("s", "x", number=n)[0] for n in range(count)]
    broken = event_ids[1]
    lines.append(f'{{"id": "{broken}", "tenant_id": "evil", "broken": \n')  # never parses
    lines.append(event_line("s", "cites", number=count, tenant_id="evil",
                            refs=[event_ids[2]])[1])  # cites one, before its own line
    for n in range(count):
        lines.append(event_line("s", "x" * 400, ts=ts, number=n,
                                tenant_id=("acme", "globex")[n % 2])[1])
    data = "".join(lines).encode()
    rel = day_file_rel(ids.time_of(event_ids[0]))  # type: ignore[arg-type]
    owners = Owners(_Files({rel: data}), "default")
    started = time.monotonic()
    found = [owners.tenant(event_id) for event_id in event_ids]
    took = time.monotonic() - started
    assert found == [("acme", "globex")[n % 2] for n in range(count)]
    assert found[1] == "globex" and found[2] == "acme"  # not the broken or citing line
    for n, event_id in enumerate(event_ids[:20]):  # as find_event answers
        assert (n, found[n]) == (n, find_event(data, event_id, rel)[1].tenant_id)  # type: ignore[index]
    assert owners.tenant("evt_01KHBYB" + f"{count + 1:019d}") is None
    assert took < 5, f"{count} lookups took {took:.1f} s"
