"""Planted facts for the retrieval-quality set: a fact, a question, decoys.

Each template states a fact in one turn or across two (a question, then its
answer), and asks about it with a paraphrase that mostly avoids the fact's
words ("Which city hosts the cluster our deployments run on?" for "Our deploy
pipeline runs on the blue cluster in Frankfurt"). Decoys share the question's
words without answering it. Slot values are drawn per planting, so every
tenant gets its own version of a fact.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from bench.text import compiled
from bench.vocabulary import SLOTS


@dataclass(frozen=True)
class FactTemplate:
    """How one fact is said (`turns`: speaker and text), asked and imitated."""

    key: str
    turns: tuple[tuple[str, str], ...]
    question: str
    direct: bool = False  # the question repeats a rare term of the fact (a name, a ticket)
    decoys: tuple[str, ...] = ()


FACT_VALUES: dict[str, tuple[str, ...]] = {
    "city": ("Frankfurt", "Dublin", "Oslo", "Lisbon", "Warsaw", "Helsinki", "Zurich",
             "Montreal", "Osaka", "Singapore", "Sydney", "Vienna", "Madrid", "Tallinn"),
    "color": ("blue", "green", "amber", "violet", "crimson", "teal", "indigo", "silver"),
    "weekday": ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday"),
    "hour": ("07:00", "08:30", "09:00", "10:00", "14:00", "16:30", "17:00"),
    "lib": ("protobuf", "grpcio", "openssl", "libpq", "urllib3", "jackson", "netty", "boto3"),
    "vendor": ("Postmark", "SendGrid", "Mailgun", "Cloudflare", "Fastly", "Hetzner",
               "Scaleway", "OVHcloud", "Backblaze", "Wasabi"),
    "region": ("eu-west-1", "eu-north-1", "us-east-2", "ap-northeast-1", "ca-central-1",
               "sa-east-1", "me-south-1"),
    "codename": ("kestrel", "marmot", "quokka", "narwhal", "pangolin", "axolotl", "ibex",
                 "okapi", "tapir", "wombat", "lynx", "heron"),
    "room": ("Ada", "Turing", "Hopper", "Lovelace", "Dijkstra", "Knuth", "Liskov"),
    "currency": ("Swiss francs", "Japanese yen", "Norwegian kroner", "Canadian dollars",
                 "Polish zloty", "Brazilian reais"),
    "date": ("March 3rd", "April 14th", "May 2nd", "June 20th", "July 7th", "September 9th"),
    "quarter": ("Q2", "Q3", "Q4"),
    "table": ("order_lines", "ledger_entries", "click_events", "audit_trail", "price_history"),
    "db": ("CockroachDB", "ScyllaDB", "ClickHouse", "FoundationDB", "TimescaleDB", "YugabyteDB"),
    "stream": ("orders.v2", "payments.settled", "user.signups", "inventory.deltas",
               "audit.events"),
    "num": ("12", "45", "90", "120", "250", "400", "600", "750", "1200", "3000"),
    "small": ("3", "4", "5", "6", "7", "9"),
}

FACTS: tuple[FactTemplate, ...] = (
    FactTemplate("deploy-city", (("human", "Our deploy pipeline runs on the {color} cluster "
                                  "in {city}."),),
                 "Which city hosts the cluster our deployments run on?",
                 decoys=("We talked about moving the deploy runners to a bigger cluster next "
                         "quarter.",)),
    FactTemplate("account-owner", (("human", "{customer} renewed for two years; {person} "
                                    "handles everything on their side from now on."),),
                 "Who looks after the {customer} account?", direct=True,
                 decoys=("{customer} asked for a status page for their account.",)),
    FactTemplate("oncall-handover", (("human", "The pager rotation switches every {weekday} "
                                      "at {hour} UTC."),),
                 "When does on-call duty change hands?",
                 decoys=("On-call was noisy last week; we should tune the duty alerts.",)),
    FactTemplate("pinned-lib", (("agent", "I pinned {lib} to {ver_a} because {ver_b} leaks file "
                                 "descriptors under load."),),
                 "Why are we stuck on an older {lib} release?", direct=True),
    FactTemplate("backup-bucket", (("agent", "Nightly snapshots of the {svc} Postgres land in "
                                    "the bucket {codename}-pg-dumps."),),
                 "Where do the {svc} database backups end up each night?",
                 decoys=("The {svc} database backups took longer than usual last night.",)),
    FactTemplate("root-cause", (("agent", "{ticket} post-mortem: an expired TLS certificate "
                                 "on the {svc} load balancer broke every handshake."),),
                 "What caused {ticket}?", direct=True),
    FactTemplate("rate-limit", (("human", "The public API allows {num} requests per minute "
                                 "for each key."),),
                 "How many calls can one client make against the public API in a minute?",
                 decoys=("A client complained that the public API was slow for a minute.",)),
    FactTemplate("service-owner", (("human", "{person} owns {svc} end to end, including its "
                                    "pager."),),
                 "Who is responsible for the {svc} service?", direct=True),
    FactTemplate("warehouse-refresh", (("agent", "The nightly warehouse load starts at {hour} "
                                        "and normally needs {num} minutes."),),
                 "How long does the analytics reload take?"),
    FactTemplate("search-hosting", (("human", "Where did we end up hosting the search cluster "
                                     "for {svc}?"),
                                    ("agent", "It moved to {vendor}, region {region}, during "
                                     "the last sprint.")),
                 "Which provider runs search for {svc} now?", direct=True),
    FactTemplate("billing-currency", (("human", "{customer} must be invoiced in {currency} "
                                       "with net {small}0 terms."),),
                 "What currency does {customer} pay their bills in?", direct=True,
                 decoys=("{customer} paid the last invoice late again.",)),
    FactTemplate("checkout-slo", (("human", "The objective for checkout is p99 below {num} "
                                   "milliseconds."),),
                 "What latency target did we set for the purchase flow?",
                 decoys=("Checkout latency looked fine in the last load test.",)),
    FactTemplate("reset-mail", (("agent", "Password reset emails go out through {vendor} "
                                 "from no-reply@{codename}.example."),),
                 "Which provider delivers our account recovery mails?"),
    FactTemplate("ledger-db", (("human", "We picked {db} for the ledger because we need "
                                "serializable transactions across regions."),),
                 "Why was that datastore chosen for the ledger?",
                 decoys=("The ledger team wants to review the datastore costs.",)),
    FactTemplate("mobile-train", (("human", "The app release train leaves every {small} weeks "
                                   "on {weekday}."),),
                 "How often do we ship the phone app?"),
    FactTemplate("code-freeze", (("human", "Code freeze for the {quarter} launch begins on "
                                  "{date}."),),
                 "When do we stop merging before the {quarter} launch?", direct=True),
    FactTemplate("vault-path", (("agent", "{svc} reads its credentials from the vault mount "
                                 "kv/{codename}/{svc}."),),
                 "Where does {svc} fetch its secrets from?", direct=True),
    FactTemplate("stream-retention", (("agent", "The {stream} topic keeps messages for "
                                       "{small} days."),),
                 "What is the retention on {stream}?", direct=True),
    FactTemplate("vpn-admin", (("human", "Contractor VPN access is managed by {person} on "
                                "{vendor}."),),
                 "Who administers remote access for external contractors?"),
    FactTemplate("migration-budget", (("human", "What did finance say about the observability "
                                       "migration?"),
                                      ("agent", "Finance approved {num} thousand euros for it, "
                                       "spread over two quarters.")),
                 "How much money was approved for moving our monitoring stack?"),
    FactTemplate("mtls", (("agent", "The {customer} integration authenticates with mutual TLS, "
                           "not OAuth."),),
                 "How does {customer}'s integration log in to our systems?", direct=True),
    FactTemplate("big-table", (("agent", "The {table} table has roughly {num} million rows "
                                "and is partitioned by month."),),
                 "How large is {table} and how is it split?", direct=True),
    FactTemplate("webhooks-sunset", (("human", "The v1 webhooks are deprecated and shut off on "
                                      "{date}."),),
                 "When will the old version-one callbacks stop working?"),
    FactTemplate("design-review", (("human", "Design reviews happen on {weekday} afternoons in "
                                    "the {room} room."),),
                 "Where and when are architecture meetings held?"),
    FactTemplate("cache-ttl", (("agent", "The {svc} cache keeps entries for {num} seconds "
                                "before they expire."),),
                 "What is the TTL of the {svc} cache?", direct=True),
    FactTemplate("failover", (("human", "Which region took over during the outage?"),
                              ("agent", "{region} failed over to {region_b} and traffic was back "
                               "within {small} minutes.")),
                 "Where did traffic move when the outage hit, and how fast did it recover?"),
    FactTemplate("gpu-reservation", (("human", "Training jobs run on the {codename} GPU pool; "
                                      "{person} handles reservations."),),
                 "Who do I ask to book machines for model training?"),
    FactTemplate("export-limit", (("human", "{customer} says exports larger than {num} MB "
                                   "time out."),),
                 "What size of export fails for {customer}?", direct=True),
    FactTemplate("standup-time", (("human", "From next week the {team} standup moves to {hour} "
                                   "on weekdays."),),
                 "At what time does the {team} daily sync happen now?", direct=True),
    FactTemplate("staging-flags", (("agent", "Staging feature flags live in the {codename} "
                                    "project of the flag service."),),
                 "Which project holds the toggles for the pre-production environment?"),
)


def slot_values(rng: random.Random) -> dict[str, str]:
    """One draw of every fact slot (a fact uses only the ones it names)."""
    values = {name: rng.choice(pool) for name, pool in FACT_VALUES.items()}
    for name in ("svc", "customer", "person", "team"):
        values[name] = SLOTS[name].draw(rng)
    values["ticket"] = f"INC-{rng.randint(10000, 99999)}"
    values["ver_a"] = f"{rng.randint(1, 5)}.{rng.randint(0, 9)}.{rng.randint(0, 9)}"
    values["ver_b"] = f"{rng.randint(6, 9)}.{rng.randint(0, 9)}.0"
    values["region_b"] = rng.choice([r for r in FACT_VALUES["region"] if r != values["region"]])
    return values


def render(text: str, values: dict[str, str]) -> str:
    """A fact, question or decoy with its slots filled from `values`."""
    return compiled(text).fill(random.Random(0), values)
