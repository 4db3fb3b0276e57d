"""End to end: upstream MCP servers nobody here wrote, behind `quiver serve`, used by the
official Python SDK as the client.

Run by `cargo xtask e2e`, which installs the reference servers from npm
(`@modelcontextprotocol/server-everything`, `-filesystem`, `-memory`), builds `quiver` and the
signed fs-tools bundle, and sets:

- QUIVER_BIN: the `quiver` binary;
- UPSTREAM_NODE: a `node` binary; UPSTREAM_MODULES: the `node_modules` folder with the servers;
- PYTHON: a Python with the `mcp` SDK (it also runs `tests/upstream/py_server.py`, a server
  written with the SDK, over stdio and over streamable HTTP);
- E2E_PLUGINS: a plugins folder with the signed fs-tools bundle; E2E_ROOT: its root folder;
- DEV_KEY: the development public key that signed it.

The test writes its own quiver.yaml (sources, overrides, profiles) in a temporary folder.
"""

import asyncio
import json
import os
import signal
import socket
import subprocess
import tempfile
import time

import mcp.types as types
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from e2e_common import check, fail, list_all, passed, text_of

QUIVER_BIN = os.environ["QUIVER_BIN"]
NODE = os.environ["UPSTREAM_NODE"]
MODULES = os.environ["UPSTREAM_MODULES"]
PYTHON = os.environ["PYTHON"]
PLUGINS = os.environ["E2E_PLUGINS"]
ROOT = os.environ["E2E_ROOT"]
DEV_KEY = os.environ["DEV_KEY"]
HERE = os.path.dirname(os.path.abspath(__file__))
PY_SERVER = os.path.join(HERE, "..", "upstream", "py_server.py")
META = "io.github.quiver/"
CONFIRMED = {META + "confirmed": True}
BUDGET = 12288
STEP_TIMEOUT = 60

def server_js(name):
    return os.path.join(MODULES, "@modelcontextprotocol", name, "dist", "index.js")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_tls(work):
    """A test CA and a certificate for localhost signed by it (openssl CLI); Quiver trusts the CA
    through SSL_CERT_FILE, as an operator would add a private CA."""
    tls = os.path.join(work, "tls")
    os.makedirs(tls)
    run = lambda *a: subprocess.run(["openssl", *a], cwd=tls, check=True, capture_output=True)
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=quiver-test-ca", "-keyout", "ca.key",
        "-out", "ca.pem", "-days", "1")
    run("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost", "-keyout", "leaf.key", "-out", "leaf.csr")
    with open(os.path.join(tls, "ext.cnf"), "w") as f:
        f.write("subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\n")
    run("x509", "-req", "-in", "leaf.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-out",
        "leaf.pem", "-days", "1", "-extfile", "ext.cnf")
    return {name: os.path.join(tls, name) for name in ["ca.pem", "leaf.pem", "leaf.key"]}


def quiver_env(work):
    return dict(os.environ, PYHTTP_AUTH="Bearer not-in-the-config",
                SSL_CERT_FILE=os.path.join(work, "tls", "ca.pem"))


def write_config(work, http_port, https_port):
    files_root = os.path.join(work, "files")
    os.makedirs(files_root, exist_ok=True)
    with open(os.path.join(files_root, "hello.txt"), "w") as f:
        f.write("hello from the filesystem server\n")
    cfg = {
        "config_version": 1,
        "plugins_dir": PLUGINS,
        "trusted_keys": [{"name": "local-dev", "path": DEV_KEY}],
        "rescan_interval_ms": 0,
        "state_dir": os.path.join(work, "state"),
        "default_profile": "agent",
        "transcripts": {"dir": os.path.join(work, "transcripts")},
        "profiles": {
            # Everything but the files source's scope.
            "agent": {"mode": "hybrid", "scopes": ["fs.read", "fs.write", "demo"], "approval": "ask",
                      "byte_budget": BUDGET},
            "wide": {"mode": "hybrid", "scopes": ["*"], "approval": "ask", "byte_budget": BUDGET},
        },
        "plugin_config": {"fs-tools": {"root": ROOT}},
        "sources": [
            {"name": "everything", "command": NODE, "args": [server_js("server-everything")],
             "tools": {
                 "echo": {"aliases": [{"name": "say_back", "state": "deprecated"}]},
                 "get-sum": {"description": "Add two numbers and return their sum (arithmetic addition)."},
             }},
            {"name": "files", "command": NODE, "args": [server_js("server-filesystem"), files_root],
             "scopes": ["files"],
             "tools": {"list_allowed_directories": {"aliases": [{"name": "files_roots", "state": "deprecated"}]}}},
            {"name": "memory", "command": NODE, "args": [server_js("server-memory")],
             "tools": {"read_graph": {"aliases": [{"name": "memory_dump", "state": "hidden-compatibility"}]}},
             "env": {"MEMORY_FILE_PATH": os.path.join(work, "memory.jsonl")}},
            {"name": "py", "command": PYTHON, "args": [PY_SERVER, "stdio"],
             "env": {"UPSTREAM_EVENTS": os.path.join(work, "events.txt")},
             "tools": {"shout": {"state": "active"}, "grow": {"side_effects": "write"},
                       "add": {"aliases": [{"name": "py_sum", "state": "deprecated"}]}}},
            {"name": "pyhttp", "url": f"http://127.0.0.1:{http_port}/mcp",
             "headers": {"Authorization": {"env": "PYHTTP_AUTH"}}},
            {"name": "pyhttps", "url": f"https://localhost:{https_port}/mcp"},
            {"name": "big", "command": PYTHON, "args": [PY_SERVER, "stdio"], "env": {"UPSTREAM_MANY": "120"},
             "exclude": ["grow", "wipe"]},
        ],
    }
    path = os.path.join(work, "quiver.yaml")
    with open(path, "w") as f:
        json.dump(cfg, f, indent=1)  # JSON is YAML
    return path


