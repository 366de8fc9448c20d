"""The import contract (pyproject.toml, [tool.importlinter]): layers import only downward,
the two back ends are independent, and no package has a module cycle. Runs without root."""

import os
import shutil
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_layers_import_only_downward_and_nothing_cycles():
    exe = shutil.which("lint-imports")
    assert exe, "lint-imports is missing: run 'make install' (pip install -e '.[test]')"
    env = {**os.environ, "PYTHONPATH": ROOT}
    p = subprocess.run([exe, "--no-cache"], cwd=ROOT, env=env, capture_output=True,
                       text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "0 broken" in p.stdout
