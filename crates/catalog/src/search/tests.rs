use serde_json::json;

use super::*;

fn doc(name: &str, description: &str, params: &[(&str, &str)]) -> SearchDoc {
    SearchDoc {
        params: params.iter().map(|(n, d)| ParamDoc { name: n.to_string(), description: d.to_string() }).collect(),
        ..SearchDoc::new(name, description)
    }
}

fn catalog() -> SearchIndex {
    let mut tz = doc(
        "tz_convert",
        "Convert a timestamp from one time zone to another.",
        &[("timestamp", "ISO 8601 time"), ("to_zone", "IANA zone name")],
    );
    tz.aliases = vec!["timezone_convert".into()];
    tz.domain = "time".into();
    tz.examples = vec!["what time is it in Tokyo when it is noon in Paris".into()];
    let mut grep = doc(
        "fs.grep",
        "Search file contents for lines matching a pattern.",
        &[("pattern", "Regular expression"), ("path", "Directory to search")],
    );
    grep.title = "Search in files".into();
    grep.capabilities = vec!["search".into(), "read".into()];
    SearchIndex::build(vec![
        doc(
            "Weather_1_GetWeather",
            "Get the weather forecast of a city on a date.",
            &[("city", "City name"), ("date", "Date, YYYY-MM-DD")],
        ),
        doc(
            "Movies_1_FindMovies",
            "Search for movies playing in theaters at a location.",
            &[("location", "City where the theater is"), ("genre", "Genre. Values: Comedy, Drama, Horror.")],
        ),
        doc("readFile", "Read the contents of a file from disk.", &[("path", "File path")]),
        doc(
            "write_file",
            "Write text to a file on disk, creating it if needed.",
            &[("path", "File path"), ("content", "Text to write")],
        ),
        doc("delete_file", "Delete a file from disk.", &[("path", "File path")]),
        doc(
            "send_email",
            "Send an email message to a recipient.",
            &[("to", "Recipient address"), ("subject", "Subject line")],
        ),
        doc("help", "Show usage help for the host.", &[]),
        tz,
        grep,
    ])
}

fn names(index: &SearchIndex, result: &SearchResult) -> Vec<String> {
    result.hits.iter().map(|h| index.doc(h.doc).name.clone()).collect()
}

fn top(index: &SearchIndex, text: &str) -> String {
    let result = index.search(&Query::text(text), &|_| true).unwrap();
    names(index, &result).into_iter().next().unwrap_or_default()
}

#[test]
fn index_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<SearchIndex>();
}

#[test]
fn right_tool_ranks_first() {
    let index = catalog();
    assert_eq!(index.len(), 9);
    let cases = [
        ("will it rain in Boston tomorrow? weather please", "Weather_1_GetWeather"),
        ("find a comedy movie playing near me", "Movies_1_FindMovies"),
        ("read the file notes.txt", "readFile"),
        ("remove the file old.log", "delete_file"),
        ("save this text into a file", "write_file"),
        ("email my boss the report", "send_email"),
        ("convert 9am from Paris time zone to Tokyo", "tz_convert"),
        ("search for TODO in all files under src", "fs.grep"),
        // Synonyms: nothing in the catalog says "film" or "erase".
        ("which films are playing tonight", "Movies_1_FindMovies"),
        ("erase a file", "delete_file"),
        // Stemming: "deleting" meets "Delete".
        ("deleting files", "delete_file"),
        // Enum values in parameter descriptions.
        ("horror in Berkeley", "Movies_1_FindMovies"),
        // Prefix completion of an unknown word.
        ("weath", "Weather_1_GetWeather"),
    ];
    for (query, expected) in cases {
        assert_eq!(top(&index, query), expected, "query: {query}");
    }
}

#[test]
fn exact_names_and_aliases_come_first() {
    let index = catalog();
    assert_eq!(top(&index, "please call write_file now"), "write_file");
    assert_eq!(top(&index, "I think readFile is what I need"), "readFile");
    assert_eq!(top(&index, "TIMEZONE_CONVERT"), "tz_convert");
    assert_eq!(top(&index, "help"), "help");
    // A plain-word name inside a sentence is just a word, not a name mention.
    assert_eq!(top(&index, "can you help me delete a file from disk"), "delete_file");
    // One-word queries prefer names they start.
    assert_eq!(top(&index, "send"), "send_email");
}

#[test]
fn ties_break_by_name() {
    let same = |name: &str| doc(name, "Identical description of a tool.", &[]);
    let index = SearchIndex::build(vec![same("zeta"), same("alpha"), same("mid")]);
    for _ in 0..3 {
        let result = index.search(&Query::text("identical tool"), &|_| true).unwrap();
        assert_eq!(names(&index, &result), ["alpha", "mid", "zeta"]);
        assert_eq!(result.hits[0].score, result.hits[2].score);
    }
}

#[test]
fn filter_applies_before_limit_and_total() {
    let index = catalog();
    let query = Query::text("file disk").with_limit(1);
    let all = index.search(&query, &|_| true).unwrap();
    assert!(all.total >= 3, "{all:?}");
    assert_eq!(all.hits.len(), 1);
    let excluded = all.hits[0].doc;
    let filtered = index.search(&query, &|d| d != excluded).unwrap();
    assert_eq!(filtered.total, all.total - 1);
    assert_eq!(filtered.hits.len(), 1);
    assert_ne!(filtered.hits[0].doc, excluded);
    let none = index.search(&query, &|_| false).unwrap();
    assert_eq!((none.total, none.hits.len()), (0, 0));
}

