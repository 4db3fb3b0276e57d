//! "Did you mean": the visible tool names closest to an unknown one.

use quiver_catalog::{Access, Catalog};

pub(crate) use quiver_manifest::edit_distance;

fn tokens(s: &str) -> impl Iterator<Item = &str> {
    s.split(|c: char| !c.is_ascii_alphanumeric()).filter(|t| !t.is_empty())
}

/// Up to `n` names of tools the caller may see (visible lifecycle state and allowed by
/// [`Access::may_see`]) that are close to `name`: by edit distance (at most a third of the
/// longer name) or by a shared word. Best first.
pub(crate) fn closest(catalog: &Catalog, access: &Access, name: &str, n: usize) -> Vec<String> {
    let lower = name.to_ascii_lowercase();
    let wanted: Vec<&str> = tokens(&lower).filter(|t| t.len() >= 3).collect();
    let mut scored: Vec<(usize, &str)> = Vec::new();
    for r in catalog.visible_tools() {
        if !access.may_see(&r.name, catalog.def(r)) {
            continue;
        }
        let d = edit_distance(&lower, &r.name);
        let limit = lower.len().max(r.name.len()).div_ceil(3);
        let shared = tokens(&r.name).filter(|t| wanted.contains(t)).count();
        let score = if d <= limit {
            d
        } else if shared > 0 {
            // Shared words rank after close spellings, more shared words first.
            100 - shared.min(50)
        } else {
            continue;
        };
        scored.push((score, r.name.as_str()));
    }
    scored.sort();
    scored.into_iter().take(n).map(|(_, s)| s.to_owned()).collect()
}

#[cfg(test)]
mod tests {
    use super::edit_distance;

    #[test]
    fn distances() {
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("read_file", "read_file"), 0);
        assert_eq!(edit_distance("read_fiel", "read_file"), 2);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }
}
