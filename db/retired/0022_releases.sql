-- rara 0022: immutable, numbered releases that readers resolve by name (issue 35, item 3;
-- docs/releases.md).
--
-- A refresh pipeline exists to publish something: an index, an adapter. A release says "this
-- is what production serves": NAME@N in a namespace is a succeeded run's chosen artifacts
-- (their digests, copied here) and step results, promoted by a login at a time with a note.
-- Numbers per (namespace, name) start at 1, without gaps (rara_release_promote takes a lock per
-- name). A release is never changed or deleted, like a definition version (0001): the
-- triggers below refuse UPDATE, DELETE and TRUNCATE, the owner included, so NAME@3 names the
-- same bytes forever. What moves is the `current` pointer per name, and every move (a promote,
-- a rollback) is appended to a history that is itself append-only.
--
-- A release outlives its run: run_id is not a foreign key (`rara runs prune` deletes old runs
-- and their manifests), and each artifact row references its blob (rara_artifacts), which GC
-- keeps while a release names it (db/queries/artifacts.sql). Written only through
-- db/functions/releases.sql; read under the namespaces' read policies (0018).

CREATE TABLE rara_releases (
    id                     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    namespace              text NOT NULL CONSTRAINT rara_releases_namespace_check
        CHECK (namespace ~ '^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$'),
    -- a definition's name rules (rara.definitions.model.NAME_PATTERN): no `@`, which
    -- separates NAME@N
    name                   text NOT NULL
        CHECK (name ~ '^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$'),
    number                 integer NOT NULL CHECK (number >= 1),
    run_id                 bigint NOT NULL,
    definition_version_id  bigint NOT NULL REFERENCES rara_definition_versions (id),
    -- step key -> that step's result, as the run stored it
    results                jsonb NOT NULL CHECK (jsonb_typeof(results) = 'object'),
    promoted_by            name NOT NULL DEFAULT session_user,
    promoted_at            timestamptz NOT NULL DEFAULT now(),
    note                   text CHECK (char_length(note) <= 4000),
    CONSTRAINT rara_releases_name_number_key UNIQUE (namespace, name, number)
);

-- The artifacts of a release: the manifest rows of its run's succeeded attempts, copied.
CREATE TABLE rara_release_artifacts (
    release_id  bigint NOT NULL REFERENCES rara_releases (id),
    step_key    text NOT NULL,
    name        text NOT NULL,
    digest      text NOT NULL REFERENCES rara_artifacts (digest),
    size        bigint NOT NULL CHECK (size >= 0),
    media_type  text NOT NULL,
    PRIMARY KEY (release_id, step_key, name)
);
-- GC's "still referenced?" probe (artifact_forget_many), as 0005's for the manifests.
CREATE INDEX rara_release_artifacts_digest ON rara_release_artifacts (digest);

CREATE FUNCTION rara_refuse_release_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is append-only (% refused)', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'integrity_constraint_violation',
              HINT = 'a release is never changed: promote a new one, or roll back to one';
END $$;
REVOKE ALL ON FUNCTION rara_refuse_release_change() FROM PUBLIC;

-- The pointer per name: which release readers get for NAME (or NAME@current). Moved only by
-- the functions, each move recorded below.
CREATE TABLE rara_release_current (
    namespace   text NOT NULL,
    name        text NOT NULL,
    number      integer NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace, name),
    FOREIGN KEY (namespace, name, number) REFERENCES rara_releases (namespace, name, number)
);

-- Every move of a pointer, oldest first: a promote (from the release it replaced, NULL for
-- the first) or a rollback (with its reason).
CREATE TABLE rara_release_moves (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    namespace    text NOT NULL,
    name         text NOT NULL,
    action       text NOT NULL CHECK (action IN ('promote', 'rollback')),
    from_number  integer,
    to_number    integer NOT NULL,
    moved_by     name NOT NULL DEFAULT session_user,
    moved_at     timestamptz NOT NULL DEFAULT now(),
    reason       text CHECK (char_length(reason) <= 4000),
    FOREIGN KEY (namespace, name, to_number) REFERENCES rara_releases (namespace, name, number)
);
CREATE INDEX rara_release_moves_by_name ON rara_release_moves (namespace, name, id);

DO $$
DECLARE
    tab text;
BEGIN
    FOREACH tab IN ARRAY ARRAY['rara_releases', 'rara_release_artifacts', 'rara_release_moves']
    LOOP
        EXECUTE format('CREATE TRIGGER %I BEFORE UPDATE OR DELETE ON %I FOR EACH ROW '
                       'EXECUTE FUNCTION rara_refuse_release_change()', tab || '_immutable', tab);
        EXECUTE format('CREATE TRIGGER %I BEFORE TRUNCATE ON %I FOR EACH STATEMENT '
                       'EXECUTE FUNCTION rara_refuse_release_change()', tab || '_no_truncate',
                       tab);
    END LOOP;
END $$;

-- Each team reads its own releases (0018's rule); the fleet's roles read all.
DO $$
DECLARE
    t record;
BEGIN
    FOR t IN SELECT * FROM (VALUES
        ('rara_releases', 'namespace'),
        ('rara_release_current', 'namespace'),
        ('rara_release_moves', 'namespace'),
        ('rara_release_artifacts',
         '(SELECT r.namespace FROM rara_releases r WHERE r.id = release_id)')
    ) AS v(tab, namespace)
    LOOP
        EXECUTE format('CREATE POLICY %I ON %I FOR SELECT USING '
                       '((SELECT rara_caller_namespaces()) @> ''{*}'' '
                       'OR %s = ANY ((SELECT rara_caller_namespaces())::text[]))',
                       t.tab || '_read', t.tab, t.namespace);
        -- Isolated already (`rara access isolate`): the new tables are too.
        IF (SELECT c.relrowsecurity FROM pg_class c WHERE c.oid = 'rara_runs'::regclass) THEN
            EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t.tab);
        END IF;
    END LOOP;
END $$;

-- A blob is a team's while a visible release names it too: its run may be pruned.
ALTER POLICY rara_artifacts_read ON rara_artifacts
    USING ((SELECT rara_caller_namespaces()) @> '{*}'
           OR EXISTS (SELECT FROM rara_step_artifacts m WHERE m.digest = rara_artifacts.digest)
           OR EXISTS (SELECT FROM rara_step_reads d WHERE d.digest = rara_artifacts.digest)
           OR EXISTS (SELECT FROM rara_release_artifacts a
                      WHERE a.digest = rara_artifacts.digest));
