"""The one-line check every error test uses: a bad input ends in ONE line naming the field, the value and the fix.

``one_error_line(stderr, *fragments)``: a command's stderr holds one ``seafl: error: ...`` line with every
fragment, and nothing else but the run's own ``seafl: running ...`` line (so a traceback, a warning or a
second error above it fails, not only a wrong last line). ``one_line(stderr)``: stderr is one line of
any kind. ``one_line_message(message, *fragments)``: an exception's text is one line holding them.
"""
STARTED = "seafl: running "  # the line a run prints before it reads its data: not part of the error


def one_line(stderr: str, *fragments: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip() and not line.startswith(STARTED)]
    assert "Traceback" not in stderr, stderr
    assert len(lines) == 1, f"{len(lines)} lines where one was due:\n{stderr}"
    missing = [f for f in fragments if f not in lines[0]]
    assert not missing, f"{missing} not in {lines[0]!r}"
    return lines[0]


def one_error_line(stderr: str, *fragments: str) -> str:
    line = one_line(stderr, *fragments)
    assert line.startswith("seafl: error: "), stderr
    return line


def one_line_message(message: str, *fragments: str) -> str:
    assert "\n" not in message, message
    missing = [f for f in fragments if f not in message]
    assert not missing, f"{missing} not in {message!r}"
    return message
