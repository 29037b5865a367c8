"""docs/glossary.md: one row per term, each with its Chinese and a one-line meaning, and an anchor
(`<a id="...">` before the term) that the lessons' links land on; the terms the lessons rely on are
there, with the agreed Chinese words; the book and the README link it."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# A row: | <a id="anchor"></a>term | 中文 | meaning |
ROW = re.compile(r'^\| <a id="([^"]*)"></a>(.+?) \| (.+?) \| (.+) \|$')
LINES = [line for line in (ROOT / "docs" / "glossary.md").read_text().splitlines()
         if line.startswith("| ") and not line.startswith("| term ")]
ROWS = [ROW.match(line) for line in LINES]
GLOSSARY = {row[2]: (row[3], row[4]) for row in ROWS if row}
ANCHORS = {row[2]: row[1] for row in ROWS if row}
CJK = re.compile(r"[\u4e00-\u9fff]")
# Names of tools and libraries keep their own name in Chinese.
NAMES = {"gloo", "nccl", "torchrun", "mp.spawn", "c10d", "SLURM", "ZeRO"}

AGREED = {"rank": "进程序号", "world size": "进程总数", "process group": "进程组", "collective": "集合通信",
          "store": "键值存储", "rendezvous": "汇合", "backend": "通信后端", "bucket": "梯度桶"}
REQUIRED = ["local rank", "init method", "all-reduce", "broadcast", "all-gather", "reduce-scatter", "barrier",
            "replica", "forkserver", "spawn", "gloo", "nccl", "torchrun", "agent", "node", *AGREED]


def anchor(term: str) -> str:
    """The term's anchor: lower case, apostrophes and symbol-only brackets such as (α) dropped, every
    other run of characters outside a-z, 0-9 and _ made one dash: "ranks' store" -> ranks-store."""
    plain = re.sub(r"\([^a-z]*\)", "", term.lower().replace("'", ""))
    return re.sub(r"[^a-z0-9_]+", "-", plain).strip("-")


def test_every_row_has_a_term_its_chinese_and_one_line():
    assert all(ROWS), [line for line, row in zip(LINES, ROWS) if not row]
    assert len(ROWS) == len(GLOSSARY) >= 60  # no term twice
    for term, (chinese, meaning) in GLOSSARY.items():
        assert term in NAMES or CJK.search(chinese), term
        assert meaning.endswith(".") and "\n" not in meaning and len(meaning) < 200, term


def test_every_term_has_its_own_anchor():
    # Plain ids that JupyterLab, GitHub and the book all keep as written.
    for term, name in ANCHORS.items():
        assert name == anchor(term) and re.fullmatch(r"[a-z0-9_-]+", name), term
    assert len(set(ANCHORS.values())) == len(ANCHORS)


def test_the_terms_the_lessons_rely_on_are_there():
    for term in REQUIRED:
        assert term in GLOSSARY, term
    for term, chinese in AGREED.items():
        assert GLOSSARY[term][0] == chinese, term


def test_each_required_term_is_used_by_a_lesson():
    lessons = " ".join(p.read_text().lower() for p in (ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb"))
    for term in REQUIRED:
        assert term.lower() in lessons or term.replace(" ", "_") in lessons, term


def test_the_readme_and_the_book_link_the_glossary_and_the_cheat_sheet():
    readme = (ROOT / "README.md").read_text()
    toc = (ROOT / "book" / "_toc.yml").read_text()
    for page in ("docs/glossary", "docs/cheatsheet"):
        assert f"]({page}.md)" in readme and f"file: {page}\n" in toc, page
