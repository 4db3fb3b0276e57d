//! Proleptic Gregorian calendar math, fixed UTC offsets, and parsing and formatting of
//! RFC 3339 / ISO 8601 date-times. Named time zones live in [`crate::zone`]; here an offset is a
//! fixed number of minutes.

use std::fmt::Write as _;

/// Seconds in a day.
pub const DAY: i64 = 86_400;
/// Earliest and latest supported years (four-digit years, as RFC 3339 allows).
pub const MIN_YEAR: i64 = 0;
/// See [`MIN_YEAR`].
pub const MAX_YEAR: i64 = 9999;

const WEEKDAYS: [&str; 7] = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"];
const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

/// True for Gregorian leap years.
pub fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

/// Days in a month (1..=12) of a year.
pub fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if is_leap(y) => 29,
        _ => 28,
    }
}

/// Days since 1970-01-01 of a civil date (H. Hinnant's `days_from_civil`).
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The civil date of a day number (inverse of [`days_from_civil`]).
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// ISO weekday of a day number: 0 = Monday … 6 = Sunday.
pub fn weekday(days: i64) -> usize {
    // 1970-01-01 was a Thursday (3).
    (days + 3).rem_euclid(7) as usize
}

/// English name of an ISO weekday (0 = Monday).
pub fn weekday_name(wd: usize) -> &'static str {
    WEEKDAYS[wd]
}

/// ISO 8601 week-numbering year and week of a day number.
pub fn iso_week(days: i64) -> (i64, u32) {
    let wd = weekday(days) as i64;
    let thursday = days - wd + 3;
    let (y, _, _) = civil_from_days(thursday);
    let week = (thursday - days_from_civil(y, 1, 1)) / 7 + 1;
    (y, week as u32)
}

/// Day of the year, 1-based.
pub fn day_of_year(days: i64) -> u32 {
    let (y, _, _) = civil_from_days(days);
    (days - days_from_civil(y, 1, 1) + 1) as u32
}

/// A calendar date.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Date {
    /// Year (0..=9999).
    pub y: i64,
    /// Month, 1..=12.
    pub m: u32,
    /// Day, 1..=days_in_month.
    pub d: u32,
}

impl Date {
    /// Checks the ranges.
    pub fn new(y: i64, m: u32, d: u32) -> Result<Date, String> {
        if !(MIN_YEAR..=MAX_YEAR).contains(&y) {
            return Err(format!("year {y} is out of range (0000 to 9999)"));
        }
        if !(1..=12).contains(&m) {
            return Err(format!("month {m} is out of range (01 to 12)"));
        }
        let dim = days_in_month(y, m);
        if d == 0 || d > dim {
            return Err(format!("day {d} does not exist in {y:04}-{m:02}, which has {dim} days"));
        }
        Ok(Date { y, m, d })
    }

    /// Days since 1970-01-01.
    pub fn days(self) -> i64 {
        days_from_civil(self.y, self.m, self.d)
    }

    /// The date of a day number (range-checked).
    pub fn from_days(days: i64) -> Result<Date, String> {
        let (y, m, d) = civil_from_days(days);
        Date::new(y, m, d).map_err(|_| format!("the result, year {y}, is outside the supported years 0000 to 9999"))
    }

    /// `YYYY-MM-DD`.
    pub fn iso(self) -> String {
        format!("{:04}-{:02}-{:02}", self.y, self.m, self.d)
    }
}

/// A fixed UTC offset in minutes east of UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offset(pub i32);

impl Offset {
    /// UTC.
    pub const UTC: Offset = Offset(0);

    /// Parses `Z`, `UTC`, `GMT`, `+05:30`, `-0800`, `+05`, `UTC+2`, `UTC-03:30`.
    pub fn parse(s: &str) -> Result<Offset, String> {
        let t = s.trim();
        let bad = || format!("`{s}` is not a UTC offset; write it like `+05:30`, `-08:00` or `Z`");
        let upper = t.to_ascii_uppercase();
        if matches!(upper.as_str(), "Z" | "UTC" | "GMT" | "+00:00" | "-00:00") {
            return Ok(Offset::UTC);
        }
        let t = upper.strip_prefix("UTC").or_else(|| upper.strip_prefix("GMT")).unwrap_or(&upper);
        let (sign, rest) = match t.as_bytes().first() {
            Some(b'+') => (1, &t[1..]),
            Some(b'-') => (-1, &t[1..]),
            _ => return Err(bad()),
        };
        let digits: String = rest.chars().filter(|c| *c != ':').collect();
        if !digits.bytes().all(|b| b.is_ascii_digit()) || rest.matches(':').count() > 1 {
            return Err(bad());
        }
        let (h, m) = match digits.len() {
            1 | 2 => (digits.parse::<i32>().map_err(|_| bad())?, 0),
            4 => (digits[..2].parse::<i32>().map_err(|_| bad())?, digits[2..].parse::<i32>().map_err(|_| bad())?),
            _ => return Err(bad()),
        };
        if h > 23 || m > 59 {
            return Err(format!("`{s}` is out of range: offsets go from -23:59 to +23:59"));
        }
        Ok(Offset(sign * (h * 60 + m)))
    }

