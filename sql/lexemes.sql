-- Named statements keeping lexeme_df (per-tenant document frequencies) exact.
-- Each lexeme (tenant-qualified, time keys included) counts the chunks holding it, all
-- of them (df) and the short ones (short_df: token_est <= 48, the rows of the short GIN
-- index). Besides: '' counts the tenant's chunks and '#' sums their token_est (BM25's
-- average length); the parser emits neither. Rows are upserted in (tenant, lexeme)
-- order so concurrent syncs lock them in the same order and cannot deadlock.

-- name: lexemes_count_path
-- Count the lexemes of the chunks file %(path)s contributed from line %(from_line)s on
-- (sign 1), or uncount them before their rows are deleted (sign -1; from line 1: all).
INSERT INTO lexeme_df (tenant_id, lexeme, df, short_df)
SELECT tenant_id, lexeme, %(sign)s * sum(n), %(sign)s * sum(s) FROM (
  SELECT c.tenant_id, u.lexeme, count(*) AS n, count(*) FILTER (WHERE c.token_est <= 48) AS s
  FROM chunks c, unnest(c.tsv) AS u
  WHERE c.path = %(path)s AND c.line >= %(from_line)s
  GROUP BY c.tenant_id, u.lexeme
  UNION ALL
  SELECT c.tenant_id, '', count(*), count(*) FILTER (WHERE c.token_est <= 48) FROM chunks c
  WHERE c.path = %(path)s AND c.line >= %(from_line)s
  GROUP BY c.tenant_id
  UNION ALL
  SELECT c.tenant_id, '#', sum(c.token_est), coalesce(sum(c.token_est)
         FILTER (WHERE c.token_est <= 48), 0) FROM chunks c
  WHERE c.path = %(path)s AND c.line >= %(from_line)s
  GROUP BY c.tenant_id
) counted
GROUP BY tenant_id, lexeme
ORDER BY tenant_id COLLATE "C", lexeme COLLATE "C"
ON CONFLICT (tenant_id, lexeme) DO UPDATE
SET df = lexeme_df.df + EXCLUDED.df, short_df = lexeme_df.short_df + EXCLUDED.short_df

-- name: lexemes_prune_path
-- Drop the counts lexemes_count_path (-1) took to zero: those of file %(path)s's chunks from
-- line %(from_line)s on and their tenants' totals, looked up one by one (before the rows
-- are deleted). Only that statement lowers counts, so no other can have reached zero; a
-- scan of the whole table (340,247 rows at 1M events) cost 21-32 ms on every decision or
-- task written.
DELETE FROM lexeme_df d
USING (
  SELECT c.tenant_id, u.lexeme FROM chunks c, unnest(c.tsv) AS u
  WHERE c.path = %(path)s AND c.line >= %(from_line)s
  UNION
  SELECT c.tenant_id, t.lexeme FROM chunks c, (VALUES (''), ('#')) AS t (lexeme)
  WHERE c.path = %(path)s AND c.line >= %(from_line)s
) gone
WHERE d.tenant_id = gone.tenant_id AND d.lexeme = gone.lexeme AND d.df <= 0

-- name: lexemes_count_all
-- After a bulk load: every tenant's document frequencies, counted by a query that
-- may run in parallel (an INSERT ... SELECT may not); lexemes_rebuild stores them.
CREATE TEMP TABLE lexeme_counts ON COMMIT DROP AS
SELECT c.tenant_id, u.lexeme, count(*) AS df, count(*) FILTER (WHERE c.token_est <= 48) AS short_df
FROM chunks c, unnest(c.tsv) AS u
GROUP BY c.tenant_id, u.lexeme

-- name: lexemes_rebuild
INSERT INTO lexeme_df (tenant_id, lexeme, df, short_df)
SELECT tenant_id, lexeme, df, short_df FROM lexeme_counts

-- name: lexemes_set_totals
-- A tenant's chunk counts ('') and token sums ('#'), known to the bulk load without a scan.
INSERT INTO lexeme_df (tenant_id, lexeme, df, short_df)
VALUES (%s, '', %s, %s), (%s, '#', %s, %s)
