//! `quiver demo`: a real MCP session on the configured plugins. Starts `quiver serve` as a child
//! process and drives it over stdio with the official Rust SDK's client, printing each step:
//! what the model would see, a search that loads a deferred tool (with the `list_changed`
//! notification), a typed call, a deprecated alias with its notice, invalid arguments a model can
//! repair, and the generic lane reaching a tool that was never listed.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use clap::Args;
use rmcp::model::{CallToolRequestParams, ClientConfig};
use rmcp::service::{NotificationContext, RoleClient, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientHandler, ServiceExt};
use serde_json::{Value, json};

use crate::GlobalArgs;

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Profile the session runs under [default: chosen by the server from the client name].
    #[arg(long, env = "QUIVER_PROFILE")]
    pub profile: Option<String>,
}

/// Counts `tools/list_changed` notifications and prints server log messages.
#[derive(Clone, Default)]
struct DemoClient {
    list_changed: Arc<AtomicUsize>,
}

impl ClientHandler for DemoClient {
    fn get_info(&self) -> ClientConfig {
        let mut info = ClientConfig::default();
        info.client_info.name = "quiver-demo".into();
        info.client_info.version = env!("CARGO_PKG_VERSION").into();
        info
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.list_changed.fetch_add(1, Ordering::SeqCst);
    }
}

type Session = RunningService<RoleClient, DemoClient>;

fn step(n: usize, title: &str) {
    println!("\n== {n}. {title}");
}

async fn list_names(client: &Session) -> Result<(Vec<String>, usize)> {
    let mut names = Vec::new();
    let mut bytes = 0;
    let mut cursor = None;
    loop {
        let page = client
            .list_tools(Some(rmcp::model::PaginatedRequestParams::default().with_cursor(cursor)))
            .await
            .context("tools/list failed")?;
        bytes += serde_json::to_vec(&page.tools)?.len();
        names.extend(page.tools.iter().map(|t| t.name.to_string()));
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    Ok((names, bytes))
}

async fn call(client: &Session, name: &str, args: Value) -> Result<Value> {
    let Value::Object(args) = args else { bail!("arguments must be an object") };
    let result = client
        .call_tool(CallToolRequestParams::new(name.to_owned()).with_arguments(args))
        .await
        .with_context(|| format!("tools/call {name} failed"))?;
    Ok(serde_json::to_value(result)?)
}

fn show(result: &Value) {
    let is_error = result.get("isError").and_then(Value::as_bool).unwrap_or(false);
    println!("   isError: {is_error}");
    if let Some(s) = result.get("structuredContent") {
        let text = serde_json::to_string(s).unwrap_or_default();
        let short: String = text.chars().take(400).collect();
        println!("   structuredContent: {short}{}", if text.chars().count() > 400 { " ..." } else { "" });
    } else if let Some(t) = result.pointer("/content/0/text").and_then(Value::as_str) {
        let short: String = t.chars().take(600).collect();
        println!("   content: {short}");
    }
    if let Some(meta) = result.get("_meta") {
        println!("   _meta: {}", serde_json::to_string(meta).unwrap_or_default());
    }
}

pub fn run(g: &GlobalArgs, a: &DemoArgs) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    rt.block_on(session(g, a))
}

async fn session(g: &GlobalArgs, a: &DemoArgs) -> Result<()> {
    let exe = std::env::current_exe().context("cannot find the quiver binary")?;
    let mut cmd = tokio::process::Command::new(exe);
    if let Some(c) = &g.config {
        cmd.arg("--config").arg(c);
    }
    if let Some(p) = &g.plugins {
        cmd.arg("--plugins").arg(p);
    }
    cmd.arg("serve");
    if let Some(p) = &a.profile {
        cmd.arg("--profile").arg(p);
    }
    if std::env::var_os("RUST_LOG").is_none() {
        cmd.env("RUST_LOG", "warn");
    }
    let transport = TokioChildProcess::new(cmd).context("cannot start `quiver serve`")?;
    let handler = DemoClient::default();
    let changes = handler.list_changed.clone();
    let started = Instant::now();
    let client = handler.serve(transport).await.context("MCP initialize with `quiver serve` failed")?;
    let peer = client.peer_info();

    step(1, "initialize");
    if let Some(info) = &peer {
        let (name, version) =
            info.server_info.as_ref().map(|s| (s.name.as_str(), s.version.as_str())).unwrap_or(("?", "?"));
        println!(
            "   server {name} {version} (protocol {}), initialized in {} ms",
            info.protocol_version,
            started.elapsed().as_millis()
        );
    }

    step(2, "tools/list: what the model sees on its first turn");
    let (names, bytes) = list_names(&client).await?;
    println!("   {} tools, {bytes} bytes: {}", names.len(), names.join(", "));

    step(3, "tool_search: \"how many business days between two dates\"");
    let found =
        call(&client, "tool_search", json!({"query": "how many business days between two dates", "limit": 3})).await?;
    show(&found);
    let deadline = Instant::now() + Duration::from_secs(3);
    while changes.load(Ordering::SeqCst) == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!("   notifications/tools/list_changed received: {}", changes.load(Ordering::SeqCst) > 0);

    step(4, "tools/list again: the found tool is loaded into this session");
    let (after, bytes_after) = list_names(&client).await?;
    let added: Vec<&String> = after.iter().filter(|n| !names.contains(n)).collect();
    println!("   {} tools, {bytes_after} bytes; new: {added:?}", after.len());

    step(5, "call date_diff directly");
    show(&call(&client, "date_diff", json!({"start": "2026-01-01", "end": "2026-11-22"})).await?);

    step(6, "call read_file, a deprecated alias of fs_read: same result, notice in _meta");
    show(&call(&client, "read_file", json!({"path": "Cargo.toml", "max_lines": 3})).await?);

    step(7, "invalid arguments: a tool error the model can repair (JSON pointers)");
    show(&call(&client, "date_diff", json!({"start": 20260101})).await?);

    step(8, "run_tool reaches a deferred tool that was never listed, through the same checks");
    show(&call(&client, "run_tool", json!({"name": "fs_stat", "arguments": {"path": "Cargo.toml"}})).await?);

    step(9, "run_tool cannot be used to call itself");
    show(&call(&client, "run_tool", json!({"name": "run_tool", "arguments": {}})).await?);

    client.cancel().await.ok();
    println!("\nsession closed");
    Ok(())
}
