//! `tools/list`: catalog descriptors as MCP tools (built once per catalog snapshot), a session's
//! surface as a listing, and opaque page cursors.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, OnceLock};

use quiver_catalog::{Catalog, Notice, Partition, Surface};
use rmcp::model::{ErrorData, JsonObject, ListToolsResult, MetaObject, Tool};
use serde_json::{Map, Value, json};

use crate::META_PREFIX;

/// The MCP tools of one catalog snapshot, each built on first use (with a hash of its
/// serialization) and then shared by every session: listing never re-serializes the catalog.
pub(crate) struct CatalogTools {
    catalog: Arc<Catalog>,
    tools: Vec<OnceLock<(Tool, u64, usize)>>,
}

/// Hash and length of a tool's serialization.
fn hash_of(tool: &Tool) -> (u64, usize) {
    let mut h = DefaultHasher::new();
    let bytes = serde_json::to_vec(tool).unwrap_or_default();
    bytes.hash(&mut h);
    (h.finish(), bytes.len())
}

impl CatalogTools {
    fn new(catalog: Arc<Catalog>) -> CatalogTools {
        let tools = (0..catalog.tools().len()).map(|_| OnceLock::new()).collect();
        CatalogTools { catalog, tools }
    }

    /// The MCP tool of catalog tool `i`, and the hash and length of its serialization.
    pub(crate) fn tool(&self, i: usize) -> &(Tool, u64, usize) {
        self.tools[i].get_or_init(|| {
            let t = catalog_tool(&self.catalog, i);
            let (h, n) = hash_of(&t);
            (t, h, n)
        })
    }
}

/// The [`CatalogTools`] of the newest snapshot seen.
#[derive(Default)]
pub(crate) struct ToolCache {
    slot: Mutex<Option<Arc<CatalogTools>>>,
}

impl ToolCache {
    /// The tools of `catalog` (rebuilt lazily when the snapshot changed).
    pub(crate) fn for_catalog(&self, catalog: &Arc<Catalog>) -> Arc<CatalogTools> {
        let mut slot = self.slot.lock().unwrap_or_else(|e| e.into_inner());
        match &*slot {
            Some(t) if Arc::ptr_eq(&t.catalog, catalog) => t.clone(),
            _ => {
                let t = Arc::new(CatalogTools::new(catalog.clone()));
                *slot = Some(t.clone());
                t
            }
        }
    }
}

/// `io.github.quiver/<name>`, put together without the formatting machinery (once per key of
/// every call result).
fn key(name: &str) -> String {
    let mut key = String::with_capacity(META_PREFIX.len() + name.len());
    key.push_str(META_PREFIX);
    key.push_str(name);
    key
}

/// An MCP output schema must describe an object; other derived schemas (e.g. a tool returning
/// a bare string) are left out of the listing rather than breaking strict clients.
pub(crate) fn is_object_schema(schema: &Value) -> bool {
    schema.get("type").and_then(Value::as_str) == Some("object")
}

fn to_tool(mut descriptor: Value, meta: Map<String, Value>) -> Tool {
    if let Some(d) = descriptor.as_object_mut() {
        if d.get("outputSchema").is_some_and(|s| !is_object_schema(s)) {
            d.remove("outputSchema");
        }
        d.insert("_meta".into(), Value::Object(meta));
    }
    match serde_json::from_value::<Tool>(descriptor.clone()) {
        Ok(t) => t,
        Err(e) => {
            // Cannot happen for catalog descriptors (names and schemas are validated at load);
            // keep the tool listed with an open schema rather than failing the whole listing.
            tracing::error!(error = %e, descriptor = %descriptor, "tool descriptor does not fit the MCP tool shape");
            let name = descriptor["name"].as_str().unwrap_or("invalid_tool").to_owned();
            let mut schema = JsonObject::new();
            schema.insert("type".into(), Value::String("object".into()));
            Tool::new(name, "This tool's descriptor could not be listed.", Arc::new(schema))
        }
    }
}

/// A notice as `_meta` carries it: its fields plus the sentence a model reads.
pub(crate) fn notice_json(notice: &Notice) -> Value {
    let mut v = serde_json::to_value(notice).unwrap_or(Value::Null);
    if let Value::Object(m) = &mut v {
        m.insert("message".into(), Value::String(notice.message()));
    }
    v
}

