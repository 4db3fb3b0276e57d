//! `cargo xtask wikdict`: builds the German → English query-translation file tool search loads
//! for German requests, `crates/catalog/data/wikdict-de-en.txt`, by translating through French
//! and Spanish.
//!
//! No German-English dictionary with a licence the host can ship is packaged for this machine
//! (Debian's `dict-freedict-deu-eng` and `-eng-deu` are GPL/AGPL). The FreeDict+WikDict
//! German-French, German-Spanish and French-German dictionaries are CC BY-SA 3.0 (Debian
//! `dict-freedict-deu-fra`, `-deu-spa`, `-fra-deu`, fetched with `apt-get download` into
//! `target/wikdict-*`), and the French and Spanish words they give are translated to English
//! with the committed MultiWordNet file (`multiwordnet-rom-en.txt`, `cargo xtask multiwordnet`).
//!
//! For each German word (one word, lower-cased, accents folded, three letters or more): its
//! French and Spanish translations (headword → translation lines of the first two; the third
//! turned around), each one-word; each of those gives its first [`PER_PIVOT`] English words. An
//! English word is kept by how many different French or Spanish words lead to it, most first,
//! then in the order met (translations that two routes agree on are rarely wrong: `ändern` →
//! `changer`, `modifier`, `cambiar` → change, alter, modify), at most [`MAX_WORDS`]. Glosses are
//! not read.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use anyhow::{Context, Result, bail};

use crate::freedict::{index_number, translation_lines};
use crate::multiwordnet::folded;
use crate::wheel;
use crate::workspace::Workspace;

/// Most English words kept per German word.
const MAX_WORDS: usize = 6;
/// English words taken from each French or Spanish word.
const PER_PIVOT: usize = 3;

/// Which side of a dictionary is German.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// German headwords, French or Spanish translations.
    Headwords,
    /// French headwords, German translations.
    Translations,
}

/// A dictionary: its name (for errors), which side is German, its `.index` and `.dict` text.
pub struct Dict<'a> {
    pub name: &'a str,
    pub german: Side,
    pub index: &'a str,
    pub dict: &'a str,
}

/// The one-word translations of a translation line (`changer, modifier 2.` → `changer`,
/// `modifier`: a numbering mark that ends a line is not part of it), folded.
fn one_words(line: &str) -> impl Iterator<Item = String> + '_ {
    let line = match line.trim_end().rsplit_once(' ') {
        Some((rest, mark))
            if mark.strip_suffix('.').is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())) =>
        {
            rest
        }
        _ => line,
    };
    line.split([',', ';']).map(str::trim).filter(|w| !w.contains(' ')).filter_map(fold)
}

/// `word` folded as tool search splits a request (`größten` → `grossten`): `ß` spelled `ss`,
/// then accents folded and lower-cased ([`folded`]); `None` unless three letters `a`-`z` or more.
fn fold(word: &str) -> Option<String> {
    if word.contains(['ß', 'ẞ']) { folded(&word.replace('ß', "ss").replace('ẞ', "SS")) } else { folded(word) }
}

/// Adds each (German word → French or Spanish word) pair of `d` to `pairs`.
fn add_pairs(d: &Dict<'_>, pairs: &mut BTreeMap<String, Vec<String>>) -> Result<()> {
    let mut entries = 0usize;
    for (i, line) in d.index.lines().enumerate() {
        let mut cols = line.split('\t');
        let (Some(head), Some(offset), Some(len)) = (cols.next(), cols.next(), cols.next()) else {
            bail!("{}.index line {}: expected `HEADWORD<TAB>OFFSET<TAB>LENGTH`", d.name, i + 1);
        };
        if head.starts_with("00database") {
            continue;
        }
        let (offset, len) = (index_number(offset)?, index_number(len)?);
        let entry = d
            .dict
            .get(offset..offset + len)
            .with_context(|| format!("{}.index line {}: entry outside the .dict file", d.name, i + 1))?;
        entries += 1;
        if head.contains(' ') {
            continue;
        }
        let Some(head) = fold(head) else {
            continue;
        };
        let body = entry.split_once('\n').map_or("", |(_, b)| b);
        for line in translation_lines(body) {
            for word in one_words(line) {
                let (german, pivot) = match d.german {
                    Side::Headwords => (head.clone(), word),
                    Side::Translations => (word, head.clone()),
                };
                let list = pairs.entry(german).or_default();
                if !list.contains(&pivot) {
                    list.push(pivot);
                }
            }
        }
    }
    if entries < 1_000 {
        bail!("only {entries} entries read from {}: not a FreeDict dictionary?", d.name);
    }
    Ok(())
}

