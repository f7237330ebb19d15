"""The socket server, tested by running the daemon for real: JSON-RPC framing,
errors, limits, concurrency and group commit."""

from __future__ import annotations

import contextlib
import json
import socket
import stat
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest

from gitmem import ids
from gitmem.client import Client
from gitmem.config import Config
from gitmem.errors import DaemonError, RpcError, ValidationError
from gitmem.memory import Memory
from gitmem.server import GroupWriter, Server, ServerOptions
from tests.daemons import (
    Daemon,
    Index,
    cleanup_dir,
    items,
    new_repo,
    running,
    short_dir,
    wait_for,
)


@pytest.fixture(scope="module")
def served(dsn: str) -> Iterator[Daemon]:
    """One daemon for the module (protocol tests share its store)."""
    root = short_dir("gms")
    new_repo(root)
    config = Config(store=root / "memory", dsn=dsn, schema=f"t_{uuid.uuid4().hex[:12]}")
    try:
        with running(config) as daemon:
            yield daemon
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{config.schema}" CASCADE')
        cleanup_dir(root)


def exchange(daemon: Daemon, *lines: bytes) -> list[Any]:
    """Send raw lines on one connection; one response per line that gets one."""
    with daemon.client(timeout=10) as client:
        answers = []
        for line in lines:
            client.send_line(line)
            answers.append(client.read_response())
        return answers


def lines_of(store: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for path in sorted(store.glob("events/*/*.jsonl"))
            for line in path.read_text().splitlines() if line.strip()]


def test_record_event_answers_once_the_line_is_on_disk(served: Daemon) -> None:
    event_id = served.call("record_event", {"session_id": "durable",
                                            "content": {"text": "written before the answer"}})
    assert event_id.keys() == {"event_id"}
    assert event_id["event_id"] in {e["id"] for e in lines_of(served.config.store)}


def test_socket_is_private_to_its_owner(served: Daemon) -> None:
    mode = served.config.socket_path.stat().st_mode
    assert stat.S_ISSOCK(mode)
    assert stat.S_IMODE(mode) == 0o600


def test_malformed_json_gets_a_parse_error_and_the_connection_keeps_serving(
        served: Daemon) -> None:
    bad, good = exchange(served, b'{"jsonrpc": "2.0", "method": \n',
                         b'{"jsonrpc": "2.0", "id": 7, "method": "daemon_status"}\n')
    assert bad["error"]["code"] == -32700 and bad["id"] is None
    assert good["id"] == 7 and good["result"]["pid"] == served.pid
    bad_utf8 = exchange(served, b'{"jsonrpc": "2.0", "id": 1, "method": "\xff"}\n')[0]
    assert bad_utf8["error"]["code"] == -32700
    deep = b'{"jsonrpc": "2.0", "id": 1, "method": "status", "params": ' + b"[" * 100_000
    nested, after = exchange(served, deep + b"]" * 100_000 + b"}\n",
                             b'{"jsonrpc": "2.0", "id": 8, "method": "daemon_status"}\n')
    assert nested["error"]["code"] == -32700 and "nested too deeply" in nested["error"]["message"]
    assert after["id"] == 8  # the same connection goes on
    long = b'{"jsonrpc": "2.0", "id": 1, "method": "status", "params": {"x": 1' + b"0" * 5000
    digits, then = exchange(served, long + b"}}\n",  # a bare ValueError ended the reader
                            b'{"jsonrpc": "2.0", "id": 9, "method": "daemon_status"}\n')
    assert digits["error"]["code"] == -32700 and "more than 4,300 digits" in digits["error"][
        "message"]
    assert then["id"] == 9


@pytest.mark.parametrize("line, needle", [
    (b"[]\n", "empty batch"),
    (b"42\n", "expected a JSON object"),
    (b'{"jsonrpc": "1.0", "id": 1, "method": "status"}\n', "jsonrpc"),
    (b'{"jsonrpc": "2.0", "id": 1, "method": 5}\n', "method"),
    (b'{"jsonrpc": "2.0", "id": true, "method": "status"}\n', "id"),
])
def test_invalid_requests_get_32600(served: Daemon, line: bytes, needle: str) -> None:
    answer = exchange(served, line)[0]
    assert answer["error"]["code"] == -32600
    assert needle in answer["error"]["message"]


def test_unknown_method_gets_32601_listing_the_methods(served: Daemon) -> None:
    with pytest.raises(RpcError) as caught:
        served.call("record_evnt", {})
    assert caught.value.code == -32601
    assert "record_evnt" in str(caught.value) and "record_event" in str(caught.value)


@pytest.mark.parametrize("method, params, field", [
    ("record_event", {"channel": 5, "content": {"text": "x"}}, "channel"),
    ("record_event", {"content": {"text": "x"}, "colour": "red"}, "colour"),
    ("record_event", {"kind": "message", "content": {"text": 3}}, "content.text"),
    ("build_acb", {"max_tokens": "many"}, "max_tokens"),
    ("build_acb", {"query": "typo of query_text"}, "query"),
    ("get_artifact", {}, "artifact_id"),
    ("create_handoff", {"to_agent": "b", "task": 7}, "task"),
    ("query_decisions", {"active_only": "yes"}, "active_only"),
    ("decide", {"text": "x", "refs": "evt_not_a_list"}, "refs"),
])
def test_wrong_params_get_32602_naming_the_field(served: Daemon, method: str,
                                                 params: dict[str, Any], field: str) -> None:
    with pytest.raises(RpcError) as caught:
        served.call(method, params)
    assert caught.value.code == -32602
    assert f"'{field}'" in str(caught.value)
    assert caught.value.data["field"] == field


@pytest.mark.parametrize("params, said", [
    ({"paths": [5]}, "expected a list of strings, got a list whose item 1 is a number"),
    ({"paths": ["a", None]}, "got a list whose item 2 is a null"),
    ({"paths": "x"}, "expected a list of strings, got a string"),
    ({"paths": {"a": 1}}, "got an object"),
])
def test_a_wrong_value_is_named_by_its_json_type(served: Daemon, params: dict[str, Any],
                                                 said: str) -> None:
    with pytest.raises(RpcError) as caught:
        served.call("sync", params)
    assert caught.value.code == -32602 and said in str(caught.value)


