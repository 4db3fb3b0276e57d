//! Tool search: a field-weighted BM25 (BM25F) ranker over tool names, descriptions, parameters
//! and the other text a tool carries, plus a bounded, case-insensitive regex mode.
//!
//! The index is immutable and built once ([`SearchIndex::build`]); every per-term, per-document
//! weight is precomputed, so a query only analyses its words, looks up their terms and sums
//! posting weights.
//!
//! Ranking ([`SearchConfig`] holds the knobs):
//! - identifier-aware tokenisation (`Movies_1_FindMovies` → `movies`, `find`, `movies`), a light
//!   suffix stemmer and stop words; Latin letters with accents folded (`différences` →
//!   `differences`); scripts without spaces (Han, kana, Thai, Hangul, ...) as character bigrams
//!   ([`text`]);
//! - BM25F over ten [`Field`]s with flat weights; parameter names and descriptions (with enum
//!   values) are fields of their own, and so are a tool's examples and capabilities;
//! - a name-coverage factor: how much of the tool's name (IDF-weighted) the query mentions;
//! - the value types a request mentions (dates, times, amounts of money, e-mail addresses, URLs,
//!   years: [`text::value_types`]; in Chinese, Japanese and Korean also a number's unit, `3月`,
//!   `8時`, `200원`, and translated words, `明天` tomorrow: [`text::value_type_of_word`]) as
//!   extra query words at reduced weight, so that tools taking such values rank up;
//! - Chinese and Korean words of a request translated to English (CC-CEDICT,
//!   [`text::zh_translations`]; the Korean Learners' Dictionary, [`text::ko_translations`]), so
//!   that requests in Chinese or Korean reach tools described in English, and loanwords spelled
//!   in Hangul or Katakana matched to the catalog words that sound alike ([`text::loanword_keys`]:
//!   `커밋` → `commit`); a word the catalog does not use looked up as Indonesian
//!   ([`text::id_translations`]: `berkas` → `file`, through prefixes and suffixes) and, in a
//!   request that reads as Spanish, French, Italian or Portuguese (more of its words are their
//!   function words than English stop words), in those languages' wordnets
//!   ([`text::rom_translations`]: `busca` → `buscar` → `search`, through their endings), and in
//!   a request that reads as German, in a German dictionary built through French and Spanish
//!   ([`text::de_translations`]: `Dateien` → `datei` → `file`, through endings and compounds);
//!   in a request that reads as Polish, in a Polish one ([`text::pl_translations`]); a Cyrillic
//!   word in a Russian one built through five languages ([`text::ru_translations`]:
//!   `удали` → `удалить` → ..., through verb and case endings), else by its sound
//!   ([`text::sound_key_cyrillic`]: `коммит` → `commit`);
//! - per query word, the best of the word itself, its synonyms (a short table of generic action
//!   verbs and software nouns) and, for words the catalog does not know, its prefix completions
//!   and the catalog words one edit away (typos), the alternatives at reduced weight;
//!   conversational filler (`help me`, `I need`) at reduced weight;
//! - exact names and aliases mentioned in the query first, then, for a one-word query, names it
//!   is a prefix of;
//! - ties broken by name ascending.
//!
//! A query costs the postings of its terms, not the size of the catalog. Measured figures (both
//! halves of the BFCL dev set, the MCP reference tool set, scale): `docs/BENCHMARKS.md`.

#[cfg(feature = "semantic")]
pub mod embed;
mod schema;
mod setup;
pub mod text;

use std::cmp::Ordering;
use std::collections::HashMap;
use std::fmt;

/// Hash maps keyed by words: foldhash is several times faster than SipHash on short strings.
/// Only catalog text is inserted; query words are only looked up.
type WordMap<V> = HashMap<Box<str>, V, foldhash::fast::FixedState>;

use regex::RegexBuilder;
use serde_json::Value;

pub use schema::params_from_schema;
pub use setup::{SearchSetup, SearchSetupError};

/// One searchable tool. Built by the catalog from manifests, or by `eval` from MCP/OpenAI tool
/// JSON.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SearchDoc {
    /// Canonical tool name.
    pub name: String,
    /// Visible aliases (other names that reach the tool); may be empty.
    pub aliases: Vec<String>,
    /// Short human title; may be empty.
    pub title: String,
    /// What the tool does.
    pub description: String,
    /// Domain (`filesystem`, `time`); may be empty.
    pub domain: String,
    /// Capability keywords (`read`, `search`).
    pub capabilities: Vec<String>,
    /// Parameters, nested ones flattened ([`params_from_schema`]).
    pub params: Vec<ParamDoc>,
    /// Guidance line shown with the tool.
    pub prompt_snippet: String,
    /// Example user requests that should find this tool.
    pub examples: Vec<String>,
    /// How many parameters the input schema's top-level `required` names (what a caller must
    /// supply); read by [`SearchConfig::required_prior`].
    pub required: usize,
}

/// One parameter of a tool, as search sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ParamDoc {
    /// Parameter name; nested parameters as dotted paths (`address.city`).
    pub name: String,
    /// Its description, with enum values appended when the schema has them.
    pub description: String,
}

impl SearchDoc {
    /// A document with a name and description and nothing else.
    pub fn new(name: impl Into<String>, description: impl Into<String>) -> Self {
        SearchDoc { name: name.into(), description: description.into(), ..SearchDoc::default() }
    }

    /// A document with a name, description and the parameters of `input_schema` (a JSON Schema
    /// object: properties, nested objects, array items and enum values are all read).
    pub fn from_input_schema(name: impl Into<String>, description: impl Into<String>, input_schema: &Value) -> Self {
        SearchDoc {
            params: params_from_schema(input_schema),
            required: schema::required_count(input_schema),
            ..SearchDoc::new(name, description)
        }
    }

    /// The parameter documentation of a JSON Schema; see [`params_from_schema`].
    pub fn params_from_schema(input_schema: &Value) -> Vec<ParamDoc> {
        params_from_schema(input_schema)
    }
}

/// How [`Query::text`] is interpreted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QueryMode {
    /// Ranked keyword search (BM25F).
    #[default]
    Text,
    /// Case-insensitive regular expression over name, aliases, title and description.
    Regex,
}

/// A search request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    /// Words (text mode) or a pattern (regex mode).
    pub text: String,
    /// How `text` is read.
    pub mode: QueryMode,
    /// Page size; clamped to `1..=`[`Query::MAX_LIMIT`].
    pub limit: usize,
    /// Hits skipped before the page starts.
    pub offset: usize,
}

impl Query {
    /// Page size when none is given.
    pub const DEFAULT_LIMIT: usize = 20;
    /// Largest page size.
    pub const MAX_LIMIT: usize = 50;

    /// A text-mode query with the default page.
    pub fn text(text: impl Into<String>) -> Self {
        Query { text: text.into(), ..Query::default() }
    }

    /// A regex-mode query with the default page.
    pub fn regex(pattern: impl Into<String>) -> Self {
        Query { text: pattern.into(), mode: QueryMode::Regex, ..Query::default() }
    }

    /// The same query with another page size.
    pub fn with_limit(mut self, limit: usize) -> Self {
        self.limit = limit;
        self
    }

    /// The same query with another offset.
    pub fn with_offset(mut self, offset: usize) -> Self {
        self.offset = offset;
        self
    }

    /// The page size actually used: `limit` clamped to `1..=MAX_LIMIT`.
    pub fn effective_limit(&self) -> usize {
        self.limit.clamp(1, Self::MAX_LIMIT)
    }
}

impl Default for Query {
    fn default() -> Self {
        Query { text: String::new(), mode: QueryMode::Text, limit: Self::DEFAULT_LIMIT, offset: 0 }
    }
}

/// One page of ranked hits.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SearchResult {
    /// Hits of the page, best first.
    pub hits: Vec<Hit>,
    /// Number of matching documents (after the filter, before offset and limit).
    pub total: usize,
}

