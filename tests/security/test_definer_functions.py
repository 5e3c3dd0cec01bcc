"""Owner code runs only where the owner means it to (migration 0012, docs/least-privilege.md).

A SECURITY DEFINER function runs as the owner of the schema. The attack that found the hole:
a login with no rara role made temporary tables named like rara's, attached a trigger running
0004's definer trigger function to one of them (PUBLIC could execute it) and gave the other a
trigger of its own; the definer function's search_path searched pg_temp first, so its DELETE
hit the temporary table, whose trigger then ran as the owner — a superuser. The catalog walk
below keeps every later migration from reopening it; the attacks are tried for real, as every
role and as a login with none.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from tests.support.roles import ROLES

Denied = psycopg.errors.InsufficientPrivilege
Login = Callable[[str | None], psycopg.Connection[Any]]


def _functions(conn: psycopg.Connection[Any]) -> list[tuple[str, bool, bool, list[str] | None]]:
    """(signature, security definer, returns trigger, proconfig) of every function of rara's
    schema."""
    return conn.execute(
        "SELECT p.oid::regprocedure::text, p.prosecdef, p.prorettype = 'trigger'::regtype,"
        "       p.proconfig"
        " FROM pg_proc p WHERE p.pronamespace = current_schema()::regnamespace"
        " ORDER BY 1"
    ).fetchall()


def test_no_function_of_the_schema_is_executable_by_public(conn: psycopg.Connection[Any]) -> None:
    found = _functions(conn)
    assert len(found) > 30
    public = [
        sig
        for sig, *_ in found
        if conn.execute(
            "SELECT has_function_privilege('public', %s::regprocedure, 'EXECUTE')", (sig,)
        ).fetchone()
        == (True,)
    ]
    assert public == []


def test_every_definer_function_resolves_in_the_schema_then_pg_temp(
    conn: psycopg.Connection[Any],
) -> None:
    schema = conn.execute("SELECT current_schema()").fetchone()[0]  # type: ignore[index]
    definers = [(sig, config) for sig, definer, _, config in _functions(conn) if definer]
    assert len(definers) >= 15
    wrong = [
        (sig, config)
        for sig, config in definers
        if f"search_path={schema}, pg_temp" not in (config or [])
    ]
    assert wrong == []
    # Nobody but the owner may put an object into a schema the definers search.
    assert conn.execute(
        "SELECT has_schema_privilege('public', current_schema(), 'CREATE')"
    ).fetchone() == (False,)


def test_trigger_functions_are_executable_by_no_role(conn: psycopg.Connection[Any]) -> None:
    triggers = [sig for sig, _, is_trigger, _ in _functions(conn) if is_trigger]
    assert "rara_delete_attempts_of_deleted_steps()" in triggers
    granted = [
        (sig, role)
        for sig in triggers
        for role in ("public", *ROLES)
        if conn.execute(
            "SELECT has_function_privilege(%s, %s::regprocedure, 'EXECUTE')", (role, sig)
        ).fetchone()
        == (True,)
    ]
    assert granted == []


def test_functions_made_later_are_not_executable_by_public(conn: psycopg.Connection[Any]) -> None:
    """The migrating role's default privileges (0007): a function the next migration makes
    starts with no EXECUTE for PUBLIC."""
    conn.execute("CREATE FUNCTION rara_made_later() RETURNS int LANGUAGE sql AS 'SELECT 1'")
    assert conn.execute(
        "SELECT has_function_privilege('public', 'rara_made_later()', 'EXECUTE')"
    ).fetchone() == (False,)


@pytest.mark.parametrize("group", [None, "rara_reader", "rara_worker"])
def test_a_temp_table_trigger_cannot_borrow_the_owner(
    conn: psycopg.Connection[Any], login: Login, group: str | None
) -> None:
    """The escalation itself, step by step; every step that PostgreSQL refuses is the fix
    holding. At the end the login is no superuser and the attempt history is whole."""
    conn.execute(
        "INSERT INTO rara_attempts (step_id, attempt, run_id, worker, lease_token)"
        " VALUES (1, 1, 1, 'w', gen_random_uuid())"
    )
    history = conn.execute("SELECT count(*) FROM rara_attempts").fetchone()
    attacker = login(group)
    me = attacker.execute("SELECT current_user").fetchone()[0]  # type: ignore[index]
    steps = [
        "CREATE TEMP TABLE rara_steps (id bigint)",
        "CREATE TEMP TABLE rara_attempts (step_id bigint)",
        f"CREATE FUNCTION pg_temp.escalate() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
        f" EXECUTE 'ALTER ROLE {me} SUPERUSER'; EXECUTE 'DELETE FROM public.rara_attempts';"
        f" RETURN NULL; END $$",
        "CREATE TRIGGER escalate AFTER DELETE ON pg_temp.rara_attempts"
        " FOR EACH STATEMENT EXECUTE FUNCTION pg_temp.escalate()",
        "CREATE TRIGGER borrow AFTER DELETE ON pg_temp.rara_steps REFERENCING OLD TABLE AS gone"
        " FOR EACH STATEMENT EXECUTE FUNCTION public.rara_delete_attempts_of_deleted_steps()",
        "INSERT INTO pg_temp.rara_steps VALUES (1)",
        "INSERT INTO pg_temp.rara_attempts VALUES (1)",
        "DELETE FROM pg_temp.rara_steps",
    ]
    refused = []
    for statement in steps:
        try:
            attacker.execute(statement)
        except psycopg.Error as exc:
            refused.append((statement.split(" AFTER")[0][:40], type(exc).__name__))
    assert ("CREATE TRIGGER borrow", "InsufficientPrivilege") in refused
    assert conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = %s", (me,)).fetchone() == (
        False,
    )
    assert conn.execute("SELECT count(*) FROM rara_attempts").fetchone() == history


@pytest.mark.parametrize("group", [None, *ROLES])
def test_no_login_builds_a_trigger_on_a_definer_function(
    conn: psycopg.Connection[Any], login: Login, group: str | None
) -> None:
    definers = [sig for sig, definer, _, _ in _functions(conn) if definer]
    attacker = login(group)
    attacker.execute("CREATE TEMP TABLE bait (id bigint)")
    built = []
    for sig in definers:
        name = sig.split("(")[0]
        try:
            with attacker.transaction():
                attacker.execute(
                    f"CREATE TRIGGER t AFTER INSERT ON pg_temp.bait"
                    f" FOR EACH STATEMENT EXECUTE FUNCTION {name}()"
                )
            built.append(sig)
        except (
            Denied,
            psycopg.errors.UndefinedFunction,
            psycopg.errors.WrongObjectType,
            psycopg.errors.InvalidObjectDefinition,
        ):
            pass  # no right to it, or not a trigger function: either way no trigger
    assert built == []


@pytest.mark.parametrize("group", [None, *ROLES])
def test_temp_tables_shadow_nothing_a_definer_function_touches(
    conn: psycopg.Connection[Any], login: Login, group: str | None
) -> None:
    """Every table of the schema shadowed by a temporary one whose writes are logged, then
    every function the login may execute called (NULL arguments: each statement still runs,
    and a statement-level trigger fires on zero rows): no write reaches a shadow."""
    tables = [
        t
        for (t,) in conn.execute(
            "SELECT c.relname FROM pg_class c WHERE c.relnamespace = current_schema()::regnamespace"
            " AND c.relkind IN ('r', 'p') ORDER BY 1"
        )
    ]
    attacker = login(group)
    attacker.execute("SET statement_timeout = '5s'")
    attacker.execute("CREATE TEMP TABLE hits (tab text, op text)")
    attacker.execute(
        "CREATE FUNCTION pg_temp.hit() RETURNS trigger LANGUAGE plpgsql AS $$"
        " BEGIN INSERT INTO pg_temp.hits VALUES (TG_TABLE_NAME, TG_OP);"
        " RETURN NULL; END $$"
    )
    for table in tables:
        attacker.execute(f"CREATE TEMP TABLE {table} (id bigint)")
        attacker.execute(
            f"CREATE TRIGGER hit AFTER INSERT OR UPDATE OR DELETE ON pg_temp.{table}"
            f" FOR EACH STATEMENT EXECUTE FUNCTION pg_temp.hit()"
        )
    callable_ = attacker.execute(
        "SELECT p.oid::regprocedure::text, p.proname,"
        "       array(SELECT format_type(t, NULL) FROM unnest(p.proargtypes) AS t)"
        " FROM pg_proc p WHERE p.pronamespace = 'public'::regnamespace"
        "  AND p.prorettype <> 'trigger'::regtype AND has_function_privilege(p.oid, 'EXECUTE')"
        " ORDER BY 1"
    ).fetchall()
    if group is None:
        assert callable_ == []
    for _, name, types in callable_:
        args = ", ".join(f"NULL::{t}" for t in types)
        try:
            with attacker.transaction():
                attacker.execute(f"SELECT public.{name}({args})")
        except psycopg.errors.QueryCanceled:
            pytest.fail(f"{name} ran past the statement timeout")
        except psycopg.Error:
            pass  # NULL arguments may be refused; what matters is where the writes went
    assert attacker.execute("SELECT * FROM pg_temp.hits").fetchall() == []
