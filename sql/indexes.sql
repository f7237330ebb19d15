-- Indexes, created after a bulk load (faster than maintaining them row by row).
CREATE INDEX IF NOT EXISTS events_session_ts ON events (tenant_id, session_id, ts, event_id);
CREATE INDEX IF NOT EXISTS events_path ON events (path);
CREATE INDEX IF NOT EXISTS event_copies_event ON event_copies (event_id);
-- Full-text search over tenant-qualified lexemes: the short chunks (token_est <= 48:
-- where BM25's length normalization puts most of the best matches), the long ones, and
-- the non-event records. No index holds every chunk: a search of all of them asks the
-- short and the long index (a BitmapOr), and a chunk goes into one of the two, not into
-- both (retrieval's short lanes read the short chunks; a statement whose short matches
-- they already hold reads the long index alone). Short chunks also go into
-- chunks_short_stamped, which serves the time-bounded lookups of short lanes.
-- New rows wait in a GIN index's pending list, which every search reads whole and
-- which the planner prices in: at the default 4 MB, a lane statement read ~350
-- pending pages (2 ms) and the planner left the short index for the full one (5x
-- the heap rows). 256 kB keeps a search's share small; inserts flush more often,
-- in smaller steps (docs/performance-log.md, "GIN pending lists").
CREATE INDEX IF NOT EXISTS chunks_short_tsv ON chunks USING gin (tsv)
  WITH (gin_pending_list_limit = 256) WHERE token_est <= 48;
-- The short chunks' lexemes stamped with their week, day and month (schema.sql,
-- gitmem_stamped): retrieval's keyed periods over the short chunks read these.
CREATE INDEX IF NOT EXISTS chunks_short_stamped ON chunks USING gin (gitmem_stamped(tsv, ts))
  WITH (gin_pending_list_limit = 256) WHERE token_est <= 48;
CREATE INDEX IF NOT EXISTS chunks_long_tsv ON chunks USING gin (tsv)
  WITH (gin_pending_list_limit = 256) WHERE token_est > 48;
CREATE INDEX IF NOT EXISTS chunks_records_tsv ON chunks USING gin (tsv)
  WITH (gin_pending_list_limit = 256) WHERE source_type <> 'event';
CREATE INDEX IF NOT EXISTS chunks_session_ts ON chunks (tenant_id, session_id, ts, chunk_id)
  WHERE source_type = 'event';
CREATE INDEX IF NOT EXISTS chunks_source ON chunks (source_id);
CREATE INDEX IF NOT EXISTS chunks_path ON chunks (path, line);  -- a sync counts the lexemes of appended lines only
CREATE INDEX IF NOT EXISTS chunks_pinned ON chunks (tenant_id, ts) WHERE 'pinned' = ANY (tags);
CREATE INDEX IF NOT EXISTS decisions_tenant ON decisions (tenant_id, ts);
CREATE INDEX IF NOT EXISTS decisions_path ON decisions (path);
CREATE INDEX IF NOT EXISTS tasks_tenant ON tasks (tenant_id, status);
CREATE INDEX IF NOT EXISTS tasks_path ON tasks (path);
CREATE INDEX IF NOT EXISTS summaries_path ON summaries (path);
CREATE INDEX IF NOT EXISTS handoffs_path ON handoffs (path);
CREATE INDEX IF NOT EXISTS artifacts_path ON artifacts (path);