def session_params(config, profile):
    env = quiver_env(os.path.dirname(config))
    return StdioServerParameters(command=QUIVER_BIN, args=["--config", config, "serve", "--profile", profile], env=env)


async def every_lane(session, query, tool, alias, args, expect):
    """One upstream tool found by search, loaded by tool_search, and called by name, by alias and
    through run_tool, each answer holding `expect`."""
    found = await session.call_tool("tool_search", {"query": query})
    loaded = (found.structured_content or {}).get("loaded", [])
    first = ((found.structured_content or {}).get("tools") or [{}])[0].get("name")
    listed = {t.name for t in await list_all(session)}
    # A tool this session already called is typed already (calls count as intent): nothing to load.
    check(not found.is_error and first == tool and tool in listed and (tool in loaded or not loaded),
          f"tool_search finds {tool} first and it is in tools/list", found.structured_content)
    for how, name, call in [("by name", tool, session.call_tool(tool, args)),
                            (f"by alias {alias}", alias, session.call_tool(alias, args)),
                            ("through run_tool", tool, session.call_tool("run_tool", {"name": tool, "arguments": args}))]:
        r = await call
        check(not r.is_error and expect in text_of(r), f"{tool} answers {how}", text_of(r)[:300])


async def until_ok(session, name, args, what):
    deadline = time.monotonic() + STEP_TIMEOUT
    while True:
        r = await session.call_tool("run_tool", {"name": name, "arguments": args})
        if not r.is_error:
            return r
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: still failing: {text_of(r)}")
        await asyncio.sleep(0.3)