/// Converts the dictionaries, with `rom` the MultiWordNet file (`word english...` lines).
pub fn convert(dicts: &[Dict<'_>], rom: &str) -> Result<String> {
    let rom: HashMap<&str, Vec<&str>> = rom
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let mut words = l.split(' ');
            Some((words.next()?, words.take(PER_PIVOT).collect()))
        })
        .collect();
    if rom.len() < 10_000 {
        bail!("the MultiWordNet file holds {} words: regenerate it with `cargo xtask multiwordnet`", rom.len());
    }
    let mut pairs: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for d in dicts {
        add_pairs(d, &mut pairs)?;
    }
    let mut words: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (german, pivots) in &pairs {
        // (English word, routes, first met)
        let mut english: Vec<(&str, usize, usize)> = Vec::new();
        for pivot in pivots {
            for &e in rom.get(pivot.as_str()).into_iter().flatten() {
                match english.iter_mut().find(|(w, _, _)| *w == e) {
                    Some((_, routes, _)) => *routes += 1,
                    None => english.push((e, 1, english.len())),
                }
            }
        }
        english.sort_by_key(|&(_, routes, first)| (std::cmp::Reverse(routes), first));
        if !english.is_empty() {
            words.insert(german, english.iter().take(MAX_WORDS).map(|&(w, _, _)| w).collect());
        }
    }
    let mut out = String::new();
    out.push_str(
        "# German -> English query translation through French and Spanish, generated by `cargo xtask wikdict`:\n",
    );
    out.push_str("# `word english...` per line; do not edit by hand. Words lower-cased with accents folded.\n");
    out.push_str("# Per German word, the English words of its one-word French and Spanish translations (the first 3\n");
    out.push_str("# of each in multiwordnet-rom-en.txt), those more translations lead to first, at most 6.\n#\n");
    out.push_str("# Sources: the FreeDict+WikDict German-French, German-Spanish and French-German dictionaries\n");
    out.push_str("# (Debian packages dict-freedict-deu-fra, dict-freedict-deu-spa, dict-freedict-fra-deu, editions\n");
    out.push_str("# 2022.11.18), from Wiktionary (https://www.wiktionary.org/) via DBnary and WikDict\n");
    out.push_str("# (http://www.wikdict.com/), published by the FreeDict project (Karl Bartel): Creative Commons\n");
    out.push_str("# Attribution-ShareAlike 3.0 Unported (https://creativecommons.org/licenses/by-sa/3.0/); and\n");
    out.push_str("# multiwordnet-rom-en.txt, whose header names its sources and licences (CC BY-SA 4.0 as a whole).\n");
    out.push_str(
        "# This file is an adaptation of both (entries selected, translated through them and shortened) and\n",
    );
    out.push_str("# is shared under CC BY-SA 4.0.\n");
    wheel::push_word_lines(&mut out, &words);
    Ok(out)
}

