//! The server's audit log (`GET /qm/v1/audit`): who applied what, and when.

use std::fmt::Write as _;

use super::Error;
use crate::client::time::utc;
use crate::client::Client;

/// Where the server keeps the log: `GET` reads it, `POST` appends an entry.
pub const AUDIT_PATH: &str = "/qm/v1/audit";

/// One entry, oldest first in the log: the wire type the server writes, so the two cannot
/// drift.
pub use qm_api::qm::AuditEntry as Entry;

/// Reads the log, page by page: its entries, and how many older ones the server has moved to
/// its archive (`[retention] audit_entries`).
pub fn read(client: &Client) -> Result<(Vec<Entry>, u64), Error> {
    let mut entries = Vec::new();
    let mut next: Option<String> = None;
    loop {
        let path = match &next {
            None => AUDIT_PATH.to_string(),
            Some(token) => format!("{AUDIT_PATH}?nextToken={token}"),
        };
        let v = client
            .get_json(&path)
            .map_err(|e| Error::request("audit", e))?;
        let page = serde_json::from_value::<qm_api::qm::AuditLog>(v).map_err(|e| Error::Shape {
            operation: "audit".into(),
            message: e.to_string(),
        })?;
        entries.extend(page.entries);
        match page.next_token {
            // The server's tokens are decimal indices, so nothing needs escaping; anything
            // else (or the same token twice) ends the walk rather than loop or inject.
            Some(token)
                if token.bytes().all(|b| b.is_ascii_digit()) && next.as_ref() != Some(&token) =>
            {
                next = Some(token)
            }
            _ => return Ok((entries, page.archived)),
        }
    }
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
        if let Some(t) = &e.tags {
            let _ = writeln!(out, "{:<20}  {}", "", tag_change(t));
        }
    }
    out
}

/// A change of tags on one line: each key that changed, `key: before -> after`.
fn tag_change(t: &qm_api::qm::TagChange) -> String {
    let keys: std::collections::BTreeSet<&String> = t.before.keys().chain(t.after.keys()).collect();
    let changed: Vec<String> = keys
        .into_iter()
        .filter(|k| t.before.get(*k) != t.after.get(*k))
        .map(|k| {
            let side = |v: Option<&String>| v.map_or("(none)".to_string(), |v| format!("{v:?}"));
            format!("{k}: {} -> {}", side(t.before.get(k)), side(t.after.get(k)))
        })
        .collect();
    format!("tags of {}: {}", t.resource, changed.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tag_change_shows_each_key_that_changed_with_its_value_before_and_after() {
        let t = qm_api::qm::TagChange {
            resource: "arn:share".into(),
            before: [
                ("qm:submitters".into(), "a".into()),
                ("keep".into(), "x".into()),
            ]
            .into(),
            after: [("qm:leads".into(), "b".into()), ("keep".into(), "x".into())].into(),
        };
        assert_eq!(
            tag_change(&t),
            "tags of arn:share: qm:leads: (none) -> \"b\", qm:submitters: \"a\" -> (none)"
        );
    }
}
