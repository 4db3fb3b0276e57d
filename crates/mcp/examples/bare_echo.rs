//! A bare `rmcp` stdio server with one `echo` tool: the baseline `stdio_bench` compares
//! `quiver serve` against (Quiver should add less than 10% to its round trip).
//!
//! `cargo run --release -p quiver-mcp --example bare_echo`

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
    let schema: JsonObject = serde_json::from_value(json!({
        "type": "object", "properties": { "text": { "type": "string" } }, "required": ["text"]
    }))
    .map_err(std::io::Error::other)?;
    let tool = Tool::new("echo", "Returns its text.", Arc::new(schema));
    let running = Echo { tool }.serve(rmcp::transport::stdio_pipes()).await.map_err(std::io::Error::other)?;
    running.waiting().await.map_err(std::io::Error::other)?;
    Ok(())
}
