#!/usr/bin/env python3
"""Check that every query name the prose mentions is a statement of `db/queries/`: `make lint`
runs this.

The names are those of the `-- name:` lines of `db/queries/*.sql` (rara.pg.queries loads them
as one name space, each name object first, then verb: `step_lease`, `run_cancel`). A statement
that is renamed or becomes a function of `db/functions/` leaves its old name behind in
docstrings and docs, where no test reads it; this check does.

A *query name mention* is, precisely:

1. in prose, a snake_case word whose first word is an object of the name space and whose last
   word is a verb of it: the first and last words of the names in `db/queries/` (objects:
   `run`, `step`, `ui`, …; verbs: `lease`, `list`, `many`, `get`, …; not a last word after
   `by`, the argument of `run_get_by_key`). Bare or in backticks, alone or before `(`; not
   part of a longer word, a dotted name or a path (`rara_step_lease`, a function of
   db/functions/; `runs.run_start`; `db/queries/runs.sql`). So `run_id`, `step_key`,
   `database_url` and `run_conformance` are no mentions (a column, a field, a setting, a
   function). Prose is: a Markdown file outside its fenced blocks, the docstrings and
   comments of a Python file, the comments of `db/queries/` and `db/functions/`;
2. in code (a Markdown fenced block, a Python file), a call of the loader with the name as a
   string: `sql("step_lease")`, and `one`, `many`, `value`, `run` and their async forms
   (`amany(conn, "ui_run_page", ...)`), where the name's first word is an object.

Not read: the migrations of `db/migrations/`. They are applied and checksummed, never edited,
and may name what was current when they were written. A page telling history names what was
then in words, not by a name that no longer exists.

"The repository" is what git knows (`.ci/repository_text.py`): tracked files plus new ones it
does not ignore.

    .ci/check-query-names.py        check the repository this script is in
    .ci/check-query-names.py ROOT   check another git work tree (tests/ci/test_check_query_names.py)

Exit status 1 with one `path:line: problem` line per finding; 0 and one summary line when
there is none.
"""

from __future__ import annotations

import ast
import io
import re
import sys
import tokenize
from collections.abc import Iterator
from pathlib import Path

from repository_text import markdown_lines, repository_files, root_of, text_files

QUERY_FOLDER = "db/queries/"
FUNCTION_FOLDER = "db/functions/"
NAME_LINE = re.compile(r"(?m)^-- name: ([a-z][a-z0-9_]*)")
# A snake_case word on its own: not inside a longer word, after a dot or a slash (a module's
# attribute, a path), nor before `.x` or `/` (a file name, a folder).
WORD = re.compile(r"(?<![\w./-])([a-z][a-z0-9]*(?:_[a-z0-9]+)+)(?![\w/-]|\.\w)")
LOADER_CALL = re.compile(
    r"\b(?:sql|a?one|a?many|a?value|a?run)\(\s*(?:[\w.]+\s*,\s*)?[\"']([a-z][a-z0-9_]*)[\"']"
)
SQL_COMMENT = re.compile(r"--(.*)$")


class NameSpace:
    """The query names of db/queries/ and the words a mention of one is recognised by."""

    def __init__(self, names: set[str]) -> None:
        self.names = names
        self.objects = {name.split("_")[0] for name in names}
        # A last word after `by` names an argument, not the statement's verb: `key` of
        # `run_get_by_key` would make `step_key` (a field) look like a name.
        self.verbs = {
            words[-1]
            for words in (name.split("_") for name in names)
            if len(words) < 3 or words[-2] != "by"
        }

    def spelled_like_a_name(self, word: str) -> bool:
        words = word.split("_")
        return words[0] in self.objects and words[-1] in self.verbs

    def mentions(self, prose: str, code: str) -> Iterator[str]:
        for match in WORD.finditer(prose):
            if self.spelled_like_a_name(match.group(1)):
                yield match.group(1)
        for call in LOADER_CALL.finditer(code):
            if call.group(1).split("_")[0] in self.objects:
                yield call.group(1)


def name_space(root: Path, files: list[str]) -> NameSpace:
    names: set[str] = set()
    for name in files:
        if name.startswith(QUERY_FOLDER) and name.endswith(".sql"):
            names.update(NAME_LINE.findall((root / name).read_text(encoding="utf-8")))
    return NameSpace(names)


# (line number, prose, code) of a file: what is read for rule 1 and for rule 2 of the docstring.
Lines = Iterator[tuple[int, str, str]]


def markdown_prose_and_code(text: str) -> Lines:
    for number, line, fenced in markdown_lines(text):
        yield (number, "", line) if fenced else (number, line, "")


def python_lines(text: str) -> Lines:
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                for offset, line in enumerate(first.value.value.splitlines()):
                    yield first.lineno + offset, line, ""
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string, ""
    for number, line in enumerate(text.splitlines(), start=1):
        yield number, "", line


def sql_lines(text: str) -> Lines:
    for number, line in enumerate(text.splitlines(), start=1):
        comment = SQL_COMMENT.search(line)
        if comment:
            yield number, comment.group(1), ""


def lines_of(name: str, text: str) -> Lines:
    if name.endswith(".md"):
        return markdown_prose_and_code(text)
    if name.endswith(".py"):
        return python_lines(text)
    if name.endswith(".sql") and name.startswith((QUERY_FOLDER, FUNCTION_FOLDER)):
        return sql_lines(text)
    return iter(())


def check(root: Path) -> list[str]:
    files = repository_files(root)
    space = name_space(root, files)
    if not space.names:
        return [f"{QUERY_FOLDER}: no `-- name:` line found: nothing to check against"]
    findings: list[str] = []
    for name, text in text_files(root, files):
        seen: set[tuple[int, str]] = set()
        for number, prose, code in lines_of(name, text):
            for mention in space.mentions(prose, code):
                if mention not in space.names and (number, mention) not in seen:
                    seen.add((number, mention))
                    findings.append(
                        f"{name}:{number}: `{mention}` is no statement of "
                        f"{QUERY_FOLDER} (renamed, or a function now?)"
                    )
    return sorted(findings)


def main(argv: list[str]) -> int:
    findings = check(root_of(argv))
    for finding in findings:
        print(finding)
    if findings:
        print(f"{len(findings)} query name problem(s): name a statement that exists")
        return 1
    print("query names: every statement the prose names is in db/queries/")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
