"""The `plugin_settings` table: plugin settings changed at run time, one row per (namespace, name).

A row holds the JSON text of a value that was validated against the plugin's model before it was
written (picobot/runtime/settings_store.py); this module only stores and reads it.
"""

from __future__ import annotations

import json
import time
from typing import Any

from sqlalchemy import Connection, bindparam, delete, select

from picobot.storage.models import PluginSettingRow
from picobot.storage.upsert import Upsert

_T = PluginSettingRow.__table__
_OF = select(_T.c.name, _T.c.value).where(_T.c.namespace == bindparam("ns")).order_by(_T.c.name)
_META = (select(_T.c.name, _T.c.updated_at, _T.c.updated_by).where(_T.c.namespace == bindparam("ns"))
         .order_by(_T.c.name))
_UNSET = delete(_T).where(_T.c.namespace == bindparam("ns"), _T.c.name == bindparam("nm"))
_SET = Upsert(_T, ("namespace", "name"), ("value", "updated_at", "updated_by"))


def overrides(conn: Connection, namespace: str) -> dict[str, Any]:
    """The namespace's run-time values, by name."""
    return {row.name: json.loads(row.value) for row in conn.execute(_OF, {"ns": namespace})}


def changes(conn: Connection, namespace: str) -> dict[str, tuple[float, str]]:
    """(updated_at, updated_by) of each of the namespace's run-time values, by name."""
    return {row.name: (row.updated_at, row.updated_by) for row in conn.execute(_META, {"ns": namespace})}


def put(conn: Connection, namespace: str, name: str, value_json: str, by: str) -> None:
    """Store the JSON text of a value (the last writer wins)."""
    _SET.run(conn, {"namespace": namespace, "name": name, "value": value_json, "updated_at": time.time(),
                    "updated_by": by[:320]})


def remove(conn: Connection, namespace: str, name: str) -> bool:
    """Drop a run-time value (config.json's, or the default, applies again); False when there was none."""
    return conn.execute(_UNSET, {"ns": namespace, "nm": name}).rowcount == 1