async def agent_session(config):
    list_changed = asyncio.Event()

    async def on_message(message):
        if isinstance(message, types.ToolListChangedNotification):
            list_changed.set()

    asked = []

    async def on_elicit(context, params):
        asked.append(("elicit", params.message))
        if "py_wipe" in params.message:
            # Quiver asking to confirm a destructive call: no the first time, yes the second.
            first = sum("py_wipe" in m for k, m in asked) == 1
            return types.ElicitResult(action="decline" if first else "accept", content=None if first else {"confirm": True})
        return types.ElicitResult(action="accept", content={"name": "Ada Lovelace", "check": True})

    async def on_sample(context, params):
        asked.append(("sample", params.messages[0].content.text))
        return types.CreateMessageResult(role="assistant", model="test-model",
                                         content=types.TextContent(type="text", text="a sampled answer"))

    async with stdio_client(session_params(config, "agent")) as (read, write):
        async with ClientSession(read, write, message_handler=on_message, elicitation_callback=on_elicit,
                                 sampling_callback=on_sample) as session:
            await session.initialize()

            # 170+ upstream tools, 120 of them from one server: the first turn stays small.
            tools = await list_all(session)
            names = {t.name for t in tools}
            size = len(json.dumps([t.model_dump(by_alias=True, exclude_none=True) for t in tools]))
            check(size <= BUDGET, f"the first tools/list fits the profile's budget ({size} <= {BUDGET} bytes)")
            check(not any(n.startswith(("everything_", "memory_", "py_", "big_", "files_")) for n in names),
                  "upstream tools are deferred: none is listed up front", sorted(names))

            # Searchable, and loadable by tool_search.
            found = await session.call_tool("tool_search", {"query": "add two numbers and return the sum"})
            loaded = (found.structured_content or {}).get("loaded", [])
            check(not found.is_error and "everything_get_sum" in loaded,
                  "tool_search finds and loads the upstream everything_get_sum", found.structured_content)
            await asyncio.wait_for(list_changed.wait(), STEP_TIMEOUT)
            list_changed.clear()
            names = {t.name for t in await list_all(session)}
            check("everything_get_sum" in names, "the loaded upstream tool is in tools/list", sorted(names))
            meta = next(t for t in await list_all(session) if t.name == "everything_get_sum").meta or {}
            check(meta.get(META + "plugin") == "everything", "its _meta names the source", meta)

            # Callable by name, through the router's validation.
            s = await session.call_tool("everything_get_sum", {"a": 2, "b": 40})
            check(not s.is_error and "42" in text_of(s), "called by name: everything_get_sum(2, 40)", text_of(s))
            bad = await session.call_tool("everything_get_sum", {"a": 2, "b": "forty"})
            check(bad.is_error and "/b" in text_of(bad), "bad arguments are refused by Quiver with a pointer",
                  text_of(bad))

            # Callable by a deprecated alias (operator override), with its notice.
            old = await session.call_tool("run_tool", {"name": "say_back", "arguments": {"message": "hi"}})
            notice = (old.meta or {}).get(META + "notice", {})
            check(not old.is_error and "hi" in text_of(old) and notice.get("state") == "deprecated",
                  "the alias say_back reaches everything's echo and says it is deprecated", old.meta)

            # Callable through run_tool without loading: memory (npm) and the Python SDK servers.
            made = await session.call_tool("run_tool", {"name": "memory_create_entities", "arguments": {
                "entities": [{"name": "quiver", "entityType": "project", "observations": ["serves tools"]}]}})
            check(not made.is_error, "run_tool: memory_create_entities", text_of(made))
            graph = await session.call_tool("run_tool", {"name": "memory_read_graph", "arguments": {}})
            check("serves tools" in text_of(graph), "run_tool: memory_read_graph reads it back", text_of(graph)[:300])
            total = await session.call_tool("run_tool", {"name": "py_add", "arguments": {"a": 20, "b": 22}})
            check(not total.is_error and "42" in text_of(total), "run_tool: py_add (Python SDK, stdio)", text_of(total))
            total = await session.call_tool("run_tool", {"name": "pyhttp_add", "arguments": {"a": 1, "b": 2}})
            check(not total.is_error and "3" in text_of(total), "run_tool: pyhttp_add (Python SDK, streamable HTTP)",
                  text_of(total))
            total = await session.call_tool("run_tool", {"name": "pyhttps_add", "arguments": {"a": 2, "b": 2}})
            check(not total.is_error and "4" in text_of(total), "run_tool: pyhttps_add (streamable HTTP over TLS)",
                  text_of(total))
            bulk = await session.call_tool("run_tool", {"name": "big_bulk_117", "arguments": {"value": "x"}})
            check(not bulk.is_error and "bulk 117: x" in text_of(bulk), "run_tool: the 118th tool of the big server",
                  text_of(bulk))

            # Each server's tools in every lane.
            await every_lane(session, "read the entire knowledge graph", "memory_read_graph",
                             "memory_dump", {}, "serves tools")
            await every_lane(session, "py_add", "py_add", "py_sum", {"a": 40, "b": 2}, "42")

            # Out-of-scope tools are invisible in list, search and errors.
            hits = await session.call_tool("tool_search", {"query": "read the contents of a text file"})
            listed = json.dumps(hits.structured_content)
            check("files_" not in listed, "search never shows the out-of-scope files tools", listed[:300])
            hidden = await session.call_tool("run_tool", {"name": "files_read_text_file",
                                                          "arguments": {"path": "hello.txt"}})
            check(hidden.is_error and "files_" not in text_of(hidden).replace("files_read_text_file", ""),
                  "calling one is an unknown tool that suggests no other files tool", text_of(hidden))

            # Approval holds for a destructive upstream tool: Quiver asks this client's user.
            wipe = await session.call_tool("run_tool", {"name": "py_wipe", "arguments": {"target": "/"}})
            check(wipe.is_error and any("py_wipe" in m for k, m in asked),
                  "py_wipe (destructive) is confirmed with the user first; declined, it does not run", text_of(wipe))
            wipe = await session.call_tool("run_tool", {"name": "py_wipe", "arguments": {"target": "/"}})
            check(not wipe.is_error and "wiped" in text_of(wipe), "accepted, it runs", text_of(wipe))

            # Upstream progress reaches the calling client.
            progress = []

            async def on_progress(p, total, message):
                progress.append((p, total, message))

            slow = await session.call_tool("run_tool", {"name": "py_slow", "arguments": {"seconds": 0.4}},
                                           progress_callback=on_progress)
            check(not slow.is_error and len(progress) >= 2, "py_slow's progress reaches the client", progress)

            # The upstream's questions reach this client: elicitation and sampling.
            e = await session.call_tool("run_tool", {"name": "everything_trigger_elicitation_request",
                                                     "arguments": {}}, meta=CONFIRMED)
            check(any(k == "elicit" for k, _ in asked) and "Ada Lovelace" in text_of(e),
                  "an upstream's elicitation reaches the client and its answer goes back", text_of(e)[:300])
            smp = await session.call_tool("run_tool", {"name": "everything_trigger_sampling_request",
                                                       "arguments": {"prompt": "say hi", "maxTokens": 20}},
                                          meta=CONFIRMED)
            check(any(k == "sample" and "say hi" in t for k, t in asked) and "a sampled answer" in text_of(smp),
                  "an upstream's sampling request reaches the client and its answer goes back", text_of(smp)[:300])

            # Cancelling a call cancels it upstream.
            events = os.path.join(os.path.dirname(config), "events.txt")
            doomed = asyncio.create_task(
                session.call_tool("run_tool", {"name": "py_slow", "arguments": {"seconds": 30}}))
            await asyncio.sleep(1.0)
            doomed.cancel()
            deadline = time.monotonic() + STEP_TIMEOUT
            while not (os.path.exists(events) and "cancelled slow 30" in open(events).read()):
                if time.monotonic() > deadline:
                    raise AssertionError("the upstream never saw the cancellation")
                await asyncio.sleep(0.2)
            check(True, "a cancelled call is cancelled in the upstream server (notifications/cancelled)")

            # The upstream's tools/list_changed refreshes its tools and notifies the session.
            list_changed.clear()
            grow = await session.call_tool("run_tool", {"name": "py_grow", "arguments": {}})
            check(not grow.is_error, "py_grow adds a tool upstream", text_of(grow))
            deadline = time.monotonic() + STEP_TIMEOUT
            while True:
                await asyncio.wait_for(list_changed.wait(), STEP_TIMEOUT)
                list_changed.clear()
                names = {t.name for t in await list_all(session)}
                if "py_shout" in names or time.monotonic() > deadline:
                    break
            check("py_shout" in names, "the new upstream tool (active by override) is announced and listed",
                  sorted(names))
            shout = await session.call_tool("py_shout", {"text": "hey"})
            check("HEY" in text_of(shout), "and answers", text_of(shout))

            # Killing an upstream mid-call: a structured error for that call, the others never notice.
            who = await session.call_tool("run_tool", {"name": "py_whoami", "arguments": {}})
            pid = (who.structured_content or json.loads(text_of(who)))["pid"]
            pending = asyncio.create_task(
                session.call_tool("run_tool", {"name": "py_slow", "arguments": {"seconds": 20}}))
            await asyncio.sleep(1.0)
            os.kill(pid, signal.SIGKILL)
            killed = await asyncio.wait_for(pending, STEP_TIMEOUT)
            check(killed.is_error and "plugin_crashed" in json.dumps(killed.model_dump()),
                  "the call in flight gets plugin_crashed", text_of(killed))
            other = await session.call_tool("run_tool", {"name": "fs_read", "arguments": {"path": "notes.txt"}})
            check(not other.is_error and "needle" in text_of(other), "a plugin tool answers meanwhile", text_of(other))
            echo = await session.call_tool("run_tool", {"name": "everything_echo", "arguments": {"message": "still"}})
            check(not echo.is_error, "another upstream answers meanwhile", text_of(echo))
            again = await until_ok(session, "py_add", {"a": 1, "b": 1}, "py restarts")
            check("2" in text_of(again), "the killed upstream restarts and the next call works", text_of(again))
            who = await session.call_tool("run_tool", {"name": "py_whoami", "arguments": {}})
            new_pid = who.structured_content or json.loads(text_of(who))
            check(new_pid.get("pid") not in (None, pid), "it is a new process", new_pid)


