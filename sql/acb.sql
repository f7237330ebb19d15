-- Named statements of the read path: build_acb's context and bounded retrieval.

-- name: query_tokens
-- The tokens of some texts and their lexemes under the 'english' configuration, less
-- the blanks, by text (`part`, from 1) and in order: what ts_debug('english', text)
-- returns for each (a token's lexemes come from the first dictionary of its type's chain
-- that recognizes it; NULL where none does or none is mapped, {} for a stopword).
-- ts_debug itself is an SQL function that costs 0.4 ms a call; this costs 0.15, for a
-- query's words and its phrases in one round trip.
SELECT q.part, t.alias, p.token, l.lexemes
FROM unnest(%(texts)s::text[]) WITH ORDINALITY AS q (text, part)
CROSS JOIN LATERAL ts_parse('default', q.text) WITH ORDINALITY AS p (tokid, token, n)
JOIN ts_token_type('default') t ON t.tokid = p.tokid
LEFT JOIN LATERAL (
  SELECT x.lexemes FROM (
    SELECT ts_lexize(m.mapdict::regdictionary, p.token) AS lexemes, m.mapseqno
    FROM pg_ts_config_map m
    WHERE m.mapcfg = 'english'::regconfig AND m.maptokentype = p.tokid) x
  WHERE x.lexemes IS NOT NULL
  ORDER BY x.mapseqno
  LIMIT 1) l ON true
WHERE t.alias <> 'blank'
ORDER BY q.part, p.n

-- name: lexeme_df_rows
-- Document frequencies (all chunks, short ones) of some lexemes of one tenant.
SELECT lexeme, df, short_df FROM lexeme_df
WHERE tenant_id = %(tenant)s AND lexeme = ANY (%(lexemes)s)

-- name: tenant_days
-- The tenant's newest days that hold chunks (day keys and sizes), newest first.
SELECT lexeme, df, short_df FROM lexeme_df
WHERE tenant_id = %(tenant)s AND lexeme >= %(low)s AND lexeme < %(high)s
ORDER BY lexeme DESC
LIMIT %(limit)s

-- name: tenant_time_keys
-- The tenant's month and week keys.
SELECT lexeme FROM lexeme_df
WHERE tenant_id = %(tenant)s AND lexeme >= %(low)s AND lexeme < %(high)s

-- name: retrieval_lane
-- One statement of bounded retrieval. gitmem/retrieval.py fills in the mask and the score
-- for the query's number of terms, and the periods: one or more retrieval_lane_period,
-- the newest stretch of time first. The newest `cap` matches at most; the best `limit`
-- the channel may load, scored; a sample of the ids it may not (score NULL: the planner
-- learns the lane matched, nothing names them); how many matched (pool), how many of
-- them the channel may load, and the oldest (epoch); each row's ctid (evidence_items
-- reads the rows it keeps by it).
-- The periods are read one after another, and reading stops at the cap: matches that
-- turn out dense (words that come together) fill it in the newest period, and the older
-- ones are never looked up (a bitmap heap scan visits every match of its period).
-- The periods keep narrow rows (where, when, id) and only the kept ones are read whole:
-- a period that matches thousands sorts them without carrying their tsvectors and
-- computing their columns (for 8,290 matches and a cap of 1,099: 9 ms instead of 22).
-- The epoch is date_part's float8: extract() computes a numeric first, which cost 4 percent of
-- the lane statements' execution at 1M chunks.
-- Ids compare byte by byte (COLLATE "C"), as retrieval's merge of the statements compares
-- them in Python: the same tie-break whatever the database's collation, and a memcmp
-- instead of strcoll.
WITH picked AS MATERIALIZED (
  SELECT tid FROM ({periods}) periods
  LIMIT %(cap)s
), lane AS MATERIALIZED (
  SELECT c.chunk_id, c.source_type, c.source_id, date_part('epoch', c.ts) AS epoch,
         c.ctid::text AS tid, c.channel, c.sensitivity, c.token_est,
         c.importance::float8 AS importance, {mask} AS mask,
         c.sensitivity <> ALL (%(suppress)s::text[])
           AND (c.channel = '' OR %(channels)s::text[] IS NULL
                OR c.channel = ANY (%(channels)s::text[])) AS allowed
  FROM chunks c
  WHERE c.ctid = ANY (ARRAY(SELECT tid FROM picked))
), counted AS (
  SELECT count(*) AS pool, min(epoch) AS oldest, count(*) FILTER (WHERE allowed) AS loadable
  FROM lane
)
(SELECT chunk_id, source_type, source_id, epoch, channel, sensitivity, token_est,
        importance, mask, {score} AS score, counted.pool, counted.oldest, tid,
        counted.loadable
 FROM lane, counted WHERE allowed
 ORDER BY score DESC, importance DESC, epoch DESC, token_est, chunk_id COLLATE "C"
 LIMIT %(limit)s)
