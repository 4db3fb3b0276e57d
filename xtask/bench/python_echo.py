"""The Python SDK reference server of `cargo xtask bench`: one `echo` tool over stdio, written
with the official Python SDK (`mcp` 2.x, installed in target/py), as MCP-NOTES.md measures it.

    target/py/bin/python xtask/bench/python_echo.py
"""

from mcp.server.mcpserver import MCPServer

server = MCPServer("python-echo")


@server.tool()
def echo(text: str) -> dict:
    """Returns its text."""
    return {"text": text}


if __name__ == "__main__":
    server.run("stdio")
