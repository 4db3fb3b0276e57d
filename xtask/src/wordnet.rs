//! `cargo xtask wordnet [DIR]`: converts Princeton WordNet 3.0 (Debian package `wordnet-base`,
//! fetched with `apt-get download` into `target/wordnet` when DIR is not given) into the compact
//! related-words file tool search loads: `crates/catalog/data/wordnet-related.txt`.
//!
//! One line per English word, `word related...`: for each noun and verb that WordNet's sense
//! counts attest (tagged at least once), the other one-word lemmas of its most frequent sense and
//! the words that sense is derivationally related to (`multiplication` → `multiply`). Only
//! lower-case ASCII one-word lemmas of three letters or more; at most [`MAX_RELATED`] related
//! words per line. The WordNet licence is copied into the file's header.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::workspace::Workspace;

/// Most related words kept per word.
const MAX_RELATED: usize = 6;

/// One synset: its lemmas, and its derivational pointers `(source word no., target offset,
/// target pos, target word no.)` (word numbers from 1; source 0 = the whole synset).
struct Synset {
    words: Vec<String>,
    derivations: Vec<(usize, u64, char, usize)>,
}

fn parse_data(path: &Path) -> Result<HashMap<u64, Synset>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut out = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        if line.starts_with("  ") || line.trim().is_empty() {
            continue; // licence header
        }
        let bad = || anyhow::anyhow!("{}:{}: not a WordNet data line", path.display(), i + 1);
        let mut f = line.split(' ');
        let offset: u64 = f.next().and_then(|x| x.parse().ok()).ok_or_else(bad)?;
        let _lex_filenum = f.next();
        let _ss_type = f.next();
        let w_cnt = f.next().and_then(|x| usize::from_str_radix(x, 16).ok()).ok_or_else(bad)?;
        let mut words = Vec::with_capacity(w_cnt);
        for _ in 0..w_cnt {
            let w = f.next().ok_or_else(bad)?;
            let _lex_id = f.next();
            // Adjective markers like `(a)` are not part of the lemma.
            words.push(w.split('(').next().unwrap_or(w).to_lowercase());
        }
        let p_cnt: usize = f.next().and_then(|x| x.parse().ok()).ok_or_else(bad)?;
        let mut derivations = Vec::new();
        for _ in 0..p_cnt {
            let symbol = f.next().ok_or_else(bad)?;
            let target: u64 = f.next().and_then(|x| x.parse().ok()).ok_or_else(bad)?;
            let pos = f.next().and_then(|x| x.chars().next()).ok_or_else(bad)?;
            let st = f.next().ok_or_else(bad)?;
            if symbol == "+" && st.len() == 4 {
                let src = usize::from_str_radix(&st[..2], 16).map_err(|_| bad())?;
                let tgt = usize::from_str_radix(&st[2..], 16).map_err(|_| bad())?;
                derivations.push((src, target, pos, tgt));
            }
        }
        out.insert(offset, Synset { words, derivations });
    }
    Ok(out)
}

/// `(lemma, tagged sense count, synset offsets in frequency order)` of an index file.
fn parse_index(path: &Path) -> Result<Vec<(String, usize, Vec<u64>)>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.starts_with("  ") || line.trim().is_empty() {
            continue;
        }
        let bad = || anyhow::anyhow!("{}:{}: not a WordNet index line", path.display(), i + 1);
        let f: Vec<&str> = line.split_whitespace().collect();
        let synset_cnt: usize = f.get(2).and_then(|x| x.parse().ok()).ok_or_else(bad)?;
        let p_cnt: usize = f.get(3).and_then(|x| x.parse().ok()).ok_or_else(bad)?;
        let tagged: usize = f.get(5 + p_cnt).and_then(|x| x.parse().ok()).ok_or_else(bad)?;
        let offsets =
            f.iter().skip(6 + p_cnt).take(synset_cnt).map(|x| x.parse().map_err(|_| bad())).collect::<Result<_>>()?;
        out.push((f[0].to_owned(), tagged, offsets));
    }
    Ok(out)
}

