//! Calendar arithmetic for header dates: Unix seconds to RFC 5322 `Date:` text and back
//! from the asctime date of an mbox `From ` line. Proleptic Gregorian, no leap seconds.

const DAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// Days since 1970-01-01 of a civil date (Howard Hinnant's algorithm).
pub(crate) fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Civil date (year, month 1-12, day 1-31) of a day count since 1970-01-01.
pub(crate) fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Calendar year (UTC) of a Unix time.
pub(crate) fn year_of(t: i64) -> i32 {
    civil_from_days(t.div_euclid(86_400)).0 as i32
}

/// `Tue, 03 Jan 2023 10:04:05 +0100`: the instant `t` shown in the zone `tz_minutes`.
pub(crate) fn rfc5322(t: i64, tz_minutes: i32) -> String {
    let local = t + i64::from(tz_minutes) * 60;
    let days = local.div_euclid(86_400);
    let secs = local.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    let wd = (days + 4).rem_euclid(7) as usize;
    let sign = if tz_minutes < 0 { '-' } else { '+' };
    let tz = tz_minutes.unsigned_abs();
    format!(
        "{}, {:02} {} {} {:02}:{:02}:{:02} {}{:02}{:02}",
        DAYS[wd],
        d,
        MONTHS[(m - 1) as usize],
        y,
        secs / 3600,
        secs % 3600 / 60,
        secs % 60,
        sign,
        tz / 60,
        tz % 60
    )
}

/// Parses the asctime date at the end of an mbox `From ` line
/// (`From sender  Thu Aug 22 12:36:23 2002`), as UTC.
pub(crate) fn parse_from_line(line: &str) -> Option<i64> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    if fields.len() < 6 || fields[0] != "From" {
        return None;
    }
    let tail = &fields[fields.len() - 5..];
    let month = MONTHS.iter().position(|m| *m == tail[1])? as u32 + 1;
    let day: u32 = tail[2].parse().ok()?;
    let hms: Vec<u32> = tail[3]
        .split(':')
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    let year: i64 = tail[4].parse().ok()?;
    if hms.len() != 3 || !(1..=31).contains(&day) || hms[0] > 23 || hms[1] > 59 || hms[2] > 60 {
        return None;
    }
    Some(
        days_from_civil(year, month, day) * 86_400
            + i64::from(hms[0]) * 3600
            + i64::from(hms[1]) * 60
            + i64::from(hms[2]),
    )
}

/// Parses an RFC 5322 date (`Thu, 22 Aug 2002 12:36:23 +0100`), leniently: the day name,
/// seconds and zone are optional, two-digit years are accepted, zone names count as UTC.
pub(crate) fn parse_rfc5322(value: &str) -> Option<i64> {
    let value = match value.split_once(',') {
        Some((_, rest)) => rest,
        None => value,
    };
    let t: Vec<&str> = value.split_whitespace().collect();
    if t.len() < 4 {
        return None;
    }
    let day: u32 = t[0].parse().ok()?;
    let month = MONTHS
        .iter()
        .position(|m| t[1].len() >= 3 && m.eq_ignore_ascii_case(&t[1][..3]))?
        as u32
        + 1;
    let mut year: i64 = t[2].parse().ok()?;
    if year < 50 {
        year += 2000;
    } else if year < 100 {
        year += 1900;
    }
    let hms: Vec<i64> = t[3]
        .split(':')
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    if !(2..=3).contains(&hms.len()) || !(1..=31).contains(&day) || hms[0] > 23 || hms[1] > 59 {
        return None;
    }
    let offset = t
        .get(4)
        .filter(|z| z.len() == 5 && (z.starts_with('+') || z.starts_with('-')))
        .and_then(|z| {
            let n: i64 = z[1..].parse().ok()?;
            let minutes = n / 100 * 60 + n % 100;
            Some(if z.starts_with('-') {
                -minutes
            } else {
                minutes
            })
        })
        .unwrap_or(0);
    Some(
        days_from_civil(year, month, day) * 86_400
            + hms[0] * 3600
            + hms[1] * 60
            + hms.get(2).copied().unwrap_or(0)
            - offset * 60,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_civil_dates() {
        for z in [-1000, 0, 1, 59, 60, 10_957, 19_358, 20_000, 30_000] {
            let (y, m, d) = civil_from_days(z);
            assert_eq!(days_from_civil(y, m, d), z);
        }
        assert_eq!(days_from_civil(2023, 1, 1) * 86_400, 1_672_531_200);
        assert_eq!(year_of(1_672_531_199), 2022);
        assert_eq!(year_of(1_672_531_200), 2023);
    }

    #[test]
    fn formats_rfc5322() {
        assert_eq!(rfc5322(0, 0), "Thu, 01 Jan 1970 00:00:00 +0000");
        assert_eq!(
            rfc5322(1_672_531_200, 60),
            "Sun, 01 Jan 2023 01:00:00 +0100"
        );
        assert_eq!(
            rfc5322(1_672_531_200, -300),
            "Sat, 31 Dec 2022 19:00:00 -0500"
        );
        assert_eq!(
            rfc5322(1_672_531_200, 330),
            "Sun, 01 Jan 2023 05:30:00 +0530"
        );
    }

    #[test]
    fn parses_mbox_from_lines() {
        let t = parse_from_line("From exmh-workers-admin@redhat.com  Thu Aug 22 12:36:23 2002");
        assert_eq!(t, Some(1_030_019_783));
        assert_eq!(parse_from_line("From: someone"), None);
        assert_eq!(
            parse_rfc5322("Thu, 22 Aug 2002 13:36:23 +0100"),
            Some(1_030_019_783)
        );
        assert_eq!(parse_rfc5322("22 aug 02 12:36 GMT"), Some(1_030_019_760));
        assert_eq!(
            parse_rfc5322("Thu, 22 Aug 2002 07:36:23 -0500 (EST)"),
            Some(1_030_019_783)
        );
        assert_eq!(parse_rfc5322("someday"), None);
        assert_eq!(parse_from_line("From x Thu Foo 22 12:36:23 2002"), None);
    }
}
