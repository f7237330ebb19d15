"""The benchmark corpus: generated once per (size, seed, generator version), then cached.

The plan (`bench.plan`) and the sessions' conversations (`bench.sessions`) are
written through gitmem's real write path: `Recorder.record_many` in batches
(validation, redaction, excerpts and artifacts, fsync), `Recorder.decide` for
decisions (so supersede chains name real decision files) and `Recorder.task`
for tasks. Beside the store lie `questions.json` (the retrieval-quality set,
with the ids of each fact's evidence) and `corpus.json` (what was generated).

    python -m bench.corpus --size 100k      # generate (or find) a corpus; print its path
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import random
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import CACHE_ROOT
from bench.plan import NOW, SHAPES, Plan, make_plan
from bench.sessions import Op, session_ops
from bench.vocabulary import RARE, SLOTS
from gitmem.policies import load_policies
from gitmem.recorder import Recorder
from gitmem.store import init_store

GENERATOR_VERSION = 3
CACHE_DIR = CACHE_ROOT / "corpus"
BATCH_EVENTS = 1000
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class Corpus:
    """A generated corpus on disk: the store, the question set, the generation report."""

    size: str
    seed: int
    root: Path

    @property
    def repo(self) -> Path:
        """The git work tree holding the store."""
        return self.root / "repo"

    @property
    def store(self) -> Path:
        """The memory store (`repo/memory`)."""
        return self.repo / "memory"

    @property
    def info(self) -> dict[str, Any]:
        """What was generated (corpus.json)."""
        data: dict[str, Any] = json.loads((self.root / "corpus.json").read_text())
        return data

    def questions(self) -> list[dict[str, Any]]:
        """The retrieval-quality questions with their evidence ids."""
        data = json.loads((self.root / "questions.json").read_text())
        questions: list[dict[str, Any]] = data["questions"]
        return questions

    def term_queries(self) -> dict[str, list[str]]:
        """Query strings of common terms and of rare terms, for latency runs."""
        data = json.loads((self.root / "questions.json").read_text())
        queries: dict[str, list[str]] = data["term_queries"]
        return queries


class _Writer:
    """Applies the ops in order: events batched, decisions and tasks one by one."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.batch: list[dict[str, Any]] = []
        self.chains: dict[tuple[str, str], str] = {}
        self.open_tasks: dict[str, list[tuple[str, str]]] = {}
        self.counts: Counter[str] = Counter()

    def handle(self, op: Op) -> None:
        if op.action == "event":
            self.batch.append(op.fields)
            if len(self.batch) >= BATCH_EVENTS:
                self.flush()
            return
        self.flush()
        {"decide": self._decide, "task": self._task,
         "task_update": self._task_update}[op.action](dict(op.fields))

    def flush(self) -> None:
        if self.batch:
            for event in self.recorder.record_many(self.batch):
                self.counts[event.kind] += 1
                if event.content.get("artifact_id"):
                    self.counts["artifacts"] += 1
            self.batch = []

    def _decide(self, f: dict[str, Any]) -> None:
        key = (f["tenant_id"], f.pop("chain"))
        previous = self.chains.get(key) if f.pop("supersede") else None
        event = self.recorder.decide(
            f.pop("text"), f.pop("refs"), supersedes=[previous] if previous else [],
            decision_id="dec_" + f["id"].removeprefix("evt_"),  # as seeded as its event's
            rationale=f.pop("rationale"), title=f.pop("title"),
            alternatives=f.pop("alternatives"), confidence=f.pop("confidence"), **f)
        self.chains[key] = event.content["decision_id"]
        self.counts["decision"] += 1
        self.counts["superseding"] += bool(previous)

    def _task(self, f: dict[str, Any]) -> None:
        title = f.pop("title")
        task_id = f.pop("task_id")
        self.recorder.task(title, task_id=task_id, owner=f.pop("owner"), **f)
        self.open_tasks.setdefault(f["tenant_id"], []).append((task_id, title))
        self.counts["task_update"] += 1
        self.counts["tasks"] += 1

    def _task_update(self, f: dict[str, Any]) -> None:
        open_tasks = self.open_tasks.get(f["tenant_id"])
        pick, status = f.pop("pick"), f.pop("status")
        if not open_tasks:
            return
        task_id, title = open_tasks[int(pick * len(open_tasks))]
        self.recorder.task(title, task_id=task_id, status=status, **f)
        if status in ("done", "cancelled"):
            open_tasks.remove((task_id, title))
        self.counts["task_update"] += 1