/// One ranked document.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hit {
    /// Index of the document in the `Vec` given to [`SearchIndex::build`].
    pub doc: usize,
    /// Relevance; only comparable within one result.
    pub score: f32,
}

/// Longest accepted regex pattern, in bytes.
pub const MAX_REGEX_LEN: usize = 256;
/// Most distinct words of a query that are used (bounds the cost of pasted documents).
const MAX_QUERY_WORDS: usize = 256;
/// Most vocabulary terms an unknown query word is completed to.
const MAX_PREFIX_TERMS: usize = 8;
/// Ranks (from the top) within which copies of the same tool are moved behind distinct tools.
const DIVERSIFY_WINDOW: usize = 4 * Query::MAX_LIMIT;
/// Most vocabulary terms an unknown query word is corrected to.
const MAX_TYPO_TERMS: usize = 8;

/// Most catalog words one loanword of a request stands for (words that sound alike).
const MAX_LOANWORD_TERMS: usize = 4;
/// Compiled-program size limit for regex queries, in bytes.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// Why a search could not run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SearchError {
    /// The regex did not compile (syntax error or over the size limit).
    InvalidRegex {
        /// The pattern as given.
        pattern: String,
        /// The regex engine's explanation.
        message: String,
    },
    /// The regex is longer than [`MAX_REGEX_LEN`].
    PatternTooLong {
        /// Its length in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
}

impl fmt::Display for SearchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SearchError::InvalidRegex { pattern, message } => {
                write!(f, "invalid regex `{pattern}`: {message}")
            }
            SearchError::PatternTooLong { len, max } => {
                write!(f, "regex pattern is {len} bytes long; at most {max} are accepted")
            }
        }
    }
}

impl std::error::Error for SearchError {}

/// The fields of a [`SearchDoc`] that text search scores separately.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Field {
    /// The tool name, split into words.
    Name = 0,
    /// Aliases, split into words.
    Alias,
    /// The title.
    Title,
    /// The description.
    Description,
    /// The domain.
    Domain,
    /// Capability keywords.
    Capability,
    /// Parameter names, split into words.
    ParamName,
    /// Parameter descriptions and enum values.
    ParamDesc,
    /// The prompt snippet.
    Snippet,
    /// Example requests.
    Example,
}

/// Number of [`Field`]s.
pub const FIELD_COUNT: usize = 10;

/// Tuning of the text ranker. [`SearchConfig::default`] is the tuned configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchConfig {
    /// BM25 term-frequency saturation.
    pub k1: f32,
    /// Weight of each field, indexed by `Field as usize`.
    pub weights: [f32; FIELD_COUNT],
    /// Length normalisation of each field (0 = none, 1 = full).
    pub b: [f32; FIELD_COUNT],
    /// Query weight of a synonym of a query word (the short generic table, `text::SYNONYM_GROUPS`).
    pub synonym_weight: f32,
    /// Query weight of a WordNet-related word of a query word ([`text::related_words`]); 0 turns
    /// it off.
    pub related_weight: f32,
    /// Query weight of a catalog word that an unknown query word is a prefix of.
    pub prefix_weight: f32,
    /// Shortest unknown query word that is completed by prefix.
    pub prefix_min_len: usize,
    /// Score factor for covering the tool name: `1 + name_coverage * covered_fraction`.
    pub name_coverage: f32,
    /// Query weight of the value types a request mentions (a date, a time, an amount of money,
    /// an e-mail address, a URL, a year: `text::value_types`), matched as the words `date`,
    /// `time`, `amount`, `email`, `url`, `year`, so that tools taking such a value rank up. 0
    /// turns it off.
    pub value_type_weight: f32,
    /// Query weight of the English translations of the Chinese and Korean words of a request
    /// ([`text::zh_translations`], [`text::ko_translations`]), each word one more query word, and
    /// of its unknown words read as Indonesian, Spanish, French, Italian, Portuguese, German,
    /// Polish or Russian ([`text::id_translations`], [`text::rom_translations`],
    /// [`text::de_translations`], [`text::pl_translations`], [`text::ru_translations`]); 0 turns
    /// it off.
    pub translation_weight: f32,
    /// Weight factor of the synonyms and WordNet related words of translated words (`文件夹` →
    /// `folder` → `directory`), on top of the translation weight times theirs; 0 switches it off.
    pub translated_expansion: f32,
    /// Weight factor of loanwords spelled in Hangul, Katakana or Cyrillic (`커밋`, `коммит` →
    /// `commit`, `レシピ` → `recipe`) and matched to catalog words that sound alike
    /// ([`text::loanword_keys`], [`text::sound_key_cyrillic`]), on top of the translation weight;
    /// 0 switches it off.
    pub loanword_weight: f32,
    /// Query weight of conversational filler words (`help`, `need`; see `text::is_filler_word`).
    pub filler_weight: f32,
    /// Rank exact name/alias mentions, and names a one-word query is a prefix of, first.
    pub name_match_first: bool,
    /// Query weight of a catalog word one edit (insertion, deletion, substitution, adjacent
    /// transposition) away from a query word the catalog does not know; 0 turns typo tolerance
    /// off.
    pub typo_weight: f32,
    /// Shortest unknown query word (in bytes, ASCII letters only) that typo tolerance corrects.
    pub typo_min_len: usize,
    /// Split a request into clauses (`;`, `then`, `and`, `also`, sentence ends) and interleave the
    /// clauses' rankings with the whole request's, so that each thing asked for reaches the page.
    pub split_intents: bool,
    /// Within the first ranks, move the second and later copies of a tool (same description and
    /// parameter names under another name) behind the distinct tools, so that copies do not
    /// crowd a page.
    pub diversify: bool,
    /// A prior for tools that ask less of the caller: a tool's score is multiplied by
    /// `(1 - required_prior)` for each parameter its schema requires, counting at most
    /// [`REQUIRED_PRIOR_CAP`]. 0 (the default) turns it off: it gained on both halves of the
    /// dev set but lost on the MCP reference servers' tools (docs/BENCHMARKS.md).
    pub required_prior: f32,
    /// With an embedding model (feature `semantic`): the weight of the semantic ranking in the
    /// reciprocal rank fusion, the lexical ranking's being 1. A document at rank `r` (from 0) of
    /// the semantic ranking adds `semantic_weight / (semantic_rrf_k + r + 1)`.
    pub semantic_weight: f32,
    /// With an embedding model: the rank constant of the fusion (both rankings). Smaller values
    /// let the first ranks of each ranking count more against the rest.
    pub semantic_rrf_k: f32,
}

/// Most required parameters [`SearchConfig::required_prior`] counts.
pub const REQUIRED_PRIOR_CAP: usize = 3;

impl Default for SearchConfig {
    fn default() -> Self {
        SearchConfig {
            // Early saturation: a word repeated in a long description says little more than
            // once (tuning half: k1 0.8 vs 1.2, +0.017 R@1; docs/BENCHMARKS.md).
            k1: 0.8,
            // Flat: the per-field weights tuned on the BFCL dev set did worse than flat ones on a
            // tool set of another shape (docs/BENCHMARKS.md, ablation).
            weights: [1.0; FIELD_COUNT],
            // Parameter names and descriptions are one field per tool, as long as the tool has
            // parameters: a tool with many parameters is not less about each of them, so their
            // length counts less (tuning half: +0.021 R@1 over 0.75).
            b: {
                let mut b = [0.75; FIELD_COUNT];
                b[Field::ParamName as usize] = 0.3;
                b[Field::ParamDesc as usize] = 0.3;
                b
            },
            synonym_weight: 0.5,
            related_weight: 0.5,
            prefix_weight: 0.3,
            prefix_min_len: 4,
            name_coverage: 0.5,
            // A value the request carries counts as much as a word it says (tuning half: 0.4 →
            // 1.0 gained 0.003 R@1 and 0.007 R@5; 1.5 no more R@5).
            value_type_weight: 1.0,
            translation_weight: 1.0,
            translated_expansion: 1.0,
            loanword_weight: 1.0,
            name_match_first: true,
            filler_weight: 0.3,
            typo_weight: 0.5,
            typo_min_len: 5,
            // Off: it cost the dev set's tuning half 0.024 R@5 (single-intent requests that
            // contain `and`) and gained nothing measurable on multi-intent requests
            // (docs/BENCHMARKS.md).
            split_intents: false,
            diversify: true,
            required_prior: 0.0,
            // The semantic ranking as a fifth of a vote, the first ranks of each ranking counting
            // most (tuning half, WordLlama model: MRR 0.793 → 0.799, R@5 0.925 → 0.930; at equal
            // weight and k 60, as first shipped, 0.767 and 0.914; docs/BENCHMARKS.md).
            semantic_weight: 0.2,
            semantic_rrf_k: 10.0,
        }
    }
}

