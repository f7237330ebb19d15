"""`gitmem verify`: the pre-commit checks over a whole store, every problem as path:line."""

from __future__ import annotations

import hashlib
from pathlib import Path

from gitmem.config import Config
from gitmem.memory import Memory
from gitmem.policies import load_policies
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
    assert "no problems" in result.output


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
    assert "memory/events/2026-03/2026-03-01.jsonl:1: events files are append-only" in out
    assert "memory/events/2026-03/2026-03-01.jsonl:2: field 'kind'" in out
    assert ("memory/events/2026-03/2026-03-01.jsonl:3: field 'refs': "
            "evt_01KHBYB0000000000000000099 is not in the store") in out
    assert "memory/events/2026-03/2026-03-01.jsonl:4: the last line has no newline" in out
    line = view.read_text().splitlines().index("Deploy token = abc123secretvalue") + 1
    assert f"memory/views/glossary.md:{line}: matches the redaction pattern" in out
    assert "abc123secretvalue" not in out
    assert f"memory/artifacts/{digest[:2]}/{digest}: content does not match its name" in out
    assert "problem(s)" in out


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
