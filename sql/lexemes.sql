-- Named statements keeping lexeme_df (per-tenant document frequencies) exact.
-- Besides the lexemes: '' counts the tenant's chunks and '#' sums their lengths in
-- distinct lexemes (for BM25's length normalization); the parser emits neither.
-- Rows are upserted in (tenant, lexeme) order so concurrent syncs lock them in the
-- same order and cannot deadlock.

-- name: lexemes_add_path
-- Count the lexemes of the chunks file %(path)s contributed from line %(from_line)s on.
INSERT INTO lexeme_df (tenant_id, lexeme, df)
SELECT tenant_id, lexeme, sum(n) FROM (
  SELECT c.tenant_id, u.lexeme, count(*) AS n
  FROM chunks c, unnest(c.tsv) AS u
  WHERE c.path = %(path)s AND c.line >= %(from_line)s
  GROUP BY c.tenant_id, u.lexeme
  UNION ALL
  SELECT c.tenant_id, '', count(*) FROM chunks c
  WHERE c.path = %(path)s AND c.line >= %(from_line)s
  GROUP BY c.tenant_id
  UNION ALL
  SELECT c.tenant_id, '#', sum(length(c.tsv)) FROM chunks c
  WHERE c.path = %(path)s AND c.line >= %(from_line)s
  GROUP BY c.tenant_id
) counted
GROUP BY tenant_id, lexeme
ORDER BY tenant_id COLLATE "C", lexeme COLLATE "C"
ON CONFLICT (tenant_id, lexeme) DO UPDATE SET df = lexeme_df.df + EXCLUDED.df

-- name: lexemes_remove_path
-- Uncount every chunk of file %(path)s (before its rows are deleted).
INSERT INTO lexeme_df (tenant_id, lexeme, df)
SELECT tenant_id, lexeme, -sum(n) FROM (
  SELECT c.tenant_id, u.lexeme, count(*) AS n
  FROM chunks c, unnest(c.tsv) AS u
  WHERE c.path = %(path)s
  GROUP BY c.tenant_id, u.lexeme
  UNION ALL
  SELECT c.tenant_id, '', count(*) FROM chunks c WHERE c.path = %(path)s GROUP BY c.tenant_id
  UNION ALL
  SELECT c.tenant_id, '#', sum(length(c.tsv)) FROM chunks c WHERE c.path = %(path)s
  GROUP BY c.tenant_id
) counted
GROUP BY tenant_id, lexeme
ORDER BY tenant_id COLLATE "C", lexeme COLLATE "C"
ON CONFLICT (tenant_id, lexeme) DO UPDATE SET df = lexeme_df.df + EXCLUDED.df

-- name: lexemes_prune
DELETE FROM lexeme_df WHERE df <= 0

-- name: lexemes_count_all
-- After a bulk load: every tenant's document frequencies, counted by a query that
-- may run in parallel (an INSERT ... SELECT may not); lexemes_rebuild stores them.
CREATE TEMP TABLE lexeme_counts ON COMMIT DROP AS
SELECT c.tenant_id, u.lexeme, count(*) AS df FROM chunks c, unnest(c.tsv) AS u
GROUP BY c.tenant_id, u.lexeme

-- name: lexemes_rebuild
-- Every chunk adds one to the df of each of its distinct lexemes, so their sum is
-- the sum of the chunks' lengths.
INSERT INTO lexeme_df (tenant_id, lexeme, df)
SELECT tenant_id, lexeme, df FROM lexeme_counts
UNION ALL
SELECT tenant_id, '#', sum(df) FROM lexeme_counts GROUP BY tenant_id

-- name: lexemes_set_total
-- A tenant's chunk count (lexeme ''), known to the bulk load without a scan.
INSERT INTO lexeme_df (tenant_id, lexeme, df) VALUES (%s, '', %s)

-- name: lexeme_df
-- Document frequencies of some lexemes in one tenant ('' and '#': see the top).
SELECT lexeme, df FROM lexeme_df
WHERE tenant_id = %(tenant)s AND lexeme = ANY (%(lexemes)s)