fn catalog_tool(catalog: &Catalog, i: usize) -> Tool {
    let r = &catalog.tools()[i];
    let plugin = catalog.plugin_of(r);
    let def = catalog.def(r);
    let (descriptor, _) = catalog.descriptor(i);
    let mut meta = Map::new();
    meta.insert(key("plugin"), json!(plugin.id()));
    meta.insert(key("version"), json!(plugin.manifest.version.to_string()));
    meta.insert(key("state"), json!(def.spec.lifecycle.state.as_str()));
    meta.insert(key("sha256"), json!(plugin.provenance.sha256));
    if let Some(k) = &plugin.provenance.signer_key_id {
        meta.insert(key("signer"), json!(k));
    }
    meta.insert(key("isolation"), json!(plugin.backend.placement().isolation));
    // Deprecation notices of aliases belong in the results of calls by those names, never in
    // the listing (they would cost every client bytes on every turn).
    to_tool((**descriptor).clone(), meta)
}

fn meta_tool(descriptor: &Value) -> Tool {
    let mut meta = Map::new();
    meta.insert(key("meta"), Value::Bool(true));
    to_tool(descriptor.clone(), meta)
}

/// A session's surface as MCP tools, with a fingerprint of exactly what a client would see.
#[derive(Debug)]
pub(crate) struct Listing {
    /// The snapshot the listing was built from.
    pub(crate) catalog: Arc<Catalog>,
    /// Tools in surface order.
    pub(crate) tools: Vec<Tool>,
    /// Hash of the serialized tools: equal fingerprints, identical listings.
    pub(crate) fingerprint: u64,
    /// Bytes of the serialized tools (what the whole listing costs a client).
    pub(crate) bytes: usize,
}

impl Listing {
    pub(crate) fn build(tools: &CatalogTools, catalog: &Arc<Catalog>, surface: &Surface) -> Listing {
        let mut out = Vec::with_capacity(surface.entries.len());
        // The fingerprint hashes the tools' own hashes, in order: O(tools), no serialization.
        let mut h = DefaultHasher::new();
        let mut bytes = 0;
        for e in &surface.entries {
            if e.partition == Partition::Meta {
                let t = meta_tool(&e.descriptor);
                let (th, n) = hash_of(&t);
                th.hash(&mut h);
                bytes += n;
                out.push(t);
            } else if let Some(i) = catalog.tool_index(&e.name) {
                let (t, th, n) = tools.tool(i);
                th.hash(&mut h);
                bytes += n;
                out.push(t.clone());
            }
        }
        Listing { catalog: catalog.clone(), tools: out, fingerprint: h.finish(), bytes }
    }

    /// The page a cursor points at. Cursors are opaque to clients: they name the listing they
    /// came from (its fingerprint) and an offset; a cursor that does not parse, points past the
    /// end or belongs to a listing that has since changed is `-32602`.
    pub(crate) fn page(&self, cursor: Option<&str>, page_size: usize) -> Result<ListToolsResult, ErrorData> {
        let start = match cursor {
            None => 0,
            Some(c) => self.decode(c)?,
        };
        let end = (start + page_size.max(1)).min(self.tools.len());
        let mut result = ListToolsResult::with_all_items(self.tools[start..end].to_vec());
        if end < self.tools.len() {
            result.next_cursor = Some(self.encode(end));
        }
        Ok(result)
    }

    fn encode(&self, offset: usize) -> String {
        format!("{:016x}{:08x}", self.fingerprint, offset)
    }

    fn decode(&self, cursor: &str) -> Result<usize, ErrorData> {
        let invalid = |why: &str| {
            ErrorData::invalid_params(
                format!("invalid cursor: {why}; call tools/list without a cursor to start again"),
                Some(json!({ "cursor": cursor })),
            )
        };
        if cursor.len() != 24 || !cursor.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(invalid("it was not issued by this server"));
        }
        let fingerprint = u64::from_str_radix(&cursor[..16], 16).map_err(|_| invalid("it does not parse"))?;
        let offset = usize::from_str_radix(&cursor[16..], 16).map_err(|_| invalid("it does not parse"))?;
        if fingerprint != self.fingerprint {
            return Err(invalid("the tool list changed since it was issued"));
        }
        if offset == 0 || offset >= self.tools.len() {
            return Err(invalid("it points outside the tool list"));
        }
        Ok(offset)
    }
}

/// `_meta` of a result, from `(name, value)` pairs (names get [`META_PREFIX`]).
pub(crate) fn meta_of(pairs: impl IntoIterator<Item = (&'static str, Value)>) -> MetaObject {
    let mut m = Map::new();
    for (k, v) in pairs {
        m.insert(key(k), v);
    }
    MetaObject(m)
}
