"""Sphinx configuration of the documentation site (`make docs` builds it into docs/_build/html).

The guides are the Markdown pages of docs/ (MyST); the API reference is generated from the package's
docstrings (autosummary over every module); the example DAGs are included from dags/, the files the
suite tests.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The package of this checkout, also when the venv holds another install of it.
sys.path.insert(0, str(ROOT))
# Importing the Airflow layers imports Airflow, which reads (and on a first run writes) AIRFLOW_HOME's
# config: keep that inside the build directory rather than the user's ~/airflow.
os.environ.setdefault("AIRFLOW_HOME", str(ROOT / "docs" / "_build" / "airflow-home"))

import airflow_provider_jetstream  # noqa: E402

project = "airflow-provider-jetstream"
author = "airflow-provider-jetstream contributors"
release = airflow_provider_jetstream.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinxcontrib.mermaid",
]

root_doc = "index"
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]
templates_path = ["_templates"]

# Markdown: "## Heading" anchors for links such as spark.md#options; ```mermaid fences (which GitHub
# draws too) as diagrams.
myst_heading_anchors = 4
myst_fence_as_directive = ["mermaid"]
myst_enable_extensions = ["colon_fence", "deflist"]

# The API reference: one page per module, every documented member, in source order.
autosummary_generate = True
autosummary_imported_members = False
# A module's members are the ones it defines: a name it re-exports (in its __all__) is documented where it
# is defined, once.
autodoc_default_options = {
    "members": True,
    "show-inheritance": True,
    "member-order": "bysource",
    "ignore-module-all": True,
}
autodoc_typehints = "signature"
autodoc_preserve_defaults = True
autoclass_content = "both"

html_theme = "furo"
html_title = f"{project} {release}"
html_show_sourcelink = False
