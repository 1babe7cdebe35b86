"""`python3 bench/model/scale_model.py --out DIR --quick` runs end to end (the form `moerl
bench package` calls) and writes the model's files."""

import json
import os
import subprocess
import sys

from conftest import MODEL

PNG = b"\x89PNG\r\n\x1a\n"


def test_quick_writes_json_markdown_and_plots(tmp_path):
    out = tmp_path / "model"
    done = subprocess.run([sys.executable, os.path.join(MODEL, "scale_model.py"), "--out", str(out),
                           "--quick"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    model = json.loads((out / "model.json").read_text())
    for key in ("inputs", "answer", "throughput", "ettr", "weights", "validation", "provenance"):
        assert key in model
    for name, entry in model["inputs"].items():
        assert entry["source"] and entry["unit"] is not None, name
    assert model["provenance"]["git_commit"] and len(model["provenance"]["load_average"]) == 3
    md = (out / "model.md").read_text()
    assert "## The seed's question" in md and "**Answer:**" in md
    for png in ("throughput.png", "ettr.png", "weights.png"):
        assert (out / png).read_bytes()[:8] == PNG, png
        assert f"({png})" in md


def test_missing_out_is_refused():
    done = subprocess.run([sys.executable, os.path.join(MODEL, "scale_model.py")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "--out" in done.stderr