#[test]
fn offset_limit_and_total_page_consistently() {
    let index = catalog();
    let full = index.search(&Query::text("file").with_limit(50), &|_| true).unwrap();
    assert!(full.total >= 4, "{:?}", names(&index, &full));
    assert_eq!(full.hits.len(), full.total);
    let mut paged = Vec::new();
    for offset in (0..full.total + 2).step_by(2) {
        let page = index.search(&Query::text("file").with_limit(2).with_offset(offset), &|_| true).unwrap();
        assert_eq!(page.total, full.total);
        assert!(page.hits.len() <= 2);
        paged.extend(page.hits);
    }
    assert_eq!(paged, full.hits);
    // Scores descend.
    assert!(full.hits.windows(2).all(|w| w[0].score >= w[1].score));
}

#[test]
fn limit_is_clamped() {
    let index = catalog();
    assert_eq!(Query::text("x").with_limit(0).effective_limit(), 1);
    assert_eq!(Query::text("x").with_limit(500).effective_limit(), 50);
    assert_eq!(Query::default().effective_limit(), Query::DEFAULT_LIMIT);
    let result = index.search(&Query::text("file").with_limit(0), &|_| true).unwrap();
    assert_eq!(result.hits.len(), 1);
}

#[test]
fn empty_query_lists_everything_by_name() {
    let index = catalog();
    let result = index.search(&Query::text("  ").with_limit(50), &|d| d != 0).unwrap();
    assert_eq!(result.total, 8);
    let got = names(&index, &result);
    let mut sorted = got.clone();
    sorted.sort();
    assert_eq!(got, sorted);
    let nothing = index.search(&Query::text("qqqq zzzz"), &|_| true).unwrap();
    assert_eq!(nothing.total, 0);
}

#[test]
fn regex_mode_matches_fields_case_insensitively() {
    let index = catalog();
    let result = index.search(&Query::regex("FILE"), &|_| true).unwrap();
    let got = names(&index, &result);
    // Names first (by name), then descriptions.
    assert_eq!(got, ["delete_file", "readFile", "write_file", "fs.grep"], "{got:?}");
    let alias = index.search(&Query::regex("^timezone_"), &|_| true).unwrap();
    assert_eq!(names(&index, &alias), ["tz_convert"]);
    let title = index.search(&Query::regex("in files$"), &|_| true).unwrap();
    assert_eq!(names(&index, &title), ["fs.grep"]);
    let filtered = index.search(&Query::regex("file").with_limit(1), &|d| index.doc(d).name != "delete_file").unwrap();
    assert_eq!(filtered.total, 3);
    assert_eq!(names(&index, &filtered), ["readFile"]);
}

#[test]
fn regex_errors_are_clear() {
    let index = catalog();
    match index.search(&Query::regex("(unclosed"), &|_| true) {
        Err(SearchError::InvalidRegex { pattern, message }) => {
            assert_eq!(pattern, "(unclosed");
            assert!(!message.is_empty());
        }
        other => panic!("expected InvalidRegex, got {other:?}"),
    }
    let long = "a".repeat(MAX_REGEX_LEN + 1);
    let err = index.search(&Query::regex(long), &|_| true).unwrap_err();
    assert_eq!(err, SearchError::PatternTooLong { len: MAX_REGEX_LEN + 1, max: MAX_REGEX_LEN });
    assert!(err.to_string().contains("at most 256"));
    // A pattern that compiles to a huge program is refused, not built.
    let huge = index.search(&Query::regex(r"\w{200}\w{200}\w{200}"), &|_| true);
    assert!(matches!(huge, Err(SearchError::InvalidRegex { .. })), "{huge:?}");
}

#[test]
fn builds_docs_from_input_schema() {
    let schema = json!({
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "City name"},
            "units": {"type": "string", "enum": ["metric", "imperial"]}
        }
    });
    let d = SearchDoc::from_input_schema("get_weather", "Weather now", &schema);
    assert_eq!(d.name, "get_weather");
    assert_eq!(d.params.len(), 2);
    assert!(d.params.iter().any(|p| p.name == "units" && p.description.contains("imperial")));
    let index = SearchIndex::build(vec![d, doc("other", "Unrelated tool", &[])]);
    assert_eq!(top(&index, "imperial units"), "get_weather");
}

#[test]
fn the_required_parameter_prior_prefers_the_tool_that_asks_less_only_when_on() {
    let schema = |required: &[&str]| {
        json!({
            "type": "object",
            "properties": {"server": {"type": "string", "description": "PostgreSQL server"},
                           "host": {"type": "string"}, "port": {"type": "integer"}},
            "required": required,
        })
    };
    let docs = || {
        vec![
            SearchDoc::from_input_schema("add_server", "Add a PostgreSQL server", &schema(&["server", "host", "port"])),
            SearchDoc::from_input_schema("show_servers", "List the servers", &schema(&[])),
        ]
    };
    assert_eq!(docs()[0].required, 3);
    let off = SearchIndex::build(docs());
    let on = SearchIndex::build_with(docs(), SearchConfig { required_prior: 0.3, ..SearchConfig::default() });
    let scores = |index: &SearchIndex| {
        let r = index.search(&Query::text("PostgreSQL servers"), &|_| true).unwrap();
        let score = |name: &str| r.hits.iter().find(|h| index.doc(h.doc).name == name).unwrap().score;
        (score("add_server"), score("show_servers"))
    };
    let ((add_off, show_off), (add_on, show_on)) = (scores(&off), scores(&on));
    // Off: the prior changes nothing. On: three required parameters cost 1 - 0.7^3 of the score,
    // none cost nothing.
    assert!(add_off > show_off, "{add_off} vs {show_off}");
    assert_eq!(top(&off, "PostgreSQL servers"), "add_server");
    assert_eq!(show_on, show_off);
    assert!((add_on - add_off * 0.7f32.powi(3)).abs() < 1e-4 * add_off, "{add_on} vs {add_off}");
    assert_eq!(top(&on, "PostgreSQL servers"), "show_servers");
}

