"""Collect text documents and clean them into deduplicated, overlapping passages.

Why this shape: retrieval quality and evaluation honesty both depend on passages being built
from whole sentences (a query sentence is then either wholly inside a passage or not at all,
see ``evaluate``), and artifact digests depend on every step being deterministic — documents
are sorted by id, ids derive from content, and nothing reads the clock or an unseeded RNG.

Two built-in corpora ship with every CPython, so the pipeline needs no download:

* ``pydoc``: ``pydoc_data.topics.topics``, the help topics (79 documents, ~65k words);
* ``stdlib``: the docstrings of the standard library's public modules, classes and functions,
  read from source with ``ast`` (nothing is imported, so no module's import side effects run
  and none can fail to import): one document per module, ~600 modules, ~250k words. It
  depends on the Python version (3.11's library is not 3.12's), and only on that.
"""

from __future__ import annotations

import ast
import hashlib
import itertools
import json
import re
import sysconfig
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

DEFAULT_SUFFIXES = (".txt", ".md", ".rst", ".jsonl")  # .jsonl: documents, one per line


class CorpusError(ValueError):
    """The corpus cannot be collected or cleaned; ``path`` names the culprit when there is one."""

    def __init__(self, message: str, path: str | Path | None = None) -> None:
        self.path = None if path is None else str(path)
        super().__init__(f"{message}: {self.path}" if self.path is not None else message)


@dataclass(frozen=True, slots=True)
class Document:
    id: str
    text: str
    source: str


@dataclass(frozen=True, slots=True)
class Passage:
    id: str  # "p" + first 16 hex of sha256(text): stable across runs and machines
    doc_id: str
    ordinal: int  # position of the passage within its document (before deduplication)
    text: str
    sha256: str


def pydoc_topics() -> list[Document]:
    """The default demo corpus: CPython's own help topics (about 80 documents, 65k words)."""
    from pydoc_data.topics import topics

    return [
        Document(id=f"pydoc:{key}", text=text, source=f"pydoc_data.topics:{key}")
        for key, text in sorted(topics.items())
    ]


#: Parts of the library that are tests, demos, tools or vendored: not documentation.
_STDLIB_SKIP = frozenset(
    {
        "test",
        "tests",
        "idle_test",
        "idlelib",
        "turtledemo",
        "site-packages",
        "lib2to3",
        "ensurepip",
        "pydoc_data",
        "encodings",
        "__pycache__",
        "__phello__",
        "this",
    }
)


def stdlib_modules(root: str | Path | None = None) -> list[tuple[str, Path]]:
    """(dotted name, source file) of the public pure-Python standard library, sorted by name.

    Public: no component of the dotted name starts with ``_`` (``_pydecimal``, ``_pyio``
    duplicate their public twins); tests, demos and tools (``_STDLIB_SKIP``) are left out.
    """
    base = Path(root or sysconfig.get_paths()["stdlib"])
    out: dict[str, Path] = {}
    for path in base.rglob("*.py"):
        rel = path.relative_to(base).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if not parts or any(p.startswith("_") or p in _STDLIB_SKIP or "-" in p for p in parts):
            continue
        if any(p in _STDLIB_SKIP for p in rel.parts):
            continue
        out[".".join(parts)] = path
    return sorted(out.items())


def _docstrings(tree: ast.Module, module: str) -> Iterator[str]:
    """``Module m.`` then ``Class m.C.`` / ``Function m.C.f.`` + docstring, in source order.

    The label is a sentence of its own (capitalised, full stop, two words): passages say what
    they document, and the label is never picked as a query (``evaluate`` wants 6+ words).
    """
    doc = ast.get_docstring(tree)
    if doc:
        yield f"Module {module}. {doc}"

    def walk(body: list[ast.stmt], prefix: str) -> Iterator[str]:
        for node in body:
            if not isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            if node.name.startswith("_"):
                continue  # private (and dunder) names: implementation notes, not docs
            name = f"{prefix}.{node.name}"
            text = ast.get_docstring(node)
            kind = "Class" if isinstance(node, ast.ClassDef) else "Function"
            if text:
                yield f"{kind} {name}. {text}"
            if isinstance(node, ast.ClassDef):
                yield from walk(node.body, name)

    yield from walk(tree.body, module)


