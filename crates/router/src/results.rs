//! Full texts of truncated results, retrievable by handle for a bounded time. Touched only when
//! a result is truncated or fetched, never on the ordinary call path.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

struct Stored {
    text: Arc<str>,
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

    pub(crate) fn insert(&self, handle: String, text: String) {
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
        map.insert(handle, Stored { text: Arc::from(text), expires: now + self.ttl });
    }

    /// Bytes `[offset, offset + len)` of the stored text, both ends moved back to a character
    /// boundary; `None` for an unknown or expired handle.
    pub(crate) fn get(&self, handle: &str, offset: usize, len: usize) -> Option<String> {
        let text = {
            let mut map = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            let s = map.get(handle)?;
            if s.expires <= Instant::now() {
                map.remove(handle);
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
        Some(text[start..end].to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fetches_slices_on_char_boundaries_and_expires() {
        let s = ResultStore::new(Duration::from_millis(50));
        s.insert("h".into(), "aé€z".into());
        assert_eq!(s.get("h", 0, 100).as_deref(), Some("aé€z"));
        assert_eq!(s.get("h", 1, 2).as_deref(), Some("é"));
        assert_eq!(s.get("h", 2, 3).as_deref(), Some("é"));
        assert_eq!(s.get("h", 100, 3).as_deref(), Some(""));
        assert_eq!(s.get("nope", 0, 1), None);
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(s.get("h", 0, 1), None);
    }
}
