-- Named statements of the scenario harness (gitmem.assertions).

-- name: index_text_search
-- Every index row whose text form holds %(text)s: proof that a secret never reached
-- the index (SCN-S1). Scans whole tables; scenario stores are small.
SELECT 'events' AS "table", t.event_id AS id FROM events t WHERE strpos(t::text, %(text)s) > 0
UNION ALL
SELECT 'chunks', t.chunk_id FROM chunks t WHERE strpos(t::text, %(text)s) > 0
UNION ALL
SELECT 'decisions', t.decision_id FROM decisions t WHERE strpos(t::text, %(text)s) > 0
UNION ALL
SELECT 'tasks', t.task_id FROM tasks t WHERE strpos(t::text, %(text)s) > 0
UNION ALL
SELECT 'summaries', t.summary_id FROM summaries t WHERE strpos(t::text, %(text)s) > 0
UNION ALL
SELECT 'handoffs', t.handoff_id FROM handoffs t WHERE strpos(t::text, %(text)s) > 0
UNION ALL
SELECT 'views', t.path FROM views t WHERE strpos(t::text, %(text)s) > 0
UNION ALL
SELECT 'view_chunks', t.path || '#' || t.anchor FROM view_chunks t
WHERE strpos(t::text, %(text)s) > 0
UNION ALL
SELECT 'artifacts', t.artifact_id FROM artifacts t WHERE strpos(t::text, %(text)s) > 0
UNION ALL
SELECT 'source_files', t.path FROM source_files t WHERE strpos(t::text, %(text)s) > 0
UNION ALL
SELECT 'meta', t.key FROM meta t WHERE strpos(t::text, %(text)s) > 0
