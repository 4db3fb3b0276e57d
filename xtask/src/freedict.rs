//! `cargo xtask freedict [DIR]`: turns the English-Indonesian FreeDict+WikDict dictionary
//! (Debian package `dict-freedict-eng-ind`, data from Wiktionary via WikDict, CC BY-SA 3.0;
//! fetched with `apt-get download` into `target/freedict` when DIR is not given) around into the
//! Indonesian → English query-translation file tool search loads:
//! `crates/catalog/data/freedict-id-en.txt`.
//!
//! One line per Indonesian word, `word english...`: for every English headword that is one plain
//! lower-case word of three letters or more, each of its Indonesian translations that is one word
//! of three letters or more gets that headword, at most [`MAX_WORDS`] per Indonesian word, in the
//! dictionary's order. Glosses (the English definition line after each translation line) are not
//! read. The other FreeDict dictionaries Debian ships for Latin-script languages (Spanish,
//! French, Portuguese, Italian, German, both directions) are GPL or AGPL and cannot be compiled
//! into the host, which is MIT OR Apache-2.0; this one is CC BY-SA, as CC-CEDICT's file is.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::wheel;
use crate::workspace::Workspace;

/// Debian's package of the dictionary.
const PACKAGE: &str = "dict-freedict-eng-ind";
/// Most English words kept per Indonesian word.
const MAX_WORDS: usize = 6;

/// A dictd index number: base 64 with the alphabet `A-Z a-z 0-9 + /`.
pub(crate) fn index_number(text: &str) -> Result<usize> {
    text.bytes().try_fold(0usize, |n, b| {
        let digit = match b {
            b'A'..=b'Z' => b - b'A',
            b'a'..=b'z' => b - b'a' + 26,
            b'0'..=b'9' => b - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => bail!("`{text}` is not a dictd index number"),
        };
        Ok(n * 64 + usize::from(digit))
    })
}

/// One plain word of three letters or more, lower-cased (`Folder` → `folder`; `melati putih`,
/// `-an`, `e-mail` are not).
fn plain_word(text: &str) -> Option<String> {
    let t = text.trim();
    (t.len() >= 3 && t.bytes().all(|b| b.is_ascii_alphabetic())).then(|| t.to_ascii_lowercase())
}

/// The translation lines of an entry's body (the lines after its headword line): the first
/// line and every numbered one (`1. abjad arab, huruf arab`); the line after each is its gloss.
pub(crate) fn translation_lines(body: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut expect = true;
    for line in body.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let numbered = line.split_once(". ").filter(|(n, _)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        if let Some((_, rest)) = numbered {
            out.push(rest);
            expect = false;
        } else if expect {
            out.push(line);
            expect = false;
        }
    }
    out
}

/// Calls `f(headword, entry body)` for each entry of a dictd dictionary named `name` (for errors):
/// `index` is its `.index` file, `dict` its `.dict` text (unpacked); the entry body is what
/// follows the entry's headword line. Returns how many entries were read.
pub(crate) fn for_each_entry(name: &str, index: &str, dict: &str, mut f: impl FnMut(&str, &str)) -> Result<usize> {
    let mut entries = 0usize;
    for (i, line) in index.lines().enumerate() {
        let mut cols = line.split('\t');
        let (Some(head), Some(offset), Some(len)) = (cols.next(), cols.next(), cols.next()) else {
            bail!("{name}.index line {}: expected `HEADWORD<TAB>OFFSET<TAB>LENGTH`", i + 1);
        };
        if head.starts_with("00database") {
            continue;
        }
        let (offset, len) = (index_number(offset)?, index_number(len)?);
        let entry = dict
            .get(offset..offset + len)
            .with_context(|| format!("{name}.index line {}: entry outside the .dict file", i + 1))?;
        entries += 1;
        f(head, entry.split_once('\n').map_or("", |(_, b)| b));
    }
    Ok(entries)
}

/// The `.index` and unpacked `.dict` text of the dictd dictionary `name` in `dir` (`NAME.index`,
/// `NAME.dict.dz`).
pub(crate) fn read_dictd(ws: &Workspace, dir: &Path, name: &str) -> Result<(String, String)> {
    let index_path = dir.join(format!("{name}.index"));
    let index = std::fs::read_to_string(&index_path).with_context(|| format!("reading {}", index_path.display()))?;
    let dz = dir.join(format!("{name}.dict.dz"));
    // A dictzip file is a gzip file.
    let script = "import gzip, sys\nsys.stdout.buffer.write(gzip.open(sys.argv[1]).read())\n";
    let dict = wheel::python_text(ws, script, &[dz.as_os_str()], &dz.display().to_string())?;
    Ok((index, dict))
}