def test_params_that_are_not_an_object_get_32602(served: Daemon) -> None:
    with pytest.raises(RpcError) as caught:
        served.call("record_event", [1, 2])
    assert caught.value.code == -32602
    with pytest.raises(RpcError) as caught:
        served.call("record_event")
    assert caught.value.code == -32602 and str(caught.value).endswith("got null")


@pytest.mark.parametrize(("method", "params", "said"), [
    ("build_acb", {"max_tokens": True}, "expected a positive integer, got true"),
    ("build_acb", {"session_id": 5}, "expected a string, got number"),
    ("record_event", {"content": {"text": "x"}, "tags": [None]},
     "expected a list of strings, got [null]"),
])
def test_a_wrong_value_is_quoted_as_json_writes_it(served: Daemon, method: str,
                                                   params: dict[str, Any], said: str) -> None:
    """Python's names (True, None, NoneType, str) mean nothing to a JSON client."""
    with pytest.raises(RpcError) as caught:
        served.call(method, params)
    assert caught.value.code == -32602 and said in str(caught.value)


SECRET = "sk-AAAABBBBCCCCDDDDEEEEFFFF1111"


@pytest.mark.parametrize(("method", "params"), [
    ("build_acb", {f"bogus {SECRET}": 1}),  # a field's name
    ("build_acb", {"channel": SECRET}),
    ("record_event", {"kind": SECRET, "content": {"text": "a"}}),  # answered by the writer
    ("record_event", {"content": {"text": "a"}, "sensitivity": SECRET}),
])
def test_an_error_quotes_no_secret_it_was_sent(served: Daemon, method: str,
                                               params: dict[str, Any]) -> None:
    """The daemon's errors repeated a secret a client sent by mistake, where `verify`
    and `status` redact the values they quote."""
    [answer] = exchange(served, json.dumps({"jsonrpc": "2.0", "id": 1, "method": method,
                                            "params": params}).encode() + b"\n")
    assert answer["error"]["code"] == -32602
    assert SECRET not in json.dumps(answer) and "[REDACTED]" in answer["error"]["message"]


def test_application_errors_carry_their_own_codes(served: Daemon) -> None:
    before = len(lines_of(served.config.store))
    with pytest.raises(RpcError) as refused:
        served.call("record_event", {"sensitivity": "secret", "content": {"text": "pw"}})
    assert refused.value.code == -32002 and "never stored" in str(refused.value)
    assert len(lines_of(served.config.store)) == before
    with pytest.raises(RpcError) as missing:
        served.call("get_artifact", {"artifact_id": "art_" + "0" * 64})
    assert missing.value.code == -32003 and "not found" in str(missing.value)


def test_an_oversized_request_is_refused_and_others_go_on(served: Daemon) -> None:
    huge = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "record_event",
                       "params": {"content": {"text": "x" * 1_100_000}}}).encode() + b"\n"
    answer, after = exchange(served, huge, b'{"jsonrpc": "2.0", "id": 2, "method": "status"}\n')
    assert answer["error"]["code"] == -32600 and "larger than" in answer["error"]["message"]
    assert answer["error"]["data"] == {"max_request_bytes": 1048576}  # the CLI works locally
    assert after["id"] == 2 and "clean" in after["result"]  # the connection goes on
    assert "x" * 1000 not in "".join(e["content"].get("text", "")
                                     for e in lines_of(served.config.store))
    assert served.call("daemon_status")["pid"] == served.pid


def test_batches_and_notifications(served: Daemon) -> None:
    marker = uuid.uuid4().hex
    batch = [{"jsonrpc": "2.0", "id": n, "method": "record_event",
              "params": {"session_id": "batch", "content": {"text": f"{marker} {n}"}}}
             for n in range(1, 4)]
    batch.append({"jsonrpc": "2.0", "method": "record_event",  # a notification: no answer
                  "params": {"session_id": "batch", "content": {"text": f"{marker} note"}}})
    batch.append({"jsonrpc": "2.0", "id": 4, "method": "build_acb",
                  "params": {"session_id": "batch"}})
    batch.append({"jsonrpc": "2.0", "id": 5, "method": "nope"})
    answers = exchange(served, json.dumps(batch).encode() + b"\n")[0]
    assert [a["id"] for a in answers] == [1, 2, 3, 4, 5]
    assert all("event_id" in a["result"] for a in answers[:3])
    window = " ".join(i["text"] for i in items(answers[3]["result"], "recent_window"))
    assert all(f"{marker} {n}" in window for n in range(1, 4))  # read-your-writes in a batch
    assert answers[4]["error"]["code"] == -32601
    texts = [e["content"].get("text") for e in lines_of(served.config.store)]
    assert f"{marker} note" in texts


def test_build_acb_right_after_record_event_on_one_connection(served: Daemon) -> None:
    with served.client() as client:
        request = {"jsonrpc": "2.0", "id": 1, "method": "record_event",
                   "params": {"session_id": "ryw", "content": {"text": "pipelined kiwi"}}}
        acb = {"jsonrpc": "2.0", "id": 2, "method": "build_acb",
               "params": {"session_id": "ryw"}}
        client.send_line((json.dumps(request) + "\n" + json.dumps(acb) + "\n").encode())
        answers = {a["id"]: a for a in (client.read_response(), client.read_response())}
    assert {"acb_id", "sections", "omissions", "provenance"} <= answers[2]["result"].keys()
    assert any("pipelined kiwi" in i["text"] for i in items(answers[2]["result"], "recent_window"))


def test_a_cached_fast_path_answer_is_the_bundle_built_in_process(served: Daemon) -> None:
    """The daemon sends a cached bundle's sections and omissions as JSON encoded once;
    they read back as the bundle a build in this process gives, call after call."""
    served.call("record_event", {"session_id": "enc", "channel": "public",
                                 "content": {"text": "encoded once"}})
    served.call("record_event", {"session_id": "enc", "channel": "public", "sensitivity": "high",
                                 "content": {"text": "left out, by id"}})
    request = {"session_id": "enc", "channel": "public", "now": "2030-01-01T00:00:00+00:00"}
    answers = [served.call("build_acb", request) for _ in range(3)]
    with Memory(served.config) as memory:
        local = memory.build_acb(request)
    assert local["omissions"] and any(
        "encoded once" in i["text"] for i in items(local, "recent_window"))
    for answer in answers:
        for key in ("acb_id", "sections", "omissions", "token_used_est"):
            assert answer[key] == local[key], key