    /// `+05:30` form (UTC is `+00:00`).
    pub fn to_colon(self) -> String {
        let sign = if self.0 < 0 { '-' } else { '+' };
        format!("{sign}{:02}:{:02}", self.0.abs() / 60, self.0.abs() % 60)
    }

    /// Seconds east of UTC.
    pub fn seconds(self) -> i64 {
        i64::from(self.0) * 60
    }
}

/// An instant (seconds and nanoseconds since the Unix epoch) seen at a fixed offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DateTime {
    /// Unix seconds (UTC).
    pub secs: i64,
    /// Nanoseconds within the second.
    pub nanos: u32,
    /// The offset the instant is shown in.
    pub offset: Offset,
}

/// Local fields of a [`DateTime`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fields {
    /// Local date.
    pub date: Date,
    /// Local hour.
    pub hour: u32,
    /// Local minute.
    pub minute: u32,
    /// Local second.
    pub second: u32,
    /// Local day number (days since 1970-01-01 in local time).
    pub days: i64,
}

impl DateTime {
    /// An instant from local fields at an offset.
    pub fn from_local(date: Date, hour: u32, minute: u32, second: u32, nanos: u32, offset: Offset) -> DateTime {
        let local = date.days() * DAY + i64::from(hour) * 3600 + i64::from(minute) * 60 + i64::from(second);
        DateTime { secs: local - offset.seconds(), nanos, offset }
    }

    /// The same instant at another offset.
    pub fn at(self, offset: Offset) -> DateTime {
        DateTime { offset, ..self }
    }

    /// Local fields; errors when the local year leaves 0000..=9999.
    pub fn fields(self) -> Result<Fields, String> {
        let local = self.secs + self.offset.seconds();
        let days = local.div_euclid(DAY);
        let rem = local.rem_euclid(DAY);
        let date = Date::from_days(days)?;
        Ok(Fields {
            date,
            hour: (rem / 3600) as u32,
            minute: (rem % 3600 / 60) as u32,
            second: (rem % 60) as u32,
            days,
        })
    }

    /// RFC 3339 text, with a fraction only when there are sub-second digits (3, 6 or 9 of them).
    pub fn rfc3339(self) -> Result<String, String> {
        let f = self.fields()?;
        Ok(format!(
            "{}T{:02}:{:02}:{:02}{}{}",
            f.date.iso(),
            f.hour,
            f.minute,
            f.second,
            fraction(self.nanos),
            self.offset.to_colon()
        ))
    }

    /// Milliseconds since the epoch (fractions of a millisecond dropped toward negative infinity).
    pub fn unix_millis(self) -> i64 {
        self.secs * 1000 + i64::from(self.nanos / 1_000_000)
    }

    /// Formats with a strftime-like pattern (see [`FORMAT_HELP`]); `%Z` writes `abbreviation`
    /// (such as `CEST`) when given, else the offset.
    pub fn format(self, pattern: &str, abbreviation: Option<&str>) -> Result<String, String> {
        let f = self.fields()?;
        let mut out = String::new();
        let mut chars = pattern.chars();
        while let Some(c) = chars.next() {
            if c != '%' {
                out.push(c);
                continue;
            }
            let Some(spec) = chars.next() else {
                return Err("the format ends with a lone `%`; write `%%` for a percent sign".into());
            };
            let wd = weekday(f.days);
            let hour12 = match f.hour % 12 {
                0 => 12,
                h => h,
            };
            let _ = match spec {
                'Y' => write!(out, "{:04}", f.date.y),
                'y' => write!(out, "{:02}", f.date.y % 100),
                'm' => write!(out, "{:02}", f.date.m),
                'd' => write!(out, "{:02}", f.date.d),
                'e' => write!(out, "{:>2}", f.date.d),
                'H' => write!(out, "{:02}", f.hour),
                'I' => write!(out, "{hour12:02}"),
                'M' => write!(out, "{:02}", f.minute),
                'S' => write!(out, "{:02}", f.second),
                'p' => write!(out, "{}", if f.hour < 12 { "AM" } else { "PM" }),
                'f' => write!(out, "{:03}", self.nanos / 1_000_000),
                'j' => write!(out, "{:03}", day_of_year(f.days)),
                'a' => write!(out, "{}", &WEEKDAYS[wd][..3]),
                'A' => write!(out, "{}", WEEKDAYS[wd]),
                'u' => write!(out, "{}", wd + 1),
                'b' => write!(out, "{}", &MONTHS[f.date.m as usize - 1][..3]),
                'B' => write!(out, "{}", MONTHS[f.date.m as usize - 1]),
                'V' => write!(out, "{:02}", iso_week(f.days).1),
                'G' => write!(out, "{:04}", iso_week(f.days).0),
                'z' => write!(out, "{}", self.offset.to_colon().replace(':', "")),
                ':' if chars.as_str().starts_with('z') => {
                    chars.next();
                    write!(out, "{}", self.offset.to_colon())
                }
                'Z' => match abbreviation {
                    Some(a) => write!(out, "{a}"),
                    None => write!(out, "{}", self.offset.to_colon()),
                },
                's' => write!(out, "{}", self.secs),
                'F' => write!(out, "{}", f.date.iso()),
                'T' => write!(out, "{:02}:{:02}:{:02}", f.hour, f.minute, f.second),
                '%' => write!(out, "%"),
                other => return Err(format!("unknown format directive `%{other}`; supported: {FORMAT_HELP}")),
            };
        }
        Ok(out)
    }
}

