"""End to end: the official Python MCP SDK (2.x) as a stdio client of `quiver serve`.

Run by `cargo xtask e2e`, which builds `quiver` and the signed `fs-tools` bundle, makes the venv
(`target/py`, package `mcp`) and sets:

- QUIVER_BIN: the `quiver` binary;
- QUIVER_CONFIG: a quiver.yaml loading the repository's plugins/ with a hybrid profile;
- E2E_ROOT: the folder fs-tools is confined to (holds notes.txt with the word "needle").

One session walks through what an agent does: a small first tool list, tool_search loading a
deferred tool and announcing it (tools/list_changed), calling it, a deprecated alias with its
notice in `_meta`, invalid arguments as a tool error with JSON pointers, and run_tool reaching
a deferred tool that was never loaded, without any list refresh. The session runs under a
session key (`quiver serve --resume KEY`): a second `quiver serve` with the same key (the client
reconnecting) starts with the loaded set the first one ended with; another key starts fresh.
"""

import asyncio
import json
import os
import time

import mcp.types as types
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from e2e_common import check, fail, list_all, passed, text_of

QUIVER_BIN = os.environ["QUIVER_BIN"]
QUIVER_CONFIG = os.environ["QUIVER_CONFIG"]
META = "io.github.quiver/"
STEP_TIMEOUT = 30
# Unique per run: the session store (files under the config's state_dir) outlives the process.
RESUME_KEY = f"e2e-{os.getpid()}-{int(time.time())}"


def serve(key):
    return StdioServerParameters(command=QUIVER_BIN, args=["--config", QUIVER_CONFIG, "serve", "--resume", key])

