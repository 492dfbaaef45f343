"""The ablations: a file given as the report folder is refused in one line naming the flag,
before any work."""

import subprocess
import sys

from scripts.common.repo_paths import REPO_ROOT


def test_ablations_refuse_a_file_as_out_in_one_line(tmp_path):
    afile = tmp_path / "report.md"
    afile.write_text("the user's own notes\n")
    proc = subprocess.run([sys.executable, "-m", "scripts.analysis.ablations", "--out",
                           str(afile)], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].endswith(
        f"error: --out {afile} is a file, not a folder; give a new or existing folder")
    assert afile.read_text() == "the user's own notes\n"