/// The directives [`DateTime::format`] understands.
pub const FORMAT_HELP: &str =
    "%Y %y %m %d %e %H %I %M %S %p %f (milliseconds) %j %a %A %u %b %B %V %G %z %:z %Z %s %F %T %%";

fn fraction(nanos: u32) -> String {
    if nanos == 0 {
        String::new()
    } else if nanos.is_multiple_of(1_000_000) {
        format!(".{:03}", nanos / 1_000_000)
    } else if nanos.is_multiple_of(1000) {
        format!(".{:06}", nanos / 1000)
    } else {
        format!(".{nanos:09}")
    }
}

/// What a parsed timestamp looked like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parsed {
    /// A date and time with an explicit offset.
    Full(DateTime),
    /// A date and time without an offset (local fields, offset still to be chosen).
    Naive { date: Date, hour: u32, minute: u32, second: u32, nanos: u32 },
    /// A date only.
    DateOnly(Date),
}

fn num(s: &str, what: &str, input: &str) -> Result<u32, String> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("`{input}`: the {what} `{s}` is not a number"));
    }
    s.parse().map_err(|_| format!("`{input}`: the {what} `{s}` is not a number"))
}

/// Parses `YYYY-MM-DD` (also `YYYYMMDD`).
pub fn parse_date(s: &str) -> Result<Date, String> {
    let t = s.trim();
    let (y, m, d) = if t.len() == 8 && t.bytes().all(|b| b.is_ascii_digit()) {
        (&t[..4], &t[4..6], &t[6..])
    } else {
        let parts: Vec<&str> = t.split('-').collect();
        if parts.len() != 3 || parts[0].len() != 4 || parts[1].len() != 2 || parts[2].len() != 2 {
            return Err(format!("`{s}` is not a date; write it as YYYY-MM-DD, like 2024-02-29"));
        }
        (parts[0], parts[1], parts[2])
    };
    Date::new(i64::from(num(y, "year", s)?), num(m, "month", s)?, num(d, "day", s)?).map_err(|e| format!("`{s}`: {e}"))
}