#[test]
fn empty_index_is_fine() {
    let index = SearchIndex::build(Vec::new());
    assert!(index.is_empty());
    let result = index.search(&Query::text("anything"), &|_| true).unwrap();
    assert_eq!(result, SearchResult::default());
}

#[test]
fn huge_queries_are_bounded() {
    let index = catalog();
    let mut text: String = (0..20_000).map(|i| format!("word{i}x ")).collect();
    text.push_str("weather");
    let result = index.search(&Query::text(text), &|_| true).unwrap();
    // Only the first words count: the late "weather" (a word of the catalog) is ignored. How
    // fast a long query is belongs in the search bench, not in a timed test.
    assert_eq!(result.total, 0);
    assert_eq!(index.search(&Query::text("weather"), &|_| true).unwrap().total, 1);
}

#[test]
fn scratch_is_clean_between_queries_and_indexes() {
    let big = catalog();
    let small = SearchIndex::build(vec![doc("solo", "Only tool here.", &[])]);
    let first = big.search(&Query::text("read the file"), &|_| true).unwrap();
    // A query that matches nothing, one on another index, and one whose filter panics leave no
    // trace in the next result.
    assert_eq!(big.search(&Query::text("qzxv wkpj"), &|_| true).unwrap().total, 0);
    assert_eq!(names(&small, &small.search(&Query::text("tool"), &|_| true).unwrap()), ["solo"]);
    let panicked = std::panic::catch_unwind(|| big.search(&Query::text("file"), &|_| panic!("filter")));
    assert!(panicked.is_err());
    let again = big.search(&Query::text("read the file"), &|_| true).unwrap();
    assert_eq!(first, again);
    // A filter that searches the same index on the same thread gets its own scratch.
    let nested = big
        .search(&Query::text("file"), &|d| {
            let inner = big.search(&Query::text("weather"), &|_| true).unwrap();
            inner.total == 1 && d != 0
        })
        .unwrap();
    assert!(nested.total >= 3, "{nested:?}");
}

#[test]
fn position_finds_exact_names() {
    let index = catalog();
    for (i, d) in index.docs().iter().enumerate() {
        assert_eq!(index.position(&d.name), Some(i));
    }
    assert_eq!(index.position("readfile"), None);
    assert_eq!(index.position(""), None);
}

#[test]
fn typos_of_unknown_words_find_the_catalog_word() {
    let index = catalog();
    assert_eq!(top(&index, "wether forecast"), "Weather_1_GetWeather");
    assert_eq!(top(&index, "DELEET the file"), "delete_file");
    assert_eq!(top(&index, "sned an emial"), "send_email");
    // Known words are never "corrected", and nothing within one edit means no match.
    let config = SearchConfig { typo_weight: 0.0, ..SearchConfig::default() };
    let strict = SearchIndex::build_with(index.docs().to_vec(), config);
    assert_eq!(strict.search(&Query::text("wether"), &|_| true).unwrap().total, 0);
    assert_eq!(index.search(&Query::text("qzxvw"), &|_| true).unwrap().total, 0);
}

#[test]
fn edit_distance_one() {
    for (a, b, ok) in [
        ("complaint", "compaint", true),
        ("drive", "driive", true),
        ("weather", "wehather", true),
        ("weather", "wheatre", false),
        ("weather", "waether", true),
        ("weather", "weathre", true),
        ("weather", "wezther", true),
        ("abc", "abc", true),
        ("abcd", "badc", false),
        ("abc", "abcde", false),
    ] {
        assert_eq!(within_one_edit(a.as_bytes(), b.as_bytes()), ok, "{a} {b}");
    }
}

#[test]
fn unspaced_scripts_match_on_shared_bigrams() {
    let index = SearchIndex::build(vec![
        doc("weather_cn", "查询城市的天气预报", &[]),
        doc("news_kr", "최근 뉴스를 검색합니다", &[]),
        doc("other", "Something else entirely", &[]),
    ]);
    assert_eq!(top(&index, "北京后天的天气如何？"), "weather_cn");
    assert_eq!(top(&index, "박지성에 관한 뉴스를 찾아줘"), "news_kr");
}

#[test]
fn multi_intent_requests_split_into_clauses() {
    assert_eq!(
        intent_clauses("read the file notes.txt and then send an email to Bob"),
        ["read the file notes.txt", "send an email to Bob"]
    );
    assert_eq!(intent_clauses("weather in Paris; delete file old.log"), ["weather in Paris", "delete file old.log"]);
    // One content word on a side: one intent.
    assert!(intent_clauses("sides 3, 4 and 5").is_empty());
    assert!(intent_clauses("read the file").is_empty());

    let config = SearchConfig { split_intents: true, ..SearchConfig::default() };
    let index = SearchIndex::build_with(catalog().docs().to_vec(), config);
    let result = index
        .search(&Query::text("read the file notes.txt and then send an email to Bob").with_limit(2), &|_| true)
        .unwrap();
    let mut top = names(&index, &result);
    top.sort();
    assert_eq!(top, ["readFile", "send_email"]);
}

