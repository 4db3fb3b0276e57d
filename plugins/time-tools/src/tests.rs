use quiver_abi::{
    Status, ToolRequest, ToolResponse,
    sdk::Host,
    serde_json::{Value, json},
};

use super::__quiver_plugin::registry;

fn call(tool: &str, args: Value) -> ToolResponse {
    let request = ToolRequest { tool_id: tool.into(), inputs: args, ..ToolRequest::default() };
    registry().call(tool, request, Host::Detached)
}

fn ok(tool: &str, args: Value) -> Value {
    let r = call(tool, args.clone());
    assert_eq!(r.status, Status::Ok, "{tool} {args}: {:?}", r.error);
    r.outputs
}

fn err(tool: &str, args: Value) -> (String, String) {
    let r = call(tool, args.clone());
    assert_eq!(r.status, Status::Error, "{tool} {args} unexpectedly ok: {}", r.outputs);
    let e = r.error.unwrap();
    (e.code, e.message)
}

fn add(date: &str, extra: Value) -> String {
    let mut args = json!({ "date": date });
    args.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    ok("date_add", args)["result"].as_str().unwrap().to_owned()
}

#[test]
fn now_is_consistent_and_close_to_the_system_clock() {
    let sys = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
    let n = ok("time_now", json!({ "offset": "-03:30" }));
    assert!((n["unix_seconds"].as_i64().unwrap() - sys).abs() <= 5);
    assert!(n["rfc3339"].as_str().unwrap().ends_with("-03:30"));
    // Converting the reported instant back gives the same text.
    let back = ok("time_convert", json!({ "value": n["unix_seconds"], "to_offset": "-03:30" }));
    assert_eq!(back["rfc3339"], n["rfc3339"]);
    assert_eq!(back["date"], n["date"]);
    let ms = n["unix_millis"].as_i64().unwrap();
    assert!(ms / 1000 == n["unix_seconds"].as_i64().unwrap());
    // Bad configuration is reported as such.
    let request = ToolRequest {
        tool_id: "time_now".into(),
        inputs: json!({}),
        config: json!({ "default_offset": "Mars/Olympus" }),
        ..ToolRequest::default()
    };
    let e = registry().call("time_now", request, Host::Detached).error.unwrap();
    assert_eq!(e.code, "tool_error");
    assert!(e.message.contains("default_offset"));
}

#[test]
fn convert_edge_cases() {
    let epoch = ok("time_convert", json!({ "value": 0 }));
    assert_eq!(epoch["rfc3339"], "1970-01-01T00:00:00+00:00");
    assert_eq!(epoch["weekday"], "Thursday");
    let before = ok("time_convert", json!({ "value": "-1.5" }));
    assert_eq!(before["rfc3339"], "1969-12-31T23:59:58.500+00:00");
    assert_eq!(before["unix_seconds"], -2);
    let frac = ok("time_convert", json!({ "value": 1710081000.25 }));
    assert_eq!(frac["rfc3339"], "2024-03-10T14:30:00.250+00:00");
    let nano = ok("time_convert", json!({ "value": "2024-03-10T14:30:00.123456789Z" }));
    assert_eq!(nano["rfc3339"], "2024-03-10T14:30:00.123456789+00:00");
    assert_eq!(nano["unix_millis"], 1_710_081_000_123i64);
    let ms = ok("time_convert", json!({ "value": "-1500.25", "input_kind": "unix_millis" }));
    assert_eq!(ms["rfc3339"], "1969-12-31T23:59:58.499750+00:00");
    let ms = ok(
        "time_convert",
        json!({ "value": 1_700_000_000_123i64, "input_kind": "unix_millis", "to_offset": "+01:00" }),
    );
    assert_eq!(ms["rfc3339"], "2023-11-14T23:13:20.123+01:00");
    let last = ok("time_convert", json!({ "value": "9999-12-31T23:59:59Z" }));
    assert_eq!(last["unix_seconds"], 253_402_300_799i64);
    // The same instant shown past the end of year 9999 is out of range, not wrapped.
    assert_eq!(
        err("time_convert", json!({ "value": "9999-12-31T23:59:59Z", "to_offset": "+01:00" })).0,
        "invalid_arguments"
    );
    let compact = ok("time_convert", json!({ "value": "20240229" }));
    assert_eq!(compact["date"], "2024-02-29");
    let (_, msg) = err("time_convert", json!({ "value": 1_700_000_000_000i64 }));
    assert!(msg.contains("unix_millis"), "{msg}");
    assert_eq!(err("time_convert", json!({ "value": 5, "input_kind": "iso" })).0, "invalid_arguments");
    assert_eq!(err("time_convert", json!({ "value": "12abc", "input_kind": "unix_seconds" })).0, "invalid_arguments");
    let (_, msg) = err("time_convert", json!({ "value": "2024-03-10T10:00:00Z", "to_offset": "New York" }));
    assert!(msg.contains("+05:30") && msg.contains("to_offset") && msg.contains("America/New_York"), "{msg}");
}

