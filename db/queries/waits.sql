-- Durable waits, signals and approvals (migration 0021): ended through db/functions/waits.sql,
-- fired by every worker (rara.worker.waits), read by `rara runs show`, `rara approvals` and
-- the UI. Typed: rara.pg.waits.
-- Loaded by rara.pg.queries with every other file of this folder (one name space).

-- name: waits_fire^
-- The waits whose time came ended (at most :limit), and when the next one is due, by the
-- database's clock (now: to measure the sleep by).
SELECT f.fired, f.next_due, now() AS db_now FROM rara_waits_fire(p_limit => :limit) AS f;

-- name: run_signal^
SELECT * FROM rara_run_signal(p_run_id => :run_id, p_name => :name,
                              p_payload => CAST(:payload AS jsonb), p_key => :key);

-- name: approval_decide^
SELECT * FROM rara_approval_decide(p_run_id => :run_id, p_step_key => :step_key,
                                   p_approve => :approve, p_reason => :reason,
                                   p_identity => :identity);

-- name: approval_list
-- Approvals of the caller's namespaces (its rows only: row-level security), open ones first,
-- newest first; :open_only for those still waiting for a decision.
SELECT a.step_id, a.run_id, a.namespace, a.step_key, v.name AS definition, a.approvers,
       a.requested_at, w.due_at, a.decision, a.decided_by, a.decided_at, a.reason
FROM rara_approvals a
JOIN rara_runs r ON r.id = a.run_id
JOIN rara_definition_versions v ON v.id = r.definition_version_id
LEFT JOIN rara_waits w ON w.step_id = a.step_id
WHERE (NOT :open_only OR a.decision IS NULL)
  AND (CAST(:namespace AS text) IS NULL OR a.namespace = :namespace)
ORDER BY a.decision IS NOT NULL, a.requested_at DESC, a.step_id DESC
LIMIT :limit;

-- name: approval_get^
-- One approval with its evidence, by run and step key.
SELECT a.step_id, a.run_id, a.namespace, a.step_key, v.name AS definition, a.approvers,
       a.requested_at, w.due_at, a.decision, a.decided_by, a.decided_login, a.decided_at,
       a.reason, a.evidence, s.wait -> 'on_reject' #>> '{}' AS on_reject
FROM rara_approvals a
JOIN rara_steps s ON s.id = a.step_id
JOIN rara_runs r ON r.id = a.run_id
JOIN rara_definition_versions v ON v.id = r.definition_version_id
LEFT JOIN rara_waits w ON w.step_id = a.step_id
WHERE a.run_id = :run_id AND a.step_key = :step_key;

-- name: wait_list_for_person
-- The waits of run :run_id that only a person can end (a signal, a decision), when nothing
-- else can move the run on: the run is `waiting` (rara_run_phase: no step, a map's children
-- included, ready or running) and for no timer. Empty while anything else can: `rara runs
-- watch` stops on a row, and says what each waits for. A deadline (due_at) ends such a wait
-- too, as the definition says, but only when nobody acted by then.
SELECT w.step AS step_key, w.kind, w.signal, w.due_at
FROM rara_runs r
CROSS JOIN LATERAL rara_run_phase(r.id, r.status) ph
CROSS JOIN LATERAL ROWS FROM (jsonb_to_recordset(ph.waiting_for)
                              AS (step text, kind text, signal text, due_at timestamptz))
    WITH ORDINALITY AS w(step, kind, signal, due_at, n)
WHERE r.id = :run_id
  AND NOT EXISTS (SELECT FROM jsonb_array_elements(ph.waiting_for) t
                  WHERE t ->> 'kind' = 'timer')
ORDER BY w.n;

-- name: login_vouches$
-- Whether this session's login may name the person it acts for (a member of rara_vouch,
-- migration 0025; a superuser is a member of every role): what `rara ui --auth-header`
-- without --user-roles needs to record its users' decisions as theirs.
SELECT EXISTS (SELECT FROM pg_roles r WHERE r.rolname = 'rara_vouch'
               AND pg_has_role(session_user, r.oid, 'MEMBER'));