/// Per-document accumulators of one text query.
#[derive(Debug, Clone, Copy, Default)]
struct Acc {
    /// Score so far.
    score: f32,
    /// IDF mass of the name terms the query covered so far.
    name_hit: f32,
    /// Best alternative of the current concept.
    best: f32,
    /// Best name IDF of the current concept.
    best_name: f32,
}

/// Reused per-thread query state: `acc` is all zero between queries.
#[derive(Debug, Default)]
struct Scratch {
    acc: Vec<Acc>,
    /// Documents with a non-zero accumulator.
    docs: Vec<u32>,
    /// Documents the current concept reached.
    touched: Vec<u32>,
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::default();
}

/// One entry of a term's posting list.
#[derive(Debug, Clone, Copy)]
struct Posting {
    doc: u32,
    /// Precomputed BM25F contribution (IDF included) of the term to the document.
    weight: f32,
    /// True when the term occurs in the document's name.
    in_name: bool,
}

/// An immutable search index over a fixed set of [`SearchDoc`]s.
#[derive(Debug)]
pub struct SearchIndex {
    config: SearchConfig,
    docs: Vec<SearchDoc>,
    /// Rank of each document's name in ascending order (ties: input order).
    name_rank: Vec<u32>,
    /// Documents in ascending name order (ties: input order).
    by_name: Vec<u32>,
    /// Lower-cased names and their documents, sorted, for prefix matching.
    lower_names: Vec<(Box<str>, u32)>,
    vocab: WordMap<u32>,
    /// Vocabulary sorted by term, for prefix completion.
    sorted_vocab: Vec<(Box<str>, u32)>,
    /// Typo keys, sorted: `(hash, term)` for every ASCII-alphabetic term and for each of its
    /// one-character deletions. A query word and a term one edit apart share a key.
    typo_keys: Vec<(u64, u32)>,
    /// Length of the longest term with typo keys: a query word more than one byte longer is no
    /// edit away from any, and is not looked up (the lookup costs the square of its length).
    max_typo_term: usize,
    /// Term id → term, for verifying typo candidates.
    terms: Vec<Box<str>>,
    /// Sound key of each ASCII term ([`text::sound_key_en`], [`text::MIN_LOANWORD_KEY`] classes
    /// or more) → its terms, for loanwords spelled in Hangul or Katakana.
    sound_keys: HashMap<Box<str>, Vec<u32>>,
    idf: Vec<f32>,
    /// `postings[post_start[t]..post_start[t + 1]]` belong to term `t`.
    post_start: Vec<u32>,
    postings: Vec<Posting>,
    /// Sum of IDF over each document's distinct name terms.
    name_mass: Vec<f32>,
    /// Hash of each document's description and parameter names: equal for copies of a tool.
    fingerprint: Vec<u64>,
    /// Per document, its score factor from [`SearchConfig::required_prior`]; empty when that
    /// is off.
    prior: Vec<f32>,
    /// True when two documents share a fingerprint (otherwise there is nothing to collapse).
    has_copies: bool,
    /// Per document: true when another document has its fingerprint.
    copied: Vec<bool>,
    /// Stemmed word → ids of its synonyms present in the vocabulary.
    synonyms: HashMap<String, Vec<u32>>,
    /// Lower-cased name or alias → documents.
    exact: HashMap<String, Vec<u32>>,
    /// The optional semantic ranker ([`SearchIndex::with_embedding`]).
    #[cfg(feature = "semantic")]
    semantic: Option<Semantic>,
}

/// A static-embedding model and the vectors of the documents.
#[cfg(feature = "semantic")]
#[derive(Debug)]
struct Semantic {
    model: std::sync::Arc<embed::StaticEmbedding>,
    /// Row-major `[documents, dim]`; all zero for a document with no known token.
    vectors: Vec<f32>,
}

/// How many of the semantic ranking's best documents take part in the fusion.
#[cfg(feature = "semantic")]
const SEMANTIC_DEPTH: usize = 100;

/// One word of a query after analysis: the term itself (when the catalog knows it) and its
/// alternatives (prefix completions, synonyms) at reduced weight. A document scores the best of
/// them, so a word with many synonyms counts no more than a word with none.
#[derive(Debug, Clone, Default)]
struct Concept {
    /// The query word's own term, if in the vocabulary.
    original: Option<u32>,
    /// Weight of the word itself: 1, or [`SearchConfig::filler_weight`].
    weight: f32,
    /// `(term, weight)`, the original first (weight 1).
    alts: Vec<(u32, f32)>,
}

impl SearchIndex {
    /// Builds the index with the default (tuned) configuration.
    pub fn build(docs: Vec<SearchDoc>) -> SearchIndex {
        Self::build_with(docs, SearchConfig::default())
    }

