"""Namespaces are tenants, and PostgreSQL keeps them apart (migration 0018, docs/namespaces.md
"Isolation"): two teams run a definition of the same name, each through its own logins, and
every table read and every function call across the boundary is tried as each kind of login —
a team's reader, a team's client, a role switched to with SET ROLE (a dashboard acting for its
user) — against what the owner sees. The fleet's roles (workers) still see both."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from typer.testing import CliRunner

from rara.cli.main import app
from rara.runs import start_run
from rara.schedules import manage
from rara.schedules.model import schedule_from_object
from rara.triggers.manage import apply_trigger
from rara.triggers.model import trigger_from_object
from tests.support.definitions import apply
from tests.support.runs import wait_run
from tests.worker.handlers import TALLY

Conn = psycopg.Connection[Any]
TEAMS = ("team-a", "team-b")
CACHED = {"cache": {"ttl": "1h"}}

# What each team's `rag` does: the same cached steps in both (the cache must not cross), and
# one step of team-b's own, so that one blob is team-b's alone.
SHARED_STEPS: list[dict[str, Any]] = [
    {"key": "collect", "capability": "test.tally@1", "input": {"text": "corpus"}, **CACHED},
    {"key": "index", "capability": "test.tally@1", "dependsOn": ["collect"], **CACHED},
    {"key": "talk", "capability": "test.chatty@1", "input": {"calls": 3, "seconds": 0.01}},
    {"key": "train", "capability": "test.checkpoint_sync@1", "input": {"items": 3}},
]
STEPS = {
    "team-a": SHARED_STEPS,
    "team-b": [
        *SHARED_STEPS,
        {"key": "private", "capability": "test.produce@1", "input": {"text": "team-b only"}},
    ],
}

_RUN = "(SELECT r.namespace FROM rara_runs r WHERE r.id = t.{})"
_STEP = (
    "(SELECT r.namespace FROM rara_steps s JOIN rara_runs r ON r.id = s.run_id WHERE s.id = t.{})"
)
# Each table that holds a namespace's data: (what names a row, the row's namespace as the owner
# works it out). A role's view of the table must be exactly its namespaces' rows.
TENANT_TABLES: dict[str, tuple[str, str]] = {
    "rara_definitions": ("name", "t.namespace"),
    "rara_definition_versions": ("id::text", "t.namespace"),
    "rara_runs": ("id::text", "t.namespace"),
    "rara_schedules": ("name", "t.namespace"),
    "rara_schedule_ticks": ("schedule || '@' || tick", "t.namespace"),
    "rara_triggers": ("name", "t.namespace"),
    "rara_trigger_events": ("trigger || '@' || event_key", "t.namespace"),
    "rara_trigger_objects": ("trigger || '@' || key", "t.namespace"),
    "rara_trigger_batches": ("id::text", "t.namespace"),
    "rara_steps": ("id::text", _RUN.format("run_id")),
    "rara_attempts": ("step_id || '/' || attempt", _RUN.format("run_id")),
    "rara_step_cache": ("key", _RUN.format("source_run")),
    "rara_events": ("step_id || '/' || attempt || '/' || seq", _STEP.format("step_id")),
    "rara_checkpoints": ("step_id || '/' || attempt || '/' || seq", _STEP.format("step_id")),
    "rara_step_artifacts": ("step_id || '/' || attempt || '/' || name", _STEP.format("step_id")),
    "rara_step_reads": ("step_id || '/' || digest", _STEP.format("step_id")),
    "rara_map_lists": ("map_id || '/' || first_index", _STEP.format("map_id")),
}
# Blobs are shared by content: one is a team's when a step of the team wrote or read it.
_ARTIFACT_OF = (
    "t.digest IN (SELECT m.digest FROM rara_step_artifacts m JOIN rara_steps s ON s.id = m.step_id"
    " JOIN rara_runs r ON r.id = s.run_id WHERE r.namespace = %(ns)s"
    " UNION SELECT d.digest FROM rara_step_reads d JOIN rara_steps s ON s.id = d.step_id"
    " JOIN rara_runs r ON r.id = s.run_id WHERE r.namespace = %(ns)s)"
)


def _rows(conn: Conn, table: str, where: str = "true", **params: Any) -> set[str]:
    ident = "digest" if table == "rara_artifacts" else TENANT_TABLES[table][0]
    query = f"SELECT {ident} FROM {table} t WHERE {where}"
    return {row[0] for row in conn.execute(query.encode(), params).fetchall()}


def _owned(owner: Conn, table: str, namespaces: tuple[str, ...]) -> set[str]:
    """The rows of ``table`` that belong to ``namespaces``, as the owner (no policy) finds
    them."""
    found: set[str] = set()
    for ns in namespaces:
        where = _ARTIFACT_OF if table == "rara_artifacts" else f"{TENANT_TABLES[table][1]} = %(ns)s"
        found |= _rows(owner, table, where, ns=ns)
    return found


@pytest.fixture
def make_role(database_url: str) -> Iterator[Callable[..., str]]:
    """``make_role(group, *namespaces)``: a NOLOGIN role in ``group`` that the owner granted
    ``namespaces`` (rara_namespace_access); dropped after the test (roles are the cluster's)."""
    made: list[str] = []
    with psycopg.connect(database_url, autocommit=True) as admin:

        def make(group: str, *namespaces: str) -> str:
            name = f"t_team_{uuid.uuid4().hex[:8]}"
            admin.execute(
                sql.SQL("CREATE ROLE {} IN ROLE {}").format(
                    sql.Identifier(name), sql.Identifier(group)
                )
            )
            made.append(name)
            for ns in namespaces:
                admin.execute(
                    "INSERT INTO rara_namespace_access (role, namespace) VALUES (%s, %s)",
                    (name, ns),
                )
            return name

        yield make
        for name in made:
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


@pytest.fixture
def login_in(database_url: str, role_url: Callable[[str], str]) -> Iterator[Callable[..., Conn]]:
    """``login_in(group, *roles)``: a connection of a new login in ``group`` and ``roles``."""
    opened: list[Conn] = []

    def connect(group: str, *roles: str) -> Conn:
        url = role_url(group)
        login = str(psycopg.conninfo.conninfo_to_dict(url)["user"])
        with psycopg.connect(database_url, autocommit=True) as admin:
            for role in roles:
                admin.execute(
                    sql.SQL("GRANT {} TO {}").format(sql.Identifier(role), sql.Identifier(login))
                )
        opened.append(psycopg.connect(url, autocommit=True))
        return opened[-1]

    yield connect
    for c in opened:
        c.close()


@pytest.fixture
def two_teams(conn: Conn, thread_worker: Callable[..., Any]) -> dict[str, int]:
    """Each team's `rag` run to its end (artifacts, reads, events, checkpoints, cache entries)
    and a due schedule in each; then isolation switched on (`rara access isolate`). Team → its
    run id."""
    runs: dict[str, int] = {}
    for ns in TEAMS:
        apply(conn, "rag", STEPS[ns], namespace=ns)
        runs[ns] = start_run(conn, "rag", namespace=ns, queue_anyway=True).run_id
        nightly = {
            "apiVersion": "rara.dev/v1alpha1",
            "kind": "WorkflowSchedule",
            "metadata": {"name": "nightly"},
            "spec": {"definition": "rag", "schedule": "0 2 * * *"},
        }
        manage.apply_schedule(conn, schedule_from_object(nightly), namespace=ns)
        hook = {
            "apiVersion": "rara.dev/v1alpha1",
            "kind": "WorkflowTrigger",
            "metadata": {"name": "docs-landed"},
            "spec": {"definition": "rag", "webhook": {"secretRef": {"name": "docs-hook"}}},
        }
        apply_trigger(conn, trigger_from_object(hook), namespace=ns)
        watched = {**hook, "metadata": {"name": "docs-changed"}}
        watched["spec"] = {"definition": "rag", "objects": {"location": "docs"}}
        apply_trigger(conn, trigger_from_object(watched), namespace=ns)
    conn.execute(
        "INSERT INTO rara_trigger_events (namespace, trigger, event_key, outcome, reason)"
        " SELECT namespace, name, 'e-1', 'refused', 'test' FROM rara_triggers"
    )
    conn.execute(
        "INSERT INTO rara_trigger_batches (namespace, trigger, batch_key, due_at)"
        " SELECT namespace, name, '', now() + interval '1 hour' FROM rara_triggers"
        " WHERE kind = 'webhook'"
    )
    conn.execute(
        "INSERT INTO rara_trigger_objects (namespace, trigger, key, digest, size, fingerprint)"
        " SELECT namespace, name, 'a.md', 'sha256:' || repeat('0', 64), 0, '0:0'"
        " FROM rara_triggers WHERE kind = 'objects'"
    )
    conn.execute(
        "INSERT INTO rara_schedule_ticks (namespace, schedule, tick, outcome, reason)"
        " SELECT namespace, name, now(), 'skipped', 'test' FROM rara_schedules"
    )
    conn.execute("UPDATE rara_schedules SET next_tick = now() - interval '1 minute'")
    thread_worker()
    for run_id in runs.values():
        assert wait_run(conn, run_id, timeout=60) == "succeeded"
    assert conn.execute("SELECT rara_namespace_isolation(true)").fetchone() == (False,)
    return runs


@pytest.mark.parametrize("group", ["rara_reader", "rara_client"])
@pytest.mark.parametrize("team", TEAMS)
def test_a_team_login_reads_its_namespace_and_nothing_of_the_other(
    conn: Conn,
    two_teams: dict[str, int],
    make_role: Callable[..., str],
    login_in: Callable[..., Conn],
    group: str,
    team: str,
) -> None:
    login = login_in(group, make_role("rara_reader", team))
    for table in [*TENANT_TABLES, "rara_artifacts"]:
        mine = _owned(conn, table, (team,))
        if table != "rara_map_lists":  # (a list is kept only while a big map inserts)
            assert mine, f"{table}: the fixture left {team} no rows to see"
        assert _rows(login, table) == mine, table
    # Another team's blob is not even known to exist; a shared one (same bytes) is.
    private = _owned(conn, "rara_artifacts", ("team-b",)) - _owned(
        conn, "rara_artifacts", ("team-a",)
    )
    assert private
    assert (private <= _rows(login, "rara_artifacts")) == (team == "team-b")
    # Who may see whom is not a team's to read.
    assert login.execute("SELECT count(*) FROM rara_namespace_access").fetchone() == (0,)
    assert login.execute("SELECT rara_caller_namespaces()").fetchone() == ([team],)


def test_until_isolation_is_on_every_login_reads_and_acts_everywhere(
    conn: Conn,
    two_teams: dict[str, int],
    make_role: Callable[..., str],
    login_in: Callable[..., Conn],
) -> None:
    """Isolation is the owner's switch (rara_namespace_isolation): off, a team's login is any
    client, as before 0018, and reads pay no policy."""
    client = login_in("rara_client", make_role("rara_reader", "team-a"))
    assert conn.execute("SELECT rara_namespace_isolation(false)").fetchone() == (True,)
    assert _rows(client, "rara_runs") == {str(r) for r in two_teams.values()}
    assert client.execute("SELECT rara_caller_namespaces()").fetchone() == (["*"],)
    theirs = start_run(client, "rag", namespace="team-b", queue_anyway=True).run_id
    assert client.execute("SELECT rara_run_cancel(%s)", (theirs,)).fetchone() == (True,)
    # Back on: the same login is team-a's again, and the run it started is not its to see.
    conn.execute("SELECT rara_namespace_isolation(true)")
    assert _rows(client, "rara_runs") == {str(two_teams["team-a"])}
    # Only the owner turns it.
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        client.execute("SELECT rara_namespace_isolation(false)")


def test_a_login_with_no_namespace_sees_no_tenant_row(
    two_teams: dict[str, int], login_in: Callable[..., Conn]
) -> None:
    nobody = login_in("rara_reader")
    for table in [*TENANT_TABLES, "rara_artifacts"]:
        assert _rows(nobody, table) == set(), table
    # The fleet is not a namespace's: workers and limits stay visible to every reader.
    assert nobody.execute("SELECT count(*) FROM rara_workers").fetchone() != (0,)


def test_the_fleet_roles_see_every_namespace(
    conn: Conn, two_teams: dict[str, int], login_in: Callable[..., Conn]
) -> None:
    for group in ("rara_worker", "rara_operator"):
        fleet = login_in(group)
        for table in [*TENANT_TABLES, "rara_artifacts"]:
            assert _rows(fleet, table) == _owned(conn, table, TEAMS), (group, table)


def _refused(call: Callable[[], Any], *words: str) -> None:
    with pytest.raises(psycopg.errors.InsufficientPrivilege) as refused:
        call()
    message = str(refused.value)
    assert all(w in message for w in words), message


@pytest.mark.parametrize("group", ["rara_client", "rara_operator"])
def test_a_team_login_acts_in_its_namespace_only(
    conn: Conn,
    two_teams: dict[str, int],
    make_role: Callable[..., str],
    login_in: Callable[..., Conn],
    group: str,
) -> None:
    """As a team's client, and as an operator that serves one namespace (its grant of every
    namespace removed, as a namespaced operator's deployment would)."""
    conn.execute("DELETE FROM rara_namespace_access WHERE role = %s", (group,))
    team_a = make_role("rara_reader", "team-a")
    client = login_in(group, team_a)
    me = client.execute("SELECT current_user").fetchone()[0]  # type: ignore[index]
    theirs = two_teams["team-b"]
    spec = conn.execute(
        "SELECT spec FROM rara_definition_versions WHERE namespace = 'team-b'"
    ).fetchone()[0]  # type: ignore[index]
    before = conn.execute("SELECT count(*) FROM rara_runs").fetchone()

    def call(statement: str, *params: Any) -> Any:
        return client.execute(statement.encode(), params).fetchall()

    # Acts that name team-b: refused, naming the login and the namespace.
    for statement, params in [
        (
            "SELECT * FROM rara_definition_register(p_name => 'rag', p_spec => %s,"
            " p_namespace => 'team-b')",
            (psycopg.types.json.Jsonb(spec),),
        ),
        ("SELECT rara_definition_retire(p_name => 'rag', p_namespace => 'team-b')", ()),
        (
            "SELECT * FROM rara_run_start(p_name => 'rag', p_version => NULL, p_digest => NULL,"
            " p_input => '{}', p_idempotency_key => NULL, p_check_capabilities => false,"
            " p_alive_seconds => 30, p_namespace => 'team-b')",
            (),
        ),
        (
            "SELECT rara_schedule_suspend(p_name => 'nightly', p_suspended => true,"
            " p_next_tick => now(), p_namespace => 'team-b')",
            (),
        ),
        ("SELECT rara_schedule_delete(p_name => 'nightly', p_namespace => 'team-b')", ()),
        (
            "SELECT rara_schedule_decide(p_name => 'nightly', p_ticks => '[]', p_missed => 0,"
            " p_next_tick => now(), p_namespace => 'team-b')",
            (),
        ),
        (
            "SELECT * FROM rara_trigger_apply(p_name => 'docs-landed', p_kind => 'webhook',"
            " p_definition => 'rag', p_version => NULL, p_input => '{}', p_config => '{}',"
            " p_suspended => true, p_spec => '{}', p_namespace => 'team-b')",
            (),
        ),
        (
            "SELECT rara_trigger_suspend(p_name => 'docs-landed', p_suspended => true,"
            " p_namespace => 'team-b')",
            (),
        ),
        ("SELECT rara_trigger_delete(p_name => 'docs-landed', p_namespace => 'team-b')", ()),
        (
            "SELECT * FROM rara_trigger_take(p_name => 'docs-landed', p_event_key => 'e-1',"
            " p_namespace => 'team-b')",
            (),
        ),
        (
            "SELECT * FROM rara_trigger_event_record(p_name => 'docs-landed',"
            " p_event_key => 'e-2', p_run_id => NULL, p_reason => 'x', p_namespace => 'team-b')",
            (),
        ),
        (
            "SELECT * FROM rara_trigger_batch_add(p_name => 'docs-landed', p_event_key => 'b-1',"
            " p_batch_key => '', p_input => '{}', p_window_seconds => 1,"
            " p_max_delay_seconds => 1, p_namespace => 'team-b')",
            (),
        ),
        (
            "SELECT rara_trigger_batch_close(%s, %s, NULL)",
            (
                conn.execute(
                    "SELECT id FROM rara_trigger_batches WHERE namespace = 'team-b'"
                ).fetchone()[0],  # type: ignore[index]
                theirs,
            ),
        ),
        (
            "SELECT rara_trigger_watch_decide(p_name => 'docs-changed', p_objects => '[]',"
            " p_changed => false, p_next_poll => now(), p_error => NULL,"
            " p_namespace => 'team-b')",
            (),
        ),
    ]:
        _refused(functools.partial(call, statement, *params), me, "namespace team-b")
    # What the fleet shares needs every namespace.
    _refused(lambda: call("SELECT rara_capability_limit_set('test.tally@1', 1)"), me, "whole fleet")
    # Acts that name team-b's run by id find no run: its existence and state stay unknown.
    assert call("SELECT rara_run_cancel(%s)", theirs) == [(None,)]
    # (not 'ended', which would say that it exists and has ended)
    assert call("SELECT * FROM rara_run_set_paused(%s, true)", theirs) == []
    assert call("SELECT * FROM rara_run_set_paused(%s, false)", theirs) == []
    with pytest.raises(psycopg.errors.NoDataFound, match=f"no run {theirs}"):
        call("SELECT * FROM rara_run_resume(%s, NULL)", theirs)
    # A team's firing process claims its own due schedules only.
    with client.transaction():
        claimed = call("SELECT namespace FROM rara_schedule_claim(10)")
    assert claimed == [("team-a",)]
    # A team's watcher claims its own objects triggers only.
    with client.transaction():
        watched = call("SELECT namespace FROM rara_trigger_watch_claim(10)")
    assert watched == [("team-a",)]
    # Team-b's cache entries stay; team-a's own go.
    keys = dict(
        conn.execute(
            "SELECT r.namespace, array_agg(c.key) FROM rara_step_cache c"
            " JOIN rara_runs r ON r.id = c.source_run GROUP BY r.namespace"
        ).fetchall()
    )
    if group == "rara_client":  # (operators do not drop cache entries: least-privilege.md)
        assert call("SELECT rara_step_cache_drop(%s)", keys["team-b"]) == []
        dropped = call("SELECT rara_step_cache_drop(%s)", keys["team-a"])
        assert sorted(k for (k,) in dropped) == sorted(keys["team-a"])
    # Nothing of team-b changed.
    assert conn.execute("SELECT count(*) FROM rara_runs").fetchone() == before
    assert conn.execute(
        "SELECT status::text, cancel_requested FROM rara_runs WHERE id = %s", (theirs,)
    ).fetchone() == ("succeeded", False)
    assert conn.execute(
        "SELECT count(*), bool_and(retired_at IS NULL) FROM rara_definitions"
        " WHERE namespace = 'team-b'"
    ).fetchone() == (1, True)
    assert conn.execute(
        "SELECT suspended FROM rara_schedules WHERE namespace = 'team-b'"
    ).fetchone() == (False,)
    assert conn.execute(
        "SELECT t.suspended, count(e.*) FROM rara_triggers t JOIN rara_trigger_events e"
        " ON (e.namespace, e.trigger) = (t.namespace, t.name) WHERE t.namespace = 'team-b'"
        " GROUP BY t.suspended"
    ).fetchone() == (False, 2)
    assert conn.execute(
        "SELECT count(*) FROM rara_step_cache c JOIN rara_runs r ON r.id = c.source_run"
        " WHERE r.namespace = 'team-b'"
    ).fetchone() == (len(keys["team-b"]),)
    # The same acts in its own namespace work.
    mine = start_run(client, "rag", namespace="team-a", queue_anyway=True).run_id
    assert call("SELECT * FROM rara_run_set_paused(%s, true)", mine)[0][0] == "paused"
    assert call("SELECT rara_run_cancel(%s)", mine) == [(True,)]
    assert call(
        "SELECT rara_schedule_suspend(p_name => 'nightly', p_suspended => true,"
        " p_next_tick => now(), p_namespace => 'team-a')"
    ) == [(True,)]


def test_a_worker_needs_every_namespace_while_isolated(
    conn: Conn,
    two_teams: dict[str, int],
    make_role: Callable[..., str],
    login_in: Callable[..., Conn],
) -> None:
    """Workers lease from every namespace, so a worker login limited to some is refused at
    registration, naming its role, instead of serving runs it may not read."""
    conn.execute("DELETE FROM rara_namespace_access WHERE role = 'rara_worker'")
    worker = login_in("rara_worker", make_role("rara_reader", "team-a"))
    me = worker.execute("SELECT current_user").fetchone()[0]  # type: ignore[index]
    _refused(
        lambda: worker.execute("SELECT rara_worker_register('w-team-a', ARRAY['test.noop@1'])"),
        me,
        "workers lease from every namespace",
    )
    assert conn.execute("SELECT count(*) FROM rara_workers WHERE id = 'w-team-a'").fetchone() == (
        0,
    )
    conn.execute("INSERT INTO rara_namespace_access (role, namespace) VALUES ('rara_worker', '*')")
    worker.execute("SELECT rara_worker_register('w-team-a', ARRAY['test.noop@1'])")


def test_set_role_narrows_a_login_to_the_role_it_acts_as(
    conn: Conn,
    two_teams: dict[str, int],
    make_role: Callable[..., str],
    login_in: Callable[..., Conn],
) -> None:
    """A dashboard's login is a member of every user's role and switches to one per request:
    reads and acts are then that role's, not the login's (PostgREST's pattern)."""
    alice = make_role("rara_client", "team-a")
    bob = make_role("rara_client", "team-b")
    dashboard = login_in("rara_reader", alice, bob)
    assert dashboard.execute("SELECT count(*) FROM rara_runs").fetchone() == (2,)
    with dashboard.transaction():
        dashboard.execute(sql.SQL("SET LOCAL ROLE {}").format(sql.Identifier(alice)))
        assert _rows(dashboard, "rara_runs") == {str(two_teams["team-a"])}
        assert dashboard.execute(
            "SELECT rara_run_cancel(%s)", (two_teams["team-b"],)
        ).fetchone() == (None,)
        _refused(
            lambda: start_run(dashboard, "rag", namespace="team-b", queue_anyway=True),
            alice,
            "namespace team-b",
        )
    with dashboard.transaction():
        dashboard.execute(sql.SQL("SET LOCAL ROLE {}").format(sql.Identifier(bob)))
        assert _rows(dashboard, "rara_runs") == {str(two_teams["team-b"])}


def test_each_team_computes_its_own_cache_entries(
    conn: Conn, two_teams: dict[str, int], thread_worker: Callable[..., Any]
) -> None:
    """The same cached step on the same bytes in two namespaces is computed in each (an entry
    is a team's: a secret's value behind one reference may differ between them), and reused
    within one."""
    called = {
        ns: sorted(k.split(":", 1)[1] for k in TALLY if k.startswith(f"{run}:"))
        for ns, run in two_teams.items()
    }
    assert called == {ns: ["collect", "index"] for ns in TEAMS}
    again = start_run(conn, "rag", namespace="team-b", queue_anyway=True).run_id
    assert wait_run(conn, again, timeout=60) == "succeeded"
    reused = dict(
        conn.execute(
            "SELECT key, reused_from ->> 'run' FROM rara_steps"
            " WHERE run_id = %s AND key IN ('collect', 'index')",
            (again,),
        ).fetchall()
    )
    assert reused == {"collect": str(two_teams["team-b"]), "index": str(two_teams["team-b"])}


def test_rara_access_grants_revokes_and_tells_a_login_its_namespaces(
    database_url: str,
    two_teams: dict[str, int],
    make_role: Callable[..., str],
    role_url: Callable[[str], str],
) -> None:
    owner = CliRunner(env={"DATABASE_URL": database_url, "RARA_NAMESPACE": None})
    opened = owner.invoke(app, ["access", "open"])
    assert opened.output.strip() == "isolation: off"
    assert "isolation: off" in owner.invoke(app, ["access"]).output
    isolated = owner.invoke(app, ["access", "isolate"])
    assert isolated.output.strip() == "isolation: on"
    team = make_role("rara_client")
    done = owner.invoke(app, ["access", "grant", team, "team-a", "team-b"])
    assert done.exit_code == 0, done.output
    assert f"{team}: granted team-a, team-b" in done.output
    listed = owner.invoke(app, ["access"])
    assert team in listed.output
    assert "rara_worker" in listed.output
    # A bad namespace or an unknown role: refused, naming it; nothing written.
    bad = owner.invoke(app, ["access", "grant", team, "Team_A"])
    assert bad.exit_code == 2
    assert "'Team_A' is not a namespace name" in bad.stderr
    ghost = owner.invoke(app, ["access", "grant", "t_no_such_role", "team-a"])
    assert ghost.exit_code == 2
    assert "role 't_no_such_role' does not exist" in ghost.stderr
    revoked = owner.invoke(app, ["access", "revoke", team, "team-b"])
    assert f"{team}: revoked team-b" in revoked.output

    login = role_url("rara_client")
    with psycopg.connect(database_url, autocommit=True) as admin:
        admin.execute(
            sql.SQL("GRANT {} TO {}").format(
                sql.Identifier(team),
                sql.Identifier(str(psycopg.conninfo.conninfo_to_dict(login)["user"])),
            )
        )
    user = CliRunner(env={"DATABASE_URL": login, "RARA_NAMESPACE": None})
    assert user.invoke(app, ["access", "mine"]).output.split() == ["team-a"]
    listed_runs = user.invoke(app, ["runs", "list", "-A"])
    assert listed_runs.exit_code == 0, listed_runs.output
    assert "team-b" not in listed_runs.output
    assert "team-a" in listed_runs.output
    # A start in a namespace the login may not act in: one clear line, exit 2.
    refused = user.invoke(app, ["runs", "start", "rag", "-n", "team-b", "--queue-anyway"])
    assert refused.exit_code == 2, refused.output
    assert refused.stderr.startswith("error: not permitted: role ")
    assert "may not act in namespace team-b" in refused.stderr
    # A non-owner cannot grant itself more.
    self_grant = user.invoke(app, ["access", "grant", team, "team-b"])
    assert self_grant.exit_code != 0
    assert "team-b" not in user.invoke(app, ["access", "mine"]).output
