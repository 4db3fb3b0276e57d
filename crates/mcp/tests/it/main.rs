//! Integration tests of the MCP server: real plugin bundles, the real host and router, and raw
//! JSON-RPC over the stdio framing and over HTTP.

mod auth;
mod hooks;
mod http;
mod meta;
mod resources;
mod resume;
mod stdio;
mod support;
