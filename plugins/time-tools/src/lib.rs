//! `time-tools`: current time, time conversion and calendar arithmetic for agents.
//!
//! Tools: `time_now` (the current time at UTC, in an IANA zone or at a fixed offset),
//! `time_convert` (parse RFC 3339, ISO dates or Unix timestamps and show them in another zone or
//! offset or in a strftime-like format),
//! `date_diff` (days, weeks, months and business days between two dates) and `date_add` (add
//! years, months, weeks, days, business days or clock time, clamping to month ends).
//!
//! Calendar math is the proleptic Gregorian calendar, implemented here with the
//! days-from-civil algorithm; years 0000–9999 are supported. Named time zones (`Europe/Paris`)
//! and their daylight-saving rules come from `jiff` with the IANA database compiled into the
//! library ([`zone`]): no system `zoneinfo` is read, so a host without tzdata gives the same
//! answers.
//!
//! What it does not do: leap seconds; calendars other than the Gregorian; natural-language dates
//! ("next Tuesday"); public-holiday calendars (pass holidays explicitly); time-zone abbreviations
//! as input (`EST` is ambiguous: pass `America/New_York`).
//!
//! Configuration (`plugin_config.time-tools`): `default_zone` (older name `default_offset`), an
//! IANA zone such as `Europe/Paris` or an offset such as `+02:00`, used by `time_now` when the
//! call names none (default UTC).

pub mod civil;
pub mod zone;

use std::time::{SystemTime, UNIX_EPOCH};

use civil::{Date, DateTime, Offset, Parsed, iso_week, parse_date, parse_datetime, weekday, weekday_name};
use quiver_abi::{
    Context, Tool, ToolError,
    schemars::JsonSchema,
    serde::{Deserialize, Serialize},
    serde_json::Value,
};
use zone::{Disambiguation, Zone, ZoneInfo};

/// A point in time, shown at one offset.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde")]
#[schemars(crate = "quiver_abi::schemars")]
pub struct Moment {
    /// RFC 3339 text, such as `2024-03-10T14:30:00+05:30`.
    pub rfc3339: String,
    /// Seconds since 1970-01-01T00:00:00Z.
    pub unix_seconds: i64,
    /// Milliseconds since 1970-01-01T00:00:00Z.
    pub unix_millis: i64,
    /// The UTC offset the local fields are shown at, such as `+05:30` (`+00:00` is UTC).
    pub offset: String,
    /// Local date, `YYYY-MM-DD`.
    pub date: String,
    /// Local time, `HH:MM:SS`.
    pub time: String,
    /// Local weekday in English, such as `Sunday`.
    pub weekday: String,
    /// ISO 8601 week, such as `2024-W10`.
    pub iso_week: String,
    /// Day of the year, 1 to 366.
    pub day_of_year: u32,
    /// The named time zone the time is shown in, with its abbreviation and whether
    /// daylight-saving time is in effect (only when a zone name was given).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zone: Option<ZoneInfo>,
}

impl Moment {
    /// `at` the instant `secs` is shown in `zone` (its offset at that instant).
    fn in_zone(secs: i64, nanos: u32, zone: &Zone) -> Result<Moment, ToolError> {
        let (offset, info) = zone.at(secs)?;
        let mut m = Moment::of(DateTime { secs, nanos, offset })?;
        m.zone = info;
        Ok(m)
    }

    fn of(dt: DateTime) -> Result<Moment, ToolError> {
        let f = dt.fields().map_err(ToolError::invalid)?;
        let (wy, wn) = iso_week(f.days);
        Ok(Moment {
            rfc3339: dt.rfc3339().map_err(ToolError::invalid)?,
            unix_seconds: dt.secs,
            unix_millis: dt.unix_millis(),
            offset: dt.offset.to_colon(),
            date: f.date.iso(),
            time: format!("{:02}:{:02}:{:02}", f.hour, f.minute, f.second),
            weekday: weekday_name(weekday(f.days)).to_owned(),
            iso_week: format!("{wy:04}-W{wn:02}"),
            day_of_year: civil::day_of_year(f.days),
            zone: None,
        })
    }
}