def stdlib_docstrings(root: str | Path | None = None) -> list[Document]:
    """The standard library's docstrings, one document per module (``stdlib:<module>``).

    Read with ``ast``, never imported. A module that does not parse, or has no public
    docstring, is skipped. Each docstring is a paragraph opened by the qualified name it
    documents, so a passage says what it is about.
    """
    docs: list[Document] = []
    for module, path in stdlib_modules(root):
        try:
            tree = ast.parse(path.read_bytes(), filename=str(path))
        except (SyntaxError, ValueError, OSError):
            continue
        paragraphs = list(_docstrings(tree, module))
        if paragraphs:
            text = "\n\n".join(paragraphs)
            docs.append(Document(id=f"stdlib:{module}", text=text, source=f"{path.name}:{module}"))
    return docs


#: The corpora ``builtin`` knows (``--input '{"corpus": ...}'``).
BUILTIN = ("pydoc", "stdlib", "python")


def builtin(name: str = "pydoc") -> list[Document]:
    """A built-in corpus by name: ``pydoc``, ``stdlib``, or ``python`` (both), sorted by id."""
    if name == "pydoc":
        return pydoc_topics()
    if name == "stdlib":
        return stdlib_docstrings()
    if name == "python":
        return sorted(pydoc_topics() + stdlib_docstrings(), key=lambda d: d.id)
    raise CorpusError(f"unknown corpus {name!r} (known: {', '.join(BUILTIN)})")


def collect(
    paths: str | Path | Sequence[str | Path] | None = None,
    *,
    suffixes: Sequence[str] = DEFAULT_SUFFIXES,
    corpus: str = "pydoc",
) -> list[Document]:
    """Read UTF-8 text files (directories are walked for ``suffixes``) into documents; a
    ``.jsonl`` file holds many, one JSON object per line (``documents_from_jsonl``).

    ``None`` returns the built-in corpus named by ``corpus`` (``builtin``). Document ids are
    paths relative to the directory they were found under (or the path as given for a file),
    sorted, so the result does not depend on the file system's listing order.
    """
    if paths is None:
        return builtin(corpus)
    items = [paths] if isinstance(paths, str | Path) else list(paths)
    if not items:
        raise CorpusError("no corpus paths given")
    found: dict[str, Path] = {}
    for item in items:
        root = Path(item)
        if root.is_dir():
            files = sorted(
                p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in suffixes
            )
            if not files:
                raise CorpusError(f"no {'/'.join(suffixes)} files in directory", root)
            for f in files:
                found.setdefault(f.relative_to(root).as_posix(), f)
        elif root.is_file():
            found.setdefault(root.as_posix(), root)
        else:
            raise CorpusError("corpus path does not exist", root)
    docs: list[Document] = []
    for doc_id in sorted(found):
        path = found[doc_id]
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = f"cannot read corpus file ({exc.__class__.__name__}: {exc})"
            raise CorpusError(reason, path) from exc
        if path.suffix.lower() == ".jsonl":
            docs.extend(documents_from_jsonl(text, path))
        elif text.strip():
            docs.append(Document(id=doc_id, text=text, source=str(path)))
    docs.sort(key=lambda d: d.id)
    if len({d.id for d in docs}) != len(docs):
        dup = next(d.id for a, d in itertools.pairwise(docs) if a.id == d.id)
        raise CorpusError(f"document id {dup!r} is given twice")
    if not docs:
        culprit = items[0] if len(items) == 1 else None
        raise CorpusError("corpus is empty (every file is blank)", culprit)
    return docs


def documents_to_jsonl(docs: Iterable[Document]) -> bytes:
    """Documents as JSON lines (``{"id", "text", "source"}``): what ``collect`` reads back
    from a ``.jsonl`` file, ids and all."""
    return b"".join(
        json.dumps(asdict(d), sort_keys=True, ensure_ascii=False).encode() + b"\n" for d in docs
    )


def documents_from_jsonl(text: str, path: Path) -> list[Document]:
    """The documents of a ``.jsonl`` file, one JSON object per line with a string ``id`` and
    ``text`` (``source`` optional: the file and line by default); blank texts are skipped."""
    docs = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise CorpusError(f"line is not JSON ({exc.msg})", where) from exc
        if not isinstance(row, dict) or not all(
            isinstance(row.get(k), str) for k in ("id", "text")
        ):
            raise CorpusError('line needs a string "id" and a string "text"', where)
        if row["text"].strip():
            source = row["source"] if isinstance(row.get("source"), str) else where
            docs.append(Document(id=row["id"], text=row["text"], source=source))
    return docs


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_UNDERLINE = re.compile(r"^\s*([=\-*~^\"'`#+.])\1{2,}\s*$")  # RST heading underlines
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])")


