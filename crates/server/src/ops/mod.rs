//! One file per API resource family: each implements the operations of that family on
//! [`crate::state::State`], with the validation that needs the state (existence, uniqueness,
//! lifecycle). Shape validation that needs no state lives in `qm_api::validate`.

mod drain;
mod environment;
mod fair;
mod job;
mod permit;
mod policy;
mod queue;
pub(crate) mod retention;
mod share;
mod snapshot;
mod tags;
mod usage;
mod whatif;

use qm_api::{decode_token, encode_token, ApiError};

/// Pages a sorted list of names: returns the items of this page and the next token.
pub(crate) fn page<'a, T>(
    items: impl Iterator<Item = (&'a str, T)>,
    token: Option<&str>,
    max: usize,
) -> Result<(Vec<T>, Option<String>), ApiError> {
    let after = match token {
        Some(t) => Some(decode_token("nextToken", t)?),
        None => None,
    };
    let mut out = Vec::new();
    let mut next = None;
    for (key, item) in items {
        if let Some(a) = &after {
            if key <= a.as_str() {
                continue;
            }
        }
        if out.len() == max {
            next = Some(encode_token(&last_key(&out, key)));
            break;
        }
        out.push((key.to_string(), item));
    }
    Ok((out.into_iter().map(|(_, v)| v).collect(), next))
}

fn last_key<T>(out: &[(String, T)], _next: &str) -> String {
    out.last().map(|(k, _)| k.clone()).unwrap_or_default()
}