/// The configured default zone (`default_zone`, or its older name `default_offset`), else UTC.
fn default_zone(config: &Value) -> Result<Zone, ToolError> {
    let (key, value) = match (config.get("default_zone"), config.get("default_offset")) {
        (Some(v), _) if !v.is_null() => ("default_zone", v),
        (_, Some(v)) if !v.is_null() => ("default_offset", v),
        _ => return Ok(Zone::Fixed(Offset::UTC)),
    };
    let field = format!("plugin_config.time-tools.{key}");
    match value {
        Value::String(s) => {
            Zone::parse(&field, s).map_err(|e| ToolError::tool(format!("{}; fix the host configuration", e.message)))
        }
        other => Err(ToolError::tool(format!(
            "{field} must be a string like \"Europe/Paris\" or \"+02:00\", not {other}; fix the host configuration"
        ))),
    }
}

// ---------------------------------------------------------------------------------------------
// time_now

/// Arguments of `time_now`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde", deny_unknown_fields)]
#[schemars(crate = "quiver_abi::schemars")]
pub struct NowInput {
    /// Where to show the time: an IANA time zone such as `Europe/Paris` or `America/New_York`
    /// (daylight-saving time applied), or a fixed UTC offset such as `+05:30` or `Z`. Default:
    /// the configured `default_zone`, else UTC.
    #[serde(default)]
    pub offset: Option<String>,
}

/// Tells the current time.
pub struct TimeNow;

impl Tool for TimeNow {
    const NAME: &'static str = "time_now";
    type Input = NowInput;
    type Output = Moment;

    fn call(&self, input: NowInput, cx: &mut Context<'_>) -> Result<Moment, ToolError> {
        let zone = match &input.offset {
            Some(o) => Zone::parse("offset", o)?,
            None => default_zone(cx.config())?,
        };
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_err(|_| ToolError::tool("the system clock is set before 1970"))?;
        let secs = i64::try_from(now.as_secs()).map_err(|_| ToolError::tool("the system clock is out of range"))?;
        let mut m = Moment::in_zone(secs, 0, &zone)?;
        m.unix_millis = secs * 1000 + i64::from(now.subsec_millis());
        Ok(m)
    }
}

// ---------------------------------------------------------------------------------------------
// time_convert

/// A timestamp: text (RFC 3339, ISO date, digits) or a number of Unix seconds or milliseconds.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde", untagged)]
#[schemars(crate = "quiver_abi::schemars")]
pub enum TimeValue {
    /// Unix seconds (or milliseconds with `input_kind: unix_millis`); fractions allowed.
    Number(f64),
    /// RFC 3339 / ISO 8601 text, or digits of a Unix timestamp.
    Text(String),
}

/// How to read `value`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde", rename_all = "snake_case")]
#[schemars(crate = "quiver_abi::schemars")]
pub enum InputKind {
    /// Numbers are Unix seconds; text is RFC 3339, an ISO date-time or an ISO date.
    #[default]
    Auto,
    /// Unix seconds since 1970-01-01T00:00:00Z.
    UnixSeconds,
    /// Unix milliseconds since 1970-01-01T00:00:00Z.
    UnixMillis,
    /// RFC 3339 / ISO 8601 text only.
    Iso,
}

/// Arguments of `time_convert`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde", deny_unknown_fields)]
#[schemars(crate = "quiver_abi::schemars")]
pub struct ConvertInput {
    /// The time to convert: `2024-03-10T14:30:00Z`, `2024-03-10T14:30:00+05:30`,
    /// `2024-03-10 14:30`, `2024-03-10` (midnight), or Unix seconds such as `1710081000`.
    pub value: TimeValue,
    /// How to read `value`; default `auto` (plain numbers are Unix seconds).
    #[serde(default)]
    pub input_kind: InputKind,
    /// Time zone or offset of a `value` that has none (like `2024-03-10 14:30` or a date): an
    /// IANA name such as `Europe/Paris` (its daylight-saving rules apply) or an offset such as
    /// `-05:00`; default UTC.
    #[serde(default)]
    pub assume_offset: Option<String>,
    /// Time zone or offset to show the result in: an IANA name such as `America/New_York` or an
    /// offset such as `-08:00`; default: the offset of the input (UTC for Unix timestamps).
    #[serde(default)]
    pub to_offset: Option<String>,
    /// How to read a local `value` that a daylight-saving change skips or repeats in the
    /// `assume_offset` zone: `compatible` (default: skipped times move forward by the gap,
    /// repeated times take the first), `earlier`, `later`, or `reject`.
    #[serde(default)]
    pub disambiguation: Disambiguation,
    /// Optional strftime-style pattern for `formatted`, such as `%A %d %B %Y %H:%M %Z`. Supported:
    /// %Y %y %m %d %e %H %I %M %S %p %f (milliseconds) %j %a %A %u %b %B %V %G %z %:z %Z (zone
    /// abbreviation such as CEST, else the offset) %s %F %T %%.
    #[serde(default)]
    pub format: Option<String>,
}