fn is_plain(w: &str) -> bool {
    w.len() >= 3 && w.bytes().all(|b| b.is_ascii_lowercase())
}

/// Builds the file's text from a WordNet `dict` directory.
pub fn convert(dir: &Path) -> Result<String> {
    let mut related: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut data: HashMap<char, HashMap<u64, Synset>> = HashMap::new();
    for (pos, name) in [('n', "noun"), ('v', "verb"), ('a', "adj"), ('r', "adv")] {
        data.insert(pos, parse_data(&dir.join(format!("data.{name}")))?);
    }
    for (pos, name) in [('n', "noun"), ('v', "verb")] {
        for (lemma, tagged, offsets) in parse_index(&dir.join(format!("index.{name}")))? {
            let Some(&first) = offsets.first() else { continue };
            if tagged == 0 || !is_plain(&lemma) {
                continue;
            }
            let Some(synset) = data[&pos].get(&first) else {
                bail!("index.{name}: `{lemma}` points at synset {first}, which data.{name} lacks");
            };
            let list = related.entry(lemma.clone()).or_default();
            let mut push = |w: &str| {
                if is_plain(w) && w != lemma && !list.iter().any(|x| x == w) && list.len() < MAX_RELATED {
                    list.push(w.to_owned());
                }
            };
            for w in &synset.words {
                push(w);
            }
            let me = synset.words.iter().position(|w| *w == lemma).map(|p| p + 1);
            for &(src, target, tpos, tgt) in &synset.derivations {
                if src != 0 && Some(src) != me {
                    continue;
                }
                let tpos = if tpos == 's' { 'a' } else { tpos };
                if let Some(t) = data.get(&tpos).and_then(|d| d.get(&target)) {
                    match tgt {
                        0 => t.words.iter().for_each(|w| push(w)),
                        n => {
                            if let Some(w) = t.words.get(n - 1) {
                                push(w);
                            }
                        }
                    }
                }
            }
        }
    }
    let licence = std::fs::read_to_string(dir.join("../doc/wordnet-base/copyright")).unwrap_or_default();
    let mut out = String::new();
    out.push_str("# Related English words from Princeton WordNet 3.0 (Debian package wordnet-base),\n");
    out.push_str("# generated by `cargo xtask wordnet`: `word related...` per line; do not edit by hand.\n");
    out.push_str("# For each attested noun and verb: the other lemmas of its most frequent sense and the\n");
    out.push_str("# words that sense is derivationally related to.\n#\n");
    out.push_str("# WordNet 3.0 Copyright 2006 by Princeton University. All rights reserved.\n");
    out.push_str("# Licence (WordNet 3.0 licence, as shipped in the Debian package):\n");
    let body = licence.split("License: WordNet3.0").nth(1).and_then(|b| b.split("\nFiles:").next()).unwrap_or("");
    for line in body.lines() {
        let line = line.trim_start_matches(' ');
        let _ = writeln!(
            out,
            "#{}{}",
            if line.is_empty() || line == "." { "" } else { " " },
            if line == "." { "" } else { line }
        );
    }
    for (word, list) in &related {
        if !list.is_empty() {
            let _ = writeln!(out, "{word} {}", list.join(" "));
        }
    }
    Ok(out)
}

/// `cargo xtask wordnet [DIR]`.
pub fn run(ws: &Workspace, dir: Option<&Path>) -> Result<()> {
    let dir: PathBuf = match dir {
        Some(d) => d.to_owned(),
        None => crate::wheel::debian_package(ws, "wordnet-base", "wordnet", "usr/share/wordnet", "data.noun")?,
    };
    let text = convert(&dir)?;
    let out = ws.root.join("crates/catalog/data/wordnet-related.txt");
    std::fs::write(&out, &text).with_context(|| format!("writing {}", out.display()))?;
    println!("{} lines -> {}", text.lines().filter(|l| !l.starts_with('#')).count(), out.display());
    Ok(())
}
