-- The web dashboard's reads (rara ui): read-only, typed in rara.ui.data. Every list is a keyset
-- page (`WHERE id < :before ORDER BY id DESC LIMIT :limit`), never OFFSET, so page 2,000 of a
-- 100k-run table costs what page 1 does. Filters are written `CAST(:x AS t) IS NULL OR …`:
-- the UI's connections never prepare statements (prepare_threshold None), so each one is
-- planned with its values and the unused filters fold away.
-- Loaded by rara.pg.queries with every other file of this folder: one name space; ours all
-- start with ui_. aiosql suffixes: ^ one row, $ one value, ! no result; none: all rows.

-- name: ui_now$
SELECT now();

-- name: ui_run_page
-- One page of the runs list, newest first, after the keyset cursor :before (a run id: ids
-- are unique across namespaces, so one cursor pages every namespace or one). Steps
-- done/total per run: the run's own step counters (rara_run_count), the one count of the
-- dashboard: every step of the definition plus each child of a map step. :namespace (null:
-- every namespace) reads the run's own column, through rara_runs_by_namespace (namespace,
-- id); a :definition is that name in :namespace when one is given, in any otherwise. The
-- status shown and filtered is the run's phase (rara_run_phase: its status, `paused`, or
-- `waiting` with what it waits for); a waiting or paused run is an unfinished one, which the
-- first test keeps to before the function is called.
SELECT r.id, r.namespace, ph.phase AS status, ph.waiting_for, v.name AS definition, v.version,
       r.idempotency_key, r.created_at, r.started_at, r.finished_at, r.cancel_requested,
       r.steps_succeeded AS done, r.steps_total AS total
FROM rara_runs r JOIN rara_definition_versions v ON v.id = r.definition_version_id
CROSS JOIN LATERAL rara_run_phase(r.id, r.status) ph
WHERE (CAST(:before AS bigint) IS NULL OR r.id < :before)
  AND (CAST(:namespace AS text) IS NULL OR r.namespace = :namespace)
  AND (CAST(:status AS text) IS NULL OR r.status::text = :status
       OR (:status IN ('waiting', 'paused') AND r.status IN ('pending', 'running')))
  AND (CAST(:status AS text) IS NULL OR ph.phase = :status)
  -- A waiting run has an open wait: that filter starts from rara_waits (the waits open now),
  -- not from every run: the array of their runs is an index condition of the primary key.
  AND (CAST(:status AS text) IS DISTINCT FROM 'waiting'
       OR r.id = ANY (ARRAY(SELECT DISTINCT w.run_id FROM rara_waits w)))
  AND (CAST(:definition AS text) IS NULL OR v.name = :definition)
  -- The search box: a substring of the definition's name or of the idempotency key.
  AND (CAST(:search AS text) IS NULL
       OR strpos(lower(v.name), lower(:search)) > 0
       OR strpos(lower(r.idempotency_key), lower(:search)) > 0)
  AND (CAST(:since AS timestamptz) IS NULL OR r.created_at >= :since)
  AND (CAST(:until AS timestamptz) IS NULL OR r.created_at < :until)
ORDER BY r.id DESC
LIMIT :limit;

-- name: ui_run_get^
-- The run page's header: its status is the run's phase (rara_run_phase), `waiting` with
-- what it waits for while only a gate, a signal or a timer can move it on.
SELECT r.id, r.namespace, ph.phase AS status, ph.waiting_for, v.name AS definition, v.version,
       v.digest, r.idempotency_key, r.input, r.error, r.cancel_requested, r.created_at,
       r.started_at, r.finished_at, r.steps_total, r.steps_succeeded, r.steps_failed,
       r.steps_cancelled
FROM rara_runs r JOIN rara_definition_versions v ON v.id = r.definition_version_id
CROSS JOIN LATERAL rara_run_phase(r.id, r.status) ph
WHERE r.id = :run_id;

