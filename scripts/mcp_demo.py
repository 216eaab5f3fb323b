"""A small MCP server for demos and tests, built on the `mcp` package's own server API.

    python scripts/mcp_demo.py                      # stdio (what an `mcpServers` stdio entry runs)
    python scripts/mcp_demo.py --http 8765          # streamable HTTP on http://127.0.0.1:8765/mcp

Tools: echo, add, slow (sleeps), pid (the server's process id), crash (the process exits mid-call),
shout (writes to stderr). The fault flags make it misbehave the ways real servers do:
--garbage (non-JSON on stdout), --crash-at-start, --hang (never answers), --bad-schema (one tool
whose input schema is not valid JSON Schema), --odd-names (names that need sanitising).

It imports nothing from PicoBot, so it is the same server a user would point PicoBot at.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

BAD_SCHEMA_TOOL = "broken"
LONG_TOOL_NAME = "a_tool_whose_name_is_far_too_long_for_most_model_apis_" + "x" * 30
DOTTED_TOOL_NAME = "files.read/v2"


def build_server(bad_schema: bool = False, odd_names: bool = False) -> Any:
    from mcp.server.mcpserver import MCPServer

    class DemoServer(MCPServer):
        async def list_tools(self):  # type: ignore[no-untyped-def]
            tools = await super().list_tools()
            for tool in tools:
                if tool.name == BAD_SCHEMA_TOOL:  # what a buggy server sends: not valid JSON Schema
                    tool.input_schema = {"type": "object", "properties": {"x": {"type": "no-such-type"}}}
            return tools

    server = DemoServer("picobot-demo", instructions="Demo tools for PicoBot.")

    @server.tool(description="Return the text unchanged.")
    def echo(text: str) -> str:
        return text

    @server.tool(description="Add two numbers.")
    def add(a: float, b: float) -> float:
        return a + b

    @server.tool(description="Sleep for `seconds`, then say so.")
    def slow(seconds: float) -> str:
        time.sleep(seconds)
        return f"slept {seconds} s"

    @server.tool(description="The server's process id.")
    def pid() -> int:
        return os.getpid()

    @server.tool(description="Exit the server process in the middle of the call.")
    def crash() -> str:
        sys.stderr.write("demo server: crashing on purpose\n")
        sys.stderr.flush()
        os._exit(7)

    @server.tool(description="Write a line to the server's stderr and return 'ok'.")
    def shout(text: str) -> str:
        sys.stderr.write(f"demo server says: {text}\n")
        sys.stderr.flush()
        return "ok"

    if bad_schema:
        @server.tool(name=BAD_SCHEMA_TOOL, description="A tool with an invalid input schema.")
        def broken(x: int) -> int:
            return x

    if odd_names:
        server.add_tool(lambda: "long", name=LONG_TOOL_NAME, description="A tool with a very long name.")
        server.add_tool(lambda: "dotted", name=DOTTED_TOOL_NAME, description="A tool with dots and a slash.")
    return server


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP on 127.0.0.1:PORT/mcp")
    p.add_argument("--garbage", action="store_true", help="print non-JSON on stdout before serving")
    p.add_argument("--crash-at-start", action="store_true", help="exit with status 3 before serving")
    p.add_argument("--hang", action="store_true", help="read requests but never answer")
    p.add_argument("--bad-schema", action="store_true", help=f"serve tool {BAD_SCHEMA_TOOL!r} with an invalid schema")
    p.add_argument("--odd-names", action="store_true", help="serve tools whose names need sanitising")
    args = p.parse_args(argv)
    sys.stderr.write("demo server starting\n")
    sys.stderr.flush()
    if args.crash_at_start:
        sys.stderr.write("demo server: cannot start (crash-at-start)\n")
        return 3
    if args.hang:
        for _line in sys.stdin:  # swallow every request, answer none
            pass
        return 0
    if args.garbage:
        sys.stdout.write("Welcome to the demo server! (this line is not JSON-RPC)\n")
        sys.stdout.flush()
    server = build_server(bad_schema=args.bad_schema, odd_names=args.odd_names)
    if args.http:
        server.run("streamable-http", host="127.0.0.1", port=args.http)
    else:
        server.run()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
