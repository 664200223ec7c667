import os
import pathlib

import pytest

SOURCE = pathlib.Path(os.environ.get("ATTNGRAPH_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))


@pytest.fixture
def seed_path():
    return SOURCE / "graphs" / "seed_mha.json"


@pytest.fixture
def seed_values():
    import json
    return json.loads((SOURCE / "tests" / "data" / "seed_values.json").read_text())


@pytest.fixture
def cli():
    path = os.environ.get("ATTNGRAPH_CLI")
    assert path, "ATTNGRAPH_CLI must name the attngraph program (ctest sets it)"
    return path