    /// Builds the index with an explicit configuration. Linear in the text of the documents.
    pub fn build_with(docs: Vec<SearchDoc>, config: SearchConfig) -> SearchIndex {
        let n = docs.len();
        let mut vocab: WordMap<u32> = WordMap::default();
        // Raw word → its term, or `u32::MAX` for a stop word: each distinct word is analysed once.
        let mut seen_words: WordMap<u32> = WordMap::default();
        // Every document's (term, per-field term frequency), flattened: document `d` owns
        // `doc_terms[doc_start[d]..doc_start[d + 1]]`. Per-field lengths per document.
        let mut doc_terms: Vec<(u32, [u16; FIELD_COUNT])> = Vec::new();
        let mut doc_start: Vec<u32> = Vec::with_capacity(n + 1);
        let mut doc_lens: Vec<[u32; FIELD_COUNT]> = Vec::with_capacity(n);
        // Term id → its position in `doc_terms` while its document is being read.
        let mut slot: Vec<u32> = Vec::new();
        let mut stem_buf = String::new();
        for doc in &docs {
            let first = doc_terms.len();
            doc_start.push(first as u32);
            let mut lens = [0u32; FIELD_COUNT];
            let mut add = |field: Field, text: &str| {
                text::split_words(text, |w| {
                    let id = match seen_words.get(w) {
                        Some(&id) => id,
                        None => {
                            let id = if text::is_stop_word(w) {
                                u32::MAX
                            } else {
                                text::stem_into(w, &mut stem_buf);
                                match vocab.get(stem_buf.as_str()) {
                                    Some(&id) => id,
                                    None => {
                                        let id = vocab.len() as u32;
                                        vocab.insert(stem_buf.as_str().into(), id);
                                        slot.push(u32::MAX);
                                        id
                                    }
                                }
                            };
                            seen_words.insert(w.into(), id);
                            id
                        }
                    };
                    if id == u32::MAX {
                        return;
                    }
                    let at = &mut slot[id as usize];
                    if *at == u32::MAX {
                        *at = doc_terms.len() as u32;
                        doc_terms.push((id, [0; FIELD_COUNT]));
                    }
                    let tf = &mut doc_terms[*at as usize].1[field as usize];
                    *tf = tf.saturating_add(1);
                    lens[field as usize] += 1;
                });
            };
            add(Field::Name, &doc.name);
            doc.aliases.iter().for_each(|a| add(Field::Alias, a));
            add(Field::Title, &doc.title);
            add(Field::Description, &doc.description);
            add(Field::Domain, &doc.domain);
            doc.capabilities.iter().for_each(|c| add(Field::Capability, c));
            for p in &doc.params {
                add(Field::ParamName, &p.name);
                add(Field::ParamDesc, &p.description);
            }
            add(Field::Snippet, &doc.prompt_snippet);
            doc.examples.iter().for_each(|e| add(Field::Example, e));
            for &(t, _) in &doc_terms[first..] {
                slot[t as usize] = u32::MAX;
            }
            doc_lens.push(lens);
        }
        doc_start.push(doc_terms.len() as u32);
        drop(slot);
        drop(seen_words);

        let n_terms = vocab.len();
        let mut df = vec![0u32; n_terms];
        for &(t, _) in &doc_terms {
            df[t as usize] += 1;
        }
        let idf: Vec<f32> = df.iter().map(|&d| (1.0 + (n as f32 - d as f32 + 0.5) / (d as f32 + 0.5)).ln()).collect();
        let mut avg_len = [0f32; FIELD_COUNT];
        for lens in &doc_lens {
            for f in 0..FIELD_COUNT {
                avg_len[f] += lens[f] as f32;
            }
        }
        for a in &mut avg_len {
            *a /= n.max(1) as f32;
        }

        // Postings, grouped by term.
        let mut post_start = vec![0u32; n_terms + 1];
        for (t, &d) in df.iter().enumerate() {
            post_start[t + 1] = post_start[t] + d;
        }
        let mut fill = post_start.clone();
        let mut postings = vec![Posting { doc: 0, weight: 0.0, in_name: false }; post_start[n_terms] as usize];
        let mut name_mass = vec![0f32; n];
        for (d, lens) in doc_lens.iter().enumerate() {
            for &(t, tf) in &doc_terms[doc_start[d] as usize..doc_start[d + 1] as usize] {
                let mut pseudo_tf = 0f32;
                for f in 0..FIELD_COUNT {
                    if tf[f] == 0 || avg_len[f] == 0.0 {
                        continue;
                    }
                    let norm = 1.0 - config.b[f] + config.b[f] * lens[f] as f32 / avg_len[f];
                    pseudo_tf += config.weights[f] * tf[f] as f32 / norm;
                }
                let weight = idf[t as usize] * pseudo_tf / (config.k1 + pseudo_tf);
                let in_name = tf[Field::Name as usize] > 0;
                if in_name {
                    name_mass[d] += idf[t as usize];
                }
                let slot = &mut fill[t as usize];
                postings[*slot as usize] = Posting { doc: d as u32, weight, in_name };
                *slot += 1;
            }
        }
        drop(doc_terms);

        let mut order: Vec<u32> = (0..n as u32).collect();
        order.sort_by(|&a, &b| docs[a as usize].name.cmp(&docs[b as usize].name));
        let mut name_rank = vec![0u32; n];
        for (rank, &d) in order.iter().enumerate() {
            name_rank[d as usize] = rank as u32;
        }

        let mut exact: HashMap<String, Vec<u32>> = HashMap::new();
        for (d, doc) in docs.iter().enumerate() {
            for name in std::iter::once(&doc.name).chain(&doc.aliases) {
                let key = name.trim().to_lowercase();
                if !key.is_empty() {
                    let list = exact.entry(key).or_default();
                    if !list.contains(&(d as u32)) {
                        list.push(d as u32);
                    }
                }
            }
        }

        let mut synonyms: HashMap<String, Vec<u32>> = HashMap::new();
        for group in text::SYNONYM_GROUPS {
            let stems: Vec<String> = group.iter().map(|w| text::stem(w)).collect();
            for s in &stems {
                let entry = synonyms.entry(s.clone()).or_default();
                for other in &stems {
                    if other != s
                        && let Some(&id) = vocab.get(other.as_str())
                        && !entry.contains(&id)
                    {
                        entry.push(id);
                    }
                }
            }
        }

        let mut sorted_vocab: Vec<(Box<str>, u32)> = vocab.iter().map(|(k, &v)| (k.clone(), v)).collect();
        sorted_vocab.sort_unstable();
        let mut terms: Vec<Box<str>> = vec![Box::from(""); vocab.len()];
        let mut typo_keys = Vec::new();
        let mut max_typo_term = 0;
        let mut key_buf = Vec::new();
        for (t, id) in &sorted_vocab {
            let id = *id;
            terms[id as usize] = t.clone();
            if t.len() + 1 >= config.typo_min_len && t.bytes().all(|b| b.is_ascii_lowercase()) {
                for_each_typo_key(t.as_bytes(), &mut key_buf, |h| typo_keys.push((h, id)));
                max_typo_term = max_typo_term.max(t.len());
            }
        }
        typo_keys.sort_unstable();
        typo_keys.dedup();
        let mut sound_keys: HashMap<Box<str>, Vec<u32>> = HashMap::new();
        let mut key = String::new();
        for (t, id) in &sorted_vocab {
            text::sound_key_en(t, &mut key);
            if key.len() >= text::MIN_LOANWORD_KEY {
                sound_keys.entry(key.as_str().into()).or_default().push(*id);
            }
        }
        let fingerprint: Vec<u64> = docs
            .iter()
            .map(|d| {
                let mut bytes = d.description.trim().to_lowercase().into_bytes();
                for p in &d.params {
                    bytes.push(0);
                    bytes.extend_from_slice(p.name.as_bytes());
                }
                key_hash(&bytes)
            })
            .collect();
        let copied: Vec<bool> = {
            let mut count: HashMap<u64, u32> = HashMap::with_capacity(n);
            fingerprint.iter().for_each(|f| *count.entry(*f).or_default() += 1);
            fingerprint.iter().map(|f| count[f] > 1).collect()
        };
        let has_copies = copied.iter().any(|&c| c);
        let prior = if config.required_prior > 0.0 {
            let keep = (1.0 - config.required_prior).clamp(0.0, 1.0);
            docs.iter().map(|doc| keep.powi(doc.required.min(REQUIRED_PRIOR_CAP) as i32)).collect()
        } else {
            Vec::new()
        };
        let mut lower_names: Vec<(Box<str>, u32)> =
            docs.iter().enumerate().map(|(d, doc)| (doc.name.to_lowercase().into(), d as u32)).collect();
        lower_names.sort_unstable();

        SearchIndex {
            config,
            docs,
            name_rank,
            by_name: order,
            lower_names,
            vocab,
            sorted_vocab,
            typo_keys,
            max_typo_term,
            terms,
            sound_keys,
            idf,
            post_start,
            postings,
            name_mass,
            prior,
            has_copies,
            copied,
            fingerprint,
            synonyms,
            exact,
            #[cfg(feature = "semantic")]
            semantic: None,
        }
    }

    /// The same index with semantic ranking (feature `semantic`): every document is embedded with `model` (its name
    /// split into words, title, description and parameter names), and text queries rank by the
    /// reciprocal rank fusion of the lexical ranking and the [`SEMANTIC_DEPTH`] documents most
    /// similar to the query (cosine). Regex queries are not affected.
    #[cfg(feature = "semantic")]
    pub fn with_embedding(mut self, model: std::sync::Arc<embed::StaticEmbedding>) -> SearchIndex {
        let dim = model.dim();
        let mut vectors = vec![0f32; self.docs.len() * dim];
        let mut text_buf = String::new();
        for (d, doc) in self.docs.iter().enumerate() {
            text_buf.clear();
            text::split_words(&doc.name, |w| {
                text_buf.push_str(w);
                text_buf.push(' ');
            });
            for part in [doc.title.as_str(), doc.description.as_str()] {
                text_buf.push_str(part);
                text_buf.push(' ');
            }
            for p in &doc.params {
                text::split_words(&p.name, |w| {
                    text_buf.push_str(w);
                    text_buf.push(' ');
                });
            }
            if let Some(v) = model.embed(&text_buf) {
                vectors[d * dim..(d + 1) * dim].copy_from_slice(&v);
            }
        }
        self.semantic = Some(Semantic { model, vectors });
        self
    }

