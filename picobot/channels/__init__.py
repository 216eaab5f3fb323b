"""Channels: platforms PicoBot talks on (Feishu, …) besides its own web socket and CLI.

base.py holds the adapter contract, registry.py finds adapters by channel name, access.py checks
senders at intake, outbound.py/delivery.py are the outbox and its delivery loop, events.py the
inbox of raw platform events. See docs/CHANNELS.md.
"""
