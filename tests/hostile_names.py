"""tiny.json with hostile names: layers, operations and variables that try to break out of what carries them.

With ``LAYER_REGEX`` (group 1 is everything before the last ``/``) the two
layers are named :data:`LAYER_0` and :data:`LAYER_1`; the variables carry
:data:`VARIABLE`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.helpers import FIXTURES

REPO = Path(__file__).resolve().parent.parent
TINY = FIXTURES / "tiny.json"

#: A newline that starts a live Python line, quotes of both kinds, a backslash before the closing quote.
LAYER_0 = 'a\nimport os; os.system("touch PWNED")  # \'"\\'
#: Unicode line and paragraph separators, NEL, CR, NUL, an OSC title and a colour escape, a bidi override,
#: a bidi isolate, vertical tab and form feed: what a terminal, an XML parser or a code reader trips on.
LAYER_1 = ('b\u2028x = 1\u2029y = 2\x85z = 3\r\x00w\x1b]0;owned\x07\x1b[31mred'
           '\u202eevil\u2066iso\u2069\x0b\x0c\x7f\x9b2J"""\'\'\'')
#: For variable names (the overflow's largest-live list, JUnit's failure text).
VARIABLE = "v\x00\x1b[2J\x08\u202e\ufffe"

LAYER_REGEX = r"(?s)^(.*)/[a-z]+$"
#: Every hostile character above, to look for in an output.
HOSTILE_CHARACTERS = set("\n\r\x00\x1b\x07\x85\u2028\u2029\u202e\u2066\u2069\x0b\x0c\x7f\x9b\x08")


def tiny_with_layers(layer_0: str, layer_1: str) -> dict[str, Any]:
    """The tiny fixture with its two layers' operations renamed ``<layer_0>/matmul``, ``<layer_0>/add`` and
    ``<layer_1>/matmul`` (the layer is what :data:`LAYER_REGEX` takes before the last slash)."""
    doc: dict[str, Any] = json.loads(TINY.read_text())
    renames = {"layer0/matmul": f"{layer_0}/matmul", "layer0/add": f"{layer_0}/add",
               "layer1/matmul": f"{layer_1}/matmul"}
    for ctx in doc["debugContexts"]:
        data = ctx.get("data") or {}
        if data.get("opName") in renames:
            data["opName"] = renames[data["opName"]]
        if ctx.get("name") in renames:
            ctx["name"] = renames[ctx["name"]]
    return doc


def hostile_document() -> dict[str, Any]:
    doc = tiny_with_layers(LAYER_0, LAYER_1)
    doc["variables"]["name"] = [f"{VARIABLE}{i}" for i in range(len(doc["variables"]["name"]))]
    return doc


def write_hostile(path: Path) -> Path:
    path.write_text(json.dumps(hostile_document()))
    return path