    /// True when the index ranks text queries with an embedding model too.
    pub fn has_embedding(&self) -> bool {
        #[cfg(feature = "semantic")]
        return self.semantic.is_some();
        #[cfg(not(feature = "semantic"))]
        false
    }

    /// Reciprocal rank fusion of the lexical ranking `lexical` (unsorted) with the semantic
    /// ranking of `text`. Without a model, or when the model knows no token of `text`, the
    /// lexical ranking as it is.
    #[cfg(feature = "semantic")]
    fn fuse(&self, mut lexical: Vec<(f32, u32)>, text: &str) -> Vec<(f32, u32)> {
        let Some(sem) = &self.semantic else { return lexical };
        let Some(query) = sem.model.embed(text) else { return lexical };
        let cmp = |a: &(f32, u32), b: &(f32, u32)| {
            b.0.total_cmp(&a.0).then_with(|| self.name_rank[a.1 as usize].cmp(&self.name_rank[b.1 as usize]))
        };
        let dim = query.len();
        let mut similar: Vec<(f32, u32)> = sem
            .vectors
            .chunks_exact(dim)
            .enumerate()
            .map(|(d, v)| (embed::dot(v, &query), d as u32))
            .filter(|&(s, _)| s > 0.0)
            .collect();
        if similar.len() > SEMANTIC_DEPTH {
            similar.select_nth_unstable_by(SEMANTIC_DEPTH - 1, cmp);
            similar.truncate(SEMANTIC_DEPTH);
        }
        similar.sort_unstable_by(cmp);
        lexical.sort_unstable_by(cmp);
        let mut fused: HashMap<u32, f32> = HashMap::with_capacity(lexical.len() + similar.len());
        let k = self.config.semantic_rrf_k;
        for (list, weight) in [(&lexical, 1.0), (&similar, self.config.semantic_weight)] {
            for (rank, &(_, d)) in list.iter().enumerate() {
                *fused.entry(d).or_default() += weight / (k + rank as f32 + 1.0);
            }
        }
        fused.into_iter().map(|(d, s)| (s, d)).collect()
    }

    /// Number of documents.
    pub fn len(&self) -> usize {
        self.docs.len()
    }

    /// True when the index holds no documents.
    pub fn is_empty(&self) -> bool {
        self.docs.is_empty()
    }

    /// The document at `index` (as given to [`SearchIndex::build`]).
    pub fn doc(&self, index: usize) -> &SearchDoc {
        &self.docs[index]
    }

    /// All documents, in build order.
    pub fn docs(&self) -> &[SearchDoc] {
        &self.docs
    }

    /// The configuration the index was built with.
    pub fn config(&self) -> &SearchConfig {
        &self.config
    }

    /// Index of the document with exactly this canonical name, if any.
    pub fn position(&self, name: &str) -> Option<usize> {
        let at = self.by_name.partition_point(|&d| self.docs[d as usize].name.as_str() < name);
        self.by_name.get(at).map(|&d| d as usize).filter(|&d| self.docs[d].name == name)
    }

    /// Ranked hits, best first, deterministic (ties broken by name ascending). `filter(doc)`
    /// excludes documents before ranking, counting and paging.
    pub fn search(&self, query: &Query, filter: &dyn Fn(usize) -> bool) -> Result<SearchResult, SearchError> {
        let mut ranked = match query.mode {
            QueryMode::Text => self.rank_text(&query.text, filter),
            QueryMode::Regex => self.rank_regex(&query.text, filter)?,
        };
        Ok(self.page(&mut ranked, query))
    }

    /// Sorts the needed prefix of `ranked` and cuts the page.
    fn page(&self, ranked: &mut [(f32, u32)], query: &Query) -> SearchResult {
        let total = ranked.len();
        let end = query.offset.saturating_add(query.effective_limit()).min(total);
        // Copies of a tool are collapsed within a window that does not depend on the page asked
        // for, so that pages stay consistent.
        let window = if self.config.diversify && self.has_copies && query.mode == QueryMode::Text {
            DIVERSIFY_WINDOW.min(total)
        } else {
            0
        };
        let cmp = |a: &(f32, u32), b: &(f32, u32)| {
            b.0.total_cmp(&a.0).then_with(|| self.name_rank[a.1 as usize].cmp(&self.name_rank[b.1 as usize]))
        };
        let sort_head = |ranked: &mut [(f32, u32)], upto: usize| {
            if upto > 0 && upto < ranked.len() {
                ranked.select_nth_unstable_by(upto - 1, cmp);
            }
            ranked[..upto].sort_unstable_by(cmp);
        };
        if window > 1 {
            // The top `window` as a set first: only when it holds a copy is it sorted whole.
            if window < total {
                ranked.select_nth_unstable_by(window - 1, cmp);
            }
            if ranked[..window].iter().any(|h| self.copied[h.1 as usize]) {
                // The collapsed window is its first copies in order, then its later copies in
                // order: only the part of that the page reaches is sorted.
                let firsts = self.firsts_to_front(&mut ranked[..window], cmp);
                if end <= firsts {
                    sort_head(&mut ranked[..firsts], end);
                } else {
                    ranked[..firsts].sort_unstable_by(cmp);
                    sort_head(&mut ranked[firsts..window], end.min(window) - firsts);
                    if end > window {
                        sort_head(&mut ranked[window..], end - window);
                    }
                }
            } else if end <= window {
                sort_head(&mut ranked[..window], end);
            } else {
                sort_head(ranked, end);
            }
        } else {
            sort_head(ranked, end);
        }
        let hits =
            ranked[..end].iter().skip(query.offset).map(|&(score, doc)| Hit { doc: doc as usize, score }).collect();
        SearchResult { hits, total }
    }

    /// Moves to the front of `window` every hit that is the best-ranked (by `cmp`) of the copies
    /// of its tool in `window` (same description and parameter names, see `fingerprint`), and
    /// every hit of a tool without copies; the later copies go behind them. Returns how many are
    /// in front. Neither part is sorted: sorted, front then back is the window with its copies
    /// collapsed, and the page sorts only as much of it as it shows.
    fn firsts_to_front(&self, window: &mut [(f32, u32)], cmp: impl Fn(&(f32, u32), &(f32, u32)) -> Ordering) -> usize {
        let mut best: HashMap<u64, (f32, u32), foldhash::fast::FixedState> = HashMap::default();
        for hit in window.iter().filter(|h| self.copied[h.1 as usize]) {
            let kept = best.entry(self.fingerprint[hit.1 as usize]).or_insert(*hit);
            if cmp(hit, kept).is_lt() {
                *kept = *hit;
            }
        }
        let mut front = 0;
        for i in 0..window.len() {
            let doc = window[i].1;
            if !self.copied[doc as usize] || best[&self.fingerprint[doc as usize]].1 == doc {
                window.swap(front, i);
                front += 1;
            }
        }
        front
    }