/// Parses an RFC 3339 / ISO 8601 date-time (`T`, `t` or a space between date and time; seconds
/// and fraction optional; offset `Z`, `±HH:MM`, `±HHMM` or `±HH` optional) or a plain date.
pub fn parse_datetime(s: &str) -> Result<Parsed, String> {
    let t = s.trim();
    let Some(sep) = t.find(['T', 't', ' ']) else {
        return parse_date(t).map(Parsed::DateOnly);
    };
    let date = parse_date(&t[..sep])?;
    let rest = t[sep + 1..].trim_start();
    // Split the offset off the time.
    let (time, offset) = if let Some(stripped) = rest.strip_suffix(['Z', 'z']) {
        (stripped, Some(Offset::UTC))
    } else if let Some(pos) = rest.rfind(['+', '-']) {
        (&rest[..pos], Some(Offset::parse(&rest[pos..]).map_err(|e| format!("`{s}`: {e}"))?))
    } else {
        (rest, None)
    };
    let (hms, frac) = match time.split_once(['.', ',']) {
        Some((a, b)) => (a, Some(b)),
        None => (time, None),
    };
    let parts: Vec<&str> = hms.split(':').collect();
    if !(2..=3).contains(&parts.len()) || parts.iter().any(|p| p.len() != 2) {
        return Err(format!(
            "`{s}` has no readable time; write it like 2024-03-10T14:30:00Z or 2024-03-10T14:30:00+05:30"
        ));
    }
    let hour = num(parts[0], "hour", s)?;
    let minute = num(parts[1], "minute", s)?;
    let second = if parts.len() == 3 { num(parts[2], "second", s)? } else { 0 };
    if hour > 23 || minute > 59 {
        return Err(format!("`{s}`: the time {hms} is out of range (00:00:00 to 23:59:59)"));
    }
    if second > 59 {
        return Err(format!("`{s}`: second {second} is out of range; leap seconds are not supported"));
    }
    let nanos = match frac {
        None => 0,
        Some(f) if !f.is_empty() && f.len() <= 9 && f.bytes().all(|b| b.is_ascii_digit()) => {
            num(f, "fraction", s)? * 10u32.pow(9 - f.len() as u32)
        }
        Some(f) => return Err(format!("`{s}`: the fraction `{f}` must be 1 to 9 digits")),
    };
    Ok(match offset {
        Some(o) => Parsed::Full(DateTime::from_local(date, hour, minute, second, nanos, o)),
        None => Parsed::Naive { date, hour, minute, second, nanos },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_round_trip_over_many_years() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(days_from_civil(0, 1, 1), -719_528);
        for z in (-719_528..2_932_896).step_by(97) {
            let (y, m, d) = civil_from_days(z);
            assert_eq!(days_from_civil(y, m, d), z);
            assert!(d >= 1 && d <= days_in_month(y, m));
        }
    }

    #[test]
    fn leap_years() {
        assert!(is_leap(2000) && is_leap(2024) && is_leap(1600));
        assert!(!is_leap(1900) && !is_leap(2100) && !is_leap(2023));
        assert_eq!(days_in_month(2024, 2), 29);
        assert_eq!(days_in_month(1900, 2), 28);
        assert!(Date::new(2023, 2, 29).is_err());
        assert!(Date::new(2000, 2, 29).is_ok());
        assert_eq!(days_from_civil(2024, 3, 1) - days_from_civil(2024, 2, 1), 29);
    }

    #[test]
    fn weekdays_and_iso_weeks() {
        assert_eq!(weekday_name(weekday(0)), "Thursday");
        assert_eq!(weekday_name(weekday(days_from_civil(2024, 2, 29))), "Thursday");
        assert_eq!(weekday_name(weekday(days_from_civil(1969, 12, 31))), "Wednesday");
        // 2021-01-03 is a Sunday of ISO week 2020-W53; 2024-12-30 is in 2025-W01.
        assert_eq!(iso_week(days_from_civil(2021, 1, 3)), (2020, 53));
        assert_eq!(iso_week(days_from_civil(2024, 12, 30)), (2025, 1));
        assert_eq!(iso_week(days_from_civil(2024, 3, 10)), (2024, 10));
        assert_eq!(day_of_year(days_from_civil(2024, 12, 31)), 366);
    }

    #[test]
    fn offsets() {
        assert_eq!(Offset::parse("+05:30").unwrap(), Offset(330));
        assert_eq!(Offset::parse("-0800").unwrap(), Offset(-480));
        assert_eq!(Offset::parse("UTC+2").unwrap(), Offset(120));
        assert_eq!(Offset::parse("z").unwrap(), Offset::UTC);
        assert_eq!(Offset(-210).to_colon(), "-03:30");
        assert_eq!(Offset::UTC.to_colon(), "+00:00");
        for bad in ["Europe/Paris", "+24:00", "+5:3", "05:00", "+05:60", ""] {
            assert!(Offset::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn parse_and_format() {
        let Parsed::Full(dt) = parse_datetime("2024-03-10T14:30:15.25+05:30").unwrap() else { panic!() };
        assert_eq!(dt.secs, 1_710_061_215);
        assert_eq!(dt.nanos, 250_000_000);
        assert_eq!(dt.rfc3339().unwrap(), "2024-03-10T14:30:15.250+05:30");
        assert_eq!(dt.at(Offset::UTC).rfc3339().unwrap(), "2024-03-10T09:00:15.250+00:00");
        assert_eq!(
            dt.format("%A %d %B %Y, %I:%M %p (%:z) day %j week %V %%", None).unwrap(),
            "Sunday 10 March 2024, 02:30 PM (+05:30) day 070 week 10 %"
        );
        assert!(dt.format("%Q", None).is_err());
        assert!(matches!(parse_datetime("2024-03-10 14:30").unwrap(), Parsed::Naive { hour: 14, minute: 30, .. }));
        assert!(matches!(parse_datetime("20240310").unwrap(), Parsed::DateOnly(_)));
        for bad in ["2024-13-01", "2024-02-30T00:00Z", "2024-03-10T25:00Z", "2024-03-10T12:00:60Z", "yesterday"] {
            assert!(parse_datetime(bad).is_err(), "{bad}");
        }
        // Before the epoch.
        let Parsed::Full(old) = parse_datetime("1969-12-31T23:59:59Z").unwrap() else { panic!() };
        assert_eq!(old.secs, -1);
    }
}
