"""Automatic dialog titles: after a dialog's first answer, a light model names it in the dialog's language.

The core knows nothing of it: the plugin (plugin.py) hears `picobot_turn_finished` and enqueues the
task `picobot.title` on the maintenance queue; its body (writer.py) makes one model call per dialog and
writes the title unless a person gave one (storage/titles.py). Settings: config `titles`.
"""

from __future__ import annotations

TITLE_TASK = "picobot.title"  # name one dialog after its first answer, on the maintenance queue
