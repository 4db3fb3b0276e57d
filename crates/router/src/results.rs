//! Results over their size limit: cutting them down so they still match the tool's output
//! schema ([`fit`]), and their full texts, retrievable by handle for a bounded time by the
//! session that made them. Touched only when a result is too big or fetched, never on the
//! ordinary call path.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;

/// The URI scheme and prefix of a result handle served as an MCP resource.
pub const RESULT_URI_PREFIX: &str = "quiver://results/";

/// The name `run_tool` takes to read a stored result (`{"handle", "offset", "length"}`): the
/// generic-lane way to fetch a cut result, for clients that do not read resources. Tool names
/// cannot contain a dot, so it never shadows a catalog tool.
pub const READ_RESULT: &str = "quiver.read_result";

/// Bytes `quiver.read_result` returns when no `length` is given, and at most.
pub const READ_RESULT_DEFAULT_LEN: usize = 64 * 1024;

/// One value a cut shortened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Cut {
    /// JSON pointer of the value in the tool's `outputs`.
    pub pointer: String,
    /// `string` (bytes kept before the marker) or `array` (items kept).
    pub kind: &'static str,
    /// Bytes (strings) or items (arrays) kept.
    pub kept: usize,
    /// Bytes or items the value had.
    pub total: usize,
}

/// How a result over its size limit was cut (in [`crate::CallMeta`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Truncation {
    /// The handle of the full result.
    pub handle: String,
    /// `quiver://results/<handle>`: the full result as an MCP resource.
    pub uri: String,
    /// Bytes of the full result's JSON.
    pub total_bytes: usize,
    /// Bytes of the JSON sent instead.
    pub shown_bytes: usize,
    /// The tool's size limit.
    pub limit_bytes: usize,
    /// True when the cut output still matches the tool's output schema and is sent as
    /// structured output; false when no cut could (then no structured output is sent).
    pub structured: bool,
    /// Why no structured output could be sent, when `structured` is false.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// True when the tool advertises an output schema (clients then expect structured output).
    pub has_output_schema: bool,
    /// The values shortened, largest first.
    pub cuts: Vec<Cut>,
}

/// Serialized JSON length of a value.
fn json_len(v: &Value) -> usize {
    serde_json::to_vec(v).map(|b| b.len()).unwrap_or(usize::MAX)
}

fn push_token(pointer: &str, token: &str) -> String {
    format!("{pointer}/{}", token.replace('~', "~0").replace('/', "~1"))
}

/// The value to shorten next: the largest string, or an array whose size is not dominated by
/// one item (else the search goes into that item). `None` when nothing can be shortened.
/// Strings no longer than `min_string` are left alone (a marker would not make them shorter).
fn pick(v: &Value, pointer: String, cut_strings: &HashMap<String, Cut>, min_string: usize) -> Option<(String, usize)> {
    match v {
        Value::String(s) => {
            let kept = cut_strings.get(&pointer).map_or(s.len(), |c| c.kept);
            let len = json_len(v);
            (kept > 0 && len > min_string).then_some((pointer, len))
        }
        Value::Array(items) => {
            if items.is_empty() {
                return None;
            }
            let sizes: Vec<usize> = items.iter().map(json_len).collect();
            let total: usize = sizes.iter().sum();
            let (i, largest) = sizes.iter().copied().enumerate().max_by_key(|&(_, n)| n).unwrap_or((0, 0));
            if items.len() > 1 && largest * 2 < total {
                return Some((pointer, total));
            }
            pick(&items[i], push_token(&pointer, &i.to_string()), cut_strings, min_string).or(Some((pointer, total)))
        }
        Value::Object(m) => {
            let mut children: Vec<(&String, &Value, usize)> = m.iter().map(|(k, c)| (k, c, json_len(c))).collect();
            children.sort_by_key(|c| std::cmp::Reverse(c.2));
            children.into_iter().find_map(|(k, c, _)| pick(c, push_token(&pointer, k), cut_strings, min_string))
        }
        _ => None,
    }
}

