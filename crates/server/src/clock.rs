//! The server's clock in epoch milliseconds, read at the edges (the HTTP layer, the driver,
//! the key store) and handed to the core as `now`. A leaf, so that nothing below the driver
//! depends on it to read the time. (SigV4's clock-skew check and the STS signer read
//! `SystemTime` themselves: they need the time as a `SystemTime`.)

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the epoch on the server's clock.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
