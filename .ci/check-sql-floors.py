#!/usr/bin/env python3
"""Check that the functions of `db/functions/` stand on floors: `make lint` runs this.

`db/functions/ORDER` lists the function files lowest floor first; `rara migrate` runs them in
that order (rara.pg.migrate). This check fails when:

1. a file calls a function of a file above it (a later line of ORDER): the files then call
   each other in a circle, and nothing says which must come first. A call is a name of a
   function of `db/functions/` followed by `(`, in a function's body or in a statement of the
   file (`SELECT rara_grant(…)`, a trigger's `EXECUTE FUNCTION`), comments left out. Within
   its own file a function may call any other, except that a `LANGUAGE sql` function or a
   statement of the file may call only one defined above it: PostgreSQL resolves those names
   when the statement runs, PL/pgSQL bodies only when called;
2. a function is defined by the baseline (`db/baseline.sql`) or a migration of
   `db/migrations/` and by no function file (the retired chain of `db/retired/` is not read):
   they are history, the current definition lives in `db/functions/` (CONTRIBUTING.md,
   "Adding a migration"). A name a later migration drops (or renames) without making it
   again no longer exists and is fine. Names, not signatures, are compared: the functions of rara
   have no overloads;
3. a function is defined in two function files, or ORDER does not list each function file
   exactly once.

"The repository" is what git knows (`.ci/repository_text.py`): tracked files plus new ones it
does not ignore.

    .ci/check-sql-floors.py          check the repository this script is in
    .ci/check-sql-floors.py ROOT     check another git work tree (tests/ci/test_check_sql_floors.py)

Exit status 1 with one `path:line: problem` line per finding; 0 and one summary line when
there is none.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

from repository_text import repository_files, root_of

FUNCTIONS = "db/functions/"
MIGRATIONS = "db/migrations/"
BASELINE = "db/baseline.sql"
ORDER = FUNCTIONS + "ORDER"

DOLLAR_TAG = re.compile(r"\$(?:[^\W\d]\w*)?\$")
NAME = r"(?:\w+\.)?\"?([A-Za-z_]\w*)\"?"
CREATE = re.compile(rf"^\s*CREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION\s+{NAME}\s*\(", re.I)
DROP = re.compile(r"^\s*DROP\s+FUNCTION\s+(?:IF\s+EXISTS\s+)?", re.I)
RENAME = re.compile(rf"^\s*ALTER\s+FUNCTION\s+{NAME}\s*\(.*?\)\s*RENAME\s+TO\s+{NAME}", re.I | re.S)
LANGUAGE = re.compile(r"\bLANGUAGE\s+'?(\w+)", re.I)
CALL = re.compile(r"(?<![\w$\"])([A-Za-z_][\w$]*)\s*\(")


@dataclass
class Statement:
    file: str
    line: int
    code: str  # comments blanked out (newlines kept), literals and bodies as written
    defines: str | None = None  # the function a CREATE FUNCTION makes
    language: str | None = None


def dollar_tag(sql: str, i: int) -> str | None:
    """The `$tag$` that opens a dollar quote at ``i``, if one does (not `$1`, not `a$b`)."""
    tag = DOLLAR_TAG.match(sql, i)
    if tag is None or (i and (sql[i - 1].isalnum() or sql[i - 1] == "_")):
        return None
    return tag[0]


def quote_end(sql: str, i: int) -> int:
    """Where the `'…'` or `"…"` that opens at ``i`` ends (a doubled quote stands for itself)."""
    j = i + 1
    while j < len(sql) and not (sql[j] == sql[i] and not sql.startswith(sql[i], j + 1)):
        j += 2 if sql[j] == sql[i] else 1
    return j + 1


def blank(text: str) -> str:
    """``text`` as spaces, its newlines kept (so that line numbers still count)."""
    return re.sub(r"[^\n]", " ", text)


def code_of(sql: str) -> str:
    """``sql`` with its comments blanked out, also inside dollar-quoted bodies (a function's
    comments name other functions without calling them); string literals stay."""
    out: list[str] = []
    i, n = 0, len(sql)
    while i < n:
        if sql.startswith("--", i):
            end = sql.find("\n", i)
            end = n if end < 0 else end
            out.append(blank(sql[i:end]))
            i = end
        elif sql.startswith("/*", i):
            depth, j = 1, i + 2
            while depth and j < n:
                if sql.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif sql.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(blank(sql[i:j]))
            i = j
        elif sql[i] in "'\"":
            end = quote_end(sql, i)
            out.append(sql[i:end])
            i = end
        elif tag := dollar_tag(sql, i):
            end = sql.find(tag, i + len(tag))
            end = n if end < 0 else end
            out.append(tag + code_of(sql[i + len(tag) : end]) + tag)
            i = end + len(tag)
        else:
            out.append(sql[i])
            i += 1
    return "".join(out)


def split(file: str, sql: str) -> list[Statement]:
    """The statements of ``sql`` (a file), each with the line it starts on."""
    code = code_of(sql)
    statements: list[Statement] = []
    start, i, n = 0, 0, len(code)
    while i <= n:
        if i == n or code[i] == ";":
            text = code[start:i]
            if text.strip():
                lead = len(text) - len(text.lstrip())
                line = code.count("\n", 0, start + lead) + 1
                statements.append(Statement(file, line, text.strip()))
            start, i = i + 1, i + 1
        elif code[i] in "'\"":
            i = quote_end(code, i)
        elif tag := dollar_tag(code, i):
            end = code.find(tag, i + len(tag))
            i = n if end < 0 else end + len(tag)
        else:
            i += 1
    for statement in statements:
        created = CREATE.match(statement.code)
        if created:
            statement.defines = created[1]
            header = DOLLAR_TAG.split(statement.code)[0::2]  # outside the body
            language = LANGUAGE.search(" ".join(header))
            statement.language = language[1].lower() if language else None
    return statements


def dropped(statement: Statement) -> list[str]:
    """Names a DROP FUNCTION statement drops (each `name(` at the outer level)."""
    head = DROP.match(statement.code)
    if not head:
        return []
    names, depth, rest = [], 0, statement.code[head.end() :]
    for match in re.finditer(r"[()]|[A-Za-z_]\w*(?=\s*\()", rest):
        if match[0] == "(":
            depth += 1
        elif match[0] == ")":
            depth -= 1
        elif depth == 0:
            names.append(match[0])
    return names


def calls(statement: Statement, known: set[str]) -> list[str]:
    """The functions of ``known`` that ``statement`` calls, first call first (a definition's
    own name is no call)."""
    found: list[str] = []
    for match in CALL.finditer(statement.code):
        name = match[1]
        if name in known and name != statement.defines and name not in found:
            found.append(name)
    return found


def read_order(root: Path, files: list[str], findings: list[str]) -> list[str]:
    sql_files = sorted(f for f in files if f.startswith(FUNCTIONS) and f.endswith(".sql"))
    if ORDER not in files:
        findings.append(f"{ORDER}:1: missing: it lists the function files, lowest floor first")
        return sql_files
    order: list[str] = []
    for number, line in enumerate((root / ORDER).read_text().splitlines(), start=1):
        name = line.split("#", 1)[0].strip()
        if not name:
            continue
        path = FUNCTIONS + name
        if path in order:
            findings.append(f"{ORDER}:{number}: {name} is listed twice")
        elif path not in sql_files:
            findings.append(f"{ORDER}:{number}: {name} is no file of {FUNCTIONS}")
        else:
            order.append(path)
    for path in sql_files:
        if path not in order:
            findings.append(f"{ORDER}:1: {path} is not listed: give it its floor")
            order.append(path)
    return order


def check(root: Path) -> list[str]:
    files = repository_files(root)
    findings: list[str] = []
    order = read_order(root, files, findings)
    floor = {path: number for number, path in enumerate(order, start=1)}

    # Where each function of db/functions/ is defined.
    home: dict[str, Statement] = {}
    statements: dict[str, list[Statement]] = {}
    for path in order:
        statements[path] = split(path, (root / path).read_text())
        for statement in statements[path]:
            name = statement.defines
            if name is None:
                continue
            if name in home and home[name].file != path:
                findings.append(
                    f"{path}:{statement.line}: {name} is defined in {home[name].file} too: "
                    "one home for each function"
                )
                continue
            home.setdefault(name, statement)

    # 1. Each file calls only its own functions and those of the files below it.
    known = set(home)
    for path in order:
        for statement in statements[path]:
            caller = statement.defines or "a statement of the file"
            for callee in calls(statement, known):
                where = home[callee]
                if floor[where.file] > floor[path]:
                    findings.append(
                        f"{path}:{statement.line}: {caller} calls {callee} of {where.file}, a "
                        f"floor above it ({ORDER}: floor {floor[path]} calls floor "
                        f"{floor[where.file]}): move one of them so that files call only "
                        "files below them"
                    )
                elif (
                    where.file == path
                    and (statement.defines is None or statement.language == "sql")
                    and where.line > statement.line
                ):
                    findings.append(
                        f"{path}:{statement.line}: {caller} calls {callee}, defined below it "
                        f"(line {where.line}): a LANGUAGE sql body or a statement of the file "
                        "resolves its names when it runs, so define the callee first"
                    )

    # 2. What the migrations leave: each function they make and no later one drops.
    alive: dict[str, Statement] = {}
    migrations = sorted(f for f in files if f.startswith(MIGRATIONS) and f.endswith(".sql"))
    for path in [BASELINE] * (BASELINE in files) + migrations:
        for statement in split(path, (root / path).read_text()):
            if statement.defines:
                alive[statement.defines] = statement
            for name in dropped(statement):
                alive.pop(name, None)
            renamed = RENAME.match(statement.code)
            if renamed and renamed[1] in alive:
                alive[renamed[2]] = statement
                del alive[renamed[1]]
    for name, statement in sorted(alive.items()):
        if name not in home:
            findings.append(
                f"{statement.file}:{statement.line}: {name} is defined here and in no file of "
                f"{FUNCTIONS}: put its current definition, with its rara_grant, in the function "
                "file of its floor"
            )
    return findings


def main(argv: list[str]) -> int:
    findings = check(root_of(argv))
    for finding in findings:
        print(finding)
    if findings:
        print(f"{len(findings)} problem(s) with the floors of {FUNCTIONS}")
        return 1
    print(f"sql floors: each file of {FUNCTIONS} calls only files below it ({ORDER})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
