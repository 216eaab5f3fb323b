"""What keeps the agent's tools from being turned against their host: network policy, egress, redaction."""
