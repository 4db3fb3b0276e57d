// End to end: the official TypeScript MCP SDK (`@modelcontextprotocol/sdk`) as a stdio client of
// `quiver serve`. Run by `cargo xtask e2e` (after the Python session), with the same
// environment: QUIVER_BIN, QUIVER_CONFIG, E2E_ROOT (holds notes.txt and many/ with 3000 files).
//
// The SDK's client validates every structuredContent against the tool's outputSchema (Ajv) and
// refuses results that do not match: each call below passes only if Quiver's result does,
// a result cut to its size limit included.

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const META = "io.github.quiver/";
let passed = 0;

function check(condition, step, detail) {
  if (!condition) {
    throw new Error(`${step}: ${JSON.stringify(detail)?.slice(0, 500)}`);
  }
  passed += 1;
  console.log(`ok - ${step}`);
}

const text = (r) => r.content.filter((b) => b.type === "text").map((b) => b.text).join("\n");

async function main() {
  const warnings = [];
  const warn = console.warn;
  console.warn = (...args) => {
    warnings.push(args.join(" "));
    warn(...args);
  };
  const transport = new StdioClientTransport({
    command: process.env.QUIVER_BIN,
    args: ["--config", process.env.QUIVER_CONFIG, "serve"],
    stderr: "inherit",
  });
  const client = new Client({ name: "quiver-e2e-ts", version: "1.0.0" });
  await client.connect(transport);
  check(client.getServerCapabilities()?.resources, "the server declares resources", client.getServerCapabilities());

  let tools = [];
  let cursor;
  do {
    const page = await client.listTools(cursor ? { cursor } : {});
    tools = tools.concat(page.tools);
    cursor = page.nextCursor;
  } while (cursor);
  check(tools.some((t) => t.name === "fs_read"), "tools/list", tools.map((t) => t.name));
  const formats = JSON.stringify(tools).match(/"format":"(u?int\d*|double|float|uint)"/g);
  check(!formats, "no non-standard formats in advertised schemas", formats);

  const read = await client.callTool({ name: "fs_read", arguments: { path: "notes.txt" } });
  check(!read.isError && read.structuredContent && text(read).includes("needle"), "fs_read", read);

  const search = await client.callTool({ name: "tool_search", arguments: { query: "list the files in a folder" } });
  check(!search.isError, "tool_search", search);
  const bad = await client.callTool({ name: "tool_search", arguments: { query: "x", limit: 500 } });
  check(bad.isError && bad._meta[META + "error"].details.errors[0].pointer === "/limit", "tool_search refuses limit 500", bad);

  // Cut to its limit: still valid against fs_list's output schema (the SDK checks), with a link.
  const big = await client.callTool({ name: "run_tool", arguments: { name: "fs_list", arguments: { path: "many", max_entries: 5000 } } });
  check(!big.isError, "a cut result through run_tool", text(big).slice(0, 200));
  const cut = big._meta[META + "truncation"];
  check(cut && cut.structured === true, "the cut is described in _meta", big._meta);
  const link = big.content.find((b) => b.type === "resource_link");
  check(link && link.uri === cut.uri, "a resource_link to the full result", big.content.map((b) => b.type));
  const typed = await client.callTool({ name: "fs_list", arguments: { path: "many", max_entries: 5000 } });
  check(!typed.isError && typed.structuredContent.entries.length < 3000, "a typed cut result passes the SDK's schema check", typed._meta);
  const full = await client.readResource({ uri: cut.uri });
  check(JSON.parse(full.contents[0].text).entries.length === 3000, "resources/read returns the whole result", full.contents[0].text.length);
  const docs = await client.listResources();
  check(docs.resources.some((r) => r.uri === "quiver://tools/fs_read"), "tool documentation is listed", docs.resources.length);

  await client.ping();
  await client.close();
  const ajv = warnings.filter((w) => /unknown format/i.test(w));
  check(ajv.length === 0, "no schema warnings from the SDK", ajv.slice(0, 3));
  console.log(`all ${passed} checks passed`);
}

main().catch((e) => {
  console.log(`not ok - ${e.message}`);
  console.log(`${passed} checks passed before the failure`);
  process.exit(1);
});
