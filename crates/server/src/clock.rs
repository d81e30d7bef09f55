//! The server's clock, read at the edges (the HTTP layer, the driver, the key store) and
//! handed to the core as `now`: the one place that reads the wall clock, so nothing below it
//! depends on the module that drives batches.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the epoch on the server's clock.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