async def scenario():
    list_changed = asyncio.Event()
    other_messages = []

    async def on_message(message):
        if isinstance(message, types.ToolListChangedNotification):
            list_changed.set()
        else:
            other_messages.append(message)

    async with stdio_client(serve(RESUME_KEY)) as (read, write):
        async with ClientSession(read, write, message_handler=on_message) as session:
            init = await session.initialize()
            check(init.server_info.name == "quiver", "initialize", init.server_info)
            check(bool(init.capabilities.tools and init.capabilities.tools.list_changed),
                  "the server announces tools.listChanged", init.capabilities)

            # A small first list: the active fs tools plus the meta tools; deferred ones absent.
            tools = await list_all(session)
            names = [t.name for t in tools]
            first_names = sorted(names)
            check(len(names) <= 8 and {"tool_search", "list_tools", "run_tool"} <= set(names),
                  "the first tools/list is small and has the meta tools", names)
            check("fs_stat" not in names and "fs_search" not in names,
                  "deferred tools are not listed up front", names)
            fs_read = next(t for t in tools if t.name == "fs_read")
            meta = fs_read.meta or {}
            check(meta.get(META + "plugin") == "fs-tools" and len(meta.get(META + "sha256", "")) == 64
                  and meta.get(META + "signer") and meta.get(META + "version"),
                  "tools carry plugin, version, sha256 and signer in _meta", meta)
            check(META + "deprecations" not in meta,
                  "tools/list carries no deprecation notices (they belong in call results)", meta)
            check(fs_read.annotations is not None and fs_read.annotations.read_only_hint is True,
                  "annotations come from the manifest risk", fs_read.annotations)

            # tool_search loads the match into the session and announces the change.
            found = await session.call_tool("tool_search", {"query": "how big is a file and when was it last modified"})
            check(not found.is_error, "tool_search answers", text_of(found))
            loaded = (found.structured_content or {}).get("loaded", [])
            check("fs_stat" in loaded, "tool_search loads fs_stat", found.structured_content)
            await asyncio.wait_for(list_changed.wait(), STEP_TIMEOUT)
            check(True, "notifications/tools/list_changed arrives")
            names = [t.name for t in await list_all(session)]
            check("fs_stat" in names, "the found tool is in tools/list", names)

            # Call it (the SDK validates structuredContent against its outputSchema).
            stat = await session.call_tool("fs_stat", {"path": "notes.txt"})
            check(not stat.is_error and stat.structured_content["kind"] == "file"
                  and stat.structured_content["size"] > 0, "the loaded tool answers", stat.structured_content)

            # A deprecated alias works and says so in _meta (and in text the model reads).
            old = await session.call_tool("read_file", {"path": "notes.txt"})
            notice = (old.meta or {}).get(META + "notice", {})
            check(not old.is_error and "needle" in text_of(old), "the deprecated alias read_file still reads", text_of(old))
            check(notice.get("state") == "deprecated" and notice.get("replacement") == "fs_read"
                  and "deprecated" in notice.get("message", ""), "its notice is in _meta", old.meta)
            check("call `fs_read` instead" in text_of(old), "the notice is in the text too", text_of(old))

            # A hidden-compatibility name dispatches with no visible trace.
            cat = await session.call_tool("cat", {"path": "notes.txt"})
            check(not cat.is_error and "needle" in text_of(cat) and "compatib" not in text_of(cat)
                  and META + "notice" not in (cat.meta or {}), "the hidden name cat answers silently", cat.meta)

            # A result over the tool's size limit is cut to still match its output schema (the
            # SDK validates structuredContent against it and would raise otherwise), and links
            # the full result, which resources/read returns.
            big = await session.call_tool("run_tool", {"name": "fs_list",
                                                       "arguments": {"path": "many", "max_entries": 5000}})
            check(not big.is_error, "a cut result is no error", text_of(big)[:300])
            cut = (big.meta or {}).get(META + "truncation", {})
            check(cut.get("structured") is True and cut.get("total_bytes", 0) > cut.get("shown_bytes", 0),
                  "the cut is described in _meta", cut)
            links = [b for b in big.content if isinstance(b, types.ResourceLink)]
            check(len(links) == 1 and str(links[0].uri) == cut.get("uri"), "a resource_link points at the full result",
                  [type(b).__name__ for b in big.content])
            typed = await session.call_tool("fs_list", {"path": "many", "max_entries": 5000}) \
                if any(t.name == "fs_list" for t in tools) else big
            check(not typed.is_error and len(typed.structured_content["entries"]) < 3000,
                  "the typed call's cut output passes the SDK's schema check", typed.structured_content.keys())
            full = await session.read_resource(cut["uri"])
            entries = json.loads(full.contents[0].text)["entries"]
            check(len(entries) == 3000, "resources/read returns the whole result", len(entries))

            # Invalid arguments: a tool error (not a protocol error) with JSON pointers.
            bad = await session.call_tool("fs_read", {"path": 5})
            check(bad.is_error and "invalid_arguments" in text_of(bad) and "/path" in text_of(bad),
                  "invalid arguments give isError with JSON pointers", text_of(bad))
            error = (bad.meta or {}).get(META + "error", {})
            check(any(e.get("pointer") == "/path" for e in error.get("details", {}).get("errors", [])),
                  "the error's pointers are in _meta too", json.dumps(error))

            # run_tool reaches a deferred tool that was never loaded, with no list refresh.
            list_changed.clear()
            hit = await session.call_tool("run_tool", {"name": "fs_search", "arguments": {"query": "needle"}})
            check(not hit.is_error, "run_tool calls the deferred fs_search", text_of(hit))
            payload = hit.structured_content or json.loads(hit.content[0].text)
            files = sorted({m["path"] for m in payload["matches"]})
            check(files == ["docs/guide.md", "notes.txt"], "fs_search found the needle", files)
            check((hit.meta or {}).get(META + "call", {}).get("lane") == "generic", "it went through the generic lane", hit.meta)
            await asyncio.sleep(0.2)
            check(not list_changed.is_set(), "run_tool did not need (or cause) a list refresh")

            # Unloading a loaded tool drops it from the list and announces the change.
            list_changed.clear()
            gone = await session.call_tool("tool_search", {"query": "", "unload": ["fs_stat"]})
            check(not gone.is_error and (gone.structured_content or {}).get("unloaded") == ["fs_stat"],
                  "tool_search unload drops fs_stat", gone.structured_content)
            await asyncio.wait_for(list_changed.wait(), STEP_TIMEOUT)
            names = [t.name for t in await list_all(session)]
            check("fs_stat" not in names, "the unloaded tool is gone from tools/list", names)

            # The same malformed call three times: three different, more specific hints, then a refusal.
            hints = []
            for level in (1, 2, 3):
                r = await session.call_tool("fs_read", {"path": 5, "lines": "x"})
                error = (r.meta or {}).get(META + "error", {})
                hint = error.get("details", {}).get("hint", {})
                check(r.is_error and hint.get("level") == level, f"malformed call {level} gets a level-{level} hint",
                      json.dumps(error))
                hints.append(text_of(r))
            check(len(set(hints)) == 3 and "takes" in hints[0] and "a valid call looks like" in hints[1]
                  and "whole input schema" in hints[2], "the three hints differ and grow more specific", hints)
            refused = await session.call_tool("fs_read", {"path": 5, "lines": "x"})
            check(refused.is_error and "refused without running" in text_of(refused) and "tool_search" in text_of(refused),
                  "the fourth identical call is refused with what to do instead", text_of(refused))

            # Load one more tool, so the loaded set is more than what calls added.
            more = await session.call_tool("tool_search", {"query": "search file contents for a text"})
            check(not more.is_error, "tool_search loads again", text_of(more))
            final_names = sorted(t.name for t in await list_all(session))
            check(final_names != first_names and "fs_stat" not in final_names,
                  "the session ends with tools loaded beyond its first list, without the unloaded one", final_names)

            # The session is still healthy.
            await session.send_ping()
            check(True, "ping after all of the above")
    errors = [m for m in other_messages if isinstance(m, Exception)]
    check(not errors, "no transport errors", errors)

    # Reconnect: a new process under the same key resumes the session with its loaded set.
    async with stdio_client(serve(RESUME_KEY)) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            resumed = sorted(t.name for t in await list_all(session))
            check(resumed == final_names, "a reconnect with the same key restores the loaded set",
                  {"resumed": resumed, "before": final_names})
            stat = await session.call_tool("fs_search", {"query": "needle"})
            check(not stat.is_error, "a restored tool answers at once", text_of(stat)[:200])
    # Another key is another session: it starts from the first list.
    async with stdio_client(serve(RESUME_KEY + "-other")) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            fresh = sorted(t.name for t in await list_all(session))
            check(fresh == first_names, "another key starts a fresh session", fresh)


def main():
    try:
        asyncio.run(asyncio.wait_for(scenario(), 120))
    except Exception as e:  # report which step failed, then fail the run
        fail(e)
    print(f"all {len(passed)} checks passed", flush=True)


if __name__ == "__main__":
    main()