def test_artifacts_and_handoffs(served: Daemon) -> None:
    output = "".join(f"line {n}: {'y' * 60}\n" for n in range(400))  # > max_excerpt_bytes
    served.call("record_event", {"kind": "tool_result", "session_id": "art",
                                 "content": {"tool": "fs.read_file", "output": output}})
    event = next(e for e in reversed(lines_of(served.config.store)) if e["session_id"] == "art")
    assert event["content"]["truncated"] is True
    artifact = served.call("get_artifact", {"artifact_id": event["content"]["artifact_id"]})
    assert artifact["encoding"] == "utf-8" and artifact["data"] == output
    assert artifact["bytes"] == len(output.encode())
    for scoped in ({}, {"tenant_id": "default"}):  # malformed: invalid params, not "not found"
        with pytest.raises(RpcError) as caught:
            served.call("get_artifact", {"artifact_id": "art_nope", **scoped})
        assert caught.value.code == -32602 and "is not an artifact id" in str(caught.value)
    packet = served.call("create_handoff", {"to_agent": "reviewer", "task": "Review the diff",
                                            "open_questions": ["Is the cache needed?"]})
    assert packet["handoff_id"].startswith("hof_")
    assert (served.config.store / packet["path"]).is_file()
    assert packet["open_questions"] == ["Is the cache needed?"]


def test_one_bad_client_does_not_disturb_the_others(served: Daemon) -> None:
    half = socket.socket(socket.AF_UNIX)  # sends half a request, then nothing
    half.connect(str(served.config.socket_path))
    half.sendall(b'{"jsonrpc": "2.0", "id": 1, "method": "sta')
    deaf = socket.socket(socket.AF_UNIX)  # pipelines requests, never reads an answer
    deaf.connect(str(served.config.socket_path))
    deaf.sendall(b"".join(json.dumps({"jsonrpc": "2.0", "id": n, "method": "record_event",
                                      "params": {"session_id": "deaf",
                                                 "content": {"text": f"deaf {n}"}}}).encode()
                          + b"\n" for n in range(300)))
    try:
        with served.client(timeout=5) as client:
            for n in range(20):
                started = time.monotonic()
                client.call("record_event", {"session_id": "polite",
                                             "content": {"text": f"polite {n}"}})
                client.call("build_acb", {"session_id": "polite"})
                assert time.monotonic() - started < 1.0
    finally:
        half.close()
        deaf.close()


