//! The server's audit log (`GET /qm/v1/audit`): who applied what, and when.

use std::fmt::Write as _;

use serde::Deserialize;

use super::Error;
use crate::client::Client;

/// Where the server keeps the log: `GET` reads it, `POST` appends an entry.
pub const AUDIT_PATH: &str = "/qm/v1/audit";

/// One entry, oldest first in the log: the server's own type, so the two cannot drift.
pub use qm_server::command::AuditEntry as Entry;

#[derive(Deserialize)]
struct Page {
    entries: Vec<Entry>,
}

/// Reads the log.
pub fn read(client: &Client) -> Result<Vec<Entry>, Error> {
    let v = client
        .get_json(AUDIT_PATH)
        .map_err(|e| Error::request("audit", e))?;
    serde_json::from_value::<Page>(v)
        .map(|p| p.entries)
        .map_err(|e| Error::Shape {
            operation: "audit".into(),
            message: e.to_string(),
        })
}

/// `2026-11-29T13:17:45Z` for an epoch-milliseconds time (UTC, proleptic Gregorian).
pub fn utc(at_ms: i64) -> String {
    let secs = at_ms.div_euclid(1000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's days-to-civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// The entries as a table: time, actor, action, summary.
pub fn render(entries: &[Entry]) -> String {
    let mut out = String::new();
    if entries.is_empty() {
        out.push_str("No audit entries yet.\n");
        return out;
    }
    let actor_w = entries
        .iter()
        .map(|e| e.actor.len())
        .max()
        .unwrap_or(0)
        .max(5);
    let action_w = entries
        .iter()
        .map(|e| e.action.len())
        .max()
        .unwrap_or(0)
        .max(6);
    let _ = writeln!(
        out,
        "{:<20}  {:<actor_w$}  {:<action_w$}  SUMMARY",
        "TIME", "ACTOR", "ACTION"
    );
    for e in entries {
        let _ = writeln!(
            out,
            "{:<20}  {:<actor_w$}  {:<action_w$}  {}",
            utc(e.at),
            e.actor,
            e.action,
            e.summary
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epoch_milliseconds_print_as_utc() {
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc(1_795_959_465_000), "2026-11-29T13:37:45Z");
    }
}