#[test]
fn copies_of_a_tool_do_not_crowd_the_page() {
    let mut docs = Vec::new();
    for v in 0..60 {
        docs.push(doc(&format!("v{v:02}.get_weather"), "Get the weather forecast for a city.", &[("city", "City")]));
    }
    docs.push(doc("weather_alerts", "Severe weather alerts for a region.", &[("region", "Region")]));
    docs.push(doc("air_quality", "Air quality index and weather pollution for a city.", &[("city", "City")]));
    let index = SearchIndex::build(docs.clone());
    let top3 = names(&index, &index.search(&Query::text("weather forecast city").with_limit(3), &|_| true).unwrap());
    assert_eq!(top3.len(), 3);
    assert_eq!(top3[0], "v00.get_weather");
    assert!(top3.contains(&"weather_alerts".to_string()) && top3.contains(&"air_quality".to_string()), "{top3:?}");
    // Pages agree with one long page.
    let all = names(&index, &index.search(&Query::text("weather forecast city").with_limit(50), &|_| true).unwrap());
    let second = index.search(&Query::text("weather forecast city").with_limit(10).with_offset(10), &|_| true).unwrap();
    assert_eq!(names(&index, &second), all[10..20].to_vec());
    // Off: the copies fill the page.
    let plain = SearchIndex::build_with(docs, SearchConfig { diversify: false, ..SearchConfig::default() });
    let top3 = names(&plain, &plain.search(&Query::text("weather forecast city").with_limit(3), &|_| true).unwrap());
    assert!(top3.iter().all(|n| n.ends_with(".get_weather")), "{top3:?}");
}

#[test]
fn a_page_with_copies_is_the_fully_sorted_collapsed_ranking_cut() {
    // Many tools, some with several copies (same description and parameters), words drawn from
    // a small pool so that every request matches hundreds of them with close scores.
    let pool =
        ["weather", "city", "forecast", "file", "read", "send", "email", "price", "stock", "hotel", "book", "room"];
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut docs = Vec::new();
    for t in 0..400 {
        let words: Vec<&str> = (0..2 + next() % 5).map(|_| pool[(next() % pool.len() as u64) as usize]).collect();
        let description = words.join(" ");
        let param = pool[(next() % pool.len() as u64) as usize];
        for c in 0..[1, 1, 1, 2, 3, 7][(next() % 6) as usize] {
            docs.push(doc(&format!("v{c}.tool_{t:03}"), &description, &[(param, "a value")]));
        }
    }
    let index = SearchIndex::build(docs);
    assert!(index.has_copies);
    // The reference: the whole window sorted, then its later copies moved behind every first
    // copy in order, then the rest sorted.
    let reference = |text: &str| -> Vec<(f32, u32)> {
        let mut ranked = index.rank_text(text, &|_| true);
        let cmp = |a: &(f32, u32), b: &(f32, u32)| {
            b.0.total_cmp(&a.0).then_with(|| index.name_rank[a.1 as usize].cmp(&index.name_rank[b.1 as usize]))
        };
        ranked.sort_unstable_by(cmp);
        let window = DIVERSIFY_WINDOW.min(ranked.len());
        let mut seen = std::collections::HashSet::new();
        let (first, later): (Vec<_>, Vec<_>) =
            ranked[..window].iter().partition(|h| seen.insert(index.fingerprint[h.1 as usize]));
        ranked[..window].copy_from_slice(&[first, later].concat());
        ranked
    };
    for text in ["weather city", "read file send email", "book hotel room price", "stock"] {
        let expected = reference(text);
        assert!(expected.len() > DIVERSIFY_WINDOW, "{text}: {} hits", expected.len());
        for (offset, limit) in [(0, 1), (0, 5), (0, 10), (0, 50), (3, 7), (45, 50), (190, 20), (199, 50)] {
            let page = index.search(&Query::text(text).with_limit(limit).with_offset(offset), &|_| true).unwrap();
            let got: Vec<(f32, u32)> = page.hits.iter().map(|h| (h.score, h.doc as u32)).collect();
            let end = (offset + limit).min(expected.len());
            assert_eq!(got, expected[offset..end], "{text}: offset {offset}, limit {limit}");
        }
    }
}

#[test]
fn a_value_type_in_the_request_favours_tools_taking_it() {
    // Two tools equally about forecasts; only one takes a date.
    let docs = vec![
        doc("forecast_current", "Weather forecast for a city.", &[("city", "City name")]),
        doc("forecast_on_day", "Weather forecast for a city.", &[("city", "City name"), ("date", "Day, YYYY-MM-DD")]),
    ];
    let index = SearchIndex::build(docs.clone());
    for request in ["forecast for Phoenix on 2023-04-14", "forecast for Phoenix next Friday"] {
        assert_eq!(top(&index, request), "forecast_on_day", "{request}");
    }
    // Without a value, the tie breaks by name; with the value types off, the date is no signal.
    assert_eq!(top(&index, "forecast for Phoenix"), "forecast_current");
    let off = SearchIndex::build_with(docs, SearchConfig { value_type_weight: 0.0, ..SearchConfig::default() });
    assert_eq!(top(&off, "forecast for Phoenix on 2023-04-14"), "forecast_current");
}