def test_64_concurrent_clients_recording_and_querying_all_answered_nothing_lost(
        served: Daemon) -> None:
    run = uuid.uuid4().hex[:8]
    per_client = 25
    failures: list[str] = []
    answered: list[str] = []
    lock = threading.Lock()

    def agent(number: int) -> None:
        session = f"c{run}-{number}"
        try:
            with Client(served.config.socket_path, timeout=60) as client:
                for n in range(per_client):
                    answer = client.call("record_event", {
                        "session_id": session, "agent_id": f"agent{number}",
                        "content": {"text": f"{session} step {n}"}})
                    with lock:
                        answered.append(answer["event_id"])
                acb = client.call("build_acb", {"session_id": session, "agent_id": "a"})
                window = " ".join(i["text"] for i in items(acb, "recent_window"))
                if f"{session} step {per_client - 1}" not in window:
                    failures.append(f"{session}: last event missing from its recent window")
                client.call("query_decisions", {})
        except Exception as exc:  # collected: a thread's assert would vanish
            failures.append(f"{session}: {exc!r}")

    threads = [threading.Thread(target=agent, args=(n,)) for n in range(64)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not failures, failures[:5]
    assert len(answered) == len(set(answered)) == 64 * per_client
    on_disk = [e["id"] for e in lines_of(served.config.store)
               if e["session_id"].startswith(f"c{run}-")]
    assert sorted(on_disk) == sorted(answered)  # each once, none lost, none torn
    served.call("status")  # catch-up on read: the index holds every answered event
    index = Index(served.config)
    try:
        stored = index.scalar("SELECT count(*) FROM events WHERE session_id LIKE %s", f"c{run}-%")
        assert stored == 64 * per_client
    finally:
        index.close()
    writer = served.call("daemon_status")["writer"]
    assert writer["batches"] < writer["events"]  # group commit batched concurrent calls


def test_get_artifact_with_a_tenant_serves_only_what_that_tenant_may_load(
        served: Daemon) -> None:
    """An artifact id is a content hash: with `tenant_id` (and `channel`) it is served
    only when an event of that tenant cites it and the channel may load that event; any
    other ask is refused exactly like an id nobody holds."""
    payroll = "".join(f"B payroll row {n}: {'z' * 60}\n" for n in range(400))
    served.call("record_event", {"kind": "tool_result", "tenant_id": "tenant-b",
                                 "session_id": "pay", "sensitivity": "high",
                                 "content": {"tool": "cat", "output": payroll}})
    notes = "".join(f"B team note {n}: {'n' * 60}\n" for n in range(400))
    served.call("record_event", {"kind": "tool_result", "tenant_id": "tenant-b",
                                 "session_id": "notes", "channel": "team",
                                 "content": {"tool": "cat", "output": notes}})
    ids = {e["session_id"]: e["content"]["artifact_id"] for e in lines_of(served.config.store)
           if e["tenant_id"] == "tenant-b"}
    art, team_art = ids["pay"], ids["notes"]
    own = served.call("get_artifact", {"artifact_id": art, "tenant_id": "tenant-b"})
    assert own["data"] == payroll  # its own tenant, on the default (private) channel
    shared = served.call("get_artifact", {"artifact_id": team_art, "tenant_id": "tenant-b",
                                          "channel": "team"})
    assert shared["data"] == notes
    nobody = "art_" + "0" * 64
    refusals = {}
    for name, params in {
            "another tenant": {"artifact_id": art, "tenant_id": "tenant-a"},
            "high on public": {"artifact_id": art, "tenant_id": "tenant-b",
                               "channel": "public"},
            "private event on team": {"artifact_id": art, "tenant_id": "tenant-b",
                                      "channel": "team"},
            "team event on public": {"artifact_id": team_art, "tenant_id": "tenant-b",
                                     "channel": "public"},
            "a channel alone": {"artifact_id": art, "channel": "public"},
            "nobody holds it": {"artifact_id": nobody, "tenant_id": "tenant-a"}}.items():
        with pytest.raises(RpcError) as caught:
            served.call("get_artifact", params)
        assert caught.value.code == -32003, name
        assert "payroll" not in str(caught.value) and "bytes" not in str(caught.value), name
        refusals[name] = str(caught.value)
    assert refusals["another tenant"].replace(art, nobody) == refusals["nobody holds it"]
    with pytest.raises(RpcError) as bad:
        served.call("get_artifact", {"artifact_id": art, "tenant_id": "tenant-b",
                                     "channel": "radio"})
    assert bad.value.code == -32602 and bad.value.data["field"] == "channel"
    unscoped = served.call("get_artifact", {"artifact_id": art})  # as before: no scope asked
    assert unscoped["data"] == payroll


# ----------------------------------------------------------------------------- group commit


def test_an_event_that_fails_fails_alone_in_its_batch(memory: Memory) -> None:
    """Whatever one caller's event raises, the other events of its batch are written and
    answered; the bad ones get errors of their own."""
    first = memory.record({"content": {"text": "cited"}})
    summary_id = memory.record({"kind": "summary", "refs": [first.id], "content": {
        "text": "a summary", "summary_id": "sum_01KDWFZY805RBPS5ZPF38HJB1M"}}
                               ).content["summary_id"]
    deep: dict[str, Any] = {}
    for _ in range(5000):
        deep = {"d": deep}
    bad = {
        "kind": {"kind": ["message"], "content": {"text": "x"}},                  # a list
        "tag": {"ts": "2026-01-02T10:00:00+00:00", "tags": ["x\ud800"],
                "content": {"text": "bad tag"}},                                  # UTF-8
        "summary": {"kind": "summary", "refs": [first.id],
                    "content": {"text": "again", "summary_id": summary_id}},       # a clash
        "deep": {"content": {"text": "deep", "nested": deep}},                    # recursion
    }
    writer = GroupWriter(memory)
    good = [writer.submit({"ts": "2026-01-01T10:00:00+00:00",
                           "content": {"text": f"valid {n}"}}) for n in range(3)]
    failing = {name: writer.submit(obj) for name, obj in bad.items()}
    good += [writer.submit({"content": {"text": f"valid {n}"}}) for n in range(3, 6)]
    writer.start()
    writer.stop()  # writes what is queued: all of it, as one batch
    assert writer.batches == 1
    written = [future.result(timeout=0) for future in good]
    assert [e.content["text"] for e in written] == [f"valid {n}" for n in range(6)]
    on_disk = [e["id"] for e in lines_of(memory.store)]
    assert all(on_disk.count(e.id) == 1 for e in written)
    errors = {name: future.exception(timeout=0) for name, future in failing.items()}
    assert isinstance(errors["tag"], ValidationError) and errors["tag"].field == "tags"
    assert isinstance(errors["summary"], ValidationError)
    assert errors["summary"].field == "content.summary_id"
    assert isinstance(errors["kind"], ValidationError) and errors["kind"].field == "kind"
    assert isinstance(errors["deep"], ValidationError) and errors["deep"].field == "content"
    assert len(on_disk) == 2 + 6  # the cited event and the summary, then the six


def test_a_batch_takes_each_connections_events_in_turn(memory: Memory) -> None:
    """One client's 20,000 events went whole before another's single one (8 s)."""
    batches: list[list[str]] = []
    writer = GroupWriter(memory, max_batch=4,
                         on_written=lambda events: batches.append(
                             [e.content["text"] for e in events]))
    bulk = [writer.submit({"content": {"text": f"bulk {n}"}}, source=1) for n in range(20)]
    single = writer.submit({"content": {"text": "single"}}, source=2)
    writer.start()
    writer.stop()
    assert single.result(timeout=0).content["text"] == "single"
    assert batches[0] == ["bulk 0", "bulk 1", "single", "bulk 2"]
    assert [t for b in batches for t in b if t != "single"] == [f"bulk {n}" for n in range(20)]
    assert all(f.result(timeout=0) for f in bulk) and len(batches) == 6


def test_a_bad_event_over_the_socket_leaves_the_others_of_its_batch_written(
        served: Daemon) -> None:
    cited = served.call("record_event", {"content": {"text": "cited"}})["event_id"]
    summary_id = f"sum_01KDWFZY805RBPS5ZP{uuid.uuid4().hex[:8].upper()}"
    summary = {"kind": "summary", "refs": [cited],
               "content": {"text": "said once", "summary_id": summary_id}}
    served.call("record_event", summary)
    marker = uuid.uuid4().hex
    params = [{"session_id": marker, "content": {"text": f"{marker} {n}"}} for n in range(4)]
    params[2:2] = [summary, {"session_id": marker, "kind": ["message"],
                             "content": {"text": "mistyped kind"}}]
    batch = [{"jsonrpc": "2.0", "id": n, "method": "record_event", "params": p}
             for n, p in enumerate(params)]
    answers = {a["id"]: a for a in exchange(served, json.dumps(batch).encode() + b"\n")[0]}
    assert [n for n, a in sorted(answers.items()) if "result" in a] == [0, 1, 4, 5]
    clash = answers[2]["error"]
    assert clash["code"] == -32602 and clash["data"]["field"] == "content.summary_id"
    assert "already exists" in clash["message"] and "retry" not in clash["message"]
    assert answers[3]["error"]["code"] == -32602
    texts = [e["content"]["text"] for e in lines_of(served.config.store)
             if e["session_id"] == marker]
    assert texts == [f"{marker} {n}" for n in range(4)]


def test_writes_close_together_see_each_other_before_the_index_does(served: Daemon) -> None:
    """In one batch the second write runs before the indexer has the first: an id named
    twice is refused, a citation of the first is accepted, a retry without `ts` is
    written once, and a citation of nothing is refused."""
    named = ids.new_id("evt")
    marker = uuid.uuid4().hex
    params = [{"id": named, "session_id": marker, "content": {"text": f"{marker} first"}},
              {"id": named, "session_id": marker, "content": {"text": f"{marker} other"}},
              {"id": named, "session_id": marker, "content": {"text": f"{marker} first"}},
              {"session_id": marker, "refs": [named], "content": {"text": f"{marker} cites"}},
              {"session_id": marker, "refs": [ids.new_id("evt")],
               "content": {"text": f"{marker} cites nothing"}}]
    batch = [{"jsonrpc": "2.0", "id": n, "method": "record_event", "params": p}
             for n, p in enumerate(params)]
    answers = {a["id"]: a for a in exchange(served, json.dumps(batch).encode() + b"\n")[0]}
    assert answers[0]["result"]["event_id"] == answers[2]["result"]["event_id"] == named
    assert answers[1]["error"]["code"] == -32602
    assert "already recorded with other content" in answers[1]["error"]["message"]
    assert "event_id" in answers[3]["result"]
    assert answers[4]["error"]["code"] == -32602 and answers[4]["error"]["data"]["field"] == \
        "refs" and "dangling reference" in answers[4]["error"]["message"]
    texts = [e["content"]["text"] for e in lines_of(served.config.store)
             if e["session_id"] == marker]
    assert texts == [f"{marker} first", f"{marker} cites"]


def test_a_task_update_over_the_socket_may_leave_the_title_out(served: Daemon) -> None:
    task_id = served.call("task", {"title": "Rotate the keys"})["task_id"]
    served.call("task", {"task_id": task_id, "status": "done", "tags": ["security"]})
    text = (served.config.store / "tasks" / f"{task_id}.md").read_text()
    assert "title: Rotate the keys" in text and "status: done" in text
    assert "- security" in text
    with pytest.raises(RpcError, match="a new task needs a title"):
        served.call("task", {"status": "open"})


def test_a_write_to_a_store_that_was_moved_away_is_refused(served: Daemon) -> None:
    """A long-lived writer whose store was moved would make a new, partial store where
    the old one was."""
    store = served.config.store
    moved = store.with_name("moved-away")
    store.rename(moved)
    try:
        with pytest.raises(RpcError, match="is gone \\(moved or deleted\\?\\): nothing was"):
            served.call("record_event", {"content": {"text": "into the void"}})
        with pytest.raises(RpcError, match="is gone"):  # a handoff comes with no event
            served.call("create_handoff", {"to_agent": "bob", "task": "into the void"})
        assert not store.exists()
    finally:
        moved.rename(store)
    assert "event_id" in served.call("record_event", {"content": {"text": "back again"}})


@pytest.mark.parametrize("field", ["to_agent", "task"])
def test_a_handoff_to_no_one_or_of_nothing_names_the_field(served: Daemon, field: str) -> None:
    """It named a file never written, and called the empty field missing."""
    params = {"to_agent": "bob", "task": "Ship it", field: " "}
    with pytest.raises(RpcError, match=f"field '{field}': expected a non-empty string") as caught:
        served.call("create_handoff", params)
    assert "handoffs/" not in str(caught.value)


def test_a_client_turned_away_is_told_why_not_a_broken_pipe(served: Daemon) -> None:
    """At the connection limit the daemon sends -32005 and closes: a client whose send
    came after the close read `Broken pipe` (8 of 300), not the answer waiting for it."""
    held: list[socket.socket] = []
    try:
        _hold_connections(served.config.socket_path, 256, held)
        for attempt in range(40):
            with Client(served.config.socket_path, timeout=5) as client:
                if attempt % 2:
                    time.sleep(0.05)  # the close comes before the send
                with pytest.raises(RpcError) as caught:
                    client.call("daemon_status")
                assert caught.value.code == -32005 and "too many connections" in str(
                    caught.value)
    finally:
        for sock in held:
            sock.close()
    deadline = time.monotonic() + 10
    while True:  # the daemon forgets the connections held as it sees them close
        try:
            assert served.call("daemon_status")["pid"] == served.pid
            break
        except RpcError:
            assert time.monotonic() < deadline
            time.sleep(0.1)


def test_a_client_waits_while_the_queue_of_connections_is_full(served: Daemon) -> None:
    """A connect to a full queue (a burst of clients, a daemon that has not accepted
    them yet) fails at once with EAGAIN: it read `Resource temporarily unavailable`."""
    import os
    import signal

    held = []
    os.kill(served.pid, signal.SIGSTOP)  # it accepts nothing: the queue fills
    try:
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.setblocking(False)
            try:
                sock.connect(str(served.config.socket_path))
            except BlockingIOError:
                sock.close()
                break
            held.append(sock)
        with pytest.raises(DaemonError, match="did not accept a connection within 0.2s "
                           r"\(its queue of connections is full\)"):
            Client(served.config.socket_path, connect_timeout=0.2).connect()
        threading.Timer(0.3, os.kill, (served.pid, signal.SIGCONT)).start()
        with Client(served.config.socket_path, connect_timeout=5, timeout=10) as client:
            for sock in held:  # room for the daemon to answer: it serves 256 at most
                sock.close()
            held.clear()
            assert client.call("daemon_status")["pid"] == served.pid
    finally:
        os.kill(served.pid, signal.SIGCONT)
        for sock in held:
            sock.close()


def test_a_write_the_disk_refused_is_not_a_not_found() -> None:
    from gitmem.errors import NotFoundError, StoreError
    from gitmem.rpc import error_object

    refused = error_object(StoreError("appending to x failed: File too large"))
    missing = error_object(NotFoundError("artifact art_0 not found"))
    assert (refused["code"], missing["code"]) == (-32007, -32003)
    assert (refused["data"]["type"], missing["data"]["type"]) == ("StoreError", "NotFoundError")


def test_an_id_no_encoder_echoes_is_refused_and_the_connection_goes_on(
        served: Daemon) -> None:
    """An integer id beyond 64 bits, or a name with an unpaired surrogate echoed in an
    error: answered, never a dead reader or a written but unanswered event."""
    marker = uuid.uuid4().hex
    big = (b'{"jsonrpc":"2.0","id":18446744073709551616,"method":"record_event",'
           b'"params":{"session_id":"' + marker.encode() + b'","content":{"text":"x"}}}\n')
    surrogate = b'{"jsonrpc":"2.0","id":2,"method":"status","params":{"\\ud800":1}}\n'
    utf16 = '{"jsonrpc":"2.0","id":3,"method":"daemon_status"}\n'.encode("utf-16-be")
    after = b'{"jsonrpc":"2.0","id":4,"method":"daemon_status"}\n'
    refused, echoed, parse, fine = exchange(served, big, surrogate, utf16, after)
    assert refused["error"]["code"] == -32600 and "64 bits" in refused["error"]["message"]
    assert echoed["id"] == 2 and echoed["error"]["code"] == -32602
    assert parse["error"]["code"] == -32700
    assert fine["id"] == 4 and "pid" in fine["result"]
    assert not [e for e in lines_of(served.config.store) if e["session_id"] == marker]


def test_a_max_tokens_beyond_64_bits_is_answered_with_the_bundle(served: Daemon) -> None:
    """The request's max_tokens is echoed in the provenance; beyond 64 bits, orjson
    refused it and the fallback wrote the bundle's encoded sections as
    "<orjson.Fragment object at ...>" strings."""
    wide = 1 << 64
    request = (b'{"jsonrpc":"2.0","id":1,"method":"build_acb","params":{"max_tokens":'
               + str(wide).encode() + b"}}\n")
    answer = exchange(served, request)[0]["result"]
    assert answer["provenance"]["budget"]["requested_max_tokens"] == wide
    assert [s["name"] for s in answer["sections"]][:2] == ["identity", "rules"]
    assert isinstance(answer["omissions"], list)


def test_the_encoder_writes_wide_integers_beside_encoded_pieces() -> None:
    from gitmem.server import encode

    message = {"a": orjson.Fragment(b'[1,"x"]'), "n": -(1 << 70), "s": "\ud800", "m": [1 << 64]}
    assert json.loads(encode(message)) == {"a": [1, "x"], "n": -(1 << 70), "s": "?",
                                           "m": [1 << 64]}


def test_a_daemon_that_turns_a_call_away_unread_leaves_it_to_the_caller(
        served: Daemon) -> None:
    """Too many connections, or a request longer than the daemon reads: it did none of
    it, so the CLI's call_if_running returns None and the command works locally."""
    from gitmem.client import call_if_running

    socket_path = served.config.socket_path
    long_query = {"query_text": "word " * 250_000}  # over the served daemon's 1 MiB
    assert call_if_running(socket_path, "build_acb", long_query) is None
    crowd: list[Client] = []
    try:
        while len(crowd) < 256:  # the daemon's limit
            try:
                crowd.append(Client(socket_path, timeout=10).connect())
            except DaemonError:  # the listen backlog is full for a moment
                time.sleep(0.01)
        time.sleep(0.2)  # all accepted
        assert call_if_running(socket_path, "status") is None
    finally:
        for client in crowd:
            client.close()
    assert "pid" in served.call("daemon_status")  # and serves again once they leave


def test_gitmem_call_asks_no_daemon_serving_another_index_than_named(served: Daemon) -> None:
    """`gitmem call` with a schema (or DSN) of its own sent its request to the daemon of
    another index all the same: a write went where it was not meant to, an answer came
    from rows it did not name. Like every other command, it asks only the daemon
    serving what it names; having no work of its own, it fails, saying nothing was sent."""
    before = sorted(p.name for p in served.config.store.glob("events/*/*.jsonl"))
    sizes = {p: p.stat().st_size for p in served.config.store.glob("events/*/*.jsonl")}
    other = {**served.env(), "GITMEM_SCHEMA": "t_another_index"}
    result = served.cli("call", "record_event", '{"content": {"text": "not for this index"}}',
                        check=False, env=other)
    assert result.returncode == 1
    assert f"the daemon serves schema {served.config.schema}" in result.stderr
    assert "not t_another_index" in result.stderr and "nothing was sent" in result.stderr
    assert sorted(p.name for p in served.config.store.glob("events/*/*.jsonl")) == before
    assert {p: p.stat().st_size for p in served.config.store.glob("events/*/*.jsonl")} == sizes
    assert served.cli("call", "daemon_status").returncode == 0  # its own: asked


def test_a_key_given_twice_is_refused_not_read_as_its_last_value(served: Daemon) -> None:
    """`"sensitivity": "high", "sensitivity": "none"` was written as none, where
    `gitmem record --json` refuses the same line: readers disagree on such JSON."""
    sizes = {p: p.stat().st_size for p in served.config.store.glob("events/*/*.jsonl")}
    twice = (b'{"jsonrpc": "2.0", "id": 1, "method": "record_event", "params": {"content": '
             b'{"text": "x"}, "sensitivity": "high", "sensitivity": "none"}}\n')
    [answer] = exchange(served, twice)
    assert answer["id"] is None and answer["error"]["code"] == -32700
    assert "key 'sensitivity' is given twice in one object" in answer["error"]["message"]
    assert {p: p.stat().st_size for p in served.config.store.glob("events/*/*.jsonl")} == sizes
    result = served.cli("call", "record_event", '{"content": {"text": "x"}, "tags": [], '
                        '"tags": ["a"]}', check=False)
    assert result.returncode == 2 and "key 'tags' is given twice" in result.stderr
    key = "ghp_" + "abcdefghijklmnopqrstuvwxyz0123456789"  # a secret as a key, twice
    [answer] = exchange(served, json.dumps({"jsonrpc": "2.0", "id": 2, "method": "status"})
                        .encode().replace(b'"id": 2', f'"{key}": 1, "{key}": 2, "id": 2'
                                          .encode()) + b"\n")
    assert answer["error"]["code"] == -32700 and key not in json.dumps(answer)
    assert "key '[REDACTED]' is given twice" in answer["error"]["message"]


# --------------------------------------------------------------------------- limits


def _hold_connections(path: Path, count: int, held: list[socket.socket]) -> None:
    """Open `count` connections to the daemon's socket that send nothing, into `held`
    (the caller closes them)."""
    for _ in range(count):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(str(path))
        held.append(sock)


def _placed_artifact(store: Path, size: int) -> str:
    """An artifact of `size` bytes put in the store as the writer would; its id."""
    import hashlib

    data = b"".join(b"line of artifact data %07d\n" % n for n in range(size // 29 + 1))[:size]
    digest = hashlib.sha256(data).hexdigest()
    path = store / "artifacts" / digest[:2] / digest
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return f"art_{digest}"


def _read_line(sock: socket.socket) -> bytes:
    with sock.makefile("rb") as reader:
        return reader.readline()


def test_a_batch_stops_running_its_calls_once_its_answers_pass_64_mib(served: Daemon) -> None:
    """A 6 KB batch of 40 get_artifact calls on a 12 MB artifact took the daemon from
    96 MB to 1.5 GB: every answer was built before the outbox limit was looked at."""
    artifact_id = _placed_artifact(served.config.store, 12 << 20)
    batch = [{"jsonrpc": "2.0", "id": n, "method": "get_artifact",
              "params": {"artifact_id": artifact_id}} for n in range(12)]
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(str(served.config.socket_path))
        sock.sendall(json.dumps(batch).encode() + b"\n")
        line = _read_line(sock)
    answers = orjson.loads(line)
    assert len(line) < 100 << 20 and [a["id"] for a in answers] == list(range(12))
    served_whole = [a for a in answers if "result" in a]
    refused = [a for a in answers if "error" in a]
    assert 5 <= len(served_whole) <= 7 and served_whole == answers[:len(served_whole)]
    for answer in refused:
        assert answer["error"]["code"] == -32005
        assert "not run" in answer["error"]["message"] and "64 MiB" in answer["error"]["message"]
        assert answer["error"]["data"] == {"max_batch_answer_bytes": 64 << 20}
    assert served.call("daemon_status")["pid"] == served.pid


def test_a_batch_of_more_than_10000_requests_is_refused_whole(served: Daemon) -> None:
    batch = [{"jsonrpc": "2.0", "id": n, "method": "daemon_status"} for n in range(10001)]
    answer = exchange(served, json.dumps(batch).encode() + b"\n")[0]
    assert answer["error"]["code"] == -32600
    assert "a batch of 10001 requests; at most 10000" in answer["error"]["message"]
    assert answer["error"]["data"] == {"max_batch_items": 10000}
    assert len(exchange(served, json.dumps(batch[:10000]).encode() + b"\n")[0]) == 10000


def test_a_half_closed_client_that_never_reads_counts_until_it_is_closed(
        served: Daemon) -> None:
    """Such a connection left the count when its reader ended, its sender still held up
    to 64 MiB, blocked for good: 30 of them held 1.9 GB past the connection limit."""
    artifact_id = _placed_artifact(served.config.store, 12 << 20)
    before = served.call("daemon_status")["connections"]
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.connect(str(served.config.socket_path))
        sock.sendall(b"".join(json.dumps({"jsonrpc": "2.0", "id": n, "method": "get_artifact",
                                          "params": {"artifact_id": artifact_id}}).encode()
                              + b"\n" for n in range(4)))
        sock.shutdown(socket.SHUT_WR)  # and never reads
        time.sleep(2)
        assert served.call("daemon_status")["connections"] == before + 1
        started = time.monotonic()
        while served.call("daemon_status")["connections"] > before:  # the send timeout
            assert time.monotonic() - started < 45
            time.sleep(0.5)
        assert time.monotonic() - started > 20
        assert "read none of its answers for 30 s; closing it" in served.log()
    finally:
        sock.close()


def test_at_the_limit_the_longest_idle_connection_makes_room(served: Daemon) -> None:
    """256 connections that never sent anything locked every other client out for good."""
    held: list[socket.socket] = []
    try:
        _hold_connections(served.config.socket_path, 255, held)
        time.sleep(0.3)
        with Client(served.config.socket_path, timeout=10) as busy:  # idle less than 10 s
            busy.call("daemon_status")
            with pytest.raises(RpcError) as caught:
                served.call("daemon_status")
            assert caught.value.code == -32005
            time.sleep(10.5)
            busy.call("daemon_status")  # no longer idle
            assert served.call("daemon_status")["pid"] == served.pid
            assert busy.call("daemon_status")["pid"] == served.pid  # it was not the one
        closed = 0
        for sock in held:
            sock.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                closed += sock.recv(1) == b""
        assert closed >= 1
    finally:
        for sock in held:
            sock.close()


def test_a_fifo_or_a_directory_at_an_artifact_path_is_named_not_waited_on(
        served: Daemon) -> None:
    """A FIFO there held the call (and a daemon thread) for good; a directory was -32603
    with a traceback in the log."""
    import os

    artifacts = served.config.store / "artifacts"
    fifo = artifacts / "dd" / ("d" * 64)
    folder = artifacts / "ee" / ("e" * 64)
    fifo.parent.mkdir(parents=True, exist_ok=True)
    folder.mkdir(parents=True, exist_ok=True)
    os.mkfifo(fifo)
    try:
        for path, what in ((fifo, "a FIFO (named pipe), not a regular file"),
                           (folder, "a directory, not a file")):
            with Client(served.config.socket_path, timeout=10) as client, pytest.raises(
                    RpcError) as caught:
                client.call("get_artifact", {"artifact_id": f"art_{path.name}"})
            assert caught.value.code == -32003
            assert f"{path}: {what}" in str(caught.value)
    finally:
        fifo.unlink()
        folder.rmdir()


def test_a_nan_is_refused_by_the_client_naming_the_field(served: Daemon) -> None:
    """It went out as `NaN` and came back `-32700 parse error: NaN is not a JSON number`."""
    for value in (float("nan"), float("inf")):
        with pytest.raises(ValidationError) as caught:
            served.call("decide", {"text": "x", "refs": ["evt_x"], "confidence": value})
        assert caught.value.field == "confidence" and "nothing was sent" in str(caught.value)
    with pytest.raises(ValidationError) as caught:
        served.call("record_event", {"content": {"scores": [1.0, float("-inf")]}})
    assert caught.value.field == "content.scores.1"


def test_an_unknown_methods_name_is_quoted_shortened(served: Daemon) -> None:
    """A 2 MB name came back whole in a 2 MB answer."""
    answer = exchange(served, json.dumps({"jsonrpc": "2.0", "id": 1,
                                          "method": "m" * 500_000}).encode() + b"\n")[0]
    message = answer["error"]["message"]
    assert answer["error"]["code"] == -32601 and len(message) < 600
    assert f"method not found: '{'m' * 100}…'" in message


@pytest.mark.parametrize("path", ["", "/etc/passwd", "../outside.md", "decisions/../../x"])
def test_sync_refuses_a_path_not_relative_to_the_store(served: Daemon, path: str) -> None:
    """Each synced nothing and answered `files: 0`, saying nothing."""
    with pytest.raises(RpcError) as caught:
        served.call("sync", {"paths": [path]})
    assert caught.value.code == -32602 and f"{path!r} is not a path relative" in str(
        caught.value)


def test_gitmem_call_says_stdin_that_is_not_utf8_is_not(served: Daemon) -> None:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "gitmem", "--store", str(served.config.store),
                           "call", "status", "-"], input=b"\xff", capture_output=True,
                          env=served.env(), timeout=60)
    assert done.returncode == 2
    assert b"PARAMS from stdin is not UTF-8: byte 0xff at offset 0" in done.stderr


@contextlib.contextmanager
def serving(memory: Memory, **limits: Any) -> Iterator[Server]:
    """A socket server in this process on `memory`'s store, with `limits` (ServerOptions:
    a short idle limit, few connections), on a real socket; stopped afterwards."""
    import os

    folder = short_dir("gmi")
    server = Server(memory, folder / "s.sock", sync=lambda paths: {},
                    daemon_status=lambda: {"pid": os.getpid()},
                    options=ServerOptions(**limits))
    server.bind()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        thread.join(10)
        server.close()
        cleanup_dir(folder)


def _record_line(request_id: int, text: str) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "record_event",
                       "params": {"session_id": "idle",
                                  "content": {"text": text}}}).encode() + b"\n"


