-- gitmem index schema. Everything here is derived from the files of one store
-- and can be dropped and rebuilt with `gitmem reindex` (P2).
-- Runs with search_path set to the store's schema; no extensions needed.
-- Tables are created bare; indexes.sql adds the indexes (after a bulk load).

-- A tenant's own lexemes: every lexeme of a chunk prefixed with its tenant's tag (8 hex
-- characters), positions kept (quoted phrases still match). The GIN index then holds
-- one posting list per tenant and word, so a search reads that tenant's matches only,
-- however large the other tenants are. In a tsvector's text every lexeme is quoted
-- and they are separated by single spaces; no lexeme holds a space (the parsers split
-- on them, and the time keys have none), so " '" starts a lexeme and nothing else.
CREATE OR REPLACE FUNCTION gitmem_qualify(v tsvector, tag text) RETURNS tsvector
IMMUTABLE PARALLEL SAFE LANGUAGE sql AS $$
  SELECT CASE WHEN length(v) = 0 THEN v
              ELSE ('''' || tag || substr(replace(v::text, ' ''', ' ''' || tag), 2))::tsvector
         END
$$;

-- A chunk's lexemes stamped with its week, day and month ('ab12cdefend@w202621'): "a word
-- in these days" is then an OR of the word's small posting lists of those days
-- (indexes.sql, chunks_short_stamped) instead of the word's whole list intersected with
-- the days' keys. Only the stamped copies: plain lexemes have their own index. Time keys
-- themselves (they hold '@') are not stamped; the copies carry no positions, so phrases
-- keep the keyed form (gitmem/retrieval.py). The units come from unnest(ARRAY[...]), not
-- VALUES: 2.5x less CPU per chunk when the index is built (docs/performance-log.md).
CREATE OR REPLACE FUNCTION gitmem_stamped(v tsvector, ts timestamptz) RETURNS tsvector
IMMUTABLE PARALLEL SAFE LANGUAGE sql AS $$
  SELECT array_to_tsvector(ARRAY(
    SELECT l || s FROM unnest(tsvector_to_array(v)) l,
      unnest(ARRAY['@w' || to_char(ts AT TIME ZONE 'UTC', 'IYYYIW'),
                   '@d' || to_char(ts AT TIME ZONE 'UTC', 'YYYYMMDD'),
                   '@m' || to_char(ts AT TIME ZONE 'UTC', 'YYYYMM')]) s
    WHERE strpos(l, '@') = 0))
$$;

-- The index's own facts: schema_version, git_head (the HEAD it last reconciled with),
-- row_policies (the policies its rows were derived under), store (the absolute path of
-- the store it indexes: a command from another store is refused, gitmem/db.py).
CREATE TABLE IF NOT EXISTS meta (
  key   text PRIMARY KEY,
  value text NOT NULL
);

-- Per source file: what the index reflects, so sync knows exactly what is stale.
CREATE TABLE IF NOT EXISTS source_files (
  path         text PRIMARY KEY,          -- store-relative, e.g. events/2026-02/2026-02-09.jsonl
  kind         text NOT NULL,             -- events|decision|task|summary|handoff|view
  content_hash text NOT NULL,             -- sha256 of the file (JSONL: of its indexed tail)
  byte_offset  bigint NOT NULL DEFAULT 0, -- JSONL: bytes of complete lines indexed
  line_count   integer NOT NULL DEFAULT 0,-- JSONL: complete lines indexed
  head_hash    text NOT NULL DEFAULT '',  -- JSONL: sha256 of the first 4 KiB of the prefix
  prefix_crc   bigint NOT NULL DEFAULT 0, -- JSONL: CRC-32 of the whole prefix (kept per append)
  errors       jsonb NOT NULL DEFAULT '[]'::jsonb,  -- [{line, field, message}]
  size         bigint NOT NULL DEFAULT 0, -- stat hint: unchanged stat means unchanged file
  ctime_ns     bigint NOT NULL DEFAULT 0,
  inode        bigint NOT NULL DEFAULT 0
);

CREATE TABLE IF NOT EXISTS events (
  event_id    text PRIMARY KEY,
  tenant_id   text NOT NULL,
  ts          timestamptz NOT NULL,
  session_id  text NOT NULL,
  agent_id    text NOT NULL,
  channel     text NOT NULL,
  actor_type  text NOT NULL,
  actor_id    text NOT NULL,
  kind        text NOT NULL,
  sensitivity text NOT NULL,
  tags        text[] NOT NULL,
  refs        text[] NOT NULL,
  content     jsonb NOT NULL,
  hash        text NOT NULL,
  path        text NOT NULL,
  line        integer NOT NULL,
  -- the line is at home: its ts is its id's time, in that ts's day file (gitmem/copies.py)
  home        boolean NOT NULL
);

-- Another copy of an indexed event, in a file other than the one its rows came from
-- (a line a person moved or copied to another day file: verify refuses the tree). The
-- index keeps one copy of an event; when the file holding it gives its rows up, the
-- files listed here are read again, so the event stays indexed from one of them.
CREATE TABLE IF NOT EXISTS event_copies (
  path     text NOT NULL,
  event_id text NOT NULL,
  PRIMARY KEY (path, event_id)
);