    /// Analyses query text into concepts, one per distinct query word.
    fn concepts(&self, text: &str) -> Vec<Concept> {
        // (stem, weight of the word, the word as written, lower-cased)
        let mut stems: Vec<(String, f32, String)> = Vec::new();
        // Romance, German and Polish function words against English stop words: the request
        // reads as Spanish, French, Italian or Portuguese, as German or as Polish when it has
        // more of that language's than of English's and of the others' (`text::function_word_languages`).
        let (mut romance_words, mut german_words, mut polish_words, mut english_words) =
            (0usize, 0usize, 0usize, 0usize);
        text::split_words(text, |w| {
            // A word both languages write (`a`, `do`) counts for both, and so for neither.
            let languages = text::function_word_languages(w);
            romance_words += usize::from(languages & text::ROMANCE != 0);
            german_words += usize::from(languages & text::GERMAN != 0);
            polish_words += usize::from(languages & text::POLISH != 0);
            if text::is_stop_word(w) {
                english_words += 1;
                return;
            }
            if text::is_russian_stop_word(w) {
                return;
            }
            if stems.len() >= MAX_QUERY_WORDS {
                return;
            }
            let weight = if text::is_filler_word(w) { self.config.filler_weight } else { 1.0 };
            let s = text::stem(w);
            match stems.iter_mut().find(|(x, _, _)| *x == s) {
                Some((_, wt, _)) => *wt = wt.max(weight),
                None => stems.push((s, weight, w.to_owned())),
            }
        });
        // A word written with an umlaut or `ß` (`über`, `größten`) counts as German too, one
        // with a Polish letter (`ł`, `ś`) as Polish.
        if !text.is_ascii() {
            for w in text.split_whitespace().filter(|w| !w.is_ascii()) {
                german_words += usize::from(w.contains(text::GERMAN_LETTERS));
                polish_words += usize::from(w.contains(text::POLISH_LETTERS));
            }
        }
        let beats = |n: usize, a: usize, b: usize| n > english_words && n > a && n > b;
        let romance = beats(romance_words, german_words, polish_words);
        let german = beats(german_words, romance_words, polish_words);
        let polish = beats(polish_words, romance_words, german_words);
        if self.config.translation_weight > 0.0 {
            // In a request that reads as Spanish, French, Italian or Portuguese, their function
            // words are stop words (`de` otherwise matches every Spanish tool name); so are
            // German ones in a German request and Polish ones in a Polish request.
            if romance {
                stems.retain(|(_, _, w)| !text::is_romance_function_word(w));
            } else if german {
                stems.retain(|(_, _, w)| !text::is_german_stop_word(w));
            } else if polish {
                stems.retain(|(_, _, w)| !text::is_polish_function_word(w));
            }
        }
        if self.config.value_type_weight > 0.0 {
            for kind in text::value_types(text) {
                let weight = self.config.value_type_weight;
                let s = text::stem(kind);
                if let Some((_, wt, _)) = stems.iter_mut().find(|(x, _, _)| *x == s) {
                    *wt = wt.max(weight);
                } else if stems.len() < MAX_QUERY_WORDS {
                    stems.push((s, weight, kind.to_owned()));
                }
            }
        }
        let cfg = &self.config;
        let mut concepts: Vec<Concept> = stems
            .iter()
            .map(|(s, weight, _)| {
                let original = self.vocab.get(s.as_str()).copied();
                let mut c =
                    Concept { original, weight: *weight, alts: original.map(|id| (id, 1.0)).into_iter().collect() };
                if original.is_none() && cfg.prefix_weight > 0.0 && s.chars().count() >= cfg.prefix_min_len {
                    let start = self.sorted_vocab.partition_point(|(t, _)| t.as_ref() < s.as_str());
                    for (t, id) in self.sorted_vocab[start..].iter().take(MAX_PREFIX_TERMS) {
                        if !t.starts_with(s.as_str()) {
                            break;
                        }
                        c.alts.push((*id, cfg.prefix_weight));
                    }
                }
                if original.is_none() && cfg.typo_weight > 0.0 {
                    self.typo_alternatives(s, &mut c.alts);
                }
                c
            })
            .collect();
        let originals: Vec<u32> = concepts.iter().filter_map(|c| c.original).collect();
        if cfg.synonym_weight > 0.0 {
            for (c, (s, _, _)) in concepts.iter_mut().zip(&stems) {
                let Some(ids) = self.synonyms.get(s.as_str()) else {
                    continue;
                };
                for &id in ids {
                    if !originals.contains(&id) && !c.alts.iter().any(|&(t, _)| t == id) {
                        c.alts.push((id, cfg.synonym_weight));
                    }
                }
            }
        }
        if cfg.related_weight > 0.0 {
            let mut buf = String::new();
            for (c, (_, _, word)) in concepts.iter_mut().zip(&stems) {
                for related in text::related_words(word) {
                    text::stem_into(related, &mut buf);
                    if let Some(&id) = self.vocab.get(buf.as_str())
                        && !originals.contains(&id)
                        && !c.alts.iter().any(|&(t, _)| t == id)
                    {
                        c.alts.push((id, cfg.related_weight));
                    }
                }
            }
        }
        if cfg.translation_weight > 0.0 {
            let mut buf = String::new();
            // Value types named by translated words (`明天` tomorrow, `달러` dollar, `jueves`
            // Thursday).
            let mut translated_types: Vec<&'static str> = Vec::new();
            // A word the catalog does not use may be Indonesian (`berkas` → `file`), or, in a
            // request that reads as one, Spanish, French, Italian or Portuguese (`archivo` → `file`),
            // German (`Datei` → `file`) or Polish (`plik` → `file`); a Cyrillic word, Russian
            // (`файл` → `file`).
            for (c, (_, _, word)) in concepts.iter_mut().zip(&stems) {
                if c.original.is_some() {
                    continue;
                }
                let mut lists: [Option<&'static [&'static str]>; 2] = [None, None];
                if text::is_cyrillic_word(word) {
                    lists[0] = text::ru_translations(word);
                    if lists[0].is_none() && cfg.loanword_weight > 0.0 {
                        // A loanword: `коммит` → `commit`.
                        text::sound_key_cyrillic(word, &mut buf);
                        let weight = cfg.translation_weight * cfg.loanword_weight;
                        if buf.len() >= text::MIN_LOANWORD_KEY
                            && let Some(ids) = self.sound_keys.get(buf.as_str())
                        {
                            for &id in ids.iter().filter(|id| !originals.contains(id)).take(MAX_LOANWORD_TERMS) {
                                c.alts.push((id, weight));
                            }
                        }
                        continue;
                    }
                } else if !word.bytes().all(|b| b.is_ascii_lowercase()) {
                    continue;
                } else if polish {
                    lists[0] = text::pl_translations(word);
                } else if german {
                    // A German word is not read as Indonesian.
                    text::de_translations(word, |e| {
                        if let Some(slot) = lists.iter_mut().find(|l| l.is_none()) {
                            *slot = Some(e);
                        }
                    });
                } else {
                    lists[0] =
                        text::id_translations(word).or_else(|| romance.then(|| text::rom_translations(word)).flatten());
                }
                // Translated filler (`brauche`, `нужно` → `need`) weighs as little as written
                // filler (German, Polish and Russian; the other languages were tuned without it).
                if (german || polish || text::is_cyrillic_word(word))
                    && lists.iter().flatten().any(|l| l.iter().any(|w| text::is_filler_word(w)))
                {
                    c.weight = c.weight.min(cfg.filler_weight);
                }
                for english in lists.into_iter().flatten().flatten() {
                    if let Some(kind) = text::value_type_of_word(english)
                        && !translated_types.contains(&kind)
                    {
                        translated_types.push(kind);
                    }
                    text::stem_into(english, &mut buf);
                    if let Some(&id) = self.vocab.get(buf.as_str())
                        && !originals.contains(&id)
                        && !c.alts.iter().any(|&(t, _)| t == id)
                    {
                        c.alts.push((id, cfg.translation_weight));
                    }
                }
            }
            let mut add = |english: &'static [&'static str]| {
                if let Some(kind) = english.iter().find_map(|w| text::value_type_of_word(w))
                    && !translated_types.contains(&kind)
                {
                    translated_types.push(kind);
                }
                // Translated filler (`帮` → `help`) weighs as little as written filler.
                let weight = if english.iter().any(|w| text::is_filler_word(w)) { cfg.filler_weight } else { 1.0 };
                let mut c = Concept { original: None, weight, alts: Vec::new() };
                for word in english.iter().filter(|w| !text::is_stop_word(w)) {
                    let sense = cfg.translation_weight;
                    let mut push = |id: u32, weight: f32| {
                        if !originals.contains(&id) && !c.alts.iter().any(|&(t, _)| t == id) {
                            c.alts.push((id, weight));
                        }
                    };
                    text::stem_into(word, &mut buf);
                    if let Some(&id) = self.vocab.get(buf.as_str()) {
                        push(id, sense);
                    }
                    // A translated word reaches the catalog's words as a written one does:
                    // `文件夹` → `folder` → `directory`.
                    let expansion = sense * cfg.translated_expansion;
                    if expansion > 0.0 {
                        for &id in self.synonyms.get(buf.as_str()).into_iter().flatten() {
                            push(id, expansion * cfg.synonym_weight);
                        }
                        for related in text::related_words(word) {
                            text::stem_into(related, &mut buf);
                            if let Some(&id) = self.vocab.get(buf.as_str()) {
                                push(id, expansion * cfg.related_weight);
                            }
                        }
                    }
                }
                if !c.alts.is_empty() && concepts.len() < MAX_QUERY_WORDS {
                    concepts.push(c);
                }
            };
            text::zh_translations(text, &mut add);
            text::ko_translations(text, &mut add);
            if cfg.value_type_weight > 0.0 {
                for kind in translated_types {
                    let s = text::stem(kind);
                    if stems.iter().any(|(x, _, _)| *x == s) || concepts.len() >= MAX_QUERY_WORDS {
                        continue;
                    }
                    if let Some(&id) = self.vocab.get(s.as_str()) {
                        let alts = vec![(id, 1.0)];
                        concepts.push(Concept { original: Some(id), weight: cfg.value_type_weight, alts });
                    }
                }
            }
            if cfg.loanword_weight > 0.0 {
                // A loanword means the catalog words that sound like it (`커밋` → `commit`).
                let weight = cfg.translation_weight * cfg.loanword_weight;
                text::loanword_keys(text, |key| {
                    let Some(ids) = self.sound_keys.get(key) else {
                        return false;
                    };
                    let alts: Vec<(u32, f32)> = ids
                        .iter()
                        .filter(|id| !originals.contains(id))
                        .take(MAX_LOANWORD_TERMS)
                        .map(|&id| (id, weight))
                        .collect();
                    if !alts.is_empty() && concepts.len() < MAX_QUERY_WORDS {
                        concepts.push(Concept { original: None, weight: 1.0, alts });
                    }
                    true
                });
            }
        }
        concepts.retain(|c| !c.alts.is_empty());
        concepts
    }

    /// Adds the vocabulary terms one edit away from the unknown word `word` to `alts` (at most
    /// [`MAX_TYPO_TERMS`], in term order), at [`SearchConfig::typo_weight`].
    fn typo_alternatives(&self, word: &str, alts: &mut Vec<(u32, f32)>) {
        let cfg = &self.config;
        if word.len() < cfg.typo_min_len
            || word.len() > self.max_typo_term + 1
            || !word.bytes().all(|b| b.is_ascii_lowercase())
        {
            return;
        }
        let mut found: Vec<u32> = Vec::new();
        let mut key_buf = Vec::new();
        for_each_typo_key(word.as_bytes(), &mut key_buf, |h| {
            let start = self.typo_keys.partition_point(|&(k, _)| k < h);
            for &(k, id) in &self.typo_keys[start..] {
                if k != h {
                    break;
                }
                if !found.contains(&id) && within_one_edit(word.as_bytes(), self.terms[id as usize].as_bytes()) {
                    found.push(id);
                }
            }
        });
        found.sort_unstable_by(|&a, &b| self.terms[a as usize].cmp(&self.terms[b as usize]));
        for id in found.into_iter().take(MAX_TYPO_TERMS) {
            if !alts.iter().any(|&(t, _)| t == id) {
                alts.push((id, cfg.typo_weight));
            }
        }
    }

    fn postings_of(&self, term: u32) -> &[Posting] {
        let t = term as usize;
        &self.postings[self.post_start[t] as usize..self.post_start[t + 1] as usize]
    }

    /// Text-mode scoring: every matching document that passes `filter`, unsorted. The work is
    /// proportional to the postings of the query's terms (plus the analysis of the query): the
    /// per-document accumulators are a per-thread scratch that only grows, and only the documents
    /// a query touched are visited and reset.
    fn rank_text(&self, text: &str, filter: &dyn Fn(usize) -> bool) -> Vec<(f32, u32)> {
        let n = self.docs.len();
        if text.trim().is_empty() {
            return (0..n as u32).filter(|&d| filter(d as usize)).map(|d| (0.0, d)).collect();
        }
        let mut matched = self.score_text(text);
        if self.config.split_intents {
            let clauses = intent_clauses(text);
            if clauses.len() > 1 {
                matched = self.interleave(matched, &clauses);
            }
        }
        #[cfg(feature = "semantic")]
        if self.semantic.is_some() {
            matched = self.fuse(matched, text);
        }
        matched.into_iter().filter(|&(_, d)| filter(d as usize)).collect()
    }

    /// Every document `text` matches, with its score, unsorted.
    fn score_text(&self, text: &str) -> Vec<(f32, u32)> {
        let concepts = self.concepts(text);
        SCRATCH.with(|cell| match cell.try_borrow_mut() {
            Ok(mut scratch) => self.score_into(text, &concepts, &mut scratch),
            // Re-entered from a filter on the same thread: use a scratch of its own.
            Err(_) => self.score_into(text, &concepts, &mut Scratch::default()),
        })
    }

    /// A multi-intent query's ranking: the whole query's best hit, then each clause's best, then
    /// the whole query's second, each clause's second, ... (documents already placed skipped),
    /// for the first [`Query::MAX_LIMIT`] places; then the rest of the whole query's ranking.
    /// Scores become ordinal (higher first).
    fn interleave(&self, whole: Vec<(f32, u32)>, clauses: &[&str]) -> Vec<(f32, u32)> {
        let by_rank = |mut v: Vec<(f32, u32)>| {
            v.sort_unstable_by(|a, b| {
                b.0.total_cmp(&a.0).then_with(|| self.name_rank[a.1 as usize].cmp(&self.name_rank[b.1 as usize]))
            });
            v
        };
        let mut lists = vec![by_rank(whole)];
        lists.extend(clauses.iter().map(|c| {
            let mut v = by_rank(self.score_text(c));
            v.truncate(Query::MAX_LIMIT);
            v
        }));
        let mut order: Vec<u32> = Vec::new();
        let mut placed: std::collections::HashSet<u32> = std::collections::HashSet::new();
        let mut depth = 0;
        while order.len() < Query::MAX_LIMIT && lists.iter().any(|l| depth < l.len()) {
            for l in &lists {
                if let Some(&(_, d)) = l.get(depth)
                    && order.len() < Query::MAX_LIMIT
                    && placed.insert(d)
                {
                    order.push(d);
                }
            }
            depth += 1;
        }
        for &(_, d) in &lists[0] {
            if placed.insert(d) {
                order.push(d);
            }
        }
        let n = order.len() as f32;
        order.into_iter().enumerate().map(|(i, d)| (n - i as f32, d)).collect()
    }

    /// Scores the documents `concepts` reach, plus the exact-name and name-prefix tiers, and
    /// leaves `scratch` all zero again.
    fn score_into(&self, text: &str, concepts: &[Concept], scratch: &mut Scratch) -> Vec<(f32, u32)> {
        let n = self.docs.len();
        if scratch.acc.len() < n {
            scratch.acc.resize(n, Acc::default());
        }
        let Scratch { acc, docs, touched } = scratch;
        for c in concepts {
            for &(term, weight) in &c.alts {
                let weight = weight * c.weight;
                let idf = self.idf[term as usize];
                for p in self.postings_of(term) {
                    let a = &mut acc[p.doc as usize];
                    if a.best == 0.0 && a.best_name == 0.0 {
                        touched.push(p.doc);
                    }
                    a.best = a.best.max(weight * p.weight);
                    if p.in_name {
                        a.best_name = a.best_name.max(weight * idf);
                    }
                }
            }
            for &d in touched.iter() {
                let a = &mut acc[d as usize];
                let fresh = a.score == 0.0 && a.name_hit == 0.0;
                a.score += a.best;
                a.name_hit += a.best_name;
                a.best = 0.0;
                a.best_name = 0.0;
                if fresh && (a.score > 0.0 || a.name_hit > 0.0) {
                    docs.push(d);
                }
            }
            touched.clear();
        }
        let cfg = &self.config;
        let mut best = 0f32;
        for &d in docs.iter() {
            let a = &mut acc[d as usize];
            let mass = self.name_mass[d as usize];
            let nc = if mass > 0.0 { (a.name_hit / mass).min(1.0) } else { 0.0 };
            a.score *= 1.0 + cfg.name_coverage * nc;
            if let Some(f) = self.prior.get(d as usize) {
                a.score *= f;
            }
            best = best.max(a.score);
        }

        // Exact names and aliases mentioned in the query go first; for a one-word query, names
        // it is a prefix of come next. A plain word (`help`, `translate`) counts as a name only
        // when it is the whole query: inside a sentence it is just a word.
        let tier = best + 1.0;
        let mut lift = |d: u32, by: f32| {
            let a = &mut acc[d as usize];
            if a.score == 0.0 && a.name_hit == 0.0 {
                docs.push(d);
            }
            a.score += by;
        };
        if cfg.name_match_first {
            let single = raw_words(text).nth(1).is_none();
            for word in raw_words(text) {
                if !single && !is_compound_name(word) {
                    continue;
                }
                if let Some(exact) = self.exact.get(&word.to_lowercase()) {
                    for &d in exact {
                        lift(d, 2.0 * tier);
                    }
                }
            }
            let trimmed = text.trim().to_lowercase();
            if single && trimmed.len() >= 2 {
                let start = self.lower_names.partition_point(|(name, _)| name.as_ref() < trimmed.as_str());
                for (name, d) in &self.lower_names[start..] {
                    if !name.starts_with(trimmed.as_str()) {
                        break;
                    }
                    if name.len() > trimmed.len() {
                        lift(*d, tier);
                    }
                }
            }
        }

        let mut out = Vec::with_capacity(docs.len());
        for &d in docs.iter() {
            let a = &mut acc[d as usize];
            if a.score > 0.0 {
                out.push((a.score, d));
            }
            *a = Acc::default();
        }
        docs.clear();
        out
    }

    /// Regex-mode scoring: the best field a case-insensitive match is found in (name 4, alias 3,
    /// title 2, description 1).
    fn rank_regex(&self, pattern: &str, filter: &dyn Fn(usize) -> bool) -> Result<Vec<(f32, u32)>, SearchError> {
        if pattern.len() > MAX_REGEX_LEN {
            return Err(SearchError::PatternTooLong { len: pattern.len(), max: MAX_REGEX_LEN });
        }
        let re = RegexBuilder::new(pattern)
            .case_insensitive(true)
            .size_limit(REGEX_SIZE_LIMIT)
            .dfa_size_limit(REGEX_SIZE_LIMIT)
            .nest_limit(64)
            .build()
            .map_err(|e| SearchError::InvalidRegex { pattern: pattern.to_string(), message: e.to_string() })?;
        let mut out = Vec::new();
        for (d, doc) in self.docs.iter().enumerate() {
            if !filter(d) {
                continue;
            }
            let score = if re.is_match(&doc.name) {
                4.0
            } else if doc.aliases.iter().any(|a| re.is_match(a)) {
                3.0
            } else if re.is_match(&doc.title) {
                2.0
            } else if re.is_match(&doc.description) {
                1.0
            } else {
                continue;
            };
            out.push((score, d as u32));
        }
        Ok(out)
    }
}