def test_a_client_still_sending_its_request_is_not_idle(memory: Memory) -> None:
    """Only whole lines counted: a client uploading a long request slowly was closed as
    idle halfway through (a broken pipe), and the connection that had just been served
    stayed."""
    with serving(memory, max_connections=2, idle_evict_s=1.0) as server:
        line = _record_line(1, "slow upload " + "x" * 20_000)
        slow = socket.socket(socket.AF_UNIX)
        slow.connect(str(server.socket_path))
        slow.sendall(line[:10_000])
        with Client(server.socket_path, timeout=10) as other:
            other.call("daemon_status")  # served after the slow one last sent a line
            for k in range(15):  # 3 s, a hundred bytes every 0.2 s
                slow.sendall(line[10_000 + 100 * k:10_100 + 100 * k])
                time.sleep(0.2)
            with Client(server.socket_path, timeout=10) as new:  # makes room: not the slow one
                assert new.call("daemon_status")["pid"] > 0
            slow.sendall(line[11_500:])
            answer = json.loads(_read_line(slow))
            assert answer["id"] == 1 and answer["result"]["event_id"].startswith("evt_")
        slow.close()


def test_a_request_that_reaches_a_connection_closed_as_idle_is_not_run(
        memory: Memory) -> None:
    """A line the daemon received as it closed the connection as idle was still run, its
    answer lost: the client read end-of-file for a write that was done."""
    done, not_done = [], []  # answered with a result; turned away or end-of-file

    def settled(server: Server, accepted: int, connections: int) -> Callable[[], bool]:
        return lambda: server.accepted == accepted and server.connections == connections

    with serving(memory, max_connections=1, idle_evict_s=0.0) as server:
        for n in range(400):  # until some met a closing connection (most do, at once)
            if n >= 40 and len([a for a in not_done if a[1] == b""]) >= 3:
                break
            wait_for(settled(server, 2 * n, 0))  # the last two are gone
            text = f"race {uuid.uuid4().hex}"
            with socket.socket(socket.AF_UNIX) as mine, socket.socket(socket.AF_UNIX) as new:
                mine.connect(str(server.socket_path))
                wait_for(settled(server, 2 * n + 1, 1))  # served, alone
                mine.sendall(_record_line(n, text))
                new.connect(str(server.socket_path))  # at the limit: closes the idle one
                mine.settimeout(10)
                got = b""
                with contextlib.suppress(ConnectionError):
                    got = _read_line(mine)
                (done if b'"result"' in got else not_done).append((text, got))
    written = "".join(p.read_text() for p in memory.store.glob("events/*/*.jsonl"))
    assert [got for _, got in not_done if got == b""], \
        "no request met a closing connection: nothing was tested"
    assert [(t, got) for t, got in not_done if t in written] == []
    assert [t for t, _ in done if t not in written] == []


