"""Redis key and channel names: a re-export of picobot.coord.keys, kept so its importers work."""

from picobot.coord.keys import *  # noqa: F401,F403 (every name of it)