-- name: ui_step_list
-- A run's steps with their latest progress report (of the current attempt): the last event
-- by the events' primary key, one backward index probe per step; the worker holding the lease,
-- else the one of the last attempt (a probe of the attempts' key). A step with a row in
-- rara_waits is `waiting` (its status stays blocked: migration 0021), with what it waits for.
SELECT s.id, s.key, s.depends_on, s.capability, s.executor,
       CASE WHEN w.step_id IS NULL THEN s.status::text ELSE 'waiting' END AS status,
       w.kind AS wait_kind, w.signal AS wait_signal, w.due_at AS wait_due,
       s.attempt, s.max_attempts, s.releases, s.leased_by, s.lease_expires_at, s.heartbeat_at,
       coalesce(s.held_available_at, s.available_at) AS available_at,  -- (held: its own)
       s.cancel_requested, s.result, s.error, s.started_at, s.finished_at,
       s.map_over IS NOT NULL AS is_map, s.map_total,
       CASE WHEN s.map_over IS NULL THEN p.fraction
            ELSE s.map_succeeded::double precision / nullif(s.map_total, 0) END AS fraction,
       CASE WHEN s.map_over IS NULL THEN coalesce(p.message, '')
            ELSE rara_map_summary(s.map_total, s.map_succeeded, s.map_failed, s.id)
       END AS message,
       coalesce(s.leased_by, (SELECT a.worker FROM rara_attempts a WHERE a.step_id = s.id
                              ORDER BY a.attempt DESC LIMIT 1)) AS worker,
       s.reused_from,
       -- Whether the run it was reused from is still there to link to (`rara runs prune`
       -- may have deleted it; the cache entry outlives it): a primary-key probe per reused
       -- step, none for a step that ran.
       CASE WHEN s.reused_from IS NOT NULL THEN EXISTS (
           SELECT FROM rara_runs o WHERE o.id = (s.reused_from ->> 'run')::bigint)
       END AS reused_run_kept
FROM rara_steps s
LEFT JOIN LATERAL (
    SELECT e.fraction, e.message FROM rara_events e
    WHERE e.step_id = s.id AND e.attempt = s.attempt AND e.kind = 'progress'
    ORDER BY e.seq DESC LIMIT 1
) p ON true
LEFT JOIN rara_waits w ON w.step_id = s.id
-- A map step is one node, its progress its children's (not a node per child).
WHERE s.run_id = :run_id AND s.map_parent IS NULL
ORDER BY s.id;

-- name: ui_run_approval_list
-- A run's approval gates that have begun to wait, each with the evidence it froze then, its
-- deadline while it waits, and its decision once made (db/functions/waits.sql).
SELECT a.step_key, a.approvers, a.requested_at, w.due_at, a.decision, a.decided_by,
       a.decided_login, a.decided_at, a.reason, a.evidence,
       s.wait -> 'on_reject' #>> '{}' AS on_reject
FROM rara_approvals a
JOIN rara_steps s ON s.id = a.step_id
LEFT JOIN rara_waits w ON w.step_id = a.step_id
WHERE a.run_id = :run_id
ORDER BY a.step_id;

-- name: ui_map_child_list
-- The children of a run's map steps (those inserted so far), each with its latest worker and
-- where it was reused from (a map's children hit the cache one by one): what the map step's
-- group shows on demand.
SELECT p.key AS parent, c.key, c.map_index, c.status::text AS status, c.attempt,
       c.started_at, c.finished_at,
       coalesce(c.leased_by, (SELECT a.worker FROM rara_attempts a WHERE a.step_id = c.id
                              ORDER BY a.attempt DESC LIMIT 1)) AS worker,
       c.reused_from,
       CASE WHEN c.reused_from IS NOT NULL THEN EXISTS (
           SELECT FROM rara_runs o WHERE o.id = (c.reused_from ->> 'run')::bigint)
       END AS reused_run_kept
FROM rara_steps c JOIN rara_steps p ON p.id = c.map_parent
WHERE c.run_id = :run_id AND c.map_parent IS NOT NULL
ORDER BY c.map_parent, c.map_index
LIMIT :limit;

-- name: ui_attempt_list
-- Every attempt of a run's steps (through the steps: rara_attempts has no run index); a map's
-- children where their map step is (by its id, then index), not after the steps added with
-- the run.
SELECT s.key, a.attempt, a.worker, a.outcome::text AS outcome, a.started_at, a.ended_at,
       a.ended_by, a.error
FROM rara_steps s JOIN rara_attempts a ON a.step_id = s.id
WHERE s.run_id = :run_id
ORDER BY coalesce(s.map_parent, s.id), s.map_index NULLS FIRST, a.attempt;

-- name: ui_metric_list
-- Progress reports that carry metrics (the adaptation's loss, …), in order, at most :limit.
SELECT s.run_id, s.key, e.attempt, e.seq, e.created_at, e.fraction, e.metrics
FROM rara_steps s JOIN rara_events e ON e.step_id = s.id
WHERE s.run_id = :run_id AND e.kind = 'progress' AND e.metrics <> '{}'::jsonb
ORDER BY s.id, e.attempt, e.seq
LIMIT :limit;

-- name: ui_run_artifact_list
-- The manifests of a run's steps, every attempt (an earlier attempt's partial output too).
SELECT s.key, a.attempt, a.name, a.digest, a.size, a.media_type,
       (s.status = 'succeeded' AND a.attempt = s.attempt) AS final
FROM rara_steps s JOIN rara_step_artifacts a ON a.step_id = s.id
WHERE s.run_id = :run_id
ORDER BY s.id, a.attempt, a.name;

-- name: ui_artifact_get^
SELECT digest, size, created_at FROM rara_artifacts WHERE digest = :digest;

-- name: ui_artifact_producer_list
-- Where a blob came from: the manifests naming it (step, attempt, run, definition).
SELECT m.name, m.media_type, m.size, m.attempt, s.key, s.run_id, s.status::text AS status,
       v.namespace, v.name AS definition, v.version
FROM rara_step_artifacts m
JOIN rara_steps s ON s.id = m.step_id
JOIN rara_runs r ON r.id = s.run_id
JOIN rara_definition_versions v ON v.id = r.definition_version_id
WHERE m.digest = :digest
ORDER BY s.run_id DESC, s.id
LIMIT :limit;

-- name: ui_artifact_consumer_list
-- Who read it: the steps whose successful attempt read the blob (rara_step_reads, written
-- with the end since migration 0015; `producer` NULL). Besides, by the dependency rule (a
-- dependant receives its dependencies' artifacts as inputs; `producer` names the step it
-- depends on): steps that have not succeeded yet, and steps that succeeded before reads were
-- recorded (before migration 0015 was applied).
WITH recorded_since AS MATERIALIZED (
    SELECT applied_at FROM rara_schema_migrations WHERE version = 15
)
SELECT run_id, key, status, producer FROM (
    SELECT s.run_id, s.key, s.status::text AS status, NULL AS producer
    FROM rara_step_reads r JOIN rara_steps s ON s.id = r.step_id
    WHERE r.digest = :digest
    UNION
    SELECT c.run_id, c.key, c.status::text AS status, p.key AS producer
    FROM rara_step_artifacts m
    JOIN rara_steps p ON p.id = m.step_id AND p.attempt = m.attempt AND p.status = 'succeeded'
    JOIN rara_steps c ON c.run_id = p.run_id AND p.key = ANY (c.depends_on)
    WHERE m.digest = :digest
      AND (c.status <> 'succeeded'
           OR c.finished_at < coalesce((SELECT applied_at FROM recorded_since), '-infinity'))
) readers
ORDER BY run_id DESC, key
LIMIT :limit;

-- name: ui_artifact_label^
-- The name and media type a manifest gave the blob (the download's file name and
-- Content-Type): the manifest entry named :name when there is one (the run page's link says
-- which), else any. Two probes of the digest index, never a sort of every manifest naming it.
SELECT coalesce(
           (SELECT m.name FROM rara_step_artifacts m
            WHERE m.digest = :digest AND m.name = CAST(:name AS text) LIMIT 1),
           (SELECT m.name FROM rara_step_artifacts m WHERE m.digest = :digest LIMIT 1)) AS name,
       (SELECT m.media_type FROM rara_step_artifacts m
        WHERE m.digest = :digest LIMIT 1) AS media_type;

-- name: ui_namespace_list
-- The namespaces the dashboard's filters offer: those with a definition (every run's is one:
-- a run is of a definition's version) or a schedule. Both tables are keyed by (namespace,
-- name) and small beside the runs.
SELECT namespace FROM rara_definitions
UNION
SELECT namespace FROM rara_schedules
ORDER BY 1
LIMIT :limit;

-- name: ui_definition_page
-- Definitions by (namespace, name) after the keyset cursor (:after_namespace, :after), each
-- with its latest version; :namespace (null: every namespace) narrows to one.
SELECT d.namespace, d.name, d.created_at, d.retired_at, v.version AS latest, v.digest,
       v.created_at AS updated_at
FROM rara_definitions d
JOIN LATERAL (
    SELECT version, digest, created_at FROM rara_definition_versions
    WHERE namespace = d.namespace AND name = d.name ORDER BY version DESC LIMIT 1
) v ON true
WHERE (CAST(:after AS text) IS NULL OR (d.namespace, d.name) > (:after_namespace, :after))
  AND (CAST(:namespace AS text) IS NULL OR d.namespace = :namespace)
  AND (CAST(:search AS text) IS NULL OR strpos(lower(d.name), lower(:search)) > 0)
ORDER BY d.namespace, d.name
LIMIT :limit;

-- name: ui_definition_version_list
SELECT version, digest, created_at FROM rara_definition_versions
WHERE namespace = :namespace AND name = :name ORDER BY version DESC;

-- name: ui_definition_version_get^
SELECT namespace, name, version, digest, spec, created_at FROM rara_definition_versions
WHERE namespace = :namespace AND name = :name AND version = :version;

-- name: ui_definition_result_list
-- The results of a definition's last :limit runs (any version), step by step: the chart of
-- results across runs (recall@k, MRR of each nightly refresh).
SELECT r.id AS run_id, r.version, r.created_at, s.key, s.result
FROM (
    SELECT r.id, v.version, r.created_at
    FROM rara_runs r JOIN rara_definition_versions v ON v.id = r.definition_version_id
    WHERE v.namespace = :namespace AND v.name = :name
    ORDER BY r.id DESC LIMIT :limit
) r
JOIN rara_steps s ON s.run_id = r.id
WHERE s.result IS NOT NULL AND jsonb_typeof(s.result) = 'object'
ORDER BY r.id, s.id;

-- name: ui_worker_list
-- Workers (live first) with the leases each holds now; running steps are found through the
-- lease-expiry index (only running steps have an expiry).
WITH held AS (
    SELECT leased_by, count(*) AS leases FROM rara_steps
    WHERE lease_expires_at IS NOT NULL GROUP BY leased_by
)
SELECT w.id, w.capabilities, w.started_at, w.heartbeat_at, w.stopped_at,
       coalesce(held.leases, 0) AS leases
FROM rara_workers w LEFT JOIN held ON held.leased_by = w.id
WHERE w.stopped_at IS NULL OR w.stopped_at > now() - interval '1 day'
ORDER BY w.stopped_at IS NOT NULL, w.heartbeat_at DESC
LIMIT :limit;

-- name: ui_executor_list
-- The remote executors that running workers reach (rara_workers.executors, migration 0015):
-- one row per endpoint and worker, since each worker asks its endpoints on its own.
SELECT e.endpoint, e.capabilities, e.version, e.live, w.id AS worker, w.heartbeat_at
FROM rara_workers w,
     jsonb_to_recordset(w.executors) AS e(endpoint text, capabilities text[], version text,
                                          live boolean)
WHERE w.stopped_at IS NULL
ORDER BY e.endpoint, w.id
LIMIT :limit;

-- name: ui_backlog_list
-- Per capability: steps waiting (ready, through the ready index; not those a pause holds), how
-- many are due now, and how many are running.
WITH ready AS (
    SELECT capability, count(*) AS ready, count(*) FILTER (WHERE available_at <= now()) AS due,
           min(available_at) AS oldest
    FROM rara_steps
    WHERE status = 'ready'
      AND available_at < 'infinity'  -- not a paused run's held steps (rara_run_set_paused)
    GROUP BY capability
), running AS (
    SELECT capability, count(*) AS running FROM rara_steps
    WHERE lease_expires_at IS NOT NULL GROUP BY capability
)
SELECT coalesce(ready.capability, running.capability) AS capability,
       coalesce(ready.ready, 0) AS ready, coalesce(ready.due, 0) AS due, ready.oldest,
       coalesce(running.running, 0) AS running
FROM ready FULL JOIN running USING (capability)
ORDER BY 1;

-- name: ui_live_run_list
-- The live view's poll, one statement for every run any viewer of this process watches; the
-- status is the phase, as on the page (ui_run_get).
SELECT r.id, ph.phase AS status, ph.waiting_for, r.cancel_requested, r.finished_at,
       r.steps_total, r.steps_succeeded, r.steps_failed, r.steps_cancelled
FROM rara_runs r
CROSS JOIN LATERAL rara_run_phase(r.id, r.status) ph
WHERE r.id = ANY (CAST(:run_ids AS bigint[]));

-- name: ui_live_step_list
-- Steps of the watched runs; the progress of running steps only (one probe each). A waiting
-- step is `waiting`, with what it waits for, as on the page (ui_step_list): a primary-key
-- probe of rara_waits each.
SELECT s.run_id, s.key,
       CASE WHEN w.step_id IS NULL THEN s.status::text ELSE 'waiting' END AS status,
       w.kind AS wait_kind, w.signal AS wait_signal, w.due_at AS wait_due, s.attempt,
       CASE WHEN s.status = 'running' THEN (
           SELECT e.fraction FROM rara_events e
           WHERE e.step_id = s.id AND e.attempt = s.attempt AND e.kind = 'progress'
           ORDER BY e.seq DESC LIMIT 1)
           WHEN s.map_over IS NOT NULL THEN
               s.map_succeeded::double precision / nullif(s.map_total, 0)
       END AS fraction
FROM rara_steps s
LEFT JOIN rara_waits w ON w.step_id = s.id
WHERE s.run_id = ANY (CAST(:run_ids AS bigint[])) AND s.map_parent IS NULL
ORDER BY s.run_id, s.id;

-- name: ui_live_metric_list
-- The live view's metrics: the progress metrics of the watched runs' running steps, every
-- attempt (a resumed curve continues its first attempt's), at most :limit; ui_metric_list's
-- rows, so the page and the live view shape them alike (rara.ui.charts).
SELECT s.run_id, s.key, e.attempt, e.seq, e.created_at, e.fraction, e.metrics
FROM rara_steps s JOIN rara_events e ON e.step_id = s.id
WHERE s.run_id = ANY (CAST(:run_ids AS bigint[])) AND s.status = 'running'
  AND e.kind = 'progress' AND e.metrics <> '{}'::jsonb
ORDER BY s.run_id, s.id, e.attempt, e.seq
LIMIT :limit;

-- name: ui_live_recent_list
-- The runs list's live view: the newest runs and their status (the first page changes);
-- :namespaces (null: every namespace) narrows to a viewer's (rara ui --user-roles). The
-- status is the phase, as on the page (ui_run_page).
SELECT r.id, ph.phase AS status FROM rara_runs r
CROSS JOIN LATERAL rara_run_phase(r.id, r.status) ph
WHERE CAST(:namespaces AS text[]) IS NULL OR r.namespace = ANY (CAST(:namespaces AS text[]))
ORDER BY r.id DESC LIMIT :limit;

-- name: ui_live_approval_list
-- The approvals page's live view: the newest gates and their decisions (a gate begins to wait,
-- is decided, times out); :namespaces (null: every namespace) narrows to a viewer's.
SELECT run_id, step_key, coalesce(decision, '') AS decision FROM rara_approvals
WHERE CAST(:namespaces AS text[]) IS NULL OR namespace = ANY (CAST(:namespaces AS text[]))
ORDER BY requested_at DESC, step_id DESC LIMIT :limit;

-- name: ui_open_approval_count$
-- The navigation's count on Approvals: the gates waiting for a decision now (an open wait:
-- a cancelled run's gate, undecided, waits no longer) that the connection's role reads
-- (row-level security: a user's namespaces under --user-roles), counted up to :limit (the
-- link says "99+" beyond), through rara_approvals_open.
SELECT count(*) FROM (
    SELECT FROM rara_approvals a
    WHERE a.decision IS NULL AND EXISTS (SELECT FROM rara_waits w WHERE w.step_id = a.step_id)
    LIMIT :limit
) open;

-- name: ui_schedule_page
-- Schedules by (namespace, name) after the keyset cursor (:after_namespace, :after)
-- (rara_schedules, migrations 0014 and 0017), each with its last run's status: the columns
-- of `rara schedules list` (schedule_list), a page at a time; :namespace (null: every
-- namespace) narrows to one.
SELECT s.namespace, s.name, s.definition, s.version, s.cron, s.time_zone,
       s.concurrency_policy, s.suspended, s.next_tick, s.last_tick, s.last_run_id,
       s.missed_ticks, r.status::text AS last_run_status, s.refused_reason
FROM rara_schedules s LEFT JOIN rara_runs r ON r.id = s.last_run_id
WHERE (CAST(:after AS text) IS NULL OR (s.namespace, s.name) > (:after_namespace, :after))
  AND (CAST(:namespace AS text) IS NULL OR s.namespace = :namespace)
ORDER BY s.namespace, s.name
LIMIT :limit;

-- name: ui_user_become$
-- `rara ui --user-roles`: the rest of this transaction (:local) or session runs as the role
-- :user, the name the proxy's header gave, when it is one the dashboard may become
-- (docs/ui.md, "One dashboard, many teams"); returns that role, or no row when it is not,
-- and then nothing changed. A dashboard user is a role granted to the UI's login directly
-- (`GRANT alice TO rara_ui`: that grant is what marks it), that is a member of a rara group
-- role and no group of other roles itself (its members are logins), and holds nothing more
-- than a team's user may: not a rara group role, not a predefined role, not a superuser or a
-- role with CREATEROLE, CREATEDB, REPLICATION or BYPASSRLS, not the login itself, not the
-- owner of rara's tables or of the database, nor a member of either. The name must exist as
-- written (compared as text, so PostgreSQL never shortens it to another role's), which rules
-- out `none` — `SET ROLE "none"`, quoted or not, is PostgreSQL's reset to the login, which
-- sees every user's namespaces together — and the other names SQL reads as keywords are
-- refused in any case. The role is set only on the row that passed every test
-- (set_config('role', …) is what SET ROLE does, with its own membership check).
SELECT set_config('role', r.rolname, CAST(:local AS boolean))
FROM pg_roles r
WHERE r.rolname::text = CAST(:user AS text)
  AND lower(r.rolname) NOT IN ('none', 'public', 'default', 'all', 'current_user',
                               'session_user', 'current_role', 'user')
  AND r.oid >= 16384 AND left(r.rolname, 3) <> 'pg_'
  AND r.rolname NOT IN ('rara_reader', 'rara_worker', 'rara_client', 'rara_operator',
                        'rara_vouch')
  AND r.rolname <> session_user
  AND NOT (r.rolsuper OR r.rolcreaterole OR r.rolcreatedb OR r.rolreplication
           OR r.rolbypassrls)
  AND EXISTS (SELECT FROM pg_auth_members m JOIN pg_roles l ON l.oid = m.member
              WHERE m.roleid = r.oid AND l.rolname = session_user)
  AND NOT EXISTS (SELECT FROM pg_auth_members m JOIN pg_roles g ON g.oid = m.member
                  WHERE m.roleid = r.oid AND NOT g.rolcanlogin)
  AND pg_has_role(r.oid, 'rara_reader', 'MEMBER')
  AND NOT pg_has_role(r.oid, (SELECT c.relowner FROM pg_class c
                              WHERE c.oid = 'rara_runs'::regclass), 'MEMBER')
  AND NOT pg_has_role(r.oid, (SELECT d.datdba FROM pg_database d
                              WHERE d.datname = current_database()), 'MEMBER');
