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

/// An epoch-milliseconds instant in UTC: `2026-11-29T13:17:44Z`.
pub fn utc(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let of_day = secs.rem_euclid(86_400);
    let (y, m, d) = qm_server::archive::civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        of_day / 3_600,
        of_day % 3_600 / 60,
        of_day % 60
    )
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
    fn instants_are_written_in_utc() {
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc(1_795_958_264_000), "2026-11-29T13:17:44Z");
        assert_eq!(utc(1_795_959_465_000), "2026-11-29T13:37:45Z");
    }
}
