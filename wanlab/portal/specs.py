"""An uploaded experiment description (ns-2 Tcl or YAML text) to the IR.

The text is written to a fresh private folder under a fixed file name built from the
format (``<stem>.tcl`` / ``<stem>.yaml``, the stem reduced to letters, digits and ``-``),
then read by the ordinary front ends: the ns script runs in wanlab's restricted Tcl
interpreter, YAML is checked against its schema. Python descriptions are refused: they are
code, and the portal runs as root. A mistake comes back as :class:`UploadError` with the
parser's message and line, and the uploaded file's name in place of the temporary path.
"""

from __future__ import annotations

import os
import re
import tempfile

from wanlab.errors import SpecError, WanlabError
from wanlab.frontends import load
from wanlab.model.ir import Experiment

FORMATS = {".tcl": ".tcl", ".ns": ".tcl", ".yaml": ".yaml", ".yml": ".yaml"}
MAX_BYTES = 1 << 20


class UploadError(WanlabError):
    """The description does not parse; ``line`` is where (None when unknown)."""

    def __init__(self, message: str, file: str, line: int | None = None):
        self.message, self.file, self.line = message, file, line
        super().__init__(f"{file}:{line}: {message}" if line else f"{file}: {message}")


def parse(filename: str, text: str, name: str | None = None) -> tuple[Experiment, list[str]]:
    """The IR of an uploaded description, and its warnings (citing the uploaded name)."""
    shown = os.path.basename(filename or "") or "upload"
    ext = os.path.splitext(shown)[1].lower()
    if ext not in FORMATS:
        raise UploadError(f"unknown format {ext or '(no extension)'!r}: upload an ns-2 script "
                          f"(.tcl, .ns) or a YAML file (.yaml, .yml); Python descriptions "
                          f"run as code and are accepted from the root CLI only", shown)
    if len(text.encode()) > MAX_BYTES:
        raise UploadError(f"larger than {MAX_BYTES} bytes", shown)
    stem = re.sub(r"[^A-Za-z0-9-]", "-", os.path.splitext(shown)[0]).strip("-")[:32]
    if not stem or not stem[0].isalpha():
        stem = "exp-" + stem if stem else "exp"
    with tempfile.TemporaryDirectory(prefix="wanlab-upload-") as d:
        path = os.path.join(d, stem + FORMATS[ext])
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
            f.write(text)
        try:
            exp = load(path)
        except SpecError as e:
            raise UploadError(e.message if e.field is None else f"{e.field}: {e.message}",
                              shown, e.line) from None
        except WanlabError as e:
            raise UploadError(str(e).replace(path, shown), shown) from None
        warnings = [str(w).replace(path, shown) for w in exp.warnings]
    return (exp.with_name(name) if name else exp), warnings
