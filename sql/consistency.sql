-- Named statements of gitmem.consistency: what a summary cites, as the index knows it.

-- name: summary_sources
-- Each summary with the sessions of the ids it cites that exist in its tenant
-- (NULL for records that have no session); an id absent from ref_sessions is missing.
SELECT s.summary_id, s.ts, s.session_id, s.scope, s.decisions, s.refs,
       COALESCE((
         SELECT jsonb_object_agg(r.ref, r.session)
         FROM (
           SELECT e.event_id AS ref, e.session_id AS session FROM events e
           WHERE e.event_id = ANY (s.refs) AND e.tenant_id = s.tenant_id
           UNION ALL
           SELECT o.summary_id, o.session_id FROM summaries o
           WHERE o.summary_id = ANY (s.refs) AND o.tenant_id = s.tenant_id
           UNION ALL
           SELECT d.decision_id, NULL FROM decisions d
           WHERE d.decision_id = ANY (s.refs) AND d.tenant_id = s.tenant_id
           UNION ALL
           SELECT t.task_id, NULL FROM tasks t
           WHERE t.task_id = ANY (s.refs) AND t.tenant_id = s.tenant_id
           UNION ALL
           SELECT h.handoff_id, NULL FROM handoffs h
           WHERE h.handoff_id = ANY (s.refs) AND h.tenant_id = s.tenant_id
           UNION ALL
           SELECT DISTINCT a.artifact_id, NULL FROM artifacts a
           WHERE a.artifact_id = ANY (s.refs) AND a.tenant_id = s.tenant_id
         ) r
       ), '{}'::jsonb) AS ref_sessions
FROM summaries s
WHERE s.tenant_id = %(tenant)s AND s.summary_id = ANY (%(ids)s)
ORDER BY s.summary_id
