"""The gateway: every channel's input comes through here to become a turn or a command."""
