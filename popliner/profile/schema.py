"""The JSON Schema of profile format v1, shipped as package data.

The schema checks structure and types; the loader (:mod:`popliner.profile.loader`)
is the authority and also checks references, cycles and ranges that depend on
other values. Tools outside popliner (an exporter's own tests, an editor) can use
the schema file directly.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # importlib.resources.abc is 3.11+; popliner also runs on 3.10
    from importlib.resources.abc import Traversable

__all__ = ["SCHEMA_FILE", "load_schema", "schema_path"]

SCHEMA_FILE = "profile-v1.schema.json"


def schema_path() -> Traversable:
    """The schema file inside the installed package (a real path for a normal install)."""
    return resources.files("popliner.profile").joinpath(SCHEMA_FILE)


def load_schema() -> dict[str, Any]:
    """The schema as a dict, ready for ``jsonschema.Draft202012Validator``."""
    schema: dict[str, Any] = json.loads(schema_path().read_text(encoding="utf-8"))
    return schema