/// The clauses of a request that asks for several things: split at `;`, sentence ends, `then`,
/// `and`, `also`, `after that` (and their CJK punctuation), keeping clauses with at least two
/// content words (not stop words). Fewer than two such clauses: one intent, an empty list.
fn intent_clauses(text: &str) -> Vec<&str> {
    const MAX_CLAUSES: usize = 4;
    let mut cuts: Vec<(usize, usize)> = Vec::new();
    let lower = text.to_ascii_lowercase();
    for sep in [" and then ", " then ", " and also ", " also ", " after that ", " and "] {
        let mut from = 0;
        while let Some(at) = lower[from..].find(sep) {
            let start = from + at;
            if !cuts.iter().any(|&(a, b)| start < b && a < start + sep.len()) {
                cuts.push((start, start + sep.len()));
            }
            from = start + sep.len();
        }
    }
    for (i, c) in text.char_indices() {
        if matches!(c, ';' | '。' | '；' | '?' | '!') || (c == '.' && text[i + 1..].starts_with(' ')) {
            cuts.push((i, i + c.len_utf8()));
        }
    }
    cuts.sort_unstable();
    let mut clauses = Vec::new();
    let mut start = 0;
    for (a, b) in cuts.into_iter().chain(std::iter::once((text.len(), text.len()))) {
        if a < start {
            continue;
        }
        let clause = text[start..a].trim();
        let mut content = 0;
        text::split_words(clause, |w| content += usize::from(!text::is_stop_word(w)));
        if content >= 2 {
            clauses.push(clause);
        }
        start = b;
    }
    if clauses.len() < 2 {
        return Vec::new();
    }
    clauses.truncate(MAX_CLAUSES);
    clauses
}