/// Result of `time_convert`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde")]
#[schemars(crate = "quiver_abi::schemars")]
pub struct ConvertOutput {
    /// The instant at the target offset.
    #[serde(flatten)]
    pub moment: Moment,
    /// `value` rendered with `format` (only when a format was given).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub formatted: Option<String>,
    /// How the input was read: `rfc3339`, `naive_datetime`, `date`, `unix_seconds` or `unix_millis`.
    pub parsed_as: String,
    /// The offset the input was read at, such as `+01:00` (for local input in a named zone, the
    /// zone's offset at that time).
    pub input_offset: String,
    /// Set when the local input was skipped or repeated by a daylight-saving change, saying how
    /// it was read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// Reads a Unix timestamp written in decimal (`-12.5`, `1710081000`) exactly, without floats.
fn from_unix(text: &str, millis: bool) -> Result<DateTime, ToolError> {
    let t = text.trim();
    let bad = || ToolError::invalid(format!("`{text}` is not a Unix timestamp: pass digits such as 1710081000"));
    let (negative, digits) = match t.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    let (whole, frac) = digits.split_once('.').unwrap_or((digits, ""));
    if whole.is_empty() || !whole.bytes().all(|b| b.is_ascii_digit()) || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let unit_digits = if millis { 6 } else { 9 };
    let frac: String = frac.chars().chain(std::iter::repeat('0')).take(unit_digits).collect();
    let whole_digits = whole.trim_start_matches('0').len();
    if whole_digits > 15 {
        let hint = if millis { "" } else { "; if it is milliseconds pass input_kind: unix_millis" };
        return Err(ToolError::invalid(format!("`{text}` is outside the supported years 0000 to 9999{hint}")));
    }
    let whole: i128 = if whole_digits == 0 { 0 } else { whole.parse().map_err(|_| bad())? };
    let unit: i128 = 10i128.pow(unit_digits as u32);
    // `unit` is nanoseconds per whole unit; `frac` holds its sub-unit nanoseconds.
    let mut total_nanos = whole * unit + frac.parse::<i128>().map_err(|_| bad())?;
    if negative {
        total_nanos = -total_nanos;
    }
    let secs = total_nanos.div_euclid(1_000_000_000);
    // Years 0000..=9999.
    if !(-62_167_219_200..=253_402_300_799).contains(&secs) {
        let hint = if !millis && whole > 100_000_000_000 {
            "; it looks like milliseconds: pass input_kind: unix_millis"
        } else {
            ""
        };
        return Err(ToolError::invalid(format!("`{text}` is outside the supported years 0000 to 9999{hint}")));
    }
    Ok(DateTime { secs: secs as i64, nanos: total_nanos.rem_euclid(1_000_000_000) as u32, offset: Offset::UTC })
}

/// Converts a time between formats and offsets.
pub struct TimeConvert;

impl Tool for TimeConvert {
    const NAME: &'static str = "time_convert";
    type Input = ConvertInput;
    type Output = ConvertOutput;

