-- rara 0029: a run's end is announced without naming the run (security issue "Trust on the
-- new surfaces", lower items; docs/least-privilege.md, "NOTIFY is a wake-up, never an
-- authority").
--
-- Any login of the database may LISTEN on any channel; PostgreSQL has no privilege for it.
-- rara_notify_run (0001, fired for run ends since 0004) sent "run_id:status", so a login with
-- no rara role at all, or a team's login under isolation, heard every namespace's run ends as
-- they happened. No listener ever used the payload (Client.wait, `rara runs watch` and the
-- UI's live hub read the runs they watch again on any wake-up), so it is now empty: the
-- wake-up costs what it did, and identical notifications of one transaction fold into one.
-- The functions' own notifications (db/functions: rara_wait_begin, the cancels, the schedule
-- changes) are emptied the same way in their files. Needs no owner: the schema's role
-- replaces its own trigger function; the trigger itself is unchanged.

CREATE OR REPLACE FUNCTION rara_notify_run() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('rara_run', '');
    RETURN NULL;
END $$;
