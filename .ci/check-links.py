#!/usr/bin/env python3
"""Check that the repository stands alone: `make lint` runs this.

1. No file names `../` + `shared`, a folder beside the repository on the project's machines:
   a clone has no such folder, so what the repository needs from it is written in the
   repository itself.
2. Every relative link in a Markdown file (`[text](path)`, `![alt](path)`, `[id]: path`)
   resolves to a file or folder of the repository, and never above its root. A path in
   backticks that starts with `../` may not climb above the root either.
3. A path to a Markdown file with a folder in it (`docs/operator.md`, `../README.md`), named in
   a Markdown file or in a comment (`#`, `--`, `//`) of any other file, is a file of the
   repository, from its root or from the folder of the file that names it. Strings in code
   are skipped: a program's paths ("b/two.md" in a test's temporary folder) are its own.

"The repository" is what git knows (`.ci/repository_text.py`): tracked files plus new ones it
does not ignore, so an ignored file on this machine (`.rara/`, `.venv/`) does not make a link
good. Links inside fenced code blocks and code spans are examples, not links, and are skipped.

    .ci/check-links.py          check the repository this script is in
    .ci/check-links.py ROOT     check another git work tree (tests/ci/test_check_links.py)

Exit status 1 with one `path:line: problem` line per finding; 0 and one summary line when
there is none.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path, PurePosixPath
from urllib.parse import unquote

from repository_text import markdown_lines, repository_files, root_of, text_files

# Written so that this file does not match itself.
OUTSIDE_FOLDER = re.compile(r"\.\./+shared\b")
# [text](target) and ![alt](target), with an optional "title"; <target> allowed.
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_LINK = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
# docs/operator.md, ../README.md: a Markdown path with at least one folder, not part of a
# longer word, a URL or an absolute path.
MARKDOWN_PATH = re.compile(r"(?<![\w/.:-])((?:\.\.?/)*[\w.-]+(?:/[\w.-]+)+\.md)\b")
# Where a comment starts in the languages of the repository (Python, shell, YAML, Makefile,
# SQL, Go): its marker at the start of the line or after a space, then a space.
COMMENT = re.compile(r"(?:^|\s)(?:#|--|//)(?:\s|$)")


def folders_of(files: list[str]) -> set[str]:
    folders = {""}
    for name in files:
        folders.update(str(parent) for parent in PurePosixPath(name).parents if str(parent) != ".")
    return folders


def resolve(source: str, target: str) -> str | None:
    """The repository path `target` names from the file `source`; None when above the root."""
    parts: list[str] = []
    for part in [*PurePosixPath(source).parent.parts, *target.split("/")]:
        if part in ("", "."):
            continue
        if part == "..":
            if not parts:
                return None
            parts.pop()
        else:
            parts.append(part)
    return "/".join(parts)


def prose_of(source: str, line: str) -> str:
    """The part of a line that people read: all of it in Markdown, else its comment."""
    if source.endswith(".md"):
        return line
    comment = COMMENT.search(line)
    return line[comment.end() :] if comment else ""


def named_markdown_problems(source: str, line: str, known: set[str]) -> list[str]:
    problems = []
    for match in MARKDOWN_PATH.finditer(prose_of(source, line)):
        path = match.group(1)
        if resolve("", path) in known or resolve(source, path) in known:
            continue
        problems.append(f"names {path}, which is no file of the repository")
    return problems


def markdown_problems(source: str, text: str, known: set[str]) -> list[tuple[int, str]]:
    problems: list[tuple[int, str]] = []
    for number, line, fenced in markdown_lines(text):
        if fenced:
            continue
        for span in CODE_SPAN.finditer(line):
            code = span.group(2).strip()
            if code.startswith("../") and resolve(source, code) is None:
                problems.append((number, f"`{code}` is a path above the repository's root"))
        prose = CODE_SPAN.sub("", line)
        targets = [m.group(1) for m in INLINE_LINK.finditer(prose)]
        reference = REFERENCE_LINK.match(prose)
        if reference:
            targets.append(reference.group(1))
        for target in targets:
            path = unquote(target.split("#", 1)[0].split("?", 1)[0])
            if not path or SCHEME.match(target) or target.startswith("/"):
                continue  # an anchor in this page, a URL, or a site-absolute path
            resolved = resolve(source, path)
            if resolved is None:
                problems.append((number, f"link {target} points above the repository's root"))
            elif resolved not in known:
                problems.append(
                    (number, f"link {target}: no file or folder {resolved} in the repository")
                )
    return problems


def check(root: Path) -> list[str]:
    files = repository_files(root)
    known = set(files) | folders_of(files)
    findings: list[str] = []
    for name, text in text_files(root, files):
        for number, line in enumerate(text.splitlines(), start=1):
            if OUTSIDE_FOLDER.search(line):
                findings.append(
                    f"{name}:{number}: names a folder outside the repository "
                    f"(write what it says here instead): {line.strip()[:120]}"
                )
            findings += [
                f"{name}:{number}: {problem}"
                for problem in named_markdown_problems(name, line, known)
            ]
        if name.endswith(".md"):
            findings += [
                f"{name}:{number}: {problem}"
                for number, problem in markdown_problems(name, text, known)
            ]
    return findings


def main(argv: list[str]) -> int:
    findings = check(root_of(argv))
    for finding in findings:
        print(finding)
    if findings:
        print(f"{len(findings)} link problem(s): the repository must stand alone")
        return 1
    print("links: every relative link resolves inside the repository")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