UNION ALL
(SELECT chunk_id, source_type, source_id, epoch, channel, sensitivity, token_est,
        importance, mask, NULL, counted.pool, counted.oldest, tid, counted.loadable
 FROM lane, counted WHERE NOT allowed
 ORDER BY chunk_id COLLATE "C"
 LIMIT %(sample)s)

-- name: retrieval_lane_period
-- One period of a lane statement, its parameters numbered: the matches of its tsquery
-- (the tenant's own lexemes, so the GIN index reads this tenant's posting lists only;
-- time keys in it keep the period's rows) in the scope's rows (all chunks, the short or
-- the long ones, the records), maybe cut by time instead (since/until, epochs); the
-- newest `cap`, as their ctids.
(SELECT c.ctid AS tid
 FROM chunks c
 WHERE {match} AND (c.tenant_id || '') = %(tenant)s {span}
 ORDER BY c.ts DESC, c.chunk_id COLLATE "C" DESC
 LIMIT %(cap)s)

-- name: naive_rank
-- What a simple implementation does: ts_rank over every match, top N
-- (gitmem/baselines.py fills {match} as for a lane over all chunks: both indexes).
SELECT c.chunk_id, ts_rank(c.tsv, %(query)s::tsquery) AS rank
FROM chunks c
WHERE c.tenant_id = %(tenant)s AND {match}
ORDER BY rank DESC, c.chunk_id
LIMIT %(limit)s

-- name: evidence_items
-- The chunks of retrieved_evidence (text, file location, artifact) and, for those of
-- %(anchors)s (the best few) that are questions, the next event of the session within
-- a day: the reply, where the answer often sits (`anchor` names the question). One
-- round trip for both.
-- The rows are read by %(tids)s, the ctids the lane statements returned: the heap
-- pages those statements have just read, and no lookup in the chunk_id index (200
-- descents into a cold index cost more than the rest of this query). Each ctid is paired
-- with its id (a Tid Scan per pair; `ctid = ANY` and `chunk_id = ANY` compared every row
-- with all 200 ids, 0.2 ms more). A row that moved since (a file reindexed in between)
-- fails its id's check; the caller asks again with %(tids)s NULL, and they are looked
-- up by id.
-- A tool result's artifact id is looked up for tool results only (a LEFT JOIN
-- would probe the events index for every chunk).
-- Only the anchors' text is matched against the question pattern (CASE): as separate
-- conditions, the planner tests the cheaper-looking pattern first, on every item's
-- text, a tool result's whole output included (0.4 of 1.9 ms at 1M events).
-- The columns are the ones an evidence item is made of: each one more costs its
-- conversion in the client for every row (tags, importance and session_id were 0.9 of
-- 4.2 us a row as dicts).
WITH items AS MATERIALIZED (
  SELECT c.chunk_id, c.source_type, c.source_id, c.path, c.line, c.ts, c.kind, c.channel,
         c.session_id, c.sensitivity, c.refs, c.hash, c.token_est, c.text,
         CASE WHEN c.kind = 'tool_result' THEN
           (SELECT e.content ->> 'artifact_id' FROM events e WHERE e.event_id = c.source_id)
         END AS artifact_id
  FROM unnest(%(tids)s::tid[], %(ids)s::text[]) AS w (tid, id)
  JOIN chunks c ON c.ctid = coalesce(w.tid, (SELECT m.ctid FROM chunks m WHERE m.chunk_id = w.id))
  WHERE c.chunk_id = w.id AND c.tenant_id = %(tenant)s
)
SELECT NULL::text AS anchor, chunk_id, source_type, source_id, path, line, ts, kind, channel,
       sensitivity, refs, hash, token_est, text, artifact_id
FROM items
UNION ALL
SELECT a.chunk_id, n.chunk_id, n.source_type, n.source_id, n.path, n.line, n.ts, n.kind,
       n.channel, n.sensitivity, n.refs, n.hash, n.token_est, n.text,
       CASE WHEN n.kind = 'tool_result' THEN
         (SELECT e.content ->> 'artifact_id' FROM events e WHERE e.event_id = n.source_id)
       END
FROM items a
CROSS JOIN LATERAL (
  SELECT * FROM chunks n
  WHERE n.tenant_id = %(tenant)s AND n.session_id = a.session_id AND n.source_type = 'event'
    AND (n.ts, n.chunk_id) > (a.ts, a.chunk_id) AND n.ts <= a.ts + interval '1 day'
  ORDER BY n.ts, n.chunk_id
  LIMIT 1
) n
WHERE CASE WHEN a.chunk_id = ANY (%(anchors)s) AND a.source_type = 'event'
           THEN a.text ~ '[?][[:space:]]*$' END

