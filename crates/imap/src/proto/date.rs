//! INTERNALDATE (`"17-Jul-1996 02:44:25 -0700"`, RFC 3501 `date-time`)
//! to and from unix seconds plus the zone offset the server keeps with it.

use std::fmt;

/// A message's INTERNALDATE: an instant plus the zone offset it was written in.
///
/// `secs` is the instant (unix seconds, UTC); `tz_minutes` is the offset of the
/// local time that is shown on the wire (`-0700` is `-420`). Two values with
/// the same `secs` and different offsets are the same instant shown in two zones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InternalDate {
    /// Unix seconds (UTC).
    pub secs: i64,
    /// Zone offset in minutes east of UTC, `-1439..=1439`.
    pub tz_minutes: i32,
}

impl From<(i64, i32)> for InternalDate {
    fn from((secs, tz_minutes): (i64, i32)) -> Self {
        InternalDate { secs, tz_minutes }
    }
}

/// Why a date could not be parsed or formatted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DateError {
    /// The text (parse) or value (format) concerned.
    pub input: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl fmt::Display for DateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bad INTERNALDATE {:?}: {}", self.input, self.reason)
    }
}

impl std::error::Error for DateError {}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

impl InternalDate {
    /// Formats as the quoted-string content of an IMAP `date-time`, e.g.
    /// `17-Jul-1996 02:44:25 -0700` (day always two digits, which
    /// `date-day-fixed` allows). Fails for years outside 0..=9999 or offsets
    /// of a day or more.
    pub fn to_imap(&self) -> Result<String, DateError> {
        let bad = |reason| DateError {
            input: format!("{self:?}"),
            reason,
        };
        if self.tz_minutes.abs() >= 24 * 60 {
            return Err(bad("zone offset of a day or more"));
        }
        let local = self
            .secs
            .checked_add(i64::from(self.tz_minutes) * 60)
            .ok_or_else(|| bad("out of range"))?;
        let days = local.div_euclid(86_400);
        let tod = local.rem_euclid(86_400);
        let (y, m, d) = civil_from_days(days);
        if !(0..=9999).contains(&y) {
            return Err(bad("year outside 0000..=9999"));
        }
        let sign = if self.tz_minutes < 0 { '-' } else { '+' };
        let off = self.tz_minutes.abs();
        Ok(format!(
            "{d:02}-{}-{y:04} {:02}:{:02}:{:02} {sign}{:02}{:02}",
            MONTHS[(m - 1) as usize],
            tod / 3600,
            tod % 3600 / 60,
            tod % 60,
            off / 60,
            off % 60
        ))
    }