def test_a_client_whose_idle_connection_was_closed_connects_again(memory: Memory) -> None:
    """Its next call failed (RequestNotSent: broken pipe); only the one after reconnected."""
    with serving(memory, max_connections=1, idle_evict_s=0.2) as server, Client(
            server.socket_path, timeout=10) as client:
        client.call("daemon_status")
        time.sleep(0.4)
        with socket.socket(socket.AF_UNIX) as new:
            new.connect(str(server.socket_path))  # closes the client's connection
            new.settimeout(5)
            new.sendall(b'{"jsonrpc": "2.0", "id": 1, "method": "daemon_status"}\n')
            assert b'"pid"' in _read_line(new)
        wait_for(lambda: server.connections == 0)  # the new one is gone: room again
        text = f"after eviction {uuid.uuid4().hex}"
        event = client.call("record_event", {"session_id": "again",
                                             "content": {"text": text}})
        assert client.call("daemon_status")["pid"] > 0
    written = "".join(p.read_text() for p in memory.store.glob("events/*/*.jsonl"))
    assert written.count(text) == 1 and event["event_id"] in written


def test_an_artifact_behind_a_linked_folder_is_not_found_naming_the_link(
        served: Daemon) -> None:
    """It was -32007, "the store could not be written", for a read."""
    import os

    outside = short_dir("gml")
    link = served.config.store / "artifacts" / "ab"
    link.parent.mkdir(parents=True, exist_ok=True)
    (outside / ("ab" + "c" * 62)).write_bytes(b"kept elsewhere")
    os.symlink(outside, link)
    try:
        with pytest.raises(RpcError) as caught:
            served.call("get_artifact", {"artifact_id": "art_ab" + "c" * 62})
        assert caught.value.code == -32003
        assert f"{link} is a symbolic link" in str(caught.value)
    finally:
        link.unlink()
        cleanup_dir(outside)
