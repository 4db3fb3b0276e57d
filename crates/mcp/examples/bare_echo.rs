//! A bare `rmcp` server with one `echo` tool: the baseline `stdio_bench` and `http_bench`
//! compare `quiver serve` against (`cargo xtask bench`).
//!
//! ```text
//! bare_echo                  # stdio through rmcp::transport::stdio_pipes()
//! bare_echo --stdio          # stdio through rmcp::transport::stdio() (tokio's stdin/stdout)
//! bare_echo --http PORT      # streamable HTTP at http://127.0.0.1:PORT/mcp (rmcp defaults)
//! ```

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData, JsonObject, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};

struct Echo {
    tool: Tool,
}

impl ServerHandler for Echo {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(vec![self.tool.clone()]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let text = request.arguments.as_ref().and_then(|a| a.get("text")).cloned().unwrap_or(Value::Null);
        let out = json!({ "text": text });
        let mut r = CallToolResult::success(vec![ContentBlock::text(out.to_string())]);
        r.structured_content = Some(out);
        Ok(r.into())
    }
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let schema: JsonObject = serde_json::from_value(json!({
        "type": "object", "properties": { "text": { "type": "string" } }, "required": ["text"]
    }))
    .map_err(std::io::Error::other)?;
    let tool = Tool::new("echo", "Returns its text.", Arc::new(schema));
    if let Some(i) = args.iter().position(|a| a == "--http") {
        let port: u16 = args.get(i + 1).and_then(|p| p.parse().ok()).unwrap_or(8766);
        return serve_http(tool, port).await;
    }
    let running = if args.iter().any(|a| a == "--stdio") {
        Echo { tool }.serve(rmcp::transport::stdio()).await
    } else {
        Echo { tool }.serve(rmcp::transport::stdio_pipes()).await
    }
    .map_err(std::io::Error::other)?;
    running.waiting().await.map_err(std::io::Error::other)?;
    Ok(())
}

/// Streamable HTTP with rmcp's default configuration and in-memory sessions, served by axum.
async fn serve_http(tool: Tool, port: u16) -> std::io::Result<()> {
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
    let service = StreamableHttpService::new(
        move || Ok(Echo { tool: tool.clone() }),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    let app = axum::Router::new().route_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    eprintln!("bare_echo: serving MCP at http://{}/mcp", listener.local_addr()?);
    // Without TCP_NODELAY a small reply waits for the client's delayed ACK (~40 ms per call).
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, app).await
}
