//! Session memory: what tools ask the host to remember (`ToolResponse.memory_writes`), kept per
//! session and tool and handed back to that tool on its later calls in that session
//! (`ToolRequest.memory_snippet`, a JSON object of the remembered keys). Bounded: keys of at
//! most [`MAX_KEY_BYTES`], at most [`MAX_SNIPPET_BYTES`] per session and tool (a write that would
//! exceed it is refused whole and logged; the previous value stays), at most [`MAX_SCOPES`]
//! session-tool pairs (the least recently used go first), and a pair unused for
//! [`IDLE_TTL`] is forgotten. Nothing here is sent to the client.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use quiver_abi::contract::MemoryWrite;
use serde_json::{Map, Value};

/// Longest key, in bytes.
pub const MAX_KEY_BYTES: usize = 128;
/// Most bytes of one session-tool pair's memory (its snippet's JSON).
pub const MAX_SNIPPET_BYTES: usize = 4096;
/// Most session-tool pairs kept.
pub const MAX_SCOPES: usize = 4096;
/// A pair not used for this long is forgotten.
pub const IDLE_TTL: Duration = Duration::from_secs(3600);

struct Scope {
    /// The remembered keys, in key order.
    values: Map<String, Value>,
    /// Their JSON, handed to the tool.
    snippet: String,
    used: Instant,
}

/// The memory of every session, keyed by (session id, plugin id, tool name).
#[derive(Default)]
pub(crate) struct MemoryStore {
    /// False until the first write: calls of hosts whose tools never remember take no lock.
    used: AtomicBool,
    inner: Mutex<HashMap<(String, String, String), Scope>>,
}

impl MemoryStore {
    /// The snippet for a call of `tool` (of `plugin`) in `session`, if it remembered anything.
    pub(crate) fn snippet(&self, session: &str, plugin: &str, tool: &str) -> Option<String> {
        if !self.used.load(Ordering::Acquire) {
            return None;
        }
        let mut map = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let key = (session.to_owned(), plugin.to_owned(), tool.to_owned());
        let now = Instant::now();
        let scope = map.get_mut(&key)?;
        if now.duration_since(scope.used) > IDLE_TTL {
            map.remove(&key);
            return None;
        }
        scope.used = now;
        Some(scope.snippet.clone())
    }

    /// Applies a tool's writes. Returns a message per refused write (for the log).
    pub(crate) fn write(&self, session: &str, plugin: &str, tool: &str, writes: &[MemoryWrite]) -> Vec<String> {
        if writes.is_empty() {
            return Vec::new();
        }
        self.used.store(true, Ordering::Release);
        let mut refused = Vec::new();
        let mut map = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let key = (session.to_owned(), plugin.to_owned(), tool.to_owned());
        if !map.contains_key(&key) {
            map.retain(|_, s| now.duration_since(s.used) <= IDLE_TTL);
            while map.len() >= MAX_SCOPES {
                let Some(oldest) = map.iter().min_by_key(|(_, s)| s.used).map(|(k, _)| k.clone()) else { break };
                map.remove(&oldest);
            }
        }
        let scope = map.entry(key).or_insert_with(|| Scope { values: Map::new(), snippet: "{}".to_owned(), used: now });
        scope.used = now;
        for w in writes {
            if w.key.is_empty() || w.key.len() > MAX_KEY_BYTES {
                refused.push(format!("memory key of {} bytes refused (1 to {MAX_KEY_BYTES} bytes)", w.key.len()));
                continue;
            }
            let mut next = scope.values.clone();
            if w.value.is_null() {
                next.remove(&w.key);
            } else {
                next.insert(w.key.clone(), w.value.clone());
            }
            // Serializing a map of JSON values cannot fail.
            let snippet = serde_json::to_string(&next).unwrap_or_default();
            if snippet.len() > MAX_SNIPPET_BYTES {
                refused.push(format!(
                    "memory write to `{}` refused: the tool's memory in this session would be {} bytes (at most {MAX_SNIPPET_BYTES}); the previous value stays",
                    w.key,
                    snippet.len()
                ));
                continue;
            }
            scope.values = next;
            scope.snippet = snippet;
        }
        refused
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn w(key: &str, value: Value) -> MemoryWrite {
        MemoryWrite { key: key.into(), value }
    }

    #[test]
    fn scoped_bounded_and_forgettable() {
        let m = MemoryStore::default();
        assert_eq!(m.snippet("s", "p", "t"), None);
        assert!(m.write("s", "p", "t", &[w("a", json!(1)), w("b", json!("x"))]).is_empty());
        assert_eq!(m.snippet("s", "p", "t").as_deref(), Some(r#"{"a":1,"b":"x"}"#));
        assert_eq!(m.snippet("s2", "p", "t"), None);
        assert_eq!(m.snippet("s", "p", "u"), None);
        assert!(m.write("s", "p", "t", &[w("a", Value::Null)]).is_empty());
        assert_eq!(m.snippet("s", "p", "t").as_deref(), Some(r#"{"b":"x"}"#));
        let refused = m.write("s", "p", "t", &[w("", json!(1)), w("big", json!("x".repeat(5000)))]);
        assert_eq!(refused.len(), 2, "{refused:?}");
        assert!(refused[1].contains("at most 4096"), "{refused:?}");
        assert_eq!(m.snippet("s", "p", "t").as_deref(), Some(r#"{"b":"x"}"#));
    }
}
