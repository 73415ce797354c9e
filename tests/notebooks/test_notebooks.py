"""Every shipped notebook runs top to bottom (nbclient); a failing cell fails the test."""

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_top_to_bottom(path, tmp_path):
    import tempfile

    scratch = Path(tempfile.gettempdir())
    before = set(scratch.glob(f"{path.stem}_*"))
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    assert set(scratch.glob(f"{path.stem}_*")) <= before, "the notebook left a temporary folder behind"
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    assert any("image/png" in o.get("data", {}) for c in nb.cells for o in c.get("outputs", [])), "no figure"


def test_there_are_notebooks():
    assert {"miss_counts", "calibration"} <= {p.stem for p in NOTEBOOKS}
