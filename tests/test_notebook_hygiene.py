"""Every lesson notebook is committed clean: executed in order, generic metadata, no machine paths,
no unexpected errors, no widget state, a Summary and Exercises, and a first cell of imports only."""

import ast
import builtins
import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb"))

# Home directories, temporary directories and Windows profiles: they differ on every machine. So does an
# environment's absolute path: torch prints its own files' paths relative to site-packages, but whole
# when the environment is reached through a link.
MACHINE_PATH = re.compile(r"/root/|/home/[^/\s]+/|/tmp/|/Users/|[A-Za-z]:\\\\?Users\\"
                          r"|/[^\s'\"]*/(?:site-packages|\.venv)/", re.IGNORECASE)
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


def load(path: Path) -> nbformat.NotebookNode:
    return nbformat.read(path, as_version=4)


def code_cells(nb: nbformat.NotebookNode) -> list:
    return [c for c in nb.cells if c.cell_type == "code"]


def may_raise(cell) -> bool:
    return "raises-exception" in cell.metadata.get("tags", []) or "NBVAL_RAISES_EXCEPTION" in cell.source


def output_texts(output) -> list[str]:
    """The text a reader sees in ``output`` (images are skipped: base64 is not text)."""
    if output.output_type == "stream":
        return [output.text]
    if output.output_type == "error":
        return [output.ename, output.evalue, *output.traceback]
    texts = []
    for mime, value in output.get("data", {}).items():
        if not mime.startswith("image/") or mime == "image/svg+xml":
            texts.append(value if isinstance(value, str) else str(value))
    return texts


def heading_texts(nb: nbformat.NotebookNode) -> list[str]:
    found = []
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            found += [m.group(1).strip() for m in re.finditer(r"^#{1,6}\s+(.*)$", cell.source, re.MULTILINE)]
    return found


def test_there_are_lessons():
    assert NOTEBOOKS, "no notebooks/NN_*.ipynb found"


