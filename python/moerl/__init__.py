"""moerl from Python: the runtime's planes reached through a thin binding (``_moerl``).

``moerl.ep`` holds ``Buffer``, call-compatible with DeepEP V1's ``deep_ep.Buffer``.
"""

import json as _json
from typing import Any, Dict

from . import _moerl

__version__: str = _moerl.__version__


def provenance() -> Dict[str, Any]:
    """Build and node provenance: the same JSON as ``moerl version --json``, as a dict."""
    return _json.loads(_moerl.provenance_json())


__all__ = ["__version__", "provenance"]
