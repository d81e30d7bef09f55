//! Ages and timestamps for people. The API's times are epoch milliseconds; `now` is always
//! passed in, so the formatting is deterministic.

/// A compact age: `42s`, `7m`, `3h`, `2d` (the largest whole unit; `0s` for the future).
pub fn age(now_ms: i64, then_ms: i64) -> String {
    let secs = (now_ms - then_ms).max(0) / 1000;
    match secs {
        s if s < 60 => format!("{s}s"),
        s if s < 3_600 => format!("{}m", s / 60),
        s if s < 86_400 => format!("{}h", s / 3_600),
        s => format!("{}d", s / 86_400),
    }
}

/// A duration between two instants, as [`age`] writes it.
pub fn duration(from_ms: i64, to_ms: i64) -> String {
    age(to_ms, from_ms)
}

pub use qm_core::time::{days_from_civil, utc};

/// An instant given on the command line, in epoch milliseconds: `now`, an age before `now`
/// (`90m`, `36h`, `7d`, `2w`), a UTC date (`2026-11-01`) or a UTC time
/// (`2026-11-01T12:00:00Z`, `2026-11-01T12:00Z`).
pub fn parse_instant(text: &str, now_ms: i64) -> Result<i64, String> {
    let bad = || {
        format!(
            "'{text}' is not a time; give now, an age such as 36h or 7d, a UTC date such as 2026-11-01, or 2026-11-01T12:00:00Z"
        )
    };
    let t = text.trim();
    if t == "now" {
        return Ok(now_ms);
    }
    if let Some(unit) = t.chars().last().filter(|c| "mhdw".contains(*c)) {
        if let Ok(n) = t[..t.len() - 1].parse::<u32>() {
            let ms = match unit {
                'm' => 60_000,
                'h' => 3_600_000,
                'd' => 86_400_000,
                _ => 7 * 86_400_000,
            };
            return Ok(now_ms - i64::from(n) * ms);
        }
    }
    let (date, time) = t.split_once('T').unwrap_or((t, ""));
    let parts: Vec<&str> = date.split('-').collect();
    let [y, m, d] = parts[..] else {
        return Err(bad());
    };
    let (Ok(y), Ok(m), Ok(d)) = (y.parse::<i64>(), m.parse::<u32>(), d.parse::<u32>()) else {
        return Err(bad());
    };
    if y.to_string().len() != 4 || !(1..=12).contains(&m) || !(1..=31).contains(&d) {
        return Err(bad());
    }
    let days = days_from_civil(y, m, d);
    if qm_core::time::civil_from_days(days) != (y, m, d) {
        return Err(format!("'{text}': {y:04}-{m:02} has no day {d}"));
    }
    let mut secs = 0i64;
    if !time.is_empty() {
        let hms = time.strip_suffix('Z').ok_or_else(|| {
            format!("'{text}': times are UTC; end the time with Z (e.g. {date}T{time}Z)")
        })?;
        let fields: Vec<&str> = hms.split(':').collect();
        let limits = [24, 60, 60];
        if !(2..=3).contains(&fields.len()) {
            return Err(bad());
        }
        for (i, f) in fields.iter().enumerate() {
            let v: i64 = f.parse().map_err(|_| bad())?;
            if f.len() != 2 || v < 0 || v >= limits[i] {
                return Err(bad());
            }
            secs += v * [3_600, 60, 1][i];
        }
    }
    Ok((days * 86_400 + secs) * 1000)
}

/// The window `[since, until)` given by `--since` and `--until` (each optional, in the forms
/// of [`parse_instant`]): until defaults to now, since to `default_days` before until. The
/// message of a bad one names its flag.
pub fn window(
    since: Option<&str>,
    until: Option<&str>,
    now_ms: i64,
    default_days: i64,
) -> Result<(i64, i64), String> {
    let instant =
        |flag: &str, v: &str| parse_instant(v, now_ms).map_err(|e| format!("--{flag}: {e}"));
    let until = until.map_or(Ok(now_ms), |v| instant("until", v))?;
    let since = since.map_or(Ok(until - default_days * 86_400_000), |v| {
        instant("since", v)
    })?;
    if since >= until {
        return Err("--since must be before --until (the window is [since, until))".into());
    }
    Ok((since, until))
}

/// The current time in epoch milliseconds (the one clock read, by the commands).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_use_the_largest_whole_unit() {
        assert_eq!(age(61_000, 0), "1m");
        assert_eq!(age(59_999, 0), "59s");
        assert_eq!(age(7_200_000, 0), "2h");
        assert_eq!(age(0, 5_000), "0s");
    }

    #[test]
    fn instants_are_read_as_ages_dates_and_utc_times() {
        let now = 1_795_958_264_000; // 2026-11-29T13:17:44Z
        assert_eq!(parse_instant("now", now), Ok(now));
        assert_eq!(parse_instant("7d", now), Ok(now - 7 * 86_400_000));
        assert_eq!(parse_instant("90m", now), Ok(now - 90 * 60_000));
        assert_eq!(parse_instant("2026-11-29T13:17:44Z", now), Ok(now));
        assert_eq!(
            utc(parse_instant("2026-11-01", now).unwrap()),
            "2026-11-01T00:00:00Z"
        );
        assert_eq!(
            utc(parse_instant("2024-02-29T23:59Z", now).unwrap()),
            "2024-02-29T23:59:00Z"
        );
        assert!(parse_instant("2025-02-29", now)
            .unwrap_err()
            .contains("no day 29"));
        assert!(parse_instant("2026-11-01T12:00", now)
            .unwrap_err()
            .contains("end the time with Z"));
        for bad in [
            "yesterday",
            "2026-13-01",
            "26-11-01",
            "2026-11-01T25:00Z",
            "-3d",
            "",
        ] {
            assert!(parse_instant(bad, now).is_err(), "{bad}");
        }
        for days in [-800_000, -1, 0, 59, 11_016, 20_788, 2_000_000] {
            let (y, m, d) = qm_core::time::civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
    }

    #[test]
    fn instants_are_written_in_utc() {
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc(1_795_958_264_000), "2026-11-29T13:17:44Z");
        assert_eq!(utc(1_795_959_465_000), "2026-11-29T13:37:45Z");
    }
}
