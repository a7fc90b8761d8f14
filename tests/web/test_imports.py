"""The page imports only ``sim`` and ``hwmodels``: importing its app loads neither torch nor the real path."""

from __future__ import annotations

import subprocess
import sys

from page_helpers import require_modules
from paths import REPO

CHECK = """
import sys
import web.app, web.commands
app = web.app.create_app()
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "real", "hetspec"))
print(",".join(loaded))
"""


def test_importing_the_app_loads_no_torch_and_no_real_path():
    require_modules("fastapi")
    out = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, cwd=REPO,
                         env={"PYTHONPATH": str(REPO), "PATH": ""}, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""


def test_the_check_sees_torch_when_it_is_loaded():
    out = subprocess.run([sys.executable, "-c", "import torch\n" + CHECK.replace("import web.app, web.commands", "import web.uploads")
                          .replace("app = web.app.create_app()", "")], capture_output=True, text=True, cwd=REPO,
                         env={"PYTHONPATH": str(REPO), "PATH": ""}, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "torch" in out.stdout.split(",")
