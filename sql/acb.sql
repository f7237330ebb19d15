-- Named statements of the read path: build_acb's context and bounded retrieval.

-- name: query_tokens
SELECT alias, token, lexemes
FROM ts_debug('english', %(text)s)
WHERE alias NOT IN ('blank')

-- name: pool_term
-- The newest chunks matching a set of terms together, found through the GIN index
-- (for sets that match rarely; the query carries the tenant's word). As in
-- pool_rare, the tenant test is kept out of the indexes: an AND with the tenant's
-- btree would read every entry of the tenant.
SELECT c.chunk_id, c.source_type, c.source_id, extract(epoch FROM c.ts)::float8 AS epoch,
       c.channel, c.sensitivity, c.token_est, c.importance,
       (SELECT coalesce(sum(1::bigint << (u.n - 1)::int), 0)::bigint
        FROM unnest(%(queries)s::tsquery[]) WITH ORDINALITY AS u(q, n)
        WHERE c.tsv @@ u.q) AS mask,
       length(c.tsv) AS words
FROM chunks c
WHERE c.tsv @@ %(query)s::tsquery AND (c.tenant_id || '') = %(tenant)s
ORDER BY c.ts DESC, c.chunk_id DESC
LIMIT %(limit)s

-- name: pool_term_walk
-- The same for sets that match often: walk the tenant's chunks newest first and
-- stop at `limit` matches. `IS TRUE` keeps the GIN index out of the plan (it would
-- fetch every match to sort them).
SELECT c.chunk_id, c.source_type, c.source_id, extract(epoch FROM c.ts)::float8 AS epoch,
       c.channel, c.sensitivity, c.token_est, c.importance,
       (SELECT coalesce(sum(1::bigint << (u.n - 1)::int), 0)::bigint
        FROM unnest(%(queries)s::tsquery[]) WITH ORDINALITY AS u(q, n)
        WHERE c.tsv @@ u.q) AS mask,
       length(c.tsv) AS words
FROM chunks c
WHERE c.tenant_id = %(tenant)s AND (c.tsv @@ %(query)s::tsquery) IS TRUE
ORDER BY c.ts DESC, c.chunk_id DESC
LIMIT %(limit)s

-- name: pool_rare
-- Every match of a rare term. The query carries the tenant's own word, so the GIN
-- index hands back this tenant's rows only; the CTE keeps the plan a bitmap scan
-- (walking the newest rows in search of a rare word would read the whole tenant),
-- and the tenant test is written so no tenant index is ANDed in (it would read
-- every entry of the tenant to narrow what the tenant word already narrowed).
WITH matches AS MATERIALIZED (
  SELECT c.chunk_id, c.source_type, c.source_id, extract(epoch FROM c.ts)::float8 AS epoch,
         c.channel, c.sensitivity, c.token_est, c.importance,
         (SELECT coalesce(sum(1::bigint << (u.n - 1)::int), 0)::bigint
          FROM unnest(%(queries)s::tsquery[]) WITH ORDINALITY AS u(q, n)
          WHERE c.tsv @@ u.q) AS mask,
       length(c.tsv) AS words
  FROM chunks c
  WHERE c.tsv @@ %(query)s::tsquery AND (c.tenant_id || '') = %(tenant)s
)
SELECT * FROM matches ORDER BY epoch DESC, chunk_id DESC LIMIT %(limit)s

-- name: pool_recent
-- Of the tenant's newest chunks (`window` of them), those matching any term: one
-- backward walk gathers every common word's recent matches at once. The match
-- mask is computed only for the chunks that match.
SELECT c.chunk_id, c.source_type, c.source_id, extract(epoch FROM c.ts)::float8 AS epoch,
       c.channel, c.sensitivity, c.token_est, c.importance,
       (SELECT coalesce(sum(1::bigint << (u.n - 1)::int), 0)::bigint
        FROM unnest(%(queries)s::tsquery[]) WITH ORDINALITY AS u(q, n)
        WHERE c.tsv @@ u.q) AS mask,
       length(c.tsv) AS words
FROM (
  SELECT chunk_id, source_type, source_id, ts, channel, sensitivity, token_est, importance, tsv
  FROM chunks
  WHERE tenant_id = %(tenant)s
  ORDER BY ts DESC, chunk_id DESC
  LIMIT %(window)s
) c
WHERE c.tsv @@ %(any)s::tsquery
ORDER BY c.ts DESC, c.chunk_id DESC
LIMIT %(limit)s

-- name: pool_records
-- Decisions, tasks and summaries matching any term (with the tenant's word): few,
-- so all of them through the small partial GIN index, then the newest.
WITH matches AS MATERIALIZED (
  SELECT c.chunk_id, c.source_type, c.source_id, extract(epoch FROM c.ts)::float8 AS epoch,
         c.channel, c.sensitivity, c.token_est, c.importance,
         (SELECT coalesce(sum(1::bigint << (u.n - 1)::int), 0)::bigint
          FROM unnest(%(queries)s::tsquery[]) WITH ORDINALITY AS u(q, n)
          WHERE c.tsv @@ u.q) AS mask,
       length(c.tsv) AS words
  FROM chunks c
  WHERE c.source_type <> 'event' AND c.tsv @@ %(query)s::tsquery
    AND (c.tenant_id || '') = %(tenant)s
)
SELECT * FROM matches ORDER BY epoch DESC, chunk_id DESC LIMIT %(limit)s

-- name: exact_matches
-- The naive baseline: every chunk matching any term, with the same features.
SELECT c.chunk_id, c.source_type, c.source_id, extract(epoch FROM c.ts)::float8 AS epoch,
       c.channel, c.sensitivity, c.token_est, c.importance,
       (SELECT coalesce(sum(1::bigint << (u.n - 1)::int), 0)::bigint
        FROM unnest(%(queries)s::tsquery[]) WITH ORDINALITY AS u(q, n)
        WHERE c.tsv @@ u.q) AS mask,
       length(c.tsv) AS words
FROM chunks c
WHERE c.tenant_id = %(tenant)s AND c.tsv @@ %(any)s::tsquery

-- name: naive_rank
-- What a simple implementation does: ts_rank over every match, top N.
SELECT chunk_id, ts_rank(tsv, %(any)s::tsquery) AS rank
FROM chunks
WHERE tenant_id = %(tenant)s AND tsv @@ %(any)s::tsquery
ORDER BY rank DESC, chunk_id
LIMIT %(limit)s

-- name: chunk_items
SELECT c.chunk_id, c.source_type, c.source_id, c.path, c.line, c.ts, c.kind, c.channel,
       c.session_id, c.sensitivity, c.tags, c.refs, c.hash, c.token_est, c.importance, c.text,
       e.content ->> 'artifact_id' AS artifact_id
FROM chunks c
LEFT JOIN events e ON c.kind = 'tool_result' AND e.event_id = c.source_id
WHERE c.chunk_id = ANY (%(ids)s) AND c.tenant_id = %(tenant)s

-- name: next_turns
-- For each anchor chunk, the next event of its session within a day (the reply to
-- it, where an answer often sits), through the session index.
SELECT s.anchor, c.chunk_id, c.source_type, c.source_id, c.path, c.line, c.ts, c.kind,
       c.channel, c.session_id, c.sensitivity, c.tags, c.refs, c.hash, c.token_est,
       c.importance, c.text, e.content ->> 'artifact_id' AS artifact_id
FROM unnest(%(anchors)s::text[], %(sessions)s::text[], %(stamps)s::timestamptz[])
     AS s(anchor, session_id, ts)
CROSS JOIN LATERAL (
  SELECT * FROM chunks n
  WHERE n.tenant_id = %(tenant)s AND n.session_id = s.session_id AND n.source_type = 'event'
    AND (n.ts, n.chunk_id) > (s.ts, s.anchor) AND n.ts <= s.ts + interval '1 day'
  ORDER BY n.ts, n.chunk_id
  LIMIT 1
) c
LEFT JOIN events e ON c.kind = 'tool_result' AND e.event_id = c.source_id

-- name: session_recent
-- The chunks of the session's latest %(limit)s events other than tool results (and
-- the kinds whose Markdown file is the record), newest event first.
WITH latest AS (
  SELECT event_id, ts FROM events
  WHERE tenant_id = %(tenant)s AND session_id = %(session)s
    AND kind NOT IN ('tool_result', 'decision', 'summary', 'task_update')
  ORDER BY ts DESC, event_id DESC
  LIMIT %(limit)s
)
SELECT c.chunk_id, c.source_type, c.source_id, c.path, c.line, c.ts, c.kind, c.channel,
       c.session_id, c.sensitivity, c.tags, c.refs, c.hash, c.token_est, c.importance, c.text,
       NULL::text AS artifact_id
FROM latest l JOIN chunks c ON c.source_id = l.event_id
ORDER BY l.ts DESC, l.event_id DESC, length(c.chunk_id), c.chunk_id

-- name: session_tools
-- The chunks of the session's latest %(limit)s tool results, newest result first,
-- each result's chunks in order (the first carries the tool and path).
WITH latest AS (
  SELECT event_id, ts, content ->> 'artifact_id' AS artifact_id FROM events
  WHERE tenant_id = %(tenant)s AND session_id = %(session)s AND kind = 'tool_result'
  ORDER BY ts DESC, event_id DESC
  LIMIT %(limit)s
)
SELECT c.chunk_id, c.source_type, c.source_id, c.path, c.line, c.ts, c.kind, c.channel,
       c.session_id, c.sensitivity, c.tags, c.refs, c.hash, c.token_est, c.importance, c.text,
       l.artifact_id
FROM latest l JOIN chunks c ON c.source_id = l.event_id
ORDER BY l.ts DESC, l.event_id DESC, length(c.chunk_id), c.chunk_id

-- name: pinned_chunks
SELECT c.chunk_id, c.source_type, c.source_id, c.path, c.line, c.ts, c.kind, c.channel,
       c.session_id, c.sensitivity, c.tags, c.refs, c.hash, c.token_est, c.importance, c.text,
       e.content ->> 'artifact_id' AS artifact_id
FROM chunks c
LEFT JOIN events e ON c.kind = 'tool_result' AND e.event_id = c.source_id
WHERE c.tenant_id = %(tenant)s AND 'pinned' = ANY (c.tags)
ORDER BY c.ts DESC, c.chunk_id DESC
LIMIT %(limit)s

-- name: all_views
SELECT v.path, v.section, v.pinned, v.sensitivity, v.channels, v.max_tokens, v.title,
       c.anchor, c.ord, c.heading, c.line, c.text, c.token_est
FROM views v JOIN view_chunks c ON c.path = v.path
ORDER BY v.path, c.ord

-- name: tenant_decisions
SELECT d.decision_id, d.ts, d.status, d.scope, d.title, d.text, d.rationale, d.supersedes,
       d.refs, d.sensitivity, d.tags, d.path, d.confidence, c.token_est, c.hash,
       c.importance, c.text AS item_text
FROM decisions d JOIN chunks c ON c.chunk_id = d.decision_id
WHERE d.tenant_id = %(tenant)s
ORDER BY d.ts DESC, d.decision_id DESC

-- name: tenant_open_tasks
SELECT t.task_id, t.ts, t.status, t.title, t.owner, t.refs, t.session_id, t.sensitivity,
       t.tags, t.path, c.token_est, c.hash, c.importance, c.text AS item_text
FROM tasks t JOIN chunks c ON c.chunk_id = t.task_id
WHERE t.tenant_id = %(tenant)s AND t.status IN ('open', 'doing', 'blocked')
ORDER BY array_position(ARRAY['doing', 'blocked', 'open'], t.status), t.ts DESC, t.task_id DESC

-- name: handoff
SELECT handoff_id, tenant_id, ts, from_agent, to_agent, task, constraints, decisions,
       required_files, open_questions, refs, path
FROM handoffs WHERE handoff_id = %(id)s

-- name: event_chunks
SELECT c.chunk_id, c.source_type, c.source_id, c.path, c.line, c.ts, c.kind, c.channel,
       c.session_id, c.sensitivity, c.tags, c.refs, c.hash, c.token_est, c.importance, c.text,
       e.content ->> 'artifact_id' AS artifact_id
FROM chunks c
LEFT JOIN events e ON c.kind = 'tool_result' AND e.event_id = c.source_id
WHERE c.tenant_id = %(tenant)s AND c.source_id = ANY (%(ids)s)
ORDER BY c.ts, c.chunk_id

-- name: decision_search
SELECT chunk_id FROM chunks
WHERE tenant_id = %(tenant)s AND source_type = 'decision' AND tsv @@ %(query)s::tsquery