/// Calls `f` with the typo key of `word` itself and of each of its one-byte deletions.
fn for_each_typo_key(word: &[u8], buf: &mut Vec<u8>, mut f: impl FnMut(u64)) {
    f(key_hash(word));
    for i in 0..word.len() {
        buf.clear();
        buf.extend_from_slice(&word[..i]);
        buf.extend_from_slice(&word[i + 1..]);
        f(key_hash(buf));
    }
}

/// 64-bit FNV-1a with a MurmurHash3 finaliser.
fn key_hash(bytes: &[u8]) -> u64 {
    let mut h = bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^ (h >> 33)
}

/// True when `a` and `b` differ by at most one insertion, deletion, substitution or swap of two
/// adjacent bytes.
fn within_one_edit(a: &[u8], b: &[u8]) -> bool {
    let (short, long) = if a.len() <= b.len() { (a, b) } else { (b, a) };
    let prefix = short.iter().zip(long).take_while(|(x, y)| x == y).count();
    match long.len() - short.len() {
        0 => {
            let (s, l) = (&short[prefix..], &long[prefix..]);
            s.len() <= 1 || s[1..] == l[1..] || (s.len() >= 2 && s[0] == l[1] && s[1] == l[0] && s[2..] == l[2..])
        }
        1 => short[prefix..] == long[prefix + 1..],
        _ => false,
    }
}

/// True for names that cannot be an ordinary word: they contain a separator or a digit, or are
/// camelCase (`todo_add`, `api.get`, `v2`, `getWeather`).
fn is_compound_name(word: &str) -> bool {
    word.contains(|c: char| matches!(c, '_' | '.' | '-' | ':' | '/') || c.is_ascii_digit())
        || word.chars().zip(word.chars().skip(1)).any(|(a, b)| a.is_lowercase() && b.is_uppercase())
}

/// Identifier-like words of a query, for exact-name matching (`todo_add`, `AclApi.add_mapping`).
fn raw_words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_alphanumeric() || matches!(c, '_' | '.' | '-' | ':' | '/')))
        .map(|w| w.trim_matches(|c: char| matches!(c, '.' | '-' | ':' | '/')))
        .filter(|w| !w.is_empty())
}

#[cfg(test)]
mod tests;