#[test]
fn value_types_in_chinese_japanese_and_korean_requests_favour_tools_taking_them() {
    // Two tools equally about forecasts (天气 / 天気 / 날씨 → weather); only one takes a date.
    let docs = vec![
        doc("forecast_current", "Weather forecast for a city.", &[("city", "City name")]),
        doc("forecast_on_day", "Weather forecast for a city.", &[("city", "City name"), ("date", "Day, YYYY-MM-DD")]),
    ];
    let index = SearchIndex::build(docs.clone());
    // A number and its unit (`5月3日`, `5월 3일`) and a translated date word (明天, 明日, 내일:
    // tomorrow; 星期五, 周五: Friday; 后天, 모레: the day after tomorrow) each name a date.
    for request in [
        "5月3日上海的天气",
        "明天上海的天气",
        "星期五上海的天气",
        "周五上海的天气",
        "后天上海的天气",
        "明日の大阪の天気",
        "내일 부산 날씨",
        "모레 부산 날씨",
        "5월 3일 부산 날씨",
    ] {
        assert_eq!(top(&index, request), "forecast_on_day", "{request}");
    }
    assert_eq!(top(&index, "上海的天气"), "forecast_current");
    let off = SearchIndex::build_with(docs, SearchConfig { value_type_weight: 0.0, ..SearchConfig::default() });
    assert_eq!(top(&off, "明天上海的天气"), "forecast_current");

    // The unit is part of the value, not a word: `日` (day, sun, Japan) does not pull up a tool
    // about days.
    let docs = vec![
        doc("hosts_per_day", "Count the hosts seen per day.", &[("day", "Day")]),
        doc("book_train", "Buy a train ticket.", &[("origin", "From"), ("date", "Travel date")]),
    ];
    let index = SearchIndex::build(docs);
    assert_eq!(top(&index, "3月15日的火车票"), "book_train");
}

#[test]
fn indonesian_requests_reach_tools_described_in_english() {
    let docs = vec![
        doc("read_file", "Read the contents of a file.", &[("path", "Path of the file")]),
        doc("git_log", "Show the commit history of a repository.", &[("repo", "Repository path")]),
        doc("get_sum", "Add two numbers.", &[("a", "First number"), ("b", "Second number")]),
    ];
    let index = SearchIndex::build(docs.clone());
    // `baca` read, `berkas` file; `tampilkan` (tampil + -kan) show, `riwayat` history.
    assert_eq!(top(&index, "tolong baca berkas ini"), "read_file");
    assert_eq!(top(&index, "tampilkan riwayat"), "git_log");
    let off = SearchIndex::build_with(docs, SearchConfig { translation_weight: 0.0, ..SearchConfig::default() });
    assert_eq!(off.search(&Query::text("tolong baca berkas ini"), &|_| true).unwrap().total, 0);
}

#[test]
fn romance_requests_reach_tools_described_in_english() {
    let docs = vec![
        doc("search_files", "Find files whose names match a pattern.", &[("pattern", "Glob pattern")]),
        doc("git_checkout", "Switch to another branch of a repository.", &[("branch", "Branch name")]),
        doc("write_file", "Write text to a file.", &[("path", "Path of the file")]),
        doc("add_observations", "Add observations to an entity.", &[("entity", "Entity name")]),
    ];
    let index = SearchIndex::build(docs.clone());
    // Spanish `busca` (buscar) search, `archivos` files; French `écris` (écrire) write,
    // `fichier` file; Italian `aggiungi` (aggiungere) add, `osservazioni` observations.
    assert_eq!(top(&index, "busca archivos que coincidan con este patrón"), "search_files");
    assert_eq!(top(&index, "écris ce texte dans un nouveau fichier"), "write_file");
    assert_eq!(top(&index, "aggiungi osservazioni a questa entità"), "add_observations");
    // Portuguese writes `do` (of the) and `a` (the) as English does: they count for neither
    // language, and `os` makes this request Portuguese (`escreva` → `escrever`, write; `arquivo`,
    // file).
    assert_eq!(top(&index, "escreva os dados do arquivo"), "write_file");
    // Only a request that reads as one of these languages is looked up: in an English request,
    // `busca` is a word nothing knows, not Spanish.
    assert_eq!(index.search(&Query::text("please busca the archivos for me"), &|_| true).unwrap().total, 0);
    let off = SearchIndex::build_with(docs, SearchConfig { translation_weight: 0.0, ..SearchConfig::default() });
    assert_eq!(off.search(&Query::text("busca archivos que coincidan con este patrón"), &|_| true).unwrap().total, 0);
}

#[test]
fn german_requests_reach_tools_described_in_english() {
    let docs = vec![
        doc("search_files", "Find files whose names match a pattern.", &[("pattern", "Glob pattern")]),
        doc("delete_file", "Delete a file.", &[("path", "Path of the file")]),
        doc("send_message", "Send a message to a user.", &[("user", "Recipient"), ("text", "Message text")]),
        doc("add_observations", "Add observations to an entity.", &[("entity", "Entity name")]),
    ];
    let index = SearchIndex::build(docs.clone());
    // `suche` (suchen) search, `Dateien` files; `lösche` (löschen) delete, `Datei` file;
    // `sende` (senden) send, `Nachricht` message.
    assert_eq!(top(&index, "Suche alle Dateien mit der Endung rs"), "search_files");
    assert_eq!(top(&index, "Lösche die Datei"), "delete_file");
    assert_eq!(top(&index, "Sende eine Nachricht an Anna"), "send_message");
    // A word with an umlaut reads as German: `über` is no ride service.
    assert_eq!(top(&index, "Nachricht über Projekte"), "send_message");
    // Only a request that reads as German is looked up: in an English request, `suche` is a
    // word nothing knows.
    assert_eq!(index.search(&Query::text("please suche the dateien"), &|_| true).unwrap().total, 0);
    let off = SearchIndex::build_with(docs, SearchConfig { translation_weight: 0.0, ..SearchConfig::default() });
    assert_eq!(off.search(&Query::text("Lösche die Datei"), &|_| true).unwrap().total, 0);
}

