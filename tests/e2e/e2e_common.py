"""What the Python SDK end-to-end scripts share: the check log and small client helpers."""

import sys

import mcp.types as types

passed = []


def check(condition, step, detail=""):
    if not condition:
        raise AssertionError(f"{step}: {detail}")
    passed.append(step)
    print(f"ok - {step}", flush=True)


def fail(e):
    """Reports which step failed (the one error inside task groups), then fails the run."""
    while isinstance(e, BaseExceptionGroup) and len(e.exceptions) == 1:
        e = e.exceptions[0]
    print(f"not ok - {type(e).__name__}: {e}", flush=True)
    print(f"{len(passed)} checks passed before the failure", flush=True)
    sys.exit(1)


def text_of(result):
    return "\n".join(b.text for b in result.content if isinstance(b, types.TextContent))


async def list_all(session):
    tools, cursor = [], None
    while True:
        params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await session.list_tools(params=params)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return tools
