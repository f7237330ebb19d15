"""What an index's rows are made under: gitmem's own rules for making rows (`ROW_RULES`)
and the policy values rows depend on (chunk sizes, the default tenant, redaction). An
index records both (meta `row_policies`); a sync that finds them changed remakes every
row once (`reshaping` says why, naming the policy file, or gitmem's upgrade)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from gitmem.db import Database
from gitmem.policies import Policies

# How gitmem reads lines and applies the redaction policy to what the index serves,
# beyond the policy's values; a change remakes existing rows once. 2: a number under a
# key naming a secret is redacted too (and an event's chunks are told duplicates by
# `records.content_key`); 3: a line giving a key twice, or a number beyond a float's
# range, is refused (it was served with the key's last value, or null), and a number
# joined to a word by a hyphen is searchable unsigned (`folding.joined_numbers`); 4: a
# version written with its `v` is searchable without it (`folding.bare_versions`); 5: an
# event's row and its chunks' tags are redacted too (`rows.stored_event`), not only the
# text served, a paragraph of one line is cut between words (`rows.split_counted`), and
# a view's code fences are read as CommonMark reads them (`~~~`, longer runs), and
# Hebrew's points, Arabic's vowel marks and a soft hyphen are folded away; 6: the ids the
# write path minted stay whole in a chunk's text (`rows._redact_text`), and a view's
# setext headings (`===`, `---` under a paragraph) cut it as `#` headings do; 7: a view is
# cut at the top-level headings markdown-it-py finds (CommonMark, GFM tables); 8: a task's
# chunk names its owner (`Task [doing] title (owner: alice)`), and a cancelled task
# weighs in retrieval as little as a done one.
ROW_RULES = 8


def row_policies(policies: Policies) -> str:
    """The rules and policy values an index's rows are made with (how events are cut into
    chunks, whose records name no tenant, what the texts it serves are redacted by): rows
    made with others are made again."""
    privacy = policies.privacy
    redaction = hashlib.sha256(json.dumps(
        [privacy.redaction, *(p.pattern for p in privacy.patterns),
         *(f"key:{p.pattern}" for p in privacy.key_patterns)]).encode()).hexdigest()
    return json.dumps({"chunk_max_tokens": policies.budgets.chunk_max_tokens,
                       "default_tenant": policies.manifest.default_tenant,
                       "redaction": redaction[:16], "rules": ROW_RULES}, sort_keys=True)


_POLICY_FILES = {"chunk_max_tokens": "policies/budgets.yaml", "default_tenant": "manifest.json",
                 "redaction": "policies/privacy.yaml"}


def reshaping(db: Database, policies: Policies) -> tuple[str, str] | None:
    """Why the index must be made again under the current policies, and the policy file
    that says so ("index" when gitmem's own rules changed: an upgrade; None: it need not)."""
    found = db.fetchone("meta_get", {"key": "row_policies"})
    now = row_policies(policies)
    if found is not None and found["value"] == now:
        return None
    made: dict[str, Any] = json.loads(found["value"]) if found is not None else {}
    wanted = json.loads(now)
    if made.get("rules") != ROW_RULES:  # an index made before `rules` was kept: before 7
        was = made.get("rules", "6 or older")
        return "index", (f"rows were made by another version of gitmem (rules {was} -> "
                         f"{ROW_RULES}): every file is read again")
    keys = [key for key in sorted(wanted) if made.get(key) != wanted[key]]
    where = _POLICY_FILES[keys[0]] if keys else "policies/budgets.yaml"
    said = ", ".join(f"{key} {made.get(key, 'unknown')} -> {wanted[key]}" for key in keys)
    return where, f"rows were made under other policies ({said}): every file is read again"