    /// Parses the content of an IMAP `date-time` quoted string (without the
    /// quotes). The day may be one digit, space-padded or two digits; the
    /// month name is matched case-insensitively.
    pub fn parse_imap(text: &str) -> Result<InternalDate, DateError> {
        let bad = |reason| DateError {
            input: text.to_string(),
            reason,
        };
        let t = text.trim_start_matches(' ');
        let (day, rest) = t.split_once('-').ok_or_else(|| bad("missing '-'"))?;
        let (mon, rest) = rest.split_once('-').ok_or_else(|| bad("missing '-'"))?;
        let (year, rest) = rest.split_once(' ').ok_or_else(|| bad("missing time"))?;
        let (time, zone) = rest.split_once(' ').ok_or_else(|| bad("missing zone"))?;
        let num = |s: &str, len: std::ops::RangeInclusive<usize>| -> Result<u32, DateError> {
            if !len.contains(&s.len()) || !s.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad("malformed number"));
            }
            s.parse().map_err(|_| bad("malformed number"))
        };
        let d = num(day, 1..=2)?;
        let m = MONTHS
            .iter()
            .position(|n| n.eq_ignore_ascii_case(mon))
            .ok_or_else(|| bad("unknown month"))? as u32
            + 1;
        let y = i64::from(num(year, 4..=4)?);
        let mut hms = time.split(':');
        let (h, mi, s) = match (hms.next(), hms.next(), hms.next(), hms.next()) {
            (Some(h), Some(mi), Some(s), None) => (num(h, 2..=2)?, num(mi, 2..=2)?, num(s, 2..=2)?),
            _ => return Err(bad("time is not hh:mm:ss")),
        };
        if d == 0 || d > days_in_month(y, m) || h > 23 || mi > 59 || s > 60 {
            return Err(bad("field out of range"));
        }
        let zb = zone.as_bytes();
        if zb.len() != 5 || !(zb[0] == b'+' || zb[0] == b'-') {
            return Err(bad("zone is not +hhmm/-hhmm"));
        }
        let zh = num(&zone[1..3], 2..=2)?;
        let zm = num(&zone[3..5], 2..=2)?;
        if zm > 59 {
            return Err(bad("zone minutes out of range"));
        }
        let mut tz = (zh * 60 + zm) as i32;
        if zb[0] == b'-' {
            tz = -tz;
        }
        let local = days_from_civil(y, m, d) * 86_400
            + i64::from(h) * 3600
            + i64::from(mi) * 60
            + i64::from(s);
        Ok(InternalDate {
            secs: local - i64::from(tz) * 60,
            tz_minutes: tz,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn rfc_example() {
        let d = InternalDate::parse_imap("17-Jul-1996 02:44:25 -0700").expect("parse");
        assert_eq!(d.tz_minutes, -420);
        assert_eq!(d.secs, 837_596_665); // 1996-07-17T09:44:25Z
        assert_eq!(d.to_imap().as_deref(), Ok("17-Jul-1996 02:44:25 -0700"));
    }

    #[test]
    fn padded_days_and_case() {
        let a = InternalDate::parse_imap(" 7-Feb-2024 00:00:00 +0000").expect("space");
        let b = InternalDate::parse_imap("7-feb-2024 00:00:00 +0000").expect("one digit");
        let c = InternalDate::parse_imap("07-FEB-2024 00:00:00 +0000").expect("two");
        assert_eq!(a, b);
        assert_eq!(b, c);
        assert_eq!(a.secs, 1_707_264_000);
        assert_eq!(a.to_imap().as_deref(), Ok("07-Feb-2024 00:00:00 +0000"));
    }

    #[test]
    fn epoch_and_negative() {
        let d = InternalDate {
            secs: 0,
            tz_minutes: 0,
        };
        assert_eq!(d.to_imap().as_deref(), Ok("01-Jan-1970 00:00:00 +0000"));
        let d = InternalDate {
            secs: -1,
            tz_minutes: 330,
        };
        assert_eq!(d.to_imap().as_deref(), Ok("01-Jan-1970 05:29:59 +0530"));
    }

    #[test]
    fn rejects_garbage() {
        for s in [
            "",
            "30-Feb-2024 00:00:00 +0000",
            "17-Jux-1996 02:44:25 -0700",
            "17-Jul-96 02:44:25 -0700",
            "17-Jul-1996 2:44:25 -0700",
            "17-Jul-1996 02:44:25 0700",
            "17-Jul-1996 02:44:25 -07000",
        ] {
            assert!(InternalDate::parse_imap(s).is_err(), "{s}");
        }
        assert!(InternalDate {
            secs: 0,
            tz_minutes: 1440
        }
        .to_imap()
        .is_err());
    }

    proptest! {
        #[test]
        fn round_trip(secs in -62_167_219_200i64..253_402_300_799, tz in -1439i32..=1439) {
            // Keep the local time inside years 0000..=9999.
            let local = secs + i64::from(tz) * 60;
            prop_assume!((-62_167_219_200..253_402_300_800).contains(&local));
            let d = InternalDate { secs, tz_minutes: tz };
            let text = d.to_imap().expect("format");
            prop_assert_eq!(InternalDate::parse_imap(&text), Ok(d));
        }
    }
}
