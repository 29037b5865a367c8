"""The ``%ranks`` and ``%%ranks`` magics of :mod:`ddp_lib.live`, and the ``ranks`` object they drive.

    %ranks 4                  start 4 ranks (--init: each joins the process group; --backend gloo|nccl)
    %ranks                    say how many ranks run
    %ranks stop               stop them
    %%ranks                   run the cell on every rank (%%ranks 0,2: on ranks 0 and 2; --timeout 5: seconds)
"""

from __future__ import annotations

from ddp_lib.errors import LaunchInputError
from ddp_lib.live import CELL_TIMEOUT_S, RanksError
from ddp_lib.live import ranks as _ranks

USAGE = "%ranks N [--init] [--backend NAME] [--timeout S], %ranks stop, or %%ranks [R,R,...] [--timeout S]"


def register(ipython) -> None:
    ipython.push({"ranks": _ranks})
    ipython.register_magic_function(_magic, magic_kind="line_cell", magic_name="ranks")


def _options(words: list[str], allowed: set[str]) -> tuple[list[str], dict[str, str | bool]]:
    """The words that are not options, and the options (``--init`` is a flag, the others take a value)."""
    rest, options = [], {}
    words = list(words)
    while words:
        word = words.pop(0)
        if not word.startswith("--"):
            rest.append(word)
            continue
        if word not in allowed:
            raise RanksError(f"unknown option {word!r}: use {USAGE}")
        if word == "--init":
            options[word] = True
        elif not words:
            raise RanksError(f"{word} needs a value: use {USAGE}")
        else:
            options[word] = words.pop(0)
    return rest, options


def _seconds(text: str | bool | None) -> float | None:
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise RanksError(f"--timeout must be a number of seconds above 0, got {text!r}")
    return value


def _magic(line: str, cell: str | None = None):
    try:
        return _line(line) if cell is None else _cell(line, cell)
    except LaunchInputError as exc:  # a world size or backend this machine cannot run: one line
        raise RanksError(str(exc)) from None


def _line(line: str) -> None:
    words, options = _options(line.split(), {"--init", "--backend", "--timeout"})
    if not words:
        print(f"{_ranks.world_size} ranks are running" if _ranks.running else "no ranks are running")
        return
    if words == ["stop"]:
        world_size = _ranks.world_size
        _ranks.stop()
        print(f"stopped {world_size} ranks")
        return
    if len(words) != 1 or not words[0].isdigit():
        raise RanksError(f"expected a number of ranks or 'stop', got {line.strip()!r}: use {USAGE}")
    timeout = _seconds(options.get("--timeout"))
    before = _ranks.timeout
    # The deadline of these ranks' cells (the --init cell's too); a start without --timeout goes back
    # to the default, so one set of ranks' deadline never carries over to the next.
    _ranks.timeout = CELL_TIMEOUT_S if timeout is None else timeout
    try:
        _ranks.start(int(words[0]), init=bool(options.get("--init")), backend=options.get("--backend"))
    except BaseException:
        _ranks.timeout = before  # a start that failed changes nothing
        raise
    if options.get("--init"):
        print(f"started {_ranks.world_size} ranks, each in the process group: rank, world_size and device "
              "are defined on each")
    else:
        print(f"started {_ranks.world_size} ranks: rank and world_size are defined on each")


def _cell(line: str, cell: str):
    words, options = _options(line.split(), {"--timeout"})
    ranks = None
    if words:
        try:
            ranks = [int(word) for word in ",".join(words).split(",") if word.strip()]
        except ValueError:
            raise RanksError(f"expected ranks such as 0,2, got {line.strip()!r}: use {USAGE}") from None
    # Not "In [N]": a notebook run under nbval counts no cells, so stored and fresh errors would differ.
    name = f"%%ranks cell {_ranks.cells + 1}"
    return _ranks.run(cell, ranks, timeout=_seconds(options.get("--timeout")), name=name)
