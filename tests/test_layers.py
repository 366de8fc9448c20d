"""The import contract (pyproject.toml, [tool.importlinter]): layers import only downward,
the two back ends are independent, and no package has a module cycle. Runs without root."""

import importlib.util
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_layers_import_only_downward_and_nothing_cycles():
    assert importlib.util.find_spec("importlinter"), \
        "import-linter is missing: run 'make install' (pip install -e '.[test]')"
    p = subprocess.run([sys.executable, "-c", "from importlinter.cli import "
                        "lint_imports_command as c; c()", "--no-cache"], cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": ROOT}, capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "0 broken" in p.stdout
