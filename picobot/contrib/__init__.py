"""Plugins that ship with PicoBot, off by default, built only on the public SDK (picobot.plugins)."""
