-- Named statements run by gitmem.db.Database. Parameters are %(name)s.

-- name: schema_version
SELECT EXISTS (
  SELECT 1 FROM information_schema.tables
  WHERE table_schema = %(schema)s AND table_name = 'meta'
) AS has_meta

-- name: meta_get
SELECT value FROM meta WHERE key = %(key)s

-- name: meta_set
INSERT INTO meta (key, value) VALUES (%(key)s, %(value)s)
ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value

-- name: lock_sync_shared
SELECT pg_advisory_xact_lock_shared(hashtext(current_schema())),
       pg_advisory_xact_lock(hashtext(current_schema() || ':' || %(path)s))

-- name: file_states
SELECT path, kind, content_hash, byte_offset, line_count, head_hash, prefix_crc, errors,
       size, ctime_ns, inode
FROM source_files ORDER BY path

-- name: file_stats
-- What a reconcile compares with each file's stat.
SELECT path, kind, size, ctime_ns, inode FROM source_files

-- name: events_recorded
-- The events already indexed under some ids (a write that names its ids must not
-- repeat another event's).
SELECT event_id, tenant_id, ts, hash FROM events WHERE event_id = ANY (%(ids)s)

-- name: file_events
-- The events whose rows a file holds (before it is read again), and their lines.
SELECT event_id, line FROM events WHERE path = %(path)s

-- name: events_present
SELECT event_id, path, line FROM events WHERE event_id = ANY (%(ids)s)

-- name: event_copies_note
-- Of these events of a file, the ones indexed from another file: copies, kept as such.
INSERT INTO event_copies (path, event_id)
SELECT %(path)s, e.event_id FROM events e
WHERE e.event_id = ANY (%(ids)s) AND e.path <> %(path)s
ON CONFLICT DO NOTHING

-- name: events_repeated_otherwise
-- Of these events of file %(path)s (id, line, hash), the ones whose id the index holds
-- from another line with other content: the line, and where the indexed one is.
SELECT u.event_id, u.line, e.path AS first_path, e.line AS first_line
FROM unnest(%(ids)s::text[], %(lines)s::integer[], %(hashes)s::text[]) AS u(event_id, line, hash)
JOIN events e ON e.event_id = u.event_id
WHERE e.hash <> u.hash AND (e.path <> %(path)s OR e.line <> u.line)
ORDER BY u.line

-- name: events_elsewhere
-- Where the index holds these events from another file than %(path)s.
SELECT event_id, path, line, home FROM events WHERE event_id = ANY (%(ids)s) AND path <> %(path)s

-- name: summaries_elsewhere
-- Where the index holds these summaries from another file than %(path)s (the other
-- scope's: gitmem/twins.py).
SELECT summary_id, path FROM summaries WHERE summary_id = ANY (%(ids)s) AND path <> %(path)s

-- name: file_summaries
-- The summaries whose rows a file holds.
SELECT summary_id FROM summaries WHERE path = %(path)s

-- name: event_holders
-- The files an event's rows come from, or that hold a copy of it (a reading of them all
-- again settles which line is its original).
SELECT path FROM events WHERE event_id = ANY (%(ids)s)
UNION
SELECT path FROM event_copies WHERE event_id = ANY (%(ids)s)

-- name: lock_sync_exclusive
-- Waits for every file's sync (they share this lock) and keeps new ones out.
SELECT pg_advisory_xact_lock(hashtext(current_schema()))

-- name: event_copies_of
-- The files holding another copy of some events.
SELECT DISTINCT path FROM event_copies WHERE event_id = ANY (%(ids)s) AND path <> %(path)s

-- name: file_state
SELECT path, kind, content_hash, byte_offset, line_count, head_hash, prefix_crc, errors,
       size, ctime_ns, inode
FROM source_files WHERE path = %(path)s

-- name: upsert_file_state
INSERT INTO source_files (path, kind, content_hash, byte_offset, line_count, head_hash,
                          prefix_crc, errors, size, ctime_ns, inode)
VALUES (%(path)s, %(kind)s, %(content_hash)s, %(byte_offset)s, %(line_count)s, %(head_hash)s,
        %(prefix_crc)s, %(errors)s, %(size)s, %(ctime_ns)s, %(inode)s)
ON CONFLICT (path) DO UPDATE SET
  kind = EXCLUDED.kind, content_hash = EXCLUDED.content_hash,
  byte_offset = EXCLUDED.byte_offset, line_count = EXCLUDED.line_count,
  head_hash = EXCLUDED.head_hash, prefix_crc = EXCLUDED.prefix_crc,
  errors = EXCLUDED.errors, size = EXCLUDED.size,
  ctime_ns = EXCLUDED.ctime_ns, inode = EXCLUDED.inode

-- name: delete_file_state
DELETE FROM source_files WHERE path = %(path)s

-- name: delete_file_rows
WITH e AS (DELETE FROM events WHERE path = %(path)s),
     c AS (DELETE FROM chunks WHERE path = %(path)s),
     d AS (DELETE FROM decisions WHERE path = %(path)s),
     t AS (DELETE FROM tasks WHERE path = %(path)s),
     s AS (DELETE FROM summaries WHERE path = %(path)s),
     h AS (DELETE FROM handoffs WHERE path = %(path)s),
     v AS (DELETE FROM views WHERE path = %(path)s),
     vc AS (DELETE FROM view_chunks WHERE path = %(path)s),
     a AS (DELETE FROM artifacts WHERE path = %(path)s),
     ec AS (DELETE FROM event_copies WHERE path = %(path)s)
SELECT 1

-- name: delete_file_tail
-- The rows of events file %(path)s's lines from %(from_line)s on (cut, or to be read again:
-- the lines before them stay as indexed), and its notes of copies it no longer holds
-- (%(kept)s: the ids of the lines that stay).
WITH gone AS (DELETE FROM events WHERE path = %(path)s AND line >= %(from_line)s
              RETURNING event_id),
     c AS (DELETE FROM chunks WHERE path = %(path)s AND line >= %(from_line)s),
     a AS (DELETE FROM artifacts WHERE path = %(path)s
           AND event_id IN (SELECT event_id FROM gone)),
     ec AS (DELETE FROM event_copies WHERE path = %(path)s AND event_id <> ALL (%(kept)s))
