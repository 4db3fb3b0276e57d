//! Request ids: short, unique within the process, and unlikely to repeat across processes.

use std::fmt::Write;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

static COUNTER: AtomicU64 = AtomicU64::new(1);
static PREFIX: OnceLock<String> = OnceLock::new();

fn base36(mut n: u64, out: &mut String) {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut buf = [0u8; 13];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = DIGITS[(n % 36) as usize];
        n /= 36;
        if n == 0 {
            break;
        }
    }
    for &b in &buf[i..] {
        out.push(b as char);
    }
}

/// A process prefix from the start time and the process id (about 6 characters).
fn prefix() -> &'static str {
    PREFIX.get_or_init(|| {
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);
        let mixed = (nanos ^ (u64::from(std::process::id()) << 40)).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 33;
        let mut s = String::new();
        base36(mixed, &mut s);
        s
    })
}

/// A new request id, e.g. `k3f9zq-1a`: a per-process prefix and a counter, both base 36.
pub fn next_request_id() -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let p = prefix();
    let mut s = String::with_capacity(p.len() + 8);
    s.push_str(p);
    let _ = s.write_char('-');
    base36(n, &mut s);
    s
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    #[test]
    fn ids_are_short_and_unique() {
        let ids: Vec<String> = (0..10_000).map(|_| super::next_request_id()).collect();
        let set: HashSet<&String> = ids.iter().collect();
        assert_eq!(set.len(), ids.len());
        assert!(ids.iter().all(|i| i.len() <= 20 && i.contains('-')), "{:?}", &ids[..3]);
    }
}
