"""Flask side of PicoBot: app factory, blueprints, WebSocket, static UI."""