#[test]
fn named_zones_follow_daylight_saving_rules() {
    // The acceptance case: Paris is still on CET (+01:00) at 01:30 on 2026-03-29, New York has
    // been on EDT (-04:00) since 2026-03-08.
    let r = ok(
        "time_convert",
        json!({ "value": "2026-03-29T01:30", "assume_offset": "Europe/Paris", "to_offset": "America/New_York" }),
    );
    assert_eq!(r["rfc3339"], "2026-03-28T20:30:00-04:00");
    assert_eq!(r["unix_seconds"], 1_774_744_200);
    // Every local half hour of that night in Paris, read in Paris and shown in UTC: the gap
    // 02:00-03:00 moves forward, so 02:30 and 03:30 are the same instant.
    let utc: Vec<String> = ["00:30", "01:30", "02:30", "03:30", "04:30"]
        .iter()
        .map(|t| {
            let r = ok(
                "time_convert",
                json!({ "value": format!("2026-03-29T{t}"), "assume_offset": "Europe/Paris", "to_offset": "Z" }),
            );
            r["time"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(utc, ["23:30:00", "00:30:00", "01:30:00", "01:30:00", "02:30:00"]);
    // Zone names are matched without regard to case and reported canonically.
    let r = ok("time_convert", json!({ "value": "2024-01-15T12:00:00Z", "to_offset": "europe/paris" }));
    assert_eq!(r["zone"]["name"], "Europe/Paris");
    assert_eq!(r["zone"]["abbreviation"], "CET");
    // A repeated autumn hour: earlier and later readings are one hour apart.
    let at = |how: &str| {
        ok(
            "time_convert",
            json!({ "value": "2026-10-25 02:30", "assume_offset": "Europe/Paris", "disambiguation": how }),
        )["unix_seconds"]
            .as_i64()
            .unwrap()
    };
    assert_eq!(at("later") - at("earlier"), 3600);
    let (_, msg) = err(
        "time_convert",
        json!({ "value": "2026-10-25 02:30", "assume_offset": "Europe/Paris", "disambiguation": "reject" }),
    );
    assert!(msg.contains("twice") && msg.contains("Europe/Paris"), "{msg}");
}

#[test]
fn add_months_clamps_to_month_end() {
    assert_eq!(add("2024-01-31", json!({ "months": 1 })), "2024-02-29");
    assert_eq!(add("2023-01-31", json!({ "months": 1 })), "2023-02-28");
    assert_eq!(add("2024-03-31", json!({ "months": -1 })), "2024-02-29");
    assert_eq!(add("2024-05-31", json!({ "months": 1 })), "2024-06-30");
    assert_eq!(add("2024-02-29", json!({ "years": 4 })), "2028-02-29");
    assert_eq!(add("2024-02-29", json!({ "years": 1 })), "2025-02-28");
    assert_eq!(add("2100-01-29", json!({ "months": 1 })), "2100-02-28");
    assert_eq!(add("2000-01-30", json!({ "months": 1 })), "2000-02-29");
    assert_eq!(add("2024-12-15", json!({ "months": 1 })), "2025-01-15");
    assert_eq!(add("2024-01-15", json!({ "months": -13 })), "2022-12-15");
    // Months are applied before days: Jan 31 + 1 month + 1 day = Mar 1.
    assert_eq!(add("2024-01-31", json!({ "months": 1, "days": 1 })), "2024-03-01");
    let out = ok("date_add", json!({ "date": "2024-01-15", "months": 1 }));
    assert_eq!(out["clamped"], false);
    assert_eq!(err("date_add", json!({ "date": "9999-12-01", "months": 1 })).0, "invalid_arguments");
    assert_eq!(err("date_add", json!({ "date": "0000-01-01", "days": -1 })).0, "invalid_arguments");
}

#[test]
fn add_days_across_leap_days_and_years() {
    assert_eq!(add("2024-02-28", json!({ "days": 1 })), "2024-02-29");
    assert_eq!(add("2023-02-28", json!({ "days": 1 })), "2023-03-01");
    assert_eq!(add("1900-02-28", json!({ "days": 1 })), "1900-03-01");
    assert_eq!(add("2000-02-28", json!({ "days": 1 })), "2000-02-29");
    assert_eq!(add("2024-12-31", json!({ "days": 1 })), "2025-01-01");
    assert_eq!(add("2024-01-01", json!({ "days": 366 })), "2025-01-01");
    assert_eq!(add("2024-03-01", json!({ "weeks": -1, "days": -1 })), "2024-02-22");
}

#[test]
fn add_business_days() {
    // Friday + 1 business day = Monday; Saturday + 1 = Monday; Monday - 1 = Friday.
    assert_eq!(add("2024-06-07", json!({ "business_days": 1 })), "2024-06-10");
    assert_eq!(add("2024-06-08", json!({ "business_days": 1 })), "2024-06-10");
    assert_eq!(add("2024-06-10", json!({ "business_days": -1 })), "2024-06-07");
    assert_eq!(add("2024-06-03", json!({ "business_days": 5 })), "2024-06-10");
    // A Friday–Saturday weekend.
    assert_eq!(add("2024-06-06", json!({ "business_days": 1, "weekend": ["friday", "saturday"] })), "2024-06-09");
    assert_eq!(
        err("date_add", json!({ "date": "2024-06-06", "days": 1, "holidays": ["2024-06-07"] })).0,
        "invalid_arguments"
    );
    let every = json!(["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]);
    assert_eq!(
        err("date_add", json!({ "date": "2024-06-06", "business_days": 1, "weekend": every })).0,
        "invalid_arguments"
    );
    assert_eq!(
        err("date_add", json!({ "date": "2024-06-06", "business_days": 1, "holidays": ["June 7"] })).0,
        "invalid_arguments"
    );
}

#[test]
fn add_clock_time() {
    assert_eq!(add("2024-12-31T23:30:00Z", json!({ "minutes": 45 })), "2025-01-01T00:15:00+00:00");
    assert_eq!(add("2024-03-10T01:00:00", json!({ "hours": -2 })), "2024-03-09T23:00:00");
    assert_eq!(add("2024-01-31T10:00:00+09:00", json!({ "months": 1, "seconds": 30 })), "2024-02-29T10:00:30+09:00");
}

#[test]
fn diff_and_add_agree() {
    for (start, n) in
        [("2024-06-07", 1), ("2024-06-03", 17), ("2024-02-26", 3), ("2024-06-10", -1), ("2024-03-01", -21)]
    {
        let end = add(start, json!({ "business_days": n }));
        let d = ok("date_diff", json!({ "start": start, "end": end }));
        assert_eq!(d["business_days"], n, "{start} + {n} business days = {end}");
    }
    for (start, m) in [("2024-01-31", 1), ("2023-05-31", 9), ("2020-02-29", 48)] {
        let end = add(start, json!({ "months": m }));
        assert_eq!(ok("date_diff", json!({ "start": start, "end": end }))["months"], m, "{start} + {m} months = {end}");
    }
}

#[test]
fn diff_details() {
    let same = ok("date_diff", json!({ "start": "2024-05-05", "end": "2024-05-05" }));
    assert_eq!(
        (same["days"].clone(), same["business_days"].clone(), same["summary"].clone()),
        (json!(0), json!(0), json!("0 days"))
    );
    let one = ok("date_diff", json!({ "start": "2024-05-06", "end": "2024-05-06", "inclusive": true }));
    assert_eq!((one["days"].clone(), one["business_days"].clone()), (json!(1), json!(1)));
    let leap = ok("date_diff", json!({ "start": "2023-03-01", "end": "2024-03-01" }));
    assert_eq!(
        (leap["days"].clone(), leap["years"].clone(), leap["summary"].clone()),
        (json!(366), json!(1), json!("1 year"))
    );
    let long = ok("date_diff", json!({ "start": "2022-01-10", "end": "2024-03-13" }));
    assert_eq!(long["summary"], "2 years, 2 months and 3 days");
    let back = ok("date_diff", json!({ "start": "2024-03-13", "end": "2024-03-10" }));
    assert_eq!(
        (back["days"].clone(), back["weeks"].clone(), back["remaining_days"].clone()),
        (json!(-3), json!(0), json!(-3))
    );
    assert_eq!(back["summary"], "3 days before the start");
    // Date-times: their own local date is used.
    let dt = ok("date_diff", json!({ "start": "2024-03-10T23:30:00-05:00", "end": "2024-03-11" }));
    assert_eq!(dt["days"], 1);
    // Many years: the O(1) weekday count matches a day-by-day count.
    let big = ok(
        "date_diff",
        json!({ "start": "2000-01-01", "end": "2024-12-31", "holidays": ["2024-12-25", "2024-12-28"] }),
    );
    let mut slow = 0;
    let (a, b) = (crate::civil::days_from_civil(2000, 1, 1), crate::civil::days_from_civil(2024, 12, 31));
    for d in a + 1..=b {
        if crate::civil::weekday(d) < 5 && d != crate::civil::days_from_civil(2024, 12, 25) {
            slow += 1;
        }
    }
    assert_eq!(big["business_days"], slow);
}

#[test]
fn manifest_names_every_registered_tool() {
    let manifest = include_str!("../tool.yaml");
    for tool in ["time_now", "time_convert", "date_diff", "date_add"] {
        assert!(manifest.contains(&format!("- name: {tool}\n")), "{tool} missing from tool.yaml");
        let r = registry().call(tool, ToolRequest::default(), Host::Detached);
        assert_ne!(r.error.map(|e| e.code), Some("unknown_tool".to_owned()), "{tool} not registered");
    }
}

#[test]
fn every_fixture_holds() {
    // The cases `cargo xtask contract-test` runs through the real host, here in-process.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    let report = quiver_abi::fixtures::run_fixtures(crate::__quiver_plugin::registry(), &dir);
    assert!(report.ran >= 10, "only {} fixture cases found in {}", report.ran, dir.display());
    assert!(report.failures.is_empty(), "{report}");
}
