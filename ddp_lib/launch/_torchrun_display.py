"""torchrun's own failure summary (the ``ChildFailedError`` box), as lesson 06 shows it.

Display only: nothing decides a result, a blame or a stack from this text (the job's failure is
read from the ranks' records, :mod:`ddp_lib.launch._record`). The regular expressions below only
cut the box out of torchrun's stderr and replace what changes from run to run, for a stable output.
"""

from __future__ import annotations

import re

# torchrun's failure summary (ChildFailedError) between its two lines of "=", and what changes from
# run to run in it: times, host names, process ids, paths.
_SUMMARY = re.compile(r"^=+\n.*?^=+$", re.MULTILINE | re.DOTALL)
_RUN_SPECIFIC = ((re.compile(r"(time\s+: ).*"), r"\g<1>TIME"), (re.compile(r"(host\s+: ).*"), r"\g<1>HOST"),
                 (re.compile(r"\(pid: \d+\)"), "(pid: PID)"), (re.compile(r"by PID \d+"), "by PID PID"),
                 (re.compile(r'File "[^"]*/(site-packages|ddp_lib)/'), r'File ".../\1/'),
                 (re.compile(r"(error_file: )\S*/(attempt_\d+/\d+/error\.json)"), r"\1LOG_DIR/.../\2"))



def failure_summary(stderr: str) -> str:
    """torchrun's failure summary (the ``ChildFailedError`` box) from its stderr, with times,
    host names, process ids and paths replaced by placeholders; "" if there is none."""
    found = _SUMMARY.findall(stderr)
    if not found:
        return ""
    text = found[-1]
    for pattern, replacement in _RUN_SPECIFIC:
        text = pattern.sub(replacement, text)
    return text
