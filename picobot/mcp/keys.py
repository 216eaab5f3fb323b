"""The MCP capability's Redis keys."""

STATUS_PREFIX = "picobot:mcp:"  # + worker name: a hash of that worker's MCP server states