async def wide_session(config):
    async with stdio_client(session_params(config, "wide")) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            await every_lane(session, "which directories am I allowed to access", "files_list_allowed_directories",
                             "files_roots", {}, "files")
            hits = await session.call_tool("tool_search", {"query": "read the contents of a text file"})
            check("files_read_text_file" in json.dumps(hits.structured_content),
                  "with the files scope, search finds the filesystem server's tool", hits.structured_content)
            read = await session.call_tool("run_tool", {"name": "files_read_text_file",
                                                        "arguments": {"path": "hello.txt"}})
            # The filesystem server wants absolute paths inside its root; a relative one is its error.
            if read.is_error:
                files = [r for r in (await session.call_tool("run_tool", {
                    "name": "files_list_allowed_directories", "arguments": {}})).content]
                root = text_of(types.CallToolResult(content=files)).split("\n")[-1].strip()
                read = await session.call_tool("run_tool", {"name": "files_read_text_file",
                                                            "arguments": {"path": os.path.join(root, "hello.txt")}})
            check(not read.is_error and "hello from the filesystem server" in text_of(read),
                  "run_tool: files_read_text_file (npm filesystem server)", text_of(read))
            write = await session.call_tool("run_tool", {"name": "files_write_file",
                                                         "arguments": {"path": "x", "content": "y"}})
            check(write.is_error and "confirmation" in text_of(write),
                  "files_write_file (destructive by the spec's defaults) needs confirmation", text_of(write))