/// `cargo xtask wikdict`.
pub fn run(ws: &Workspace) -> Result<()> {
    let sources = [("deu-fra", Side::Headwords), ("deu-spa", Side::Headwords), ("fra-deu", Side::Translations)];
    let mut texts = Vec::new();
    for (pair, german) in sources {
        let name = format!("freedict-{pair}");
        let dir: PathBuf = wheel::debian_package(
            ws,
            &format!("dict-freedict-{pair}"),
            &format!("wikdict-{pair}"),
            "usr/share/dictd",
            &format!("{name}.index"),
        )?;
        let index_path = dir.join(format!("{name}.index"));
        let index =
            std::fs::read_to_string(&index_path).with_context(|| format!("reading {}", index_path.display()))?;
        let dz = dir.join(format!("{name}.dict.dz"));
        // A dictzip file is a gzip file.
        let script = "import gzip, sys\nsys.stdout.buffer.write(gzip.open(sys.argv[1]).read())\n";
        let dict = wheel::python_text(ws, script, &[dz.as_os_str()], &dz.display().to_string())?;
        texts.push((name, german, index, dict));
    }
    let rom_path = ws.root.join("crates/catalog/data/multiwordnet-rom-en.txt");
    let rom = std::fs::read_to_string(&rom_path).with_context(|| format!("reading {}", rom_path.display()))?;
    let dicts: Vec<Dict<'_>> =
        texts.iter().map(|(name, german, index, dict)| Dict { name, german: *german, index, dict }).collect();
    wheel::write_search_data(ws, "wikdict-de-en.txt", &convert(&dicts, &rom)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A dictd index number, as `.index` files write them.
    fn b64(mut n: usize) -> String {
        let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut s = Vec::new();
        loop {
            s.push(alphabet[n % 64]);
            n /= 64;
            if n == 0 {
                break;
            }
        }
        s.reverse();
        String::from_utf8(s).unwrap()
    }

    /// A dictionary's `.index` and `.dict` text from (headword, entry body) pairs, padded with
    /// filler entries to the size `add_pairs` expects of a real one.
    fn dictionary(entries: &[(&str, &str)]) -> (String, String) {
        let (mut index, mut dict) = (String::new(), String::from("header\n"));
        for (head, body) in entries.iter().copied().chain(std::iter::repeat_n(("zzfiller", "x\n"), 1_000)) {
            let entry = format!("{head} /ipa/ <n>\n{body}");
            index.push_str(&format!("{}\t{}\t{}\n", head.to_lowercase(), b64(dict.len()), b64(entry.len())));
            dict.push_str(&entry);
        }
        (index, dict)
    }

    #[test]
    fn translation_lines_lose_a_trailing_numbering_mark() {
        // Real lines of the German-French dictionary.
        assert_eq!(one_words("changer, modifier 2.").collect::<Vec<_>>(), ["changer", "modifier"]);
        assert_eq!(one_words("faire peur, inquiéter").collect::<Vec<_>>(), ["inquieter"]);
        assert_eq!(fold("Größe"), Some("grosse".into()));
    }

    #[test]
    fn german_words_reach_english_through_both_routes_agreed_first() {
        // ändern → changer, modifier (German-French), cambiar (German-Spanish), and from the
        // French side, `altérer` → ändern; Datei ← fichier (French-German, turned around).
        let (fr_index, fr_dict) =
            dictionary(&[("ändern", "changer, modifier 2.\nanders machen\n"), ("Größe", "taille\nMaß\n")]);
        let (es_index, es_dict) = dictionary(&[("ändern", "cambiar\nanders machen\n")]);
        let (de_index, de_dict) =
            dictionary(&[("altérer", "ändern, verfälschen\nchanger\n"), ("fichier", "1. Kartei, Datei\nfiches\n")]);
        let mut rom = String::from("# header\n");
        rom.push_str("changer change switch exchange interchange\n");
        rom.push_str("modifier modify change alter\n");
        rom.push_str("cambiar change alter vary\n");
        rom.push_str("alterer alter falsify\n");
        rom.push_str("fichier file register\n");
        rom.push_str("taille size waist\n");
        for i in 0..10_000 {
            rom.push_str(&format!("pad{i} pad\n"));
        }
        let dicts = [
            Dict { name: "deu-fra", german: Side::Headwords, index: &fr_index, dict: &fr_dict },
            Dict { name: "deu-spa", german: Side::Headwords, index: &es_index, dict: &es_dict },
            Dict { name: "fra-deu", german: Side::Translations, index: &de_index, dict: &de_dict },
        ];
        let out = convert(&dicts, &rom).unwrap();
        let line = |word: &str| out.lines().find(|l| l.split(' ').next() == Some(word)).map(str::to_owned);
        // change: changer, modifier, cambiar (3 routes); alter: modifier, cambiar, altérer (3,
        // met later); switch (1) ...: at most 6, and only the first 3 of each French word.
        assert_eq!(line("andern").as_deref(), Some("andern change alter switch exchange modify vary"));
        assert_eq!(line("datei").as_deref(), Some("datei file register"));
        assert_eq!(line("kartei").as_deref(), Some("kartei file register"));
        assert_eq!(line("grosse").as_deref(), Some("grosse size waist"));
        assert!(out.contains("CC BY-SA 4.0"));
        // A MultiWordNet file that is not one is refused by name.
        let err = convert(&dicts, "casa house\n").unwrap_err().to_string();
        assert!(err.contains("cargo xtask multiwordnet"), "{err}");
    }
}