#[test]
fn russian_requests_reach_tools_described_in_english() {
    let docs = vec![
        doc("search_files", "Find files whose names match a pattern.", &[("pattern", "Glob pattern")]),
        doc("git_commit", "Record changes to the repository.", &[("message", "Commit message")]),
        doc("create_table", "Create a table in the database.", &[("name", "Table name")]),
        doc("add_observations", "Add observations to an entity.", &[("entity", "Entity name")]),
    ];
    let index = SearchIndex::build(docs.clone());
    // `найди` (найти) find, `файлы` (файл) files; `создай` (создать) create, `таблицу` (таблица)
    // table; `коммит`, a loanword, sounds like commit.
    assert_eq!(top(&index, "Найди все файлы по шаблону"), "search_files");
    assert_eq!(top(&index, "Создай новую таблицу"), "create_table");
    assert_eq!(top(&index, "сделай коммит"), "git_commit");
    let off = SearchIndex::build_with(docs, SearchConfig { translation_weight: 0.0, ..SearchConfig::default() });
    assert_eq!(off.search(&Query::text("Найди все файлы по шаблону"), &|_| true).unwrap().total, 0);
}

#[test]
fn polish_requests_reach_tools_described_in_english() {
    let docs = vec![
        doc("search_files", "Find files whose names match a pattern.", &[("pattern", "Glob pattern")]),
        doc("send_message", "Send a message to a user.", &[("user", "Recipient"), ("text", "Message text")]),
        doc("check_status", "Check the status of an order.", &[("order", "Order id")]),
        doc("add_observations", "Add observations to an entity.", &[("entity", "Entity name")]),
    ];
    let index = SearchIndex::build(docs.clone());
    // `plików` (plik) files; `wiadomość` message; `sprawdź` (sprawdzić) check.
    assert_eq!(top(&index, "Znajdź wszystkie pliki według wzorca"), "search_files");
    assert_eq!(top(&index, "Wyślij wiadomość do Anny"), "send_message");
    assert_eq!(top(&index, "Sprawdź, czy moje zamówienie jest gotowe"), "check_status");
    // Only a request that reads as Polish is looked up.
    assert_eq!(index.search(&Query::text("please wiadomosc the pliki"), &|_| true).unwrap().total, 0);
    let off = SearchIndex::build_with(docs, SearchConfig { translation_weight: 0.0, ..SearchConfig::default() });
    assert_eq!(off.search(&Query::text("Wyślij wiadomość do Anny"), &|_| true).unwrap().total, 0);
}

#[test]
fn translated_day_names_are_dates() {
    let docs = vec![
        doc("cancel_meeting", "Cancel a meeting.", &[("meeting", "Meeting name")]),
        doc("move_meeting", "Move a meeting.", &[("meeting", "Meeting name"), ("date", "New date")]),
    ];
    // `reunión` meeting; `jueves` Thursday, a date: the tool taking a date ranks first.
    let index = SearchIndex::build(docs.clone());
    assert_eq!(top(&index, "la reunión del jueves"), "move_meeting");
    let off = SearchIndex::build_with(docs, SearchConfig { value_type_weight: 0.0, ..SearchConfig::default() });
    assert_eq!(top(&off, "la reunión del jueves"), "cancel_meeting");
}

#[test]
fn chinese_requests_reach_tools_described_in_english() {
    let index = catalog();
    // 天气 → weather, 电影 → movie, 删除 → delete, 文件 → file.
    assert_eq!(top(&index, "帮我查一下北京的天气"), "Weather_1_GetWeather");
    assert_eq!(top(&index, "给我找一部喜剧电影"), "Movies_1_FindMovies");
    assert_eq!(top(&index, "删除这个文件"), "delete_file");
    let off = SearchIndex::build_with(
        index.docs().to_vec(),
        SearchConfig { translation_weight: 0.0, ..SearchConfig::default() },
    );
    assert_eq!(off.search(&Query::text("帮我查一下北京的天气"), &|_| true).unwrap().total, 0);
}

#[test]
fn korean_requests_reach_tools_described_in_english() {
    let index = catalog();
    // 날씨 → weather, 영화 → movie, 삭제하 (삭제하다) → delete, 파일 → file; particles (`를`,
    // `의`) and endings (`해줘`) attached.
    assert_eq!(top(&index, "서울의 날씨를 알려줘"), "Weather_1_GetWeather");
    assert_eq!(top(&index, "코미디 영화를 찾아줘"), "Movies_1_FindMovies");
    assert_eq!(top(&index, "이 파일을 삭제해줘"), "delete_file");
    let off = SearchIndex::build_with(
        index.docs().to_vec(),
        SearchConfig { translation_weight: 0.0, ..SearchConfig::default() },
    );
    assert_eq!(off.search(&Query::text("서울의 날씨를 알려줘"), &|_| true).unwrap().total, 0);
}