SELECT count(*) AS n FROM gone

-- name: file_event_rows
-- What the index holds of events file %(path)s's first %(to_line)s lines: their events'
-- rows (file_copies: the events it holds another copy of, indexed from another file,
-- with where their row is and its hash).
SELECT event_id, tenant_id, ts, session_id, agent_id, channel, actor_type, actor_id, kind,
       sensitivity, tags, refs, content, hash, line, home
FROM events WHERE path = %(path)s AND line <= %(to_line)s

-- name: files_with_errors
-- The files whose lines or records failed to parse (the daemon lists them at start).
SELECT path FROM source_files WHERE errors <> '[]'::jsonb ORDER BY path

-- name: file_copies
SELECT c.event_id, e.path, e.line, e.hash
FROM event_copies c JOIN events e ON e.event_id = c.event_id
WHERE c.path = %(path)s

-- name: insert_events
INSERT INTO events (event_id, tenant_id, ts, session_id, agent_id, channel, actor_type,
                    actor_id, kind, sensitivity, tags, refs, content, hash, path, line,
                    home)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (event_id) DO NOTHING

-- name: insert_chunks
INSERT INTO chunks (chunk_id, tenant_id, source_type, source_id, path, line, ts, kind,
                    channel, session_id, agent_id, sensitivity, tags, refs, hash, token_est,
                    importance, text, search_extra, search_keys, search_text)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (chunk_id) DO NOTHING

-- name: insert_decisions
INSERT INTO decisions (decision_id, tenant_id, ts, status, scope, title, text, rationale,
                       constraints, alternatives, consequences, confidence, supersedes,
                       refs, sensitivity, tags, path)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (decision_id) DO NOTHING

-- name: insert_tasks
INSERT INTO tasks (task_id, tenant_id, ts, status, title, details, owner, refs, session_id,
                   sensitivity, tags, path)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (task_id) DO NOTHING

-- name: insert_summaries
INSERT INTO summaries (summary_id, tenant_id, ts, scope, session_id, refs, decisions, text,
                       sensitivity, tags, path)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (summary_id) DO NOTHING

-- name: insert_handoffs
INSERT INTO handoffs (handoff_id, tenant_id, ts, from_agent, to_agent, task, constraints,
                      decisions, required_files, open_questions, refs, path)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (handoff_id) DO NOTHING

-- name: insert_views
INSERT INTO views (path, section, pinned, sensitivity, channels, max_tokens, title)
VALUES (%s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (path) DO NOTHING

-- name: insert_view_chunks
INSERT INTO view_chunks (path, anchor, ord, heading, line, text, token_est)
VALUES (%s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (path, anchor) DO NOTHING

-- name: insert_artifacts
INSERT INTO artifacts (artifact_id, event_id, tenant_id, bytes, path)
VALUES (%s, %s, %s, %s, %s)
ON CONFLICT (artifact_id, event_id) DO NOTHING

-- name: index_counts
SELECT (SELECT count(*) FROM events) AS events,
       (SELECT count(*) FROM chunks) AS chunks,
       (SELECT count(*) FROM decisions) AS decisions,
       (SELECT count(*) FROM tasks) AS tasks,
       (SELECT count(*) FROM summaries) AS summaries,
       (SELECT count(*) FROM handoffs) AS handoffs,
       (SELECT count(*) FROM views) AS views,
       (SELECT count(*) FROM artifacts) AS artifacts

-- name: digest_settings
-- Fixed text forms for the digest, whatever the server's or session's defaults.
SELECT set_config('TimeZone', 'UTC', true), set_config('DateStyle', 'ISO, YMD', true),
       set_config('extra_float_digits', '1', true), set_config('IntervalStyle', 'postgres', true)

-- name: index_digest_table
-- One table's part of `indexer.index_digest`: the sha256 of the sha256 of each row's
-- text ({row}: the row, or the columns of it compared), in key order ({order}). Run
-- after digest_settings.
SELECT '{table}' AS name, count(*) AS rows,
       encode(sha256(coalesce(string_agg(
         sha256(convert_to({row}::text, 'UTF8')), ''::bytea
         ORDER BY {order}), ''::bytea)), 'hex') AS digest
FROM {table} t