def normalise(text: str) -> str:
    """NFKC, unify newlines, drop control characters and heading underlines; keep paragraphs."""
    text = unicodedata.normalize("NFKC", text).replace("\r\n", "\n").replace("\r", "\n")
    text = _CONTROL.sub(" ", text.replace("\t", " "))
    lines = ["" if _UNDERLINE.match(line) else line for line in text.split("\n")]
    paragraphs = re.split(r"\n\s*\n", "\n".join(lines))
    return "\n\n".join(p for p in (" ".join(p.split()) for p in paragraphs) if p)


def split_sentences(text: str) -> list[str]:
    """Split normalised text into sentences: at paragraph breaks and after . ! ? + capital."""
    out: list[str] = []
    for paragraph in text.split("\n\n"):
        out.extend(s for s in (s.strip() for s in _SENTENCE_END.split(paragraph)) if s)
    return out


def _pieces(sentences: Iterable[str], max_words: int) -> list[list[str]]:
    """Sentences as word lists; a sentence longer than ``max_words`` (code, tables) is cut."""
    out: list[list[str]] = []
    for sentence in sentences:
        words = sentence.split()
        out.extend(words[i : i + max_words] for i in range(0, len(words), max_words))
    return out


def chunk(text: str, *, words: int = 100, overlap: int = 20) -> list[str]:
    """Pack whole sentences into passages of about ``words`` words.

    Each passage after the first starts with the previous passage's trailing sentences
    (at most ``overlap`` words), so a fact cut at a boundary is still whole somewhere.
    """
    if words < 1 or not 0 <= overlap < words:
        raise ValueError(f"need words >= 1 and 0 <= overlap < words, got {words=} {overlap=}")
    pieces = _pieces(split_sentences(normalise(text)), words)
    passages: list[str] = []
    current: list[list[str]] = []
    count = 0
    fresh = 0  # pieces in `current` not carried over from the previous passage
    for piece in pieces:
        if current and fresh and count + len(piece) > words:
            passages.append(" ".join(" ".join(p) for p in current))
            carried: list[list[str]] = []
            carried_words = 0
            for prev in reversed(current):
                if carried_words + len(prev) > overlap:
                    break
                carried.insert(0, prev)
                carried_words += len(prev)
            current, count, fresh = carried, carried_words, 0
        current.append(piece)
        count += len(piece)
        fresh += 1
    if fresh:
        passages.append(" ".join(" ".join(p) for p in current))
    return passages


def clean(docs: Sequence[Document], *, words: int = 100, overlap: int = 20) -> list[Passage]:
    """Normalise and chunk every document, then drop exact duplicates (by content sha256).

    The first occurrence wins (documents in id order), so ids and order are deterministic.
    """
    if not docs:
        raise CorpusError("corpus is empty (no documents)")
    seen: set[str] = set()
    out: list[Passage] = []
    for doc in sorted(docs, key=lambda d: d.id):
        for ordinal, text in enumerate(chunk(doc.text, words=words, overlap=overlap)):
            digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
            if digest in seen:
                continue
            seen.add(digest)
            out.append(Passage(f"p{digest[:16]}", doc.id, ordinal, text, digest))
    if not out:
        raise CorpusError("corpus is empty after cleaning")
    return out


def passages_to_jsonl(passages: Sequence[Passage]) -> bytes:
    """Canonical JSON lines (sorted keys, UTF-8): the bytes of a ``passages`` artifact."""
    return b"".join(
        json.dumps(asdict(p), sort_keys=True, ensure_ascii=False).encode("utf-8") + b"\n"
        for p in passages
    )


def passages_from_jsonl(data: bytes) -> list[Passage]:
    return [Passage(**json.loads(line)) for line in data.decode("utf-8").splitlines() if line]


def split_shards(passages: Sequence[Passage], shards: int) -> list[list[Passage]]:
    """``shards`` contiguous runs of ``passages`` (fewer when there are fewer passages, none
    empty), sizes within one of each other: a function of the count alone, never of timing.
    Their JSON lines, concatenated, are ``passages_to_jsonl(passages)``."""
    if shards < 1:
        raise ValueError(f"shards must be at least 1, got {shards}")
    n = len(passages)
    k = min(shards, n)
    bounds = [i * n // k for i in range(k + 1)]
    return [list(passages[a:b]) for a, b in itertools.pairwise(bounds)]