#[test]
fn loanwords_in_hangul_and_katakana_reach_the_english_words_they_sound_like() {
    let docs = vec![
        doc("git_commit", "Records changes to the repository.", &[("message", "Commit message")]),
        doc("git_create_branch", "Creates a new branch.", &[("branch_name", "Name of the new branch")]),
        doc("find_recipes", "Find cooking recipes by ingredient.", &[("ingredient", "Main ingredient")]),
        doc("send_email", "Send an e-mail message.", &[("to", "Recipient")]),
    ];
    let index = SearchIndex::build(docs.clone());
    // 커밋 (keo-mit) → commit, 브랜치 (beu-raen-chi) → branch, with particles and endings
    // attached; レシピ (re-shi-pi) → recipe: none of them is in the Korean dictionary.
    assert_eq!(top(&index, "커밋해 줘"), "git_commit");
    assert_eq!(top(&index, "브랜치를 보여 줘"), "git_create_branch");
    assert_eq!(top(&index, "レシピ"), "find_recipes");
    let off = SearchIndex::build_with(docs, SearchConfig { loanword_weight: 0.0, ..SearchConfig::default() });
    for q in ["커밋해 줘", "レシピ"] {
        assert_eq!(off.search(&Query::text(q), &|_| true).unwrap().total, 0, "{q}");
    }
}

#[test]
#[cfg(not(feature = "semantic"))]
fn a_configured_model_without_the_semantic_feature_names_the_feature() {
    assert!(!SearchSetup::load(None).unwrap().has_embedding());
    let err = SearchSetup::load(Some(std::path::Path::new("models/m"))).unwrap_err();
    assert!(err.file.ends_with("models/m") && err.message.contains("`semantic` cargo feature"), "{err}");
}

/// The optional semantic ranking (feature `semantic`).
#[cfg(feature = "semantic")]
mod semantic {
    use super::*;