def replay(config):
    tdir = os.path.join(os.path.dirname(config), "transcripts")
    files = [os.path.join(tdir, f) for f in sorted(os.listdir(tdir)) if f.endswith(".jsonl")]
    agent = [f for f in files if "everything_get_sum" in open(f).read()]
    check(len(files) == 2 and len(agent) == 1, "each session wrote a transcript; one holds the upstream calls", files)
    env = quiver_env(os.path.dirname(config))
    out = subprocess.run([QUIVER_BIN, "--config", config, "replay", "--json", agent[0]],
                         capture_output=True, text=True, timeout=180, env=env)
    report = json.loads(out.stdout or "{}")
    verdicts = {}
    for e in report.get("entries", []):
        verdicts.setdefault(e["called_name"], e["verdict"])
    for name in ["everything_get_sum", "say_back", "memory_read_graph", "py_add", "pyhttp_add", "pyhttps_add",
                 "big_bulk_117"]:
        check(verdicts.get(name) == "identical", f"replaying the transcript, {name} answers the same", verdicts)


def down_at_start(config):
    """The py server cannot start now: its tools stay findable from the last listing, and a call
    says why it fails instead of pretending the tool does not exist."""
    with open(config) as f:
        cfg = json.load(f)
    for src in cfg["sources"]:
        if src["name"] == "py":
            src["command"] = os.path.join(os.path.dirname(config), "no-such-server")
    broken = os.path.join(os.path.dirname(config), "broken.yaml")
    with open(broken, "w") as f:
        json.dump(cfg, f)
    env = quiver_env(os.path.dirname(config))
    found = subprocess.run([QUIVER_BIN, "--config", broken, "search", "--json", "py_add"],
                           capture_output=True, text=True, timeout=120, env=env)
    check("py_add" in found.stdout, "a server down at start keeps its tools in search (last listing)",
          found.stdout[:300] + found.stderr[-300:])
    call = subprocess.run([QUIVER_BIN, "--config", broken, "call", "py_add", "--args", '{"a": 1, "b": 2}'],
                          capture_output=True, text=True, timeout=120, env=env)
    check(call.returncode != 0 and "plugin_unavailable" in call.stderr and "no-such-server" in call.stderr,
          "and a call says it is unavailable and why", call.stderr[-400:])


def wait_for_port(port):
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def main():
    work = tempfile.mkdtemp(prefix="quiver-upstreams-")
    tls = make_tls(work)
    port, tls_port = free_port(), free_port()
    servers = [
        subprocess.Popen([PYTHON, PY_SERVER, "http", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
        subprocess.Popen([PYTHON, PY_SERVER, "https", str(tls_port), tls["leaf.pem"], tls["leaf.key"]],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
    ]
    try:
        wait_for_port(port)
        wait_for_port(tls_port)
        config = write_config(work, port, tls_port)
        with open(config) as f:
            check("not-in-the-config" not in f.read(), "the HTTP header secret is read from the environment")
        asyncio.run(asyncio.wait_for(agent_session(config), 300))
        asyncio.run(asyncio.wait_for(wide_session(config), 120))
        replay(config)
        down_at_start(config)
    except Exception as e:  # report which step failed, then fail the run
        fail(e)
    finally:
        for s in servers:
            s.kill()
    print(f"all {len(passed)} checks passed", flush=True)


if __name__ == "__main__":
    main()