/// Shortens `value` until its JSON is at most `max` bytes: the largest string or array value
/// each round, by at most half; a string keeps a prefix followed by `marker(cut_bytes)`, an array its first items.
/// Returns the cuts made, largest first, or `None` when it cannot fit (nothing left to shorten).
pub(crate) fn fit(value: &mut Value, max: usize, marker: &dyn Fn(usize) -> String) -> Option<Vec<Cut>> {
    let mut cuts: HashMap<String, Cut> = HashMap::new();
    let mut order: Vec<String> = Vec::new();
    // Each round removes at least the excess from one value or empties it, so rounds are few;
    // the bound is a guard.
    for _ in 0..256 {
        let size = json_len(value);
        if size <= max {
            let mut out: Vec<Cut> = order
                .iter()
                .filter(|p| value.pointer(p).is_some())
                .filter_map(|p| {
                    cuts.remove(p).map(|mut c| {
                        c.pointer.clone_from(p);
                        c
                    })
                })
                .collect();
            out.sort_by_key(|c| std::cmp::Reverse(c.total - c.kept.min(c.total)));
            return Some(out);
        }
        // At most half of the chosen value per round, so that several large values end up
        // shortened alike rather than the largest one emptied.
        let (pointer, chosen) = pick(value, String::new(), &cuts, marker(usize::MAX).len() + 16)?;
        let excess = (size - max).min(chosen.div_ceil(2).max(1));
        let target = value.pointer_mut(&pointer)?;
        match target {
            Value::String(s) => {
                let prev = cuts.get(&pointer).cloned();
                let (total, kept_before) = prev.as_ref().map_or((s.len(), s.len()), |c| (c.total, c.kept));
                let original_prefix = &s[..kept_before.min(s.len())];
                let serialized = json_len(&Value::String(original_prefix.to_owned())).max(1);
                // Escaping can make the JSON longer than the bytes: cut in proportion.
                let marker_len = marker(total).len() + 8;
                let want = serialized.saturating_sub(excess + marker_len + 2);
                let mut keep = (original_prefix.len() as u128 * want as u128 / serialized as u128) as usize;
                keep = keep.min(kept_before.saturating_sub(1));
                while !original_prefix.is_char_boundary(keep) {
                    keep -= 1;
                }
                let mut next = original_prefix[..keep].to_owned();
                next.push_str(&marker(total - keep));
                *s = next;
                if prev.is_none() {
                    order.push(pointer.clone());
                }
                cuts.insert(pointer, Cut { pointer: String::new(), kind: "string", kept: keep, total });
            }
            Value::Array(items) => {
                let prev_total = cuts.get(&pointer).map(|c| c.total);
                let total = prev_total.unwrap_or(items.len());
                let mut removed = 0usize;
                while removed < excess {
                    match items.pop() {
                        Some(item) => removed += json_len(&item) + 1,
                        None => break,
                    }
                }
                if prev_total.is_none() {
                    order.push(pointer.clone());
                }
                cuts.insert(pointer, Cut { pointer: String::new(), kind: "array", kept: items.len(), total });
            }
            _ => return None,
        }
    }
    None
}

struct Stored {
    text: Arc<str>,
    /// The session the result belongs to.
    session: Arc<str>,
    expires: Instant,
}

pub(crate) struct ResultStore {
    ttl: Duration,
    inner: Mutex<HashMap<String, Stored>>,
}

impl ResultStore {
    /// Results kept at once; the oldest go first.
    const MAX_ENTRIES: usize = 256;
    /// Bytes kept at once; the oldest go first.
    const MAX_BYTES: usize = 256 * 1024 * 1024;

    pub(crate) fn new(ttl: Duration) -> ResultStore {
        ResultStore { ttl, inner: Mutex::new(HashMap::new()) }
    }

    pub(crate) fn insert(&self, handle: String, session: &str, text: String) {
        let now = Instant::now();
        let mut map = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        map.retain(|_, s| s.expires > now);
        let incoming = text.len();
        while !map.is_empty()
            && (map.len() >= Self::MAX_ENTRIES
                || map.values().map(|s| s.text.len()).sum::<usize>() + incoming > Self::MAX_BYTES)
        {
            let oldest = map.iter().min_by_key(|(_, s)| s.expires).map(|(k, _)| k.clone());
            match oldest {
                Some(k) => map.remove(&k),
                None => break,
            };
        }
        map.insert(handle, Stored { text: Arc::from(text), session: Arc::from(session), expires: now + self.ttl });
    }

