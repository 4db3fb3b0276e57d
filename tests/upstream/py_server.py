"""An upstream MCP server written with the official Python SDK (`mcp` 2.x), for Quiver's
upstream tests: `python py_server.py stdio`, `python py_server.py http PORT` or `python py_server.py https PORT CERT KEY`.

UPSTREAM_MANY=N adds N generated tools (`bulk_0` ...), for the large-catalog test.
UPSTREAM_EVENTS=FILE: `slow` appends a line there when its call is cancelled.
"""

import asyncio
import os
import sys

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations

READ = ToolAnnotations(readOnlyHint=True)
server = MCPServer("py-upstream", title="Python SDK test server", version="1.4.0")
grown = False


@server.tool(annotations=READ)
def add(a: int, b: int) -> int:
    """Add two integers and return their sum."""
    return a + b


@server.tool(annotations=READ)
def whoami() -> dict:
    """The process id of this server (the tests kill it mid-call)."""
    return {"pid": os.getpid()}


@server.tool(annotations=READ)
async def slow(seconds: float, ctx: Context) -> str:
    """Wait `seconds`, reporting progress four times on the way."""
    try:
        for step in range(4):
            await ctx.report_progress(step + 1, 4, f"step {step + 1}")
            await asyncio.sleep(seconds / 4)
    except BaseException:  # cancelled: say so, for the test
        events = os.environ.get("UPSTREAM_EVENTS")
        if events:
            with open(events, "a") as f:
                f.write(f"cancelled slow {seconds}\n")
        raise
    return f"waited {seconds} s"


@server.tool(annotations=ToolAnnotations(destructiveHint=True))
def wipe(target: str) -> str:
    """Delete everything under `target` (a test stand-in: deletes nothing)."""
    return f"wiped {target}"


def grown_tool(text: str) -> str:
    """Shout the text back in capitals (added at run time by `grow`)."""
    return text.upper()


@server.tool()
async def grow(ctx: Context) -> str:
    """Add the tool `shout` and tell the client the tool list changed."""
    global grown
    if not grown:
        server.add_tool(grown_tool, name="shout", annotations=READ)
        grown = True
    await ctx.session.send_tool_list_changed()
    try:
        await ctx.notify_tools_changed()
    except Exception:  # not every protocol version has listen streams
        pass
    return "shout added"


def bulk_tool(i):
    def bulk(value: str) -> str:
        return f"bulk {i}: {value}"

    return bulk


for i in range(int(os.environ.get("UPSTREAM_MANY", "0"))):
    server.add_tool(
        bulk_tool(i),
        name=f"bulk_{i}",
        description=f"Generated tool number {i} of a large catalog: returns its value tagged with {i}.",
        annotations=READ,
    )


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    elif len(sys.argv) > 4 and sys.argv[1] == "https":  # https PORT CERT KEY
        import uvicorn

        uvicorn.run(server.streamable_http_app(), host="127.0.0.1", port=int(sys.argv[2]),
                    ssl_certfile=sys.argv[3], ssl_keyfile=sys.argv[4], log_level="warning")
    else:
        server.run("stdio")
