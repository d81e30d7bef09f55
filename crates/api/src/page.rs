//! Pagination tokens. AWS tells clients to treat `nextToken` as opaque; the server's position
//! (for example the last name or id of the previous page) goes in readable but versioned and
//! checksummed, so that a token that this server did not issue, or one that was edited, is
//! refused with a clear message instead of silently starting somewhere else.
//!
//! Format: `qm1-<8 hex digits of FNV-1a over the position>-<position bytes in hex>`.

use crate::error::ApiError;

const PREFIX: &str = "qm1-";

fn fnv1a(bytes: &[u8]) -> u32 {
    let mut hash: u32 = 0x811c_9dc5;
    for b in bytes {
        hash ^= u32::from(*b);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    hash
}

/// The token that resumes a listing at `position`.
pub fn encode_token(position: &str) -> String {
    let mut token = format!("{PREFIX}{:08x}-", fnv1a(position.as_bytes()));
    for b in position.as_bytes() {
        token.push_str(&format!("{b:02x}"));
    }
    token
}

/// The position a token of [`encode_token`] carries; `field` names the request member.
pub fn decode_token(field: &str, token: &str) -> Result<String, ApiError> {
    let refuse = || {
        ApiError::client(format!(
            "{field} is not a token this server issued: pass the nextToken of the previous \
             response unchanged, or leave {field} out to start from the beginning"
        ))
    };
    let rest = token.strip_prefix(PREFIX).ok_or_else(refuse)?;
    let (checksum, hex) = rest.split_once('-').ok_or_else(refuse)?;
    // from_str_radix takes a leading '+' and upper case: checking the digits first keeps one
    // spelling per token, so a token compares equal to the one the server issued.
    let digits = |s: &str| s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    if checksum.len() != 8 || hex.len() % 2 != 0 || !digits(checksum) || !digits(hex) {
        return Err(refuse());
    }
    let checksum = u32::from_str_radix(checksum, 16).map_err(|_| refuse())?;
    let bytes = (0..hex.len())
        .step_by(2)
        .map(|i| {
            hex.get(i..i + 2)
                .and_then(|pair| u8::from_str_radix(pair, 16).ok())
        })
        .collect::<Option<Vec<u8>>>()
        .ok_or_else(refuse)?;
    if fnv1a(&bytes) != checksum {
        return Err(refuse());
    }
    String::from_utf8(bytes).map_err(|_| refuse())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_decodes_to_the_position_it_was_made_from() {
        for position in ["", "jq/QS1", "1774420000000:a4d6c728-8ee8", "ünïcode ✓"] {
            assert_eq!(
                decode_token("nextToken", &encode_token(position)),
                Ok(position.into())
            );
        }
    }

    #[test]
    fn tokens_are_url_safe() {
        let token = encode_token("a/b c?d");
        assert!(
            token.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'),
            "{token}"
        );
    }

    #[test]
    fn garbage_and_edited_tokens_are_refused() {
        let good = encode_token("QS1");
        let mut edited = good.clone();
        edited.replace_range(good.len() - 1.., "0");
        for bad in [
            "",
            "abc",
            "qm1-",
            "qm1-zzzzzzzz-00",
            "qm1-00000000-0",
            &edited,
            // Found by the page_token fuzz target: a sign is not a digit.
            "qm1-+4e20a13-712f612f30303030303030303432",
            &format!("{}+{}", &good[..good.len() - 2], &good[good.len() - 1..]),
            &good.to_ascii_uppercase().replace("QM1-", "qm1-"),
        ] {
            let err = decode_token("nextToken", bad).unwrap_err();
            assert!(
                err.message().starts_with(
                    "nextToken is not a token this server issued: pass the nextToken of the \
                     previous response unchanged"
                ),
                "{bad}: {err}"
            );
        }
    }
}
