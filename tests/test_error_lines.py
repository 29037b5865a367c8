"""last_line and own_line read a traceback's error line, and the caller's own line in it."""

import os
import sys

from ddp_lib.errors import last_line, own_line


def test_last_line_and_own_line_read_a_real_traceback(tmp_path):
    mine = tmp_path / "mine.py"
    mine.write_text("def f():\n    return 1 / 0\n")
    sys.path.insert(0, str(tmp_path))
    try:
        import mine
        try:
            mine.f()
        except ZeroDivisionError as exc:
            import traceback
            text = "".join(traceback.format_exception(exc))
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("mine", None)
    assert last_line(text) == "ZeroDivisionError: division by zero"
    assert last_line(ZeroDivisionError("x\n")) == "x" and last_line("  \n", "none") == "none"
    assert own_line(text) == "mine.py line 2: return 1 / 0"


def test_relative_paths_leaves_out_the_current_folder_and_torchs_install_folder(tmp_path, monkeypatch):
    import torch

    from ddp_lib.errors import relative_paths

    monkeypatch.chdir(tmp_path)
    module = torch.nn.modules.module.__file__
    message = f'File "{tmp_path / "my_work" / "job.py"}", line 3\nFile "{module}", line 9'
    shown = relative_paths(message)
    assert shown.startswith('File "' + os.path.join("my_work", "job.py") + '"')
    assert os.path.join("torch", "nn", "modules", "module.py") in shown
    assert str(tmp_path) not in shown
    assert relative_paths("no path here") == "no path here"