-- Retrieval units: events, decisions, tasks and summaries, split at paragraphs
-- when long. `text` is exactly what an ACB item shows; token_est counts it.
CREATE TABLE IF NOT EXISTS chunks (
  chunk_id     text PRIMARY KEY,
  tenant_id    text NOT NULL,
  source_type  text NOT NULL,             -- event|decision|task|summary
  source_id    text NOT NULL,
  path         text NOT NULL,
  line         integer NOT NULL,
  ts           timestamptz NOT NULL,
  kind         text NOT NULL,
  channel      text NOT NULL,
  session_id   text NOT NULL,
  agent_id     text NOT NULL,
  sensitivity  text NOT NULL,
  tags         text[] NOT NULL,
  refs         text[] NOT NULL,
  hash         text NOT NULL,             -- dedupe key (same hash = same content)
  token_est    integer NOT NULL,
  importance   real NOT NULL,
  text         text NOT NULL,
  search_extra text NOT NULL,             -- actor name and tags, searchable too
  -- {tenant tag, @dYYYYMMDD, @wIIIIWW, @mYYYYMM}: the tag qualifies every lexeme; the
  -- time keys (UTC day, ISO week, month) let a search ask for recent matches only
  search_keys  text[] NOT NULL,
  -- the text as search reads it where that differs: accents folded, unspaced scripts
  -- cut into pairs of characters (gitmem/folding.py); NULL for most texts
  search_text  text,
  -- left(): a tsvector holds at most 1 MB; one huge record (a pasted log, thousands
  -- of tags) must not make the whole sync fail, so only its head is searchable.
  tsv          tsvector GENERATED ALWAYS AS
                 (gitmem_qualify(to_tsvector('english', left(coalesce(search_text, text), 100000))
                                 || to_tsvector('simple', left(search_extra, 10000))
                                 || array_to_tsvector(search_keys[2:]), search_keys[1])) STORED
)
-- Rows up to a page stay whole: retrieval reads a chunk's tsvector once per query
-- term, and a compressed or out-of-line one would be decompressed every time.
WITH (toast_tuple_target = 8160);

CREATE TABLE IF NOT EXISTS decisions (
  decision_id  text PRIMARY KEY,
  tenant_id    text NOT NULL,
  ts           timestamptz NOT NULL,
  status       text NOT NULL,             -- as written; superseded-by is derived
  scope        text NOT NULL,
  title        text NOT NULL,
  text         text NOT NULL,
  rationale    text[] NOT NULL,
  constraints  text[] NOT NULL,
  alternatives text[] NOT NULL,
  consequences text[] NOT NULL,
  confidence   real,
  supersedes   text[] NOT NULL,
  refs         text[] NOT NULL,
  sensitivity  text NOT NULL,
  tags         text[] NOT NULL,
  path         text NOT NULL
);

CREATE TABLE IF NOT EXISTS tasks (
  task_id     text PRIMARY KEY,
  tenant_id   text NOT NULL,
  ts          timestamptz NOT NULL,
  status      text NOT NULL,
  title       text NOT NULL,
  details     text NOT NULL,
  owner       text NOT NULL,
  refs        text[] NOT NULL,
  session_id  text NOT NULL,
  sensitivity text NOT NULL,
  tags        text[] NOT NULL,
  path        text NOT NULL
);

CREATE TABLE IF NOT EXISTS summaries (
  summary_id  text PRIMARY KEY,
  tenant_id   text NOT NULL,
  ts          timestamptz NOT NULL,
  scope       text NOT NULL,
  session_id  text NOT NULL,
  refs        text[] NOT NULL,
  decisions   text[] NOT NULL,
  text        text NOT NULL,
  sensitivity text NOT NULL,
  tags        text[] NOT NULL,
  path        text NOT NULL
);

CREATE TABLE IF NOT EXISTS handoffs (
  handoff_id     text PRIMARY KEY,
  tenant_id      text NOT NULL,
  ts             timestamptz NOT NULL,
  from_agent     text NOT NULL,
  to_agent       text NOT NULL,
  task           text NOT NULL,
  constraints    text[] NOT NULL,
  decisions      text[] NOT NULL,
  required_files text[] NOT NULL,
  open_questions text[] NOT NULL,
  refs           text[] NOT NULL,
  path           text NOT NULL
);

CREATE TABLE IF NOT EXISTS views (
  path        text PRIMARY KEY,
  section     text NOT NULL,
  pinned      boolean NOT NULL,
  sensitivity text NOT NULL,
  channels    text[] NOT NULL,
  max_tokens  integer,
  title       text NOT NULL
);

CREATE TABLE IF NOT EXISTS view_chunks (
  path      text NOT NULL,
  anchor    text NOT NULL,
  ord       integer NOT NULL,
  heading   text NOT NULL,
  line      integer NOT NULL,
  text      text NOT NULL,
  token_est integer NOT NULL,
  PRIMARY KEY (path, anchor)
);

-- Large tool outputs: the bytes stay in artifacts/; this is their metadata.
CREATE TABLE IF NOT EXISTS artifacts (
  artifact_id text NOT NULL,
  event_id    text NOT NULL,
  tenant_id   text NOT NULL,
  bytes       bigint NOT NULL,
  path        text NOT NULL,
  PRIMARY KEY (artifact_id, event_id)
);

-- Document frequency of each (tenant-qualified) lexeme and time key per tenant, over
-- all chunks and over the short ones (token_est <= 48, the short GIN index's rows):
-- exact IDF for ranking and exact sizes for planning, kept in step with chunks in the
-- same transactions. Lexeme '' holds the tenant's chunk counts, '#' their token sums.
CREATE TABLE IF NOT EXISTS lexeme_df (
  tenant_id text NOT NULL,
  lexeme    text NOT NULL,
  df        bigint NOT NULL,
  short_df  bigint NOT NULL,
  PRIMARY KEY (tenant_id, lexeme)
);
