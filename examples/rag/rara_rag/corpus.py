"""Collect text documents and clean them into deduplicated, overlapping passages.

Why this shape: retrieval quality and evaluation honesty both depend on passages being built
from whole sentences (a query sentence is then either wholly inside a passage or not at all,
see ``evaluate``), and artifact digests depend on every step being deterministic — documents
are sorted by id, ids derive from content, and nothing reads the clock or an unseeded RNG.

The demo's default corpus is ``pydoc_data.topics.topics``: real English technical prose that
ships with every CPython, so the pipeline needs no download.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

DEFAULT_SUFFIXES = (".txt", ".md", ".rst")


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


def collect(
    paths: str | Path | Sequence[str | Path] | None = None,
    *,
    suffixes: Sequence[str] = DEFAULT_SUFFIXES,
) -> list[Document]:
    """Read UTF-8 text files (directories are walked for ``suffixes``) into documents.

    ``None`` returns the built-in ``pydoc_topics()`` corpus. Document ids are paths relative to
    the directory they were found under (or the path as given for a file), sorted, so the
    result does not depend on the file system's listing order.
    """
    if paths is None:
        return pydoc_topics()
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
        if text.strip():
            docs.append(Document(id=doc_id, text=text, source=str(path)))
    if not docs:
        culprit = items[0] if len(items) == 1 else None
        raise CorpusError("corpus is empty (every file is blank)", culprit)
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
