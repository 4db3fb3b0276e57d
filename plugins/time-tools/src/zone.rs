//! Where a time is shown or read: a fixed UTC offset (`+05:30`) or an IANA time zone
//! (`Europe/Paris`) with its daylight-saving rules, from the time-zone database bundled into the
//! library by `jiff` (no system `zoneinfo` is read at run time, so results do not depend on the
//! machine).
//!
//! Offsets of named zones are rounded to the minute: only local mean time before about 1900
//! has second-level offsets, and RFC 3339 cannot write them.

use jiff::tz::{AmbiguousOffset, TimeZone};
use quiver_abi::{
    ToolError,
    schemars::JsonSchema,
    serde::{Deserialize, Serialize},
};

use crate::civil::{Date, DateTime, Offset};

/// A fixed offset or a named time zone.
#[derive(Debug, Clone)]
pub enum Zone {
    /// A fixed UTC offset.
    Fixed(Offset),
    /// An IANA time zone, and the name it is known by.
    Named(TimeZone, String),
}

/// What a named zone says about an instant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde")]
#[schemars(crate = "quiver_abi::schemars")]
pub struct ZoneInfo {
    /// The IANA name, such as `Europe/Paris`.
    pub name: String,
    /// The abbreviation in use at that instant, such as `CET` or `CEST`.
    pub abbreviation: String,
    /// True when daylight-saving time is in effect at that instant.
    pub dst: bool,
}

/// How to read a local time that a daylight-saving change skips (gap) or repeats (fold).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde", rename_all = "snake_case")]
#[schemars(crate = "quiver_abi::schemars")]
pub enum Disambiguation {
    /// Gap: shift forward by the gap's length (02:30 becomes 03:30); fold: the earlier instant.
    #[default]
    Compatible,
    /// The earlier of the two readings.
    Earlier,
    /// The later of the two readings.
    Later,
    /// Refuse skipped or repeated local times with an error.
    Reject,
}

fn to_offset(o: jiff::tz::Offset) -> Offset {
    let secs = o.seconds();
    Offset((secs + secs.signum() * 30) / 60)
}

impl Zone {
    /// Reads `value` of argument `field`: a fixed offset (`+05:30`, `Z`, `UTC-3`) or an IANA name.
    pub fn parse(field: &str, value: &str) -> Result<Zone, ToolError> {
        if let Ok(o) = Offset::parse(value) {
            return Ok(Zone::Fixed(o));
        }
        let name = value.trim();
        match TimeZone::get(name) {
            Ok(tz) => {
                let canonical = tz.iana_name().unwrap_or(name).to_owned();
                Ok(Zone::Named(tz, canonical))
            }
            Err(_) => Err(ToolError::invalid(format!(
                "{field}: `{value}` is neither a UTC offset (like `+05:30`, `-08:00` or `Z`) nor a known IANA time \
                 zone (like `Europe/Paris`, `America/New_York` or `Asia/Kolkata`); city names need their region \
                 prefix and abbreviations such as `EST` or `CET` are not zones"
            ))),
        }
    }

    /// The offset in effect at Unix second `secs`, and the zone's details when it is named.
    pub fn at(&self, secs: i64) -> Result<(Offset, Option<ZoneInfo>), ToolError> {
        match self {
            Zone::Fixed(o) => Ok((*o, None)),
            Zone::Named(tz, name) => {
                let ts = jiff::Timestamp::from_second(secs).map_err(|e| ToolError::invalid(e.to_string()))?;
                let info = tz.to_offset_info(ts);
                Ok((
                    to_offset(info.offset()),
                    Some(ZoneInfo {
                        name: name.clone(),
                        abbreviation: info.abbreviation().to_owned(),
                        dst: info.dst().is_dst(),
                    }),
                ))
            }
        }
    }

    /// The instant `date hour:minute:second.nanos` denotes in this zone, shown at the offset in
    /// effect then, and a note when a daylight-saving change made the local time skipped or
    /// repeated.
    pub fn resolve_local(
        &self,
        date: Date,
        (hour, minute, second, nanos): (u32, u32, u32, u32),
        how: Disambiguation,
    ) -> Result<(DateTime, Option<String>), ToolError> {
        let (tz, name) = match self {
            Zone::Fixed(o) => return Ok((DateTime::from_local(date, hour, minute, second, nanos, *o), None)),
            Zone::Named(tz, name) => (tz, name),
        };
        let civil = jiff::civil::DateTime::new(
            date.y as i16,
            date.m as i8,
            date.d as i8,
            hour as i8,
            minute as i8,
            second as i8,
            0,
        )
        .map_err(|e| ToolError::invalid(e.to_string()))?;
        let local = format!("{} {hour:02}:{minute:02}", date.iso());
        let ambiguous = tz.to_ambiguous_timestamp(civil);
        let note = match ambiguous.offset() {
            AmbiguousOffset::Unambiguous { .. } => None,
            AmbiguousOffset::Gap { before, after } => {
                if how == Disambiguation::Reject {
                    return Err(ToolError::invalid(format!(
                        "{local} does not exist in {name}: clocks jump from {before} to {after} then; pass a time \
                         outside the gap, or disambiguation `compatible`, `earlier` or `later`"
                    )));
                }
                Some(format!(
                    "{local} does not exist in {name} (clocks jump from {before} to {after}); read with \
                     disambiguation `{}`",
                    how.name()
                ))
            }
            AmbiguousOffset::Fold { before, after } => {
                if how == Disambiguation::Reject {
                    return Err(ToolError::invalid(format!(
                        "{local} happens twice in {name} (at {before} and at {after}); pass an explicit offset, or \
                         disambiguation `earlier` or `later`"
                    )));
                }
                Some(format!(
                    "{local} happens twice in {name} (at {before} and at {after}); read with disambiguation `{}`",
                    how.name()
                ))
            }
        };
        let ts = match how {
            Disambiguation::Compatible | Disambiguation::Reject => ambiguous.compatible(),
            Disambiguation::Earlier => ambiguous.earlier(),
            Disambiguation::Later => ambiguous.later(),
        }
        .map_err(|e| ToolError::invalid(e.to_string()))?;
        let secs = ts.as_second();
        let (offset, _) = self.at(secs)?;
        Ok((DateTime { secs, nanos, offset }, note))
    }
}

impl Disambiguation {
    fn name(self) -> &'static str {
        match self {
            Disambiguation::Compatible => "compatible",
            Disambiguation::Earlier => "earlier",
            Disambiguation::Later => "later",
            Disambiguation::Reject => "reject",
        }
    }
}
