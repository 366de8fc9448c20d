"""Errors that reach the user as one clear line, never a traceback.

Every error a user can cause (a broken script, an unknown key, an impossible
topology) is a :class:`WanlabError`; the CLI prints ``str(err)`` and exits 2.
"""


class WanlabError(Exception):
    """A user-facing error: its message is the whole story."""


class SpecError(WanlabError):
    """An error in an experiment description, located at a file and line or field path."""

    def __init__(self, message: str, file: str | None = None, line: int | None = None,
                 field: str | None = None):
        self.message, self.file, self.line, self.field = message, file, line, field
        where = ""
        if file:
            where = f"{file}:{line}: " if line else f"{file}: "
        if field:
            where += f"{field}: "
        super().__init__(where + message)


class EngineError(WanlabError):
    """The engine refused a request or could not be reached."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM ended an operation; the message says what was rolled back or
    finished (wanlab/interrupts.py). A KeyboardInterrupt, so ``except Exception`` lets
    it through."""

    def __init__(self, message: str):
        self.message = message
        super().__init__(message)