    /// Bytes `[offset, offset + len)` of the stored text, both ends moved back to a character
    /// boundary; `None` for an unknown or expired handle, or (with `session` given) a handle
    /// another session made. Also returns the full text's length.
    pub(crate) fn get_for(
        &self,
        handle: &str,
        session: Option<&str>,
        offset: usize,
        len: usize,
    ) -> Option<(String, usize)> {
        let text = {
            let mut map = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            let s = map.get(handle)?;
            if s.expires <= Instant::now() {
                map.remove(handle);
                return None;
            }
            if session.is_some_and(|id| id != &*s.session) {
                return None;
            }
            s.text.clone()
        };
        let floor = |mut i: usize| {
            i = i.min(text.len());
            while !text.is_char_boundary(i) {
                i -= 1;
            }
            i
        };
        let start = floor(offset);
        let end = floor(offset.saturating_add(len)).max(start);
        Some((text[start..end].to_owned(), text.len()))
    }

    /// [`ResultStore::get_for`] without the session check (the operator's view).
    pub(crate) fn get(&self, handle: &str, offset: usize, len: usize) -> Option<String> {
        self.get_for(handle, None, offset, len).map(|(t, _)| t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fetches_slices_on_char_boundaries_and_expires() {
        let s = ResultStore::new(Duration::from_millis(50));
        s.insert("h".into(), "me", "aé€z".into());
        assert_eq!(s.get_for("h", Some("me"), 1, 2), Some(("é".to_owned(), 7)));
        assert_eq!(s.get_for("h", Some("you"), 0, 2), None);
        assert_eq!(s.get("h", 0, 100).as_deref(), Some("aé€z"));
        assert_eq!(s.get("h", 1, 2).as_deref(), Some("é"));
        assert_eq!(s.get("h", 2, 3).as_deref(), Some("é"));
        assert_eq!(s.get("h", 100, 3).as_deref(), Some(""));
        assert_eq!(s.get("nope", 0, 1), None);
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(s.get_for("h", Some("me"), 0, 1), None);
        assert_eq!(s.get("h", 0, 1), None);
    }
}

#[cfg(test)]
mod fit_tests {
    use serde_json::json;

    use super::*;

    fn marker(n: usize) -> String {
        format!("…[{n} bytes cut]")
    }

    #[test]
    fn cuts_the_largest_string_and_array_first_and_keeps_the_shape() {
        let long: String = "x".repeat(2000);
        let mut v = json!({"title": "short", "body": long, "lines": (0..300).map(|i| format!("line {i}")).collect::<Vec<_>>(), "n": 7});
        let cuts = fit(&mut v, 1000, &marker).expect("fits");
        assert!(json_len(&v) <= 1000, "{}", json_len(&v));
        assert_eq!(v["title"], "short");
        assert_eq!(v["n"], 7);
        let body = v["body"].as_str().unwrap();
        assert!(body.starts_with("xxx") && body.ends_with(" bytes cut]"), "{body}");
        let lines = v["lines"].as_array().unwrap();
        assert_eq!(lines[0], "line 0");
        let pointers: Vec<&str> = cuts.iter().map(|c| c.pointer.as_str()).collect();
        assert!(pointers.contains(&"/body") && pointers.contains(&"/lines"), "{cuts:?}");
        let lc = cuts.iter().find(|c| c.pointer == "/lines").unwrap();
        assert_eq!((lc.kind, lc.total, lc.kept), ("array", 300, lines.len()));
        let bc = cuts.iter().find(|c| c.pointer == "/body").unwrap();
        assert_eq!(bc.total, 2000);
        assert!(body.starts_with(&"x".repeat(bc.kept)));
    }

    #[test]
    fn goes_into_an_array_dominated_by_one_item_and_respects_char_boundaries() {
        let mut v = json!({"items": [{"name": "a", "text": "é".repeat(3000)}]});
        let cuts = fit(&mut v, 500, &marker).expect("fits");
        assert!(json_len(&v) <= 500);
        assert_eq!(v["items"][0]["name"], "a");
        assert_eq!(cuts[0].pointer, "/items/0/text");
        assert_eq!(cuts[0].kept % 2, 0);
    }

    #[test]
    fn cannot_fit_numbers_and_reports_it() {
        let mut v = json!({"a": 1, "b": 2, "c": 3});
        assert_eq!(fit(&mut v, 5, &marker), None);
        let mut v = json!({"s": "abc"});
        assert_eq!(fit(&mut v, 100, &marker), Some(vec![]));
    }
}