def _term_queries(seed: int) -> dict[str, list[str]]:
    rng = random.Random(seed ^ 0x5EED)
    head = sorted({item.lower() for slot, top in (("svc", 8), ("comp", 8), ("verb", 6))
                   for item in SLOTS[slot].items[:top]})
    tail = list(RARE[len(RARE) // 3:])
    return {"common": _distinct(rng, head, (2,)), "rare": _distinct(rng, tail, (1, 2))}


def _distinct(rng: random.Random, words: list[str], lengths: tuple[int, ...],
              count: int = 20) -> list[str]:
    found: dict[str, None] = {}
    while len(found) < count:
        found[" ".join(rng.sample(words, rng.choice(lengths)))] = None
    return list(found)


GIT_IDENTITY = {"GIT_AUTHOR_NAME": "gitmem bench", "GIT_AUTHOR_EMAIL": "bench@example.com",
                "GIT_COMMITTER_NAME": "gitmem bench", "GIT_COMMITTER_EMAIL": "bench@example.com"}


def new_repo(repo: Path, default_tenant: str = "default") -> Path:
    """A git repository of its own at `repo` (never the checkout that holds the cache)
    with a fresh store; the store's path."""
    repo.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    return init_store(repo, default_tenant=default_tenant).store


def commit_all(repo: Path, message: str) -> None:
    """Commit everything in `repo`, as a project keeps its memory committed, without
    the automatic `git gc` a commit this size sets off: detached, it packed the
    repository on both cores for minutes into the measurements that followed; in
    the foreground it took 328 s of a 1M corpus's 11 minutes. Nothing here reads
    the history, so the objects stay loose."""
    env = {**os.environ, **GIT_IDENTITY}
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True, env=env)
    subprocess.run(["git", "-C", str(repo), "-c", "gc.auto=0", "commit", "-q",
                    "--no-verify", "-m", message], check=True, env=env)


def write_corpus(plan: Plan, repo: Path, progress: Progress | None = None) -> dict[str, Any]:
    """Write the plan's events into a new store in a new repository `repo`; what was written."""
    store = new_repo(repo, plan.tenants[0].id)
    writer = _Writer(Recorder(store, load_policies(store)))
    planned = sum(s.length for s in plan.sessions)
    ops = heapq.merge(*(session_ops(s) for s in plan.sessions), key=lambda op: op.key)
    for number, op in enumerate(ops, start=1):
        writer.handle(op)
        if progress is not None and number % 10_000 == 0:
            progress(number, planned)
    writer.flush()
    counts = dict(sorted(writer.counts.items()))
    events = sum(v for k, v in counts.items() if k not in ("artifacts", "superseding", "tasks"))
    return {"events": events, "counts": counts}


def corpus_dir(size: str, seed: int, cache: Path = CACHE_DIR) -> Path:
    """Where the corpus of (size, seed) for this generator version is cached."""
    return cache / f"{size}-s{seed}-v{GENERATOR_VERSION}"


def ensure_corpus(size: str, seed: int = 1, cache: Path = CACHE_DIR,
                  progress: Progress | None = None) -> Corpus:
    """The cached corpus of (size, seed), generated first when missing."""
    root = corpus_dir(size, seed, cache)
    if (root / "corpus.json").is_file():
        return Corpus(size, seed, root)
    shape = SHAPES[size]
    tmp = root.with_name(f"{root.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    started = time.perf_counter_ns()
    plan = make_plan(shape.events, shape.tenants, shape.questions, seed)
    written = write_corpus(plan, tmp / "repo", progress)
    seconds = (time.perf_counter_ns() - started) / 1e9
    with_commit = time.perf_counter_ns()
    commit_all(tmp / "repo", f"benchmark corpus {size}, seed {seed}")
    commit_s = (time.perf_counter_ns() - with_commit) / 1e9
    questions = {"version": GENERATOR_VERSION, "size": size, "seed": seed,
                 "now": NOW.isoformat(), "questions": [q.to_dict() for q in plan.questions],
                 "term_queries": _term_queries(seed)}
    (tmp / "questions.json").write_text(json.dumps(questions, indent=1) + "\n")
    info = {"size": size, "seed": seed, "generator_version": GENERATOR_VERSION,
            "now": NOW.isoformat(), "tenants": len(plan.tenants),
            "sessions": len(plan.sessions), "questions": len(plan.questions),
            **written, "generation_s": round(seconds, 2), "git_commit_s": round(commit_s, 2),
            "events_per_s": round(written["events"] / seconds, 1),
            "store_bytes": _tree_bytes(tmp / "repo" / "memory")}
    (tmp / "corpus.json").write_text(json.dumps(info, indent=1) + "\n")
    os.replace(tmp, root)
    return Corpus(size, seed, root)


def _tree_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _progress(done: int, planned: int) -> None:
    print(f"  corpus: {done:,} / ~{planned:,} writes", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    """Generate (or find) a corpus and print its directory."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", choices=sorted(SHAPES), default="tiny")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cache", type=Path, default=CACHE_DIR)
    args = parser.parse_args(argv)
    corpus = ensure_corpus(args.size, args.seed, args.cache, _progress)
    print(corpus.root)
    print(json.dumps(corpus.info, indent=1), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