    /// Writes a tiny model2vec model into `dir`: a word-level tokenizer over `words` and one vector
    /// per word (`[UNK]` first, all zero).
    fn write_tiny_model(dir: &std::path::Path, words: &[(&str, [f32; 3])]) {
        let mut vocab = serde_json::Map::new();
        vocab.insert("[UNK]".into(), json!(0));
        let mut data: Vec<f32> = vec![0.0; 3];
        for (i, (w, v)) in words.iter().enumerate() {
            vocab.insert((*w).into(), json!(i + 1));
            data.extend_from_slice(v);
        }
        let tokenizer = json!({
            "version": "1.0",
            "truncation": null,
            "padding": null,
            "added_tokens": [],
            "normalizer": {"type": "Lowercase"},
            "pre_tokenizer": {"type": "Whitespace"},
            "post_processor": null,
            "decoder": null,
            "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]"}
        });
        std::fs::write(dir.join(embed::TOKENIZER_FILE), tokenizer.to_string()).unwrap();
        let bytes: Vec<u8> = data.iter().flat_map(|x| x.to_le_bytes()).collect();
        let view =
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![words.len() + 1, 3], &bytes).unwrap();
        let file = safetensors::serialize([(embed::EMBEDDINGS_TENSOR, view)], None).unwrap();
        std::fs::write(dir.join(embed::WEIGHTS_FILE), file).unwrap();
    }

    #[test]
    fn an_embedding_model_finds_tools_the_words_miss() {
        let dir = tempfile::tempdir().unwrap();
        // `rain` and `umbrella` sit next to `weather` and `forecast`; `mail` next to `email`.
        write_tiny_model(
            dir.path(),
            &[
                ("weather", [1.0, 0.0, 0.0]),
                ("forecast", [0.9, 0.1, 0.0]),
                ("rain", [0.95, 0.0, 0.05]),
                ("umbrella", [0.9, 0.0, 0.1]),
                ("email", [0.0, 1.0, 0.0]),
                ("mail", [0.0, 0.95, 0.05]),
                ("file", [0.0, 0.0, 1.0]),
            ],
        );
        let model = std::sync::Arc::new(embed::StaticEmbedding::load(dir.path()).unwrap());
        assert_eq!(model.dim(), 3);
        let lexical = catalog();
        assert_eq!(lexical.search(&Query::text("rain or umbrella"), &|_| true).unwrap().total, 0);
        let fused = catalog().with_embedding(model);
        assert!(fused.has_embedding());
        assert_eq!(top(&fused, "rain or umbrella"), "Weather_1_GetWeather");
        // Lexical matches still count: the exact request keeps its tool first.
        assert_eq!(top(&fused, "send an email message"), "send_email");
        // A query the model knows nothing of ranks lexically, and regex mode is untouched.
        let unknown = Query::text("convert a time zone");
        assert_eq!(
            names(&fused, &fused.search(&unknown, &|_| true).unwrap()),
            names(&lexical, &lexical.search(&unknown, &|_| true).unwrap())
        );
        assert_eq!(
            names(&fused, &fused.search(&Query::regex("^write"), &|_| true).unwrap()),
            names(&lexical, &lexical.search(&Query::regex("^write"), &|_| true).unwrap())
        );
    }

    /// A tiny model where `umbrella` sits next to `weather` and far from `email`; the words of
    /// the request "send umbrella" reach `send_email`, the model `Weather_1_GetWeather`.
    fn umbrella_model() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        write_tiny_model(
            dir.path(),
            &[("weather", [1.0, 0.0, 0.0]), ("umbrella", [0.9, 0.0, 0.1]), ("email", [0.0, 1.0, 0.0])],
        );
        dir
    }

    #[test]
    fn the_fusion_weight_decides_between_the_words_and_the_model() {
        let dir = umbrella_model();
        let model = std::sync::Arc::new(embed::StaticEmbedding::load(dir.path()).unwrap());
        let with = |semantic_weight: f32| {
            let config = SearchConfig { semantic_weight, ..SearchConfig::default() };
            SearchIndex::build_with(catalog().docs().to_vec(), config).with_embedding(model.clone())
        };
        // `send` is a word of `send_email` only; `umbrella` is only the model's, next to weather.
        let request = "send umbrella";
        assert_eq!(top(&with(SearchConfig::default().semantic_weight), request), "send_email");
        assert_eq!(top(&with(5.0), request), "Weather_1_GetWeather");
        // At weight 0 the model changes no rank of what the words found.
        let lexical = catalog();
        let off = with(0.0);
        let query = Query::text(request);
        let lexical_names = names(&lexical, &lexical.search(&query, &|_| true).unwrap());
        let off_names = names(&off, &off.search(&query, &|_| true).unwrap());
        assert_eq!(off_names[..lexical_names.len()], lexical_names[..]);
    }

    #[test]
    fn the_dot_product_is_the_sum_of_the_products() {
        for len in [0usize, 1, 7, 8, 9, 256, 259] {
            let a: Vec<f32> = (0..len).map(|i| (i as f32 * 0.37).sin()).collect();
            let b: Vec<f32> = (0..len).map(|i| (i as f32 * 0.11).cos()).collect();
            let plain: f64 = a.iter().zip(&b).map(|(x, y)| f64::from(*x) * f64::from(*y)).sum();
            assert!((f64::from(embed::dot(&a, &b)) - plain).abs() < 1e-4, "length {len}");
        }
    }

    #[test]
    fn search_setup_loads_the_configured_model_for_every_index() {
        let dir = tempfile::tempdir().unwrap();
        write_tiny_model(dir.path(), &[("weather", [1.0, 0.0, 0.0]), ("rain", [0.95, 0.0, 0.05])]);
        let setup = SearchSetup::load(Some(dir.path())).unwrap();
        assert!(setup.has_embedding());
        let index = setup.index(catalog().docs().to_vec());
        assert_eq!(top(&index, "rain"), "Weather_1_GetWeather");
        let err = SearchSetup::load(Some(&dir.path().join("nope"))).unwrap_err();
        assert!(err.file.ends_with("nope") && err.message.contains("model2vec"), "{err}");
        assert!(!SearchSetup::load(None).unwrap().index(catalog().docs().to_vec()).has_embedding());
    }

    #[test]
    fn search_setup_passes_the_configured_fusion_weight_on() {
        let dir = umbrella_model();
        let setup = SearchSetup::load(Some(dir.path())).unwrap();
        assert_eq!(top(&setup.index(catalog().docs().to_vec()), "send umbrella"), "send_email");
        let heavy = setup.with_semantic_weight(5.0).index(catalog().docs().to_vec());
        assert_eq!(top(&heavy, "send umbrella"), "Weather_1_GetWeather");
    }

    #[test]
    fn a_padding_tokenizer_does_not_dilute_a_vector() {
        let dir = tempfile::tempdir().unwrap();
        write_tiny_model(dir.path(), &[("weather", [1.0, 0.0, 0.0]), ("mail", [0.0, 1.0, 0.0])]);
        let plain = embed::StaticEmbedding::load(dir.path()).unwrap().embed("weather mail").unwrap();
        // Sentence encoders export tokenizers that pad to a fixed length with token 0.
        let path = dir.path().join(embed::TOKENIZER_FILE);
        let mut tokenizer: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        tokenizer["padding"] = json!({"strategy": {"Fixed": 16}, "direction": "Right", "pad_to_multiple_of": null,
            "pad_id": 0, "pad_type_id": 0, "pad_token": "[UNK]"});
        tokenizer["truncation"] =
            json!({"max_length": 1, "strategy": "LongestFirst", "stride": 0, "direction": "Right"});
        std::fs::write(&path, tokenizer.to_string()).unwrap();
        let padded = embed::StaticEmbedding::load(dir.path()).unwrap().embed("weather mail").unwrap();
        assert_eq!(plain, padded);
    }

    #[test]
    fn a_bad_embedding_model_is_refused_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let missing = embed::StaticEmbedding::load(&dir.path().join("nope")).unwrap_err();
        assert!(missing.to_string().contains("nope") && missing.message.contains("model2vec"), "{missing}");
        let no_weights = embed::StaticEmbedding::load(dir.path()).unwrap_err();
        assert!(no_weights.file.ends_with(embed::WEIGHTS_FILE), "{no_weights}");
        std::fs::write(dir.path().join(embed::WEIGHTS_FILE), b"not safetensors").unwrap();
        let bad = embed::StaticEmbedding::load(dir.path()).unwrap_err();
        assert!(bad.message.contains("not a safetensors file"), "{bad}");
        write_tiny_model(dir.path(), &[("weather", [1.0, 0.0, 0.0])]);
        std::fs::write(dir.path().join(embed::TOKENIZER_FILE), b"{}").unwrap();
        let bad_tokenizer = embed::StaticEmbedding::load(dir.path()).unwrap_err();
        assert!(bad_tokenizer.file.ends_with(embed::TOKENIZER_FILE), "{bad_tokenizer}");
    }
}
