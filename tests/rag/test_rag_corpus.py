"""corpus: collection errors name the path; cleaning is normalising, chunking and dedup."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rara_rag import corpus
from rara_rag.corpus import CorpusError, Document


def test_default_corpus_is_pydoc_topics() -> None:
    docs = corpus.collect()
    assert len(docs) > 50
    assert docs == sorted(docs, key=lambda d: d.id)
    assert all(d.id.startswith("pydoc:") and d.text.strip() for d in docs)


def test_collect_directory_sorted_relative_ids(tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "two.md").write_text("Second document.\n", encoding="utf-8")
    (tmp_path / "one.txt").write_text("First document.\n", encoding="utf-8")
    (tmp_path / "skip.bin").write_bytes(b"\x00\x01")
    (tmp_path / "blank.txt").write_text("  \n", encoding="utf-8")
    docs = corpus.collect(tmp_path)
    assert [d.id for d in docs] == ["b/two.md", "one.txt"]
    assert corpus.collect([tmp_path / "one.txt"])[0].text == "First document.\n"


def test_empty_corpus_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(CorpusError, match=r"no .* files in directory") as err:
        corpus.collect(tmp_path)
    assert err.value.path == str(tmp_path)
    (tmp_path / "blank.txt").write_text("\n\n", encoding="utf-8")
    with pytest.raises(CorpusError, match="empty"):
        corpus.collect(tmp_path)
    with pytest.raises(CorpusError, match="empty"):
        corpus.clean([])
    with pytest.raises(CorpusError, match="no corpus paths"):
        corpus.collect([])


def test_missing_and_unreadable_files_name_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope.txt"
    with pytest.raises(CorpusError, match="does not exist") as err:
        corpus.collect(missing)
    assert err.value.path == str(missing)

    bad = tmp_path / "latin1.txt"
    bad.write_bytes("caf\xe9".encode("latin-1"))
    with pytest.raises(CorpusError, match="UnicodeDecodeError") as err:
        corpus.collect(bad)
    assert str(bad) in str(err.value)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files regardless of permissions")
def test_permission_denied_names_the_path(tmp_path: Path) -> None:
    locked = tmp_path / "locked.txt"
    locked.write_text("secret", encoding="utf-8")
    locked.chmod(0)
    with pytest.raises(CorpusError, match="PermissionError"):
        corpus.collect(locked)


def test_dangling_symlink_names_the_path(tmp_path: Path) -> None:
    (tmp_path / "ok.txt").write_text("fine", encoding="utf-8")
    dangling = tmp_path / "gone.txt"
    dangling.symlink_to(tmp_path / "does-not-exist")
    with pytest.raises(CorpusError, match="does not exist") as err:
        corpus.collect([tmp_path / "ok.txt", dangling])
    assert err.value.path == str(dangling)


def test_normalise_unicode_whitespace_and_rst_underlines() -> None:
    raw = "Title\r\n*****\r\n\r\nﬁne   text\twith\x07 bells.\n\n\n  Next   para.  "
    assert corpus.normalise(raw) == "Title\n\nfine text with bells.\n\nNext para."


def test_chunk_whole_sentences_with_overlap() -> None:
    sentences = [f"Sentence number {i} has exactly seven words." for i in range(10)]
    passages = corpus.chunk(" ".join(sentences), words=21, overlap=7)
    assert len(passages) > 1
    for p in passages:
        assert p.endswith("words.")  # never cut mid-sentence
    # consecutive passages share exactly the carried sentence
    assert passages[1].startswith(passages[0][-len(sentences[2]) :])
    with pytest.raises(ValueError, match="overlap"):
        corpus.chunk("x", words=5, overlap=5)


def test_clean_dedups_by_content_with_stable_ids() -> None:
    text = "Alpha beta gamma. Delta epsilon zeta."
    docs = [Document("b", text, "b"), Document("a", text, "a"), Document("c", "Other.", "c")]
    passages = corpus.clean(docs, words=50, overlap=5)
    assert [p.doc_id for p in passages] == ["a", "c"]  # "b" duplicates "a"; a < b wins
    again = corpus.clean(list(reversed(docs)), words=50, overlap=5)
    assert passages == again
    assert all(p.id == "p" + p.sha256[:16] for p in passages)
    assert corpus.passages_from_jsonl(corpus.passages_to_jsonl(passages)) == passages


def test_clean_real_corpus_is_deterministic() -> None:
    a = corpus.clean(corpus.collect())
    b = corpus.clean(corpus.collect())
    assert corpus.passages_to_jsonl(a) == corpus.passages_to_jsonl(b)
    assert len({p.id for p in a}) == len(a) > 300


def test_stdlib_corpus_is_public_docstrings_read_not_imported(tmp_path: Path) -> None:
    # A fake library: a module whose import would exit, a private one, a test package.
    (tmp_path / "boom.py").write_text(
        '"""Boom module docs. It explodes when imported."""\n'
        "raise SystemExit('imported!')\n\n"
        "class Fuse:\n"
        '    """A fuse burns for a while. Then it stops."""\n\n'
        "    def light(self):\n"
        '        """Light the fuse."""\n\n'
        "    def _hidden(self):\n"
        '        """Private: not documentation."""\n',
        encoding="utf-8",
    )
    (tmp_path / "_private.py").write_text('"""Private module."""\n', encoding="utf-8")
    (tmp_path / "test").mkdir()
    (tmp_path / "test" / "test_x.py").write_text('"""A test."""\n', encoding="utf-8")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text('"""The package."""\n', encoding="utf-8")
    (tmp_path / "broken.py").write_text('"""Docs."""\ndef (:\n', encoding="utf-8")
    (tmp_path / "nodocs.py").write_text("x = 1\n", encoding="utf-8")
    assert [m for m, _ in corpus.stdlib_modules(tmp_path)] == ["boom", "broken", "nodocs", "pkg"]
    docs = corpus.stdlib_docstrings(tmp_path)
    assert [d.id for d in docs] == ["stdlib:boom", "stdlib:pkg"]
    assert docs[0].text.split("\n\n") == [
        "Module boom. Boom module docs. It explodes when imported.",
        "Class boom.Fuse. A fuse burns for a while. Then it stops.",
        "Function boom.Fuse.light. Light the fuse.",
    ]


def test_stdlib_corpus_is_large_sorted_and_deterministic() -> None:
    docs = corpus.builtin("stdlib")
    assert docs == corpus.collect(corpus="stdlib")
    assert len(docs) > 300
    assert [d.id for d in docs] == sorted(d.id for d in docs)
    assert all(d.id.startswith("stdlib:") and "._" not in d.id for d in docs)
    assert not any(d.id.startswith(("stdlib:test.", "stdlib:idlelib")) for d in docs)
    assert sum(len(d.text.split()) for d in docs) > 100_000
    passages = corpus.clean(docs)
    assert len(passages) > 2000  # thousands of passages
    assert corpus.passages_to_jsonl(passages) == corpus.passages_to_jsonl(corpus.clean(docs))
    ids = {d.id for d in corpus.builtin("python")}
    assert ids == {d.id for d in docs} | {d.id for d in corpus.builtin("pydoc")}
    with pytest.raises(CorpusError, match="unknown corpus 'nope'"):
        corpus.builtin("nope")
