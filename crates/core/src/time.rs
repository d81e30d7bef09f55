//! Calendar arithmetic on shell milliseconds, without a clock or a time zone database (the
//! core stays pure): the one place that turns an instant into a date, for the core's reasons,
//! the server's monthly archive files and the CLI.

/// The proleptic Gregorian (year, month, day) of a day count since 1970-01-01 (H. Hinnant's
/// civil-from-days).
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// The day count since 1970-01-01 of a proleptic Gregorian date (the inverse of
/// [`civil_from_days`]; H. Hinnant's days-from-civil).
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = i64::from(if m > 2 { m - 3 } else { m + 9 });
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// An epoch-milliseconds instant in UTC, to the second: `2026-11-29T13:17:44Z`.
pub fn utc(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let of_day = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        of_day / 3_600,
        of_day % 3_600 / 60,
        of_day % 60
    )
}

/// What [`utc`] writes, back to epoch milliseconds; fractions of a second are kept to the
/// millisecond (`2026-12-07T06:42:01.500Z`, as STS writes its expirations).
pub fn parse_utc(text: &str) -> Option<i64> {
    let (date, time) = text.trim().strip_suffix('Z')?.split_once('T')?;
    let mut d = date.splitn(3, '-');
    let y: i64 = d.next()?.parse().ok()?;
    let m: u32 = d.next()?.parse().ok()?;
    let day: u32 = d.next()?.parse().ok()?;
    let mut t = time.splitn(3, ':');
    let h: i64 = t.next()?.parse().ok()?;
    let min: i64 = t.next()?.parse().ok()?;
    let seconds = t.next()?;
    let (sec, frac) = seconds.split_once('.').unwrap_or((seconds, ""));
    let sec: i64 = sec.parse().ok()?;
    let ms: i64 = format!("{frac:0<3}").get(..3)?.parse().ok()?;
    let days = days_from_civil(y, m, day);
    Some((days * 86_400 + h * 3_600 + min * 60 + sec) * 1000 + ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_utc_reads_back_what_utc_writes_and_fractions_to_the_millisecond() {
        let ms = 1_796_625_589_000;
        assert_eq!(parse_utc(&utc(ms)), Some(ms));
        assert_eq!(
            parse_utc("2026-12-07T06:42:01.500Z").map(|t| t % 1000),
            Some(500)
        );
        assert_eq!(
            parse_utc("2026-12-07T06:42:01.5Z").map(|t| t % 1000),
            Some(500)
        );
        assert_eq!(parse_utc("2026-12-07 06:42:01"), None);
    }

    #[test]
    fn days_map_to_calendar_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(59), (1970, 3, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(20_788), (2026, 12, 1));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
    }

    #[test]
    fn instants_are_written_to_the_second_in_utc() {
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc(951_782_400_000), "2000-02-29T00:00:00Z");
        assert_eq!(utc(1_796_169_599_999), "2026-12-01T23:59:59Z");
    }
}
