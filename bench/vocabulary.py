"""The benchmark corpus's words: slot vocabularies drawn with Zipfian weights.

Each slot (`{svc}`, `{problem}`, ...) is a list in rank order; rank r is drawn
with weight 1/r**s, so a few terms are very common and the rest form a long
tail. `{rare}` words and generated identifiers (tickets, hosts, versions)
supply the rare terms a retrieval benchmark needs.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate


@dataclass(frozen=True)
class Zipf:
    """Items drawn with Zipfian weights: the r-th item has weight 1/r**s."""

    items: tuple[str, ...]
    cum: tuple[float, ...]

    @classmethod
    def of(cls, items: Sequence[str], s: float = 1.0) -> Zipf:
        """A sampler over `items` in rank order."""
        weights = (1.0 / (rank ** s) for rank in range(1, len(items) + 1))
        return cls(tuple(items), tuple(accumulate(weights)))

    def draw(self, rng: random.Random) -> str:
        """One item."""
        return self.items[bisect.bisect(self.cum, rng.random() * self.cum[-1])]


def _words(text: str) -> tuple[str, ...]:
    return tuple(w.strip() for w in text.split("|") if w.strip())


SERVICES = _words("""api|checkout|billing|search|auth|payments|gateway|notifications|ledger|
scheduler|ingest|exporter|webhooks|reporting|inventory|pricing|catalog|recommendations|mailer|
uploader|thumbnailer|indexer|router|session-store|rate-limiter|feature-flags|audit-log|
metrics-collector|geo-lookup|invoicing|onboarding|identity|fraud-check|shipping|returns|
loyalty|chat-relay|media-transcoder|sitemap|tax-engine""")

COMPONENTS = _words("""database|cache|queue|cluster|pipeline|migration|index|connection pool|
load balancer|replica|worker|cron job|dashboard|alert|config|feature flag|schema|endpoint|
container|node|pod|certificate|DNS record|bucket|topic|consumer group|build|test suite|
release branch|runbook|helm chart|terraform module|service mesh|sidecar|ingress|
autoscaler|read replica|primary|partition|materialized view|background job|webhook|
API key rotation|retry policy|circuit breaker|health check|rollout|deployment|canary|
storage volume|snapshot|backup|secret store|message broker|CDN|proxy|job runner|
search index|event stream""")

PROBLEMS = _words("""timeouts|a memory leak|a deadlock|a latency spike|500 errors|OOM kills|
disk pressure|replication lag|a flaky test|a race condition|a cache stampede|a retry storm|
a slow query|connection exhaustion|stale reads|an expired certificate|config drift|
a bad migration|dropped messages|duplicate events|a thundering herd|lock contention|
packet loss|a DNS failure|a noisy neighbour|throttling|a hot partition|clock skew|
a broken build|a dependency conflict|a schema mismatch|an N+1 query|GC pauses|
a full disk|a split brain|a crash loop|missing indexes|a TLS handshake failure|
a rate limit breach|a data race""")

VERBS = _words("""deploy|roll back|restart|scale up|migrate|patch|revert|merge|review|
benchmark|profile|drain|rebuild|upgrade|investigate|monitor|document|split|shard|vacuum|
tune|batch|pause|replay|backfill|rotate|reindex|rerun|bisect|pin|throttle|cordon|
failover|snapshot|archive|deprecate|refactor|load test|canary|quarantine""")

VERBED = _words("""deployed|rolled back|restarted|scaled up|migrated|patched|reverted|merged|
reviewed|benchmarked|profiled|drained|rebuilt|upgraded|investigated|fixed|documented|split|
sharded|vacuumed|tuned|batched|paused|replayed|backfilled|rotated|reindexed|reran|bisected|
pinned|throttled|cordoned|failed over|snapshotted|archived|deprecated|refactored|
load tested|quarantined|disabled""")

ENVS = _words("""prod|staging|production|canary|dev|the EU region|us-east-1|eu-central-1|
the preview environment|ap-southeast-2|the sandbox|the DR site""")

PEOPLE = _words("""alice|bob|carol|dave|erin|frank|grace|heidi|ivan|judy|mallory|niaj|
olivia|peggy|rupert|sybil|trent|victor|walter|yuki|zara|amir|bea|chen|dmitri|elena|
farah|goran|hana|ines|jonas|kemal|lena|mateo|nadia|oskar|priya|quinn|rosa|sanjay|tomas|
uma|vera|wei|ximena|yusuf|zoe|arjun|bianca|colm""")

CUSTOMERS = _words("""Acme|Globex|Initech|Umbrella|Hooli|Vandelay|Stark Industries|
Wayne Enterprises|Soylent|Tyrell|Cyberdyne|Wonka|Oscorp|Aperture|Black Mesa|
Massive Dynamic|Pied Piper|Dunder Mifflin|Prestige Worldwide|Monarch|Gringotts|Nakatomi|
Virtucon|Sirius Cybernetics|Bluth Company|Los Pollos|Krusty Krab|Planet Express|
Weyland|Zorg Industries|Duff|Gekko and Co|Spacely Sprockets|Cogswell Cogs|Rekall|Ollivanders|
Octan|Yoyodyne|Buy n Large|Ghostbusters""")

METRICS = _words("""p95 latency|p99 latency|error rate|CPU usage|memory usage|queue depth|
throughput|cache hit rate|disk IO|replication lag|request rate|GC pause time|connection count|
saturation|apdex|cold start time|build time|test duration|bundle size|cost per request""")

TIMES = _words("""yesterday|this morning|last night|on Friday|after lunch|during the standup|
over the weekend|an hour ago|last sprint|before the release|on Monday|at 3am|earlier today|
right after the deploy|during the incident|last week|two days ago|at midnight""")

REASONS = _words("""because the index was missing|since the pool was too small|
after the config change|due to a bad migration|because nobody set a timeout|
since the retry policy had no backoff|because the cache key ignored the tenant|
after the certificate rotation|because the batch size was too large|
due to a missing feature flag|because the health check was too strict|
since the node pool ran out of capacity|because of a typo in the helm values|
after the dependency upgrade|because two workers raced on the same row""")

TOOLS = _words("""kubectl|terraform|psql|grafana|pagerduty|datadog|sentry|github actions|
argo cd|helm|vault|redis-cli|pgbouncer|jenkins|buildkite|k6|jmeter|opentelemetry|
prometheus|loki|elasticsearch|kafka|rabbitmq|nginx|envoy|docker|bazel|poetry|pytest|
playwright""")

TEAMS = _words("""platform|payments|growth|data|mobile|web|infra|security|support|sre|
search|billing|identity|ml|design""")

# The long tail: technical words that appear rarely (flatter weights, low template share).
RARE = _words("""idempotency|backpressure|quiescence|tombstones|hysteresis|linearizability|
write amplification|bloom filter|compaction|hugepages|seccomp|cgroups|jitter|bulkhead|
debounce|fencing token|vector clock|gossip protocol|consistent hashing|lease renewal|
head-of-line blocking|nagle|slow loris|cardinality explosion|toast tables|wraparound|
autovacuum|checkpointer|fsync storm|readahead|page cache|numa|cpu pinning|spot instances|
preemption|taints|tolerations|pod disruption budget|leader election|raft|paxos|quorum|
anti-entropy|merkle tree|hinted handoff|sloppy quorum|saga|outbox pattern|two-phase commit|
exactly-once|dead letter queue|poison message|schema registry|protobuf|avro|flatbuffers|
zstd|brotli|simd|jit|wasm|ebpf|io_uring|epoll|kqueue|mmap|copy-on-write|rcu|seqlock|
spinlock|futex|priority inversion|false sharing|cache line|branch predictor|tail latency|
coordinated omission|hdr histogram|reservoir sampling|hyperloglog|count-min sketch|
t-digest|roaring bitmap|trigram index|gin index|brin index|partial index|covering index|
index-only scan|bitmap heap scan|hash join|merge join|nested loop|work_mem|
shared_buffers|wal archiving|logical replication|pgoutput|debezium|cdc|snowflake ids|
ulid|uuidv7|monotonic clock|leap second|tzdata|iso week|cron drift|thundering herd|
canary analysis|blue-green|feature toggles|dark launch|shadow traffic|chaos engineering|
game day|error budget|burn rate|slo alerting|runbook automation|toil|postmortem|
five whys|blast radius|sev2|pagerduty escalation|sbom|sigstore|cosign|slsa|
dependabot|renovate|semver|monorepo|bazel remote cache|hermetic builds|flaky quarantine""")

TOPICS = ("deploys", "databases", "incidents", "reviews", "customers", "ci", "planning",
          "observability", "security", "infra")

SLOTS: dict[str, Zipf] = {
    "svc": Zipf.of(SERVICES, 1.1), "comp": Zipf.of(COMPONENTS, 1.0),
    "problem": Zipf.of(PROBLEMS, 1.0), "verb": Zipf.of(VERBS, 1.0),
    "verbed": Zipf.of(VERBED, 1.0), "env": Zipf.of(ENVS, 1.2),
    "person": Zipf.of([p.capitalize() for p in PEOPLE], 0.9),
    "customer": Zipf.of(CUSTOMERS, 1.0), "metric": Zipf.of(METRICS, 1.0),
    "time": Zipf.of(TIMES, 0.9), "reason": Zipf.of(REASONS, 0.8),
    "tool": Zipf.of(TOOLS, 1.0), "team": Zipf.of(TEAMS, 1.0), "rare": Zipf.of(RARE, 0.6),
}


def generated(slot: str, rng: random.Random) -> str | None:
    """Values of the generated slots (numbers and identifiers); None if `slot` is a list."""
    if slot == "n":
        return str(rng.choice((2, 3, 4, 5, 8, 10, 12, 15, 20, 30, 50, 100, 200, 500)))
    if slot == "ms":
        return f"{rng.randint(2, 40) * 25}ms"
    if slot == "pct":
        return f"{rng.randint(1, 99)}%"
    if slot == "ticket":
        return f"{rng.choice(('INC', 'OPS', 'BUG', 'SEC', 'PLAT'))}-{rng.randint(100, 9999)}"
    if slot == "pr":
        return f"#{rng.randint(1000, 19999)}"
    if slot == "host":
        return f"{SLOTS['svc'].draw(rng)}-{rng.getrandbits(24):06x}"
    if slot == "ver":
        return f"{rng.randint(0, 9)}.{rng.randint(0, 30)}.{rng.randint(0, 20)}"
    return None