    fn call(&self, input: ConvertInput, _cx: &mut Context<'_>) -> Result<ConvertOutput, ToolError> {
        let assume = match &input.assume_offset {
            Some(o) => Zone::parse("assume_offset", o)?,
            None => Zone::Fixed(Offset::UTC),
        };
        let mut note = None;
        let millis = input.input_kind == InputKind::UnixMillis;
        let (dt, parsed_as) = match (&input.value, input.input_kind) {
            (TimeValue::Number(_), InputKind::Iso) => {
                return Err(ToolError::invalid("input_kind `iso` needs text such as \"2024-03-10T14:30:00Z\""));
            }
            (TimeValue::Number(n), _) => {
                if !n.is_finite() {
                    return Err(ToolError::invalid("value must be a finite number"));
                }
                (from_unix(&n.to_string(), millis)?, if millis { "unix_millis" } else { "unix_seconds" })
            }
            (TimeValue::Text(t), kind) => {
                let trimmed = t.trim();
                let numeric = !trimmed.is_empty()
                    && trimmed.trim_start_matches('-').bytes().all(|b| b.is_ascii_digit() || b == b'.')
                    && trimmed.len() != 8; // `20240310` is a compact date
                if matches!(kind, InputKind::UnixSeconds | InputKind::UnixMillis)
                    || (kind == InputKind::Auto && numeric)
                {
                    (from_unix(trimmed, millis)?, if millis { "unix_millis" } else { "unix_seconds" })
                } else {
                    match parse_datetime(trimmed).map_err(ToolError::invalid)? {
                        Parsed::Full(dt) => (dt, "rfc3339"),
                        Parsed::Naive { date, hour, minute, second, nanos } => {
                            let (dt, n) =
                                assume.resolve_local(date, (hour, minute, second, nanos), input.disambiguation)?;
                            note = n;
                            (dt, "naive_datetime")
                        }
                        Parsed::DateOnly(date) => {
                            let (dt, n) = assume.resolve_local(date, (0, 0, 0, 0), input.disambiguation)?;
                            note = n;
                            (dt, "date")
                        }
                    }
                }
            }
        };
        let target = match &input.to_offset {
            Some(o) => Zone::parse("to_offset", o)?,
            // Local input read in a named zone stays in that zone.
            None if parsed_as == "naive_datetime" || parsed_as == "date" => assume,
            None => Zone::Fixed(dt.offset),
        };
        let (offset, info) = target.at(dt.secs)?;
        let shown = dt.at(offset);
        let formatted = match &input.format {
            Some(p) => Some(
                shown
                    .format(p, info.as_ref().map(|z| z.abbreviation.as_str()))
                    .map_err(|e| ToolError::invalid(format!("format: {e}")))?,
            ),
            None => None,
        };
        let mut moment = Moment::of(shown)?;
        moment.zone = info;
        Ok(ConvertOutput {
            moment,
            formatted,
            parsed_as: parsed_as.to_owned(),
            input_offset: dt.offset.to_colon(),
            note,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Shared calendar helpers

/// A day of the week.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde", rename_all = "lowercase")]
#[schemars(crate = "quiver_abi::schemars")]
pub enum WeekdayName {
    Monday,
    Tuesday,
    Wednesday,
    Thursday,
    Friday,
    Saturday,
    Sunday,
}

/// Which days count as business days.
struct WorkWeek {
    weekend: [bool; 7],
    holidays: Vec<i64>,
}

impl WorkWeek {
    fn new(weekend: &Option<Vec<WeekdayName>>, holidays: &[String]) -> Result<WorkWeek, ToolError> {
        let mut days = [false; 7];
        match weekend {
            None => {
                days[5] = true;
                days[6] = true;
            }
            Some(list) => list.iter().for_each(|w| days[*w as usize] = true),
        }
        if days.iter().all(|d| *d) {
            return Err(ToolError::invalid("weekend lists all seven days, so there are no business days"));
        }
        let mut hol = holidays
            .iter()
            .map(|h| parse_date(h).map(Date::days).map_err(|e| ToolError::invalid(format!("holidays: {e}"))))
            .collect::<Result<Vec<_>, _>>()?;
        hol.sort_unstable();
        hol.dedup();
        Ok(WorkWeek { weekend: days, holidays: hol })
    }

    fn is_business(&self, day: i64) -> bool {
        !self.weekend[weekday(day)] && self.holidays.binary_search(&day).is_err()
    }

    /// Business days in the day-number range `[from, to)` (from <= to).
    fn count(&self, from: i64, to: i64) -> i64 {
        let span = to - from;
        let per_week = self.weekend.iter().filter(|w| !**w).count() as i64;
        let mut n = span / 7 * per_week;
        for d in from + span / 7 * 7..to {
            n += i64::from(!self.weekend[weekday(d)]);
        }
        let holidays = self.holidays.iter().filter(|h| (from..to).contains(*h) && !self.weekend[weekday(**h)]).count();
        n - holidays as i64
    }
}

/// A date or date-time argument: its date, and what to rebuild a date-time from.
struct DateArg {
    date: Date,
    /// Time of day and offset (`None` offset: no offset was written).
    time: Option<(u32, u32, u32, u32, Option<Offset>)>,
}

fn date_arg(name: &str, s: &str) -> Result<DateArg, ToolError> {
    let bad = |e: String| ToolError::invalid(format!("{name}: {e}"));
    Ok(match parse_datetime(s).map_err(bad)? {
        Parsed::DateOnly(date) => DateArg { date, time: None },
        Parsed::Naive { date, hour, minute, second, nanos } => {
            DateArg { date, time: Some((hour, minute, second, nanos, None)) }
        }
        Parsed::Full(dt) => {
            let f = dt.fields().map_err(bad)?;
            DateArg { date: f.date, time: Some((f.hour, f.minute, f.second, dt.nanos, Some(dt.offset))) }
        }
    })
}

/// Adds calendar months, clamping the day to the end of the target month. Returns the date and
/// whether it was clamped.
fn add_months(d: Date, months: i64) -> Result<(Date, bool), ToolError> {
    let total = d.y * 12 + i64::from(d.m) - 1 + months;
    let (y, m) = (total.div_euclid(12), (total.rem_euclid(12) + 1) as u32);
    if !(civil::MIN_YEAR..=civil::MAX_YEAR).contains(&y) {
        return Err(ToolError::invalid(format!("the result, year {y}, is outside the supported years 0000 to 9999")));
    }
    let dim = civil::days_in_month(y, m);
    Ok((Date { y, m, d: d.d.min(dim) }, d.d > dim))
}

// ---------------------------------------------------------------------------------------------
// date_diff

/// Arguments of `date_diff`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde", deny_unknown_fields)]
#[schemars(crate = "quiver_abi::schemars")]
pub struct DiffInput {
    /// First date, `YYYY-MM-DD` (a date-time is accepted; its own local date is used).
    pub start: String,
    /// Second date, `YYYY-MM-DD`. Results are negative when it is before `start`.
    pub end: String,
    /// Count both `start` and `end` in `days` and `business_days` (for "from March 1 to March 31
    /// inclusive"). Default false: `days` is end − start and business days are the days after
    /// `start` up to and including `end`, so that `date_add` of that many business days to
    /// `start` lands on `end`.
    #[serde(default)]
    pub inclusive: bool,
    /// Dates (`YYYY-MM-DD`) that are not business days, such as public holidays.
    #[serde(default)]
    pub holidays: Vec<String>,
    /// Days of the weekend; default `["saturday", "sunday"]`.
    #[serde(default)]
    pub weekend: Option<Vec<WeekdayName>>,
}

/// Result of `date_diff`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde")]
#[schemars(crate = "quiver_abi::schemars")]
pub struct DiffOutput {
    /// The start date, `YYYY-MM-DD`.
    pub start: String,
    /// The end date, `YYYY-MM-DD`.
    pub end: String,
    /// Calendar days from start to end (plus one when `inclusive`); negative when end is earlier.
    pub days: i64,
    /// Whole weeks in `days` (rounded toward zero).
    pub weeks: i64,
    /// Days left over after the whole weeks.
    pub remaining_days: i64,
    /// Business days (not weekend, not a holiday) between the dates; see `inclusive`.
    pub business_days: i64,
    /// Whole calendar months from start to end (adding them to start with month-end clamping does
    /// not pass end).
    pub months: i64,
    /// Whole years (`months` / 12).
    pub years: i64,
    /// Years, months and days in words, such as `1 year, 2 months and 3 days`.
    pub summary: String,
    /// Weekday of the start date.
    pub start_weekday: String,
    /// Weekday of the end date.
    pub end_weekday: String,
}

fn whole_months(from: Date, to: Date) -> Result<i64, ToolError> {
    let mut n = (to.y - from.y) * 12 + i64::from(to.m) - i64::from(from.m);
    if add_months(from, n)?.0 > to {
        n -= 1;
    }
    Ok(n)
}

fn plural(n: i64, unit: &str) -> String {
    format!("{n} {unit}{}", if n == 1 { "" } else { "s" })
}

/// Measures the time between two dates.
pub struct DateDiff;

impl Tool for DateDiff {
    const NAME: &'static str = "date_diff";
    type Input = DiffInput;
    type Output = DiffOutput;

    fn call(&self, input: DiffInput, _cx: &mut Context<'_>) -> Result<DiffOutput, ToolError> {
        let start = date_arg("start", &input.start)?.date;
        let end = date_arg("end", &input.end)?.date;
        let work = WorkWeek::new(&input.weekend, &input.holidays)?;
        let (a, b) = (start.days(), end.days());
        let sign = if b < a { -1 } else { 1 };
        let (lo, hi) = (a.min(b), a.max(b));
        let extra = i64::from(input.inclusive);
        let days = sign * (hi - lo + extra);
        // Counted like date_add walks: the days after `start` up to and including `end` (going
        // back: the days before `start` down to and including `end`); `inclusive` adds `start`.
        let business = if sign > 0 { work.count(lo + 1 - extra, hi + 1) } else { -work.count(lo, hi + extra) };
        let (early, late) = if sign < 0 { (end, start) } else { (start, end) };
        let months = whole_months(early, late)?;
        let rest = late.days() - add_months(early, months)?.0.days();
        let mut parts = Vec::new();
        if months / 12 != 0 {
            parts.push(plural(months / 12, "year"));
        }
        if months % 12 != 0 {
            parts.push(plural(months % 12, "month"));
        }
        if rest != 0 || parts.is_empty() {
            parts.push(plural(rest, "day"));
        }
        let mut summary = match parts.len() {
            1 => parts.remove(0),
            _ => {
                let last = parts.pop().unwrap_or_default();
                format!("{} and {last}", parts.join(", "))
            }
        };
        if sign < 0 {
            summary.push_str(" before the start");
        }
        Ok(DiffOutput {
            start: start.iso(),
            end: end.iso(),
            days,
            weeks: days / 7,
            remaining_days: days % 7,
            business_days: business,
            months: sign * months,
            years: sign * (months / 12),
            summary,
            start_weekday: weekday_name(weekday(a)).to_owned(),
            end_weekday: weekday_name(weekday(b)).to_owned(),
        })
    }
}

// ---------------------------------------------------------------------------------------------
// date_add

/// Arguments of `date_add`. Units are applied in this order: years and months (clamped to the
/// month's last day), then weeks and days, then business days, then hours, minutes and seconds.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde", deny_unknown_fields)]
#[schemars(crate = "quiver_abi::schemars")]
pub struct AddInput {
    /// Starting date `YYYY-MM-DD`, or a date-time such as `2024-01-31T09:00:00+01:00` (the result
    /// then keeps its time and offset).
    pub date: String,
    /// Years to add (negative to subtract).
    #[serde(default)]
    pub years: i64,
    /// Months to add (negative to subtract); Jan 31 + 1 month is Feb 28 (Feb 29 in leap years).
    #[serde(default)]
    pub months: i64,
    /// Weeks to add (negative to subtract).
    #[serde(default)]
    pub weeks: i64,
    /// Days to add (negative to subtract).
    #[serde(default)]
    pub days: i64,
    /// Business days to add (negative to go back), skipping weekends and `holidays`; at most 100000.
    #[serde(default)]
    pub business_days: i64,
    /// Hours to add; needs a date-time `date`.
    #[serde(default)]
    pub hours: i64,
    /// Minutes to add; needs a date-time `date`.
    #[serde(default)]
    pub minutes: i64,
    /// Seconds to add; needs a date-time `date`.
    #[serde(default)]
    pub seconds: i64,
    /// Dates (`YYYY-MM-DD`) skipped by `business_days`, such as public holidays.
    #[serde(default)]
    pub holidays: Vec<String>,
    /// Days of the weekend for `business_days`; default `["saturday", "sunday"]`.
    #[serde(default)]
    pub weekend: Option<Vec<WeekdayName>>,
    /// IANA time zone (such as `Europe/Paris`) for a date-time `date`: calendar units (years to
    /// business days) keep the wall-clock time across daylight-saving changes, hours, minutes and
    /// seconds are exact elapsed time, and the result shows the zone's offset at that time. A
    /// `date` with an offset is first converted into the zone.
    #[serde(default)]
    pub zone: Option<String>,
}

/// Result of `date_add`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde")]
#[schemars(crate = "quiver_abi::schemars")]
pub struct AddOutput {
    /// The result, in the style of the input: `YYYY-MM-DD` for a date, RFC 3339 for a date-time.
    pub result: String,
    /// The result's date, `YYYY-MM-DD`.
    pub date: String,
    /// The result's weekday.
    pub weekday: String,
    /// True when adding months or years moved the day back to the last day of a shorter month.
    pub clamped: bool,
    /// Calendar days between the input date and the result date.
    pub days_moved: i64,
    /// The zone of the result, its abbreviation and daylight-saving flag (only with `zone`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zone: Option<ZoneInfo>,
}

/// Adds time to a date.
pub struct DateAdd;

const MAX_UNITS: i64 = 10_000_000;

impl Tool for DateAdd {
    const NAME: &'static str = "date_add";
    type Input = AddInput;
    type Output = AddOutput;

    fn call(&self, input: AddInput, _cx: &mut Context<'_>) -> Result<AddOutput, ToolError> {
        let zone = input.zone.as_deref().map(|z| Zone::parse("zone", z)).transpose()?;
        let mut arg = date_arg("date", &input.date)?;
        if let (Some(z), Some((h, mi, s, nanos, Some(offset)))) = (&zone, arg.time) {
            // An instant with an offset: move it into the zone before calendar math.
            let at = DateTime::from_local(arg.date, h, mi, s, nanos, offset);
            let f = at.at(z.at(at.secs)?.0).fields().map_err(ToolError::invalid)?;
            arg = DateArg { date: f.date, time: Some((f.hour, f.minute, f.second, nanos, Some(offset))) };
        }
        for (name, v) in
            [("years", input.years), ("months", input.months), ("weeks", input.weeks), ("days", input.days)]
        {
            if v.abs() > MAX_UNITS {
                return Err(ToolError::invalid(format!("{name} = {v} is too large; the calendar ends at 9999")));
            }
        }
        if input.business_days.abs() > 100_000 {
            return Err(ToolError::invalid("business_days is limited to ±100000"));
        }
        let clock = [input.hours, input.minutes, input.seconds];
        if clock.iter().any(|v| *v != 0) && arg.time.is_none() {
            return Err(ToolError::invalid(format!(
                "hours, minutes and seconds need a date-time, not the date `{}`: pass e.g. `{}T09:00:00Z`",
                input.date.trim(),
                arg.date.iso()
            )));
        }
        if clock.iter().any(|v| v.abs() > MAX_UNITS * 100) {
            return Err(ToolError::invalid("hours, minutes or seconds are too large; the calendar ends at 9999"));
        }

        let (mut date, clamped) = add_months(arg.date, input.years * 12 + input.months)?;
        date = Date::from_days(date.days() + input.weeks * 7 + input.days).map_err(ToolError::invalid)?;
        if input.business_days != 0 {
            let work = WorkWeek::new(&input.weekend, &input.holidays)?;
            let step = input.business_days.signum();
            let mut day = date.days();
            let mut left = input.business_days.abs();
            while left > 0 {
                day += step;
                if work.is_business(day) {
                    left -= 1;
                }
            }
            date = Date::from_days(day).map_err(ToolError::invalid)?;
        } else if !input.holidays.is_empty() || input.weekend.is_some() {
            return Err(ToolError::invalid("holidays and weekend only apply to business_days; leave them out"));
        }

        let mut zone_info = None;
        let (result, date) = match (arg.time, &zone) {
            (None, _) => (date.iso(), date),
            (Some((h, mi, s, nanos, _)), Some(z)) => {
                let shift = input.hours * 3600 + input.minutes * 60 + input.seconds;
                let (base, _) = z.resolve_local(date, (h, mi, s, nanos), Disambiguation::Compatible)?;
                let secs = base.secs + shift;
                let (offset, info) = z.at(secs)?;
                let dt = DateTime { secs, nanos, offset };
                zone_info = info;
                (dt.rfc3339().map_err(ToolError::invalid)?, dt.fields().map_err(ToolError::invalid)?.date)
            }
            (Some((h, mi, s, nanos, offset)), None) => {
                let shift = input.hours * 3600 + input.minutes * 60 + input.seconds;
                let base = DateTime::from_local(date, h, mi, s, nanos, offset.unwrap_or(Offset::UTC));
                let dt = DateTime { secs: base.secs + shift, ..base };
                let f = dt.fields().map_err(ToolError::invalid)?;
                let text = match offset {
                    Some(_) => dt.rfc3339().map_err(ToolError::invalid)?,
                    // No offset in, none out.
                    None => dt.rfc3339().map_err(ToolError::invalid)?.trim_end_matches("+00:00").to_owned(),
                };
                (text, f.date)
            }
        };
        Ok(AddOutput {
            result,
            date: date.iso(),
            weekday: weekday_name(weekday(date.days())).to_owned(),
            clamped,
            days_moved: date.days() - arg.date.days(),
            zone: zone_info,
        })
    }
}

quiver_abi::export_plugin! {
    manifest: include_str!("../tool.yaml"),
    tools: [TimeNow, TimeConvert, DateDiff, DateAdd],
}

#[cfg(test)]
mod tests;
