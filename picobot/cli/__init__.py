"""The `picobot` command."""