@pytest.fixture(params=NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def nb(request) -> nbformat.NotebookNode:
    return load(request.param)


def test_executed_top_to_bottom_from_a_fresh_kernel(nb):
    counts = [c.execution_count for c in code_cells(nb) if c.source.strip()]
    expected = list(range(1, len(counts) + 1))
    assert counts == expected, "re-execute it from a fresh kernel: make notebooks NB=<this notebook>"


def test_kernelspec_is_the_generic_python3(nb):
    assert nb.metadata.get("kernelspec", {}).get("name") == "python3"


# What ipykernel reports as language_info. JupyterLab copies the kernel's into an open notebook and
# marks the notebook modified when it differs, so each lesson stores exactly this.
KERNEL_LANGUAGE_INFO = {"codemirror_mode", "file_extension", "mimetype", "name", "nbconvert_exporter",
                        "pygments_lexer", "version"}


def test_metadata_is_what_the_kernel_reports_and_nothing_else(nb):
    assert set(nb.metadata) == {"kernelspec", "language_info"}
    info = nb.metadata["language_info"]
    assert set(info) == KERNEL_LANGUAGE_INFO, "re-execute it: make notebooks NB=<this notebook>"
    assert info["name"] == "python" and info["version"].startswith("3.")


def test_exercise_stubs_stored_as_a_fresh_clone_writes_them(nb):
    # A stored "Its previous text is in ...previous" means the lesson was executed over an earlier run's
    # my_work/ files: a learner's first run says only "Wrote ...". Empty notebooks/my_work/ and re-execute.
    found = [f"code cell {index}" for index, cell in enumerate(code_cells(nb))
             for output in cell.get("outputs", []) for text in output_texts(output)
             if "Its previous text is in" in text or text.startswith("Kept my_work/")]
    assert found == []


def test_no_machine_paths_in_outputs(nb):
    found = []
    for index, cell in enumerate(code_cells(nb)):
        for output in cell.get("outputs", []):
            for text in output_texts(output):
                found += [f"code cell {index}: {m.group(0)!r} in {line.strip()[:100]!r}"
                          for line in text.splitlines() for m in [MACHINE_PATH.search(line)] if m]
    assert found == []


def test_errors_are_stored_only_where_the_cell_says_it_raises(nb):
    unexpected = [f"code cell {index}: {o.ename}: {o.evalue[:100]}"
                  for index, cell in enumerate(code_cells(nb)) if not may_raise(cell)
                  for o in cell.get("outputs", []) if o.output_type == "error"]
    assert unexpected == [], "tag the cell raises-exception, or catch the error and print it"


def test_no_widget_state(nb):
    assert "widgets" not in nb.metadata
    widget_outputs = [index for index, cell in enumerate(code_cells(nb))
                      if "widgets" in cell.metadata
                      or any(WIDGET_MIME in o.get("data", {}) for o in cell.get("outputs", []))]
    assert widget_outputs == []


@pytest.mark.parametrize("heading", ["Summary", "Exercises"])
def test_lesson_closes_with(nb, heading):
    headings = heading_texts(nb)
    assert any(h.lower().startswith(heading.lower()) for h in headings), \
        f"no markdown heading {heading!r} in {headings}"


def test_first_code_cell_only_imports(nb):
    # The Colab/Binder set-up cell (tools/add_colab_cell.py) comes before the lesson's own code.
    first = next(c for c in code_cells(nb) if c.source.strip() and "colab-setup" not in c.metadata.get("tags", []))
    # %load_ext loads an IPython extension: an import too.
    source = "\n".join(line for line in first.source.splitlines() if not line.startswith("%load_ext "))
    tree = ast.parse(source)
    others = [ast.unparse(node).splitlines()[0] for node in tree.body
              if not isinstance(node, (ast.Import, ast.ImportFrom))]
    assert others == [], "the first code cell holds the imports only"


NBVAL_TAGS = {"nbval-ignore-output", "nbval-check-output", "raises-exception", "nbval-skip", "nbval-raises-exception"}


def test_nbval_markers_are_cell_tags_not_code(nb):
    # The learner reads the code; what the test harness needs goes in the cell's tags.
    for i, cell in enumerate(c for c in nb.cells if c.cell_type == "code"):
        assert "NBVAL_" not in cell.source, f"code cell {i}: use a cell tag ({', '.join(sorted(NBVAL_TAGS))})"


def test_lessons_do_not_talk_about_their_tests(nb):
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            assert "notebook tests" not in cell.source.lower(), f"cell {i} talks about the notebook tests"


WRITEFILE = re.compile(r"^%%(?:writefile|exercise)\s+(\S+)", re.MULTILINE)


def test_learner_files_go_to_my_work(nb):
    # Files a lesson writes for the learner stay out of the lessons' folder (notebooks/my_work/ is
    # git-ignored and importable as my_work).
    for i, cell in enumerate(c for c in nb.cells if c.cell_type == "code"):
        for path in WRITEFILE.findall(cell.source):
            assert path.startswith("my_work/"), f"code cell {i} writes {path}; write to my_work/ instead"


# "Deeper: ..." sections (see ../shared/teaching.md in the team's notes: the lesson's main line stays
# plain, torch's internals go to folded sections). A Deeper heading opens its cell and the cell's
# metadata folds it in JupyterLab; the section runs to the next heading of the same or a higher level.
DEEPER = "Deeper:"
FOLDED = "jp-MarkdownHeadingCollapsed"
HEADING = re.compile(r"^(#{1,6})\s+(.*)$")
# What the main line must not name: torch's source files, and private names (torch._C, ._foo, `_foo`).
INTERNALS = re.compile(r"\btorch/[\w/.]*\.(?:py|cpp|h|hpp|cu)\b"   # a torch source path
                       r"|\b[\w/]+\.(?:cpp|hpp|h|cu)\b"            # a C++ source or header anywhere
                       r"|\btorch\._\w*"                           # torch._C, torch._dynamo, ...
                       r"|\w\._(?!_)\w+"                           # a private attribute: x._private
                       r"|`_(?!_)\w+")                             # a private name in code: `_sync_module_states`
# The lessons whose main line is checked today; the others are being rewritten to this standard.
DEEPER_CHECKED = sorted(p.name for p in (ROOT / "notebooks").glob("[0-9]*.ipynb"))


def headings_of(cell) -> list[tuple[int, str, int]]:
    """(level, text, line number) of each markdown heading of ``cell``, outside fenced code."""
    found, fenced = [], False
    for number, line in enumerate(cell.source.splitlines()):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and (match := HEADING.match(line)):
            found.append((len(match.group(1)), match.group(2).strip(), number))
    return found


def main_line_markdown(nb: nbformat.NotebookNode) -> list[tuple[int, str]]:
    """(cell index, text) of every markdown line outside a Deeper section."""
    kept, deeper_level = [], None
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "markdown":
            continue
        starts = {number: (level, text) for level, text, number in headings_of(cell)}
        for number, line in enumerate(cell.source.splitlines()):
            if number in starts:
                level, text = starts[number]
                if deeper_level is not None and level <= deeper_level:
                    deeper_level = None
                if deeper_level is None and text.startswith(DEEPER):
                    deeper_level = level
            if deeper_level is None:
                kept.append((index, line))
    return kept


def internals_named(nb: nbformat.NotebookNode) -> list[str]:
    return [f"markdown cell {index}: {match.group(0)!r} in {line.strip()[:90]!r}"
            for index, line in main_line_markdown(nb) for match in INTERNALS.finditer(line)]


def test_deeper_headings_and_only_they_are_folded(nb):
    wrong = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "markdown":
            continue
        headings = headings_of(cell)
        deeper = [number for _, text, number in headings if text.startswith(DEEPER)]
        folded = cell.metadata.get(FOLDED) is True
        if deeper and (deeper != [0] or not folded):
            wrong.append(f"cell {index}: a Deeper heading opens its own cell, which has {FOLDED}: true")
        if folded and not deeper:
            wrong.append(f"cell {index}: {FOLDED} on a cell that opens no Deeper section")
    assert wrong == []


# JupyterLab's fold hides the cells after a folded heading, not the rest of the heading's own cell:
# a Deeper heading cell holds its heading line only.
def test_a_deeper_heading_cell_holds_only_its_heading(nb):
    crowded = [f"cell {index}: {cell.source.splitlines()[0]!r}"
               for index, cell in enumerate(nb.cells)
               if cell.cell_type == "markdown" and cell.metadata.get(FOLDED) is True
               and len(cell.source.strip().splitlines()) > 1]
    assert crowded == [], "put the text after these headings in a cell of its own:\n" + "\n".join(crowded)


@pytest.mark.parametrize("name", DEEPER_CHECKED)
def test_the_main_line_names_no_torch_internals(name):
    found = internals_named(load(ROOT / "notebooks" / name))
    assert found == [], "move these into a '## Deeper: ...' section:\n" + "\n".join(found)


def test_the_internals_check_sees_what_it_should():
    cell = nbformat.v4.new_markdown_cell
    nb = nbformat.v4.new_notebook(cells=[
        cell("## Main\nDDP copies weights (`_sync_module_states` in `torch/nn/parallel/distributed.py`)."),
        cell("### Deeper: the source\n`deviceFromLong` in `python_arg_parser.h`, `torch._C._nn`, `ddp._pre_forward`."),
        cell("#### still deep\n`torch/accelerator/__init__.py`"),
        cell("### Back on the main line\n`__init__` and `torch.distributed` are fine; `torch._C` is not."),
    ])
    assert [f.split(":", 1)[1].split(" in ")[0].strip() for f in internals_named(nb)] == [
        "'`_sync_module_states'", "'torch/nn/parallel/distributed.py'", "'torch._C'"]


# A learner may read the main line only, skipping every folded Deeper section: a main-line code cell
# must not use a name that only a Deeper section's cells define. Cells that run on the ranks (%%ranks)
# or write files are skipped; shell (!) and magic (%) lines are dropped before parsing.
NOT_PARSED = ("%%ranks", "%%writefile", "%%bash", "%%exercise")
ALWAYS_DEFINED = set(dir(builtins)) | {"get_ipython", "display", "In", "Out"}  # what IPython provides


def names_in(source: str) -> tuple[set[str], set[str]]:
    """(names the code binds, names it reads) in ``source``."""
    code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
    bound, read = set(), set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return bound, read


def code_cells_by_section(nb: nbformat.NotebookNode):
    """(index, bound names, read names, start of its Deeper section or None) for each parsed code cell."""
    deeper_level, section = None, None
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            for level, text, _ in headings_of(cell):
                if deeper_level is not None and level <= deeper_level:
                    deeper_level, section = None, None
                if deeper_level is None and text.startswith(DEEPER):
                    deeper_level, section = level, index
            continue
        if cell.cell_type != "code" or cell.source.lstrip().startswith(NOT_PARSED):
            continue
        yield (index, cell, section, *names_in(cell.source))


def names_only_deeper_defines(nb: nbformat.NotebookNode) -> list[str]:
    found, main_line, deeper = [], set(ALWAYS_DEFINED), {}
    for index, _, section, bound, read in code_cells_by_section(nb):
        if section is not None:
            for name in bound:
                deeper.setdefault(name, index)
            continue
        found += [f"code cell {index} uses {name!r}, defined only in the Deeper cell {deeper[name]}"
                  for name in sorted(read - main_line - bound) if name in deeper]
        main_line |= bound
    return found


def test_the_main_line_runs_without_the_deeper_sections(nb):
    found = names_only_deeper_defines(nb)
    assert found == [], "define these on the main line too:\n" + "\n".join(found)


def test_the_deeper_names_check_sees_what_it_should():
    md, code = nbformat.v4.new_markdown_cell, nbformat.v4.new_code_cell
    nb = nbformat.v4.new_notebook(cells=[
        code("import torch\nshared = 1"),
        md("### Deeper: a measurement"), code("kept = torch.zeros(1)\nshared = 2"),
        md("### Back on the main line"), code("print(kept, shared, len([]))\n!ls"),
        code("%%ranks\nprint(kept)"),
    ])
    assert names_only_deeper_defines(nb) == ["code cell 4 uses 'kept', defined only in the Deeper cell 2"]


def test_lesson_00_stores_the_fixed_script_finishing():
    """nbval accepts torch's rare abort at exit in the fixed file's run under mp.spawn in the kernel; the
    stored run shows every rank finishing, with no SIGABRT."""
    nb = load(ROOT / "notebooks" / "00_start_here.ipynb")
    for marker, finished in (("run_demo(fixed_demo_basic", "torch's mp.spawn: every rank finished\n"),):
        runs = [c for c in code_cells(nb) if marker in c.source]
        assert len(runs) == 1, marker
        shown = "".join(text for output in runs[0].outputs for text in output_texts(output))
        assert finished in shown and "SIGABRT" not in shown, (
            f"re-execute lesson 00: its stored run of the fixed file ({marker}) did not finish cleanly")


# A learner opens one folded Deeper section after running the main line: its cells must not use a name
# that only another Deeper section defines. A cell that checks `globals()` for such a name, and says
# which section to run first, is allowed.
def names_from_another_deeper_section(nb: nbformat.NotebookNode) -> list[str]:
    found, main_line, elsewhere, this_section, current = [], set(ALWAYS_DEFINED), {}, set(), None
    for index, cell, section, bound, read in code_cells_by_section(nb):
        if section is None:
            main_line |= bound
            continue
        if section != current:
            current, this_section = section, set()
        if "not in globals()" not in cell.source:
            found += [f"code cell {index} uses {name!r}, defined in another Deeper section (cell {elsewhere[name]})"
                      for name in sorted(read - main_line - this_section - bound) if name in elsewhere]
        this_section |= bound
        for name in bound:
            elsewhere.setdefault(name, index)
    return found


def test_each_deeper_section_runs_after_the_main_line_alone(nb):
    found = names_from_another_deeper_section(nb)
    assert found == [], "import or define these in the section that uses them:\n" + "\n".join(found)


def test_the_other_deeper_section_check_sees_what_it_should():
    md, code = nbformat.v4.new_markdown_cell, nbformat.v4.new_code_cell
    nb = nbformat.v4.new_notebook(cells=[
        code("import torch"),
        md("### Deeper: one"), code("import inspect\nkept = torch.zeros(1)"), code("print(inspect, kept)"),
        md("### Deeper: two"), code("print(inspect.getsource(print))"),
        code('if "kept" not in globals():\n    print("run Deeper: one first")\nelse:\n    print(kept)'),
        md("### Back on the main line"), code("print(torch)"),
    ])
    assert names_from_another_deeper_section(nb) == [
        "code cell 5 uses 'inspect', defined in another Deeper section (cell 2)"]