-- name: session_recent
-- The chunks of the session's latest %(limit)s events other than tool results (and
-- the kinds whose Markdown file is the record), newest event first; of events at the
-- same instant, the later line first (ids minted apart have no order).
WITH latest AS (
  SELECT event_id, ts, path, line FROM events
  WHERE tenant_id = %(tenant)s AND session_id = %(session)s
    AND kind NOT IN ('tool_result', 'decision', 'summary', 'task_update')
  ORDER BY ts DESC, path DESC, line DESC
  LIMIT %(limit)s
)
SELECT c.chunk_id, c.source_type, c.source_id, c.path, c.line, c.ts, c.kind, c.channel,
       c.session_id, c.sensitivity, c.tags, c.refs, c.hash, c.token_est, c.importance, c.text,
       NULL::text AS artifact_id
FROM latest l JOIN chunks c ON c.source_id = l.event_id
ORDER BY l.ts DESC, l.path DESC, l.line DESC, length(c.chunk_id), c.chunk_id

-- name: session_tools
-- The chunks of the session's latest %(limit)s tool results, newest result first,
-- each result's chunks in order (the first carries the tool and path).
WITH latest AS (
  SELECT event_id, ts, path, line, content ->> 'artifact_id' AS artifact_id FROM events
  WHERE tenant_id = %(tenant)s AND session_id = %(session)s AND kind = 'tool_result'
  ORDER BY ts DESC, path DESC, line DESC
  LIMIT %(limit)s
)
SELECT c.chunk_id, c.source_type, c.source_id, c.path, c.line, c.ts, c.kind, c.channel,
       c.session_id, c.sensitivity, c.tags, c.refs, c.hash, c.token_est, c.importance, c.text,
       l.artifact_id
FROM latest l JOIN chunks c ON c.source_id = l.event_id
ORDER BY l.ts DESC, l.path DESC, l.line DESC, length(c.chunk_id), c.chunk_id

-- name: pinned_chunks
SELECT c.chunk_id, c.source_type, c.source_id, c.path, c.line, c.ts, c.kind, c.channel,
       c.session_id, c.sensitivity, c.tags, c.refs, c.hash, c.token_est, c.importance, c.text,
       e.content ->> 'artifact_id' AS artifact_id
FROM chunks c
LEFT JOIN events e ON c.kind = 'tool_result' AND e.event_id = c.source_id
WHERE c.tenant_id = %(tenant)s AND 'pinned' = ANY (c.tags)
ORDER BY c.ts DESC, c.source_id DESC, length(c.chunk_id), c.chunk_id
LIMIT %(limit)s

-- name: all_views
SELECT v.path, v.section, v.pinned, v.sensitivity, v.channels, v.max_tokens, v.title,
       c.anchor, c.ord, c.heading, c.line, c.text, c.token_est
FROM views v JOIN view_chunks c ON c.path = v.path
ORDER BY v.path, c.ord

-- name: tenant_decisions
-- A tenant's decisions, or only those of %(paths)s (the decision files changed since the
-- cache read them all) when it is not NULL. gitmem/context.py sorts merged rows the same
-- way (_arrange_decisions).
SELECT d.decision_id, d.ts, d.status, d.scope, d.title, d.text, d.rationale, d.supersedes,
       d.refs, d.sensitivity, d.tags, d.path, d.confidence, c.token_est, c.hash,
       c.importance, c.text AS item_text
FROM decisions d JOIN chunks c ON c.chunk_id = d.decision_id
WHERE d.tenant_id = %(tenant)s AND (%(paths)s::text[] IS NULL OR d.path = ANY (%(paths)s))
ORDER BY d.ts DESC, d.decision_id DESC

-- name: tenant_open_tasks
-- A tenant's open tasks, or only those of %(paths)s (the task files changed since the
-- cache read them all) when it is not NULL. gitmem/context.py sorts merged rows the same
-- way (_arrange_tasks).
SELECT t.task_id, t.ts, t.status, t.title, t.owner, t.refs, t.session_id, t.sensitivity,
       t.tags, t.path, c.token_est, c.hash, c.importance, c.text AS item_text
FROM tasks t JOIN chunks c ON c.chunk_id = t.task_id
WHERE t.tenant_id = %(tenant)s AND t.status IN ('open', 'doing', 'blocked')
  AND (%(paths)s::text[] IS NULL OR t.path = ANY (%(paths)s))
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

-- name: artifact_events
-- The events of a tenant that cite an artifact: whether a channel may load one of
-- them decides whether that tenant is served the artifact (get_artifact).
SELECT e.event_id, e.sensitivity, e.channel
FROM artifacts a JOIN events e ON e.event_id = a.event_id
WHERE a.artifact_id = %(artifact)s AND a.tenant_id = %(tenant)s AND e.tenant_id = %(tenant)s

-- name: decision_search
SELECT chunk_id FROM chunks
WHERE tenant_id = %(tenant)s AND source_type = 'decision' AND tsv @@ %(query)s::tsquery