/// Converts the dictionary: `index` is its `.index` file, `dict` its `.dict` text (unpacked).
pub fn convert(index: &str, dict: &str) -> Result<String> {
    let mut words: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let entries = for_each_entry("freedict-eng-ind", index, dict, |head, body| {
        let Some(english) = plain_word(head).filter(|w| w == head) else {
            return;
        };
        for line in translation_lines(body) {
            for word in line.split([',', ';']).filter_map(plain_word) {
                let list = words.entry(word).or_default();
                if list.len() < MAX_WORDS && !list.contains(&english) {
                    list.push(english.clone());
                }
            }
        }
    })?;
    if entries < 5_000 {
        bail!("only {entries} entries read: not the FreeDict English-Indonesian dictionary?");
    }
    let mut out = String::new();
    out.push_str("# Indonesian -> English query translation, the FreeDict+WikDict English-Bahasa Indonesia\n");
    out.push_str("# dictionary (Debian package dict-freedict-eng-ind, edition 2022.11.18) turned around,\n");
    out.push_str("# generated by `cargo xtask freedict`: `word english...` per line; do not edit by hand.\n");
    out.push_str("# One-word Indonesian translations of one-word English headwords, at most 6 per word.\n#\n");
    out.push_str(
        "# Source of the data: WikDict (http://www.wikdict.com/), from Wiktionary (https://www.wiktionary.org/)\n",
    );
    out.push_str("# via DBnary; published by the FreeDict project (Karl Bartel).\n");
    out.push_str("# Licence: Creative Commons Attribution-ShareAlike 3.0 Unported (CC BY-SA 3.0),\n");
    out.push_str("# https://creativecommons.org/licenses/by-sa/3.0/ . This file is an adaptation of that\n");
    out.push_str("# dictionary (entries selected, inverted and shortened) and is shared under the same licence.\n");
    wheel::push_word_lines(&mut out, &words);
    Ok(out)
}

/// `cargo xtask freedict [DIR]`: DIR holds `freedict-eng-ind.index` and `freedict-eng-ind.dict.dz`.
pub fn run(ws: &Workspace, dir: Option<&Path>) -> Result<()> {
    let dir: PathBuf = match dir {
        Some(d) => d.to_owned(),
        None => wheel::debian_package(ws, PACKAGE, "freedict", "usr/share/dictd", "freedict-eng-ind.index")?,
    };
    let (index, dict) = read_dictd(ws, &dir, "freedict-eng-ind")?;
    wheel::write_search_data(ws, "freedict-id-en.txt", &convert(&index, &dict)?)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A dictd index number, as `.index` files write them (base 64).
    pub(crate) fn b64(mut n: usize) -> String {
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

    #[test]
    fn index_numbers_are_base_64() {
        assert_eq!(index_number("A").unwrap(), 0);
        assert_eq!(index_number("b").unwrap(), 27);
        assert_eq!(index_number("BA").unwrap(), 64);
        assert!(index_number("a-b").is_err());
    }

    #[test]
    fn translations_are_the_first_and_numbered_lines_not_the_glosses() {
        // Real entries of the dictionary.
        assert_eq!(translation_lines("Arktika\npertaining to the northern polar region\n"), ["Arktika"]);
        assert_eq!(
            translation_lines("1. abjad arab, huruf arab\nalphabet\n2. bahasa arab, arab\nlanguage\n"),
            ["abjad arab, huruf arab", "bahasa arab, arab"]
        );
        assert_eq!(plain_word(" Folder "), Some("folder".into()));
        assert_eq!(plain_word("melati putih"), None);
        assert_eq!(plain_word("-an"), None);
    }

    #[test]
    fn english_headwords_are_turned_around() {
        let dict = "header\nfile /faɪl/ <n>\nberkas, arsip\na collection of data\nsize /saɪz/ <n>\nukuran\nhow big\n";
        let file_at = dict.find("file").unwrap();
        let size_at = dict.find("size").unwrap();
        let mut index = String::new();
        index.push_str(&format!("file\t{}\t{}\n", b64(file_at), b64(size_at - file_at)));
        index.push_str(&format!("size\t{}\t{}\n", b64(size_at), b64(dict.len() - size_at)));
        for _ in 0..5_000 {
            index.push_str(&format!("Name\t{}\t{}\n", b64(0), b64(6)));
        }
        let out = convert(&index, dict).unwrap();
        let lines: Vec<&str> = out.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(lines, ["arsip file", "berkas file", "ukuran size"]);
    }
}
