"""docs/glossary.md: one row per term, each with its Chinese and a one-line meaning; the terms the
lessons rely on are there, with the agreed Chinese words; the book and the README link it."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ROWS = [line.strip("|").split(" | ") for line in (ROOT / "docs" / "glossary.md").read_text().splitlines()
        if line.startswith("| ") and not line.startswith("| term ")]
GLOSSARY = {term.strip(): (chinese.strip(), meaning.strip()) for term, chinese, meaning in ROWS}
CJK = re.compile(r"[\u4e00-\u9fff]")
# Names of tools and libraries keep their own name in Chinese.
NAMES = {"gloo", "nccl", "torchrun", "mp.spawn", "c10d", "SLURM", "ZeRO"}

AGREED = {"rank": "进程序号", "world size": "进程总数", "process group": "进程组", "collective": "集合通信",
          "store": "键值存储", "rendezvous": "汇合", "backend": "通信后端", "bucket": "梯度桶"}
REQUIRED = ["local rank", "init method", "all-reduce", "broadcast", "all-gather", "reduce-scatter", "barrier",
            "replica", "forkserver", "spawn", "gloo", "nccl", "torchrun", "agent", "node", *AGREED]


def test_every_row_has_a_term_its_chinese_and_one_line():
    assert len(ROWS) == len(GLOSSARY) >= 60  # no term twice
    for term, (chinese, meaning) in GLOSSARY.items():
        assert term in NAMES or CJK.search(chinese), term
        assert meaning.endswith(".") and "\n" not in meaning and len(meaning) < 200, term


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
