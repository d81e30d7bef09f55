//! AWS Signature Version 4, both ways: `qm` signs its requests as the AWS SDKs do, and the
//! server recomputes the signature a client sent and compares it in constant time. Both sides
//! use the `aws-sigv4` crate (the AWS SDK for Rust's own signer), so a request boto3, the AWS
//! CLI or an SDK signed verifies exactly as it would at AWS.
//!
//! What is ours is only the parsing of the `Authorization` header and of `X-Amz-Date`, and
//! the choice of what goes into the recomputation: the headers the client says it signed
//! (`SignedHeaders`), with their values as received, and the body.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_credential_types::Credentials as AwsCredentials;
use aws_sigv4::http_request::{
    sign as aws_sign, PayloadChecksumKind, SignableBody, SignableRequest, SigningSettings,
};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;
use subtle::ConstantTimeEq;

/// The service name in the credential scope: the server speaks the Batch API, so clients
/// sign for `batch`.
pub const SERVICE: &str = "batch";

/// The algorithm this server verifies.
pub const ALGORITHM: &str = "AWS4-HMAC-SHA256";

/// AWS's allowed clock skew between the signature's time and the server's.
pub const MAX_SKEW: Duration = Duration::from_secs(15 * 60);

/// An access key pair.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The access key id (public: it names the principal).
    pub access_key_id: String,
    /// The secret access key (never logged).
    pub secret_access_key: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"<redacted>")
            .finish()
    }
}

/// A request's `Authorization` header, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Authorization {
    /// The access key id of `Credential=`.
    pub access_key_id: String,
    /// The scope's date, `YYYYMMDD`.
    pub date: String,
    /// The scope's region.
    pub region: String,
    /// The scope's service.
    pub service: String,
    /// `SignedHeaders=`, lower-case, as sent.
    pub signed_headers: Vec<String>,
    /// `Signature=`, hex.
    pub signature: String,
}

/// Parses `AWS4-HMAC-SHA256 Credential=AK/20261202/us-east-1/batch/aws4_request,
/// SignedHeaders=host;x-amz-date, Signature=hex`; the error says what is malformed.
pub fn parse_authorization(value: &str) -> Result<Authorization, String> {
    let rest = value
        .strip_prefix(ALGORITHM)
        .filter(|r| r.starts_with(' '))
        .ok_or_else(|| format!("the Authorization header does not start with '{ALGORITHM} '"))?;
    let (mut credential, mut signed, mut signature) = (None, None, None);
    for part in rest.split(',') {
        let part = part.trim();
        if let Some(v) = part.strip_prefix("Credential=") {
            credential = Some(v);
        } else if let Some(v) = part.strip_prefix("SignedHeaders=") {
            signed = Some(v);
        } else if let Some(v) = part.strip_prefix("Signature=") {
            signature = Some(v);
        }
    }
    let missing = |what: &str| format!("the Authorization header has no {what}=");
    let credential = credential.ok_or_else(|| missing("Credential"))?;
    let scope: Vec<&str> = credential.split('/').collect();
    let [key, date, region, service, terminator] = scope[..] else {
        return Err(format!(
            "Credential={credential} is not KEY/YYYYMMDD/REGION/SERVICE/aws4_request"
        ));
    };
    if terminator != "aws4_request" || key.is_empty() || date.len() != 8 {
        return Err(format!(
            "Credential={credential} is not KEY/YYYYMMDD/REGION/SERVICE/aws4_request"
        ));
    }
    let signed = signed.ok_or_else(|| missing("SignedHeaders"))?;
    let signature = signature.ok_or_else(|| missing("Signature"))?;
    if signature.len() != 64 || !signature.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err("Signature= is not 64 hex digits".into());
    }
    Ok(Authorization {
        access_key_id: key.to_string(),
        date: date.to_string(),
        region: region.to_string(),
        service: service.to_string(),
        signed_headers: signed.split(';').map(str::to_ascii_lowercase).collect(),
        signature: signature.to_ascii_lowercase(),
    })
}

/// Parses an `X-Amz-Date` value, `YYYYMMDDTHHMMSSZ`.
pub fn parse_amz_date(value: &str) -> Option<SystemTime> {
    let b = value.as_bytes();
    if b.len() != 16 || b[8] != b'T' || b[15] != b'Z' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<u32> {
        let s = value.get(r)?;
        s.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| s.parse().ok())?
    };
    let (y, mo, d) = (num(0..4)?, num(4..6)?, num(6..8)?);
    let (h, mi, s) = (num(9..11)?, num(11..13)?, num(13..15)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || s > 60 {
        return None;
    }
    let days = qm_core::time::days_from_civil(i64::from(y), mo, d);
    let secs = days * 86_400 + i64::from(h * 3600 + mi * 60 + s);
    u64::try_from(secs)
        .ok()
        .map(|s| UNIX_EPOCH + Duration::from_secs(s))
}

fn params<'a>(
    identity: &'a Identity,
    region: &'a str,
    service: &'a str,
    time: SystemTime,
) -> Result<aws_sigv4::http_request::SigningParams<'a>, String> {
    let mut settings = SigningSettings::default();
    // The server recomputes over exactly the headers the client listed; the signer must not
    // leave any of them out (its default drops user-agent and a few others).
    settings.excluded_headers = None;
    settings.payload_checksum_kind = PayloadChecksumKind::NoHeader;
    v4::SigningParams::builder()
        .identity(identity)
        .region(region)
        .name(service)
        .time(time)
        .settings(settings)
        .build()
        .map(Into::into)
        .map_err(|e| format!("signing parameters: {e}"))
}

fn identity(creds: &Credentials, session_token: Option<&str>) -> Identity {
    AwsCredentials::new(
        &creds.access_key_id,
        &creds.secret_access_key,
        session_token.map(str::to_string),
        None,
        "qm",
    )
    .into()
}

/// Which AWS service a request is signed for, and where.
#[derive(Clone, Copy, Debug)]
pub struct Target<'a> {
    /// The service's signing name (`sts`, `s3`...).
    pub service: &'a str,
    /// The signing region.
    pub region: &'a str,
}

/// The headers (`authorization`, `x-amz-date`) to add to a request so that it is signed for
/// `region` and [`SERVICE`] at `time`. `headers` are the request's own headers to sign
/// (`host` and `content-type` at least).
pub fn sign(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    creds: &Credentials,
    region: &str,
    time: SystemTime,
) -> Result<Vec<(String, String)>, String> {
    let target = Target {
        service: SERVICE,
        region,
    };
    let caller = Caller {
        creds,
        session_token: None,
    };
    sign_for(target, caller, method, url, headers, body, time)
}

/// Who signs: a key pair, and the session token of temporary credentials.
#[derive(Clone, Copy, Debug)]
pub struct Caller<'a> {
    /// The key pair.
    pub creds: &'a Credentials,
    /// Sent as `x-amz-security-token` when set.
    pub session_token: Option<&'a str>,
}

/// [`sign`] for any AWS service (the server calls STS with it), with the session token of
/// temporary credentials (sent as `x-amz-security-token`).
pub fn sign_for(
    target: Target<'_>,
    caller: Caller<'_>,
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    time: SystemTime,
) -> Result<Vec<(String, String)>, String> {
    let id = identity(caller.creds, caller.session_token);
    let params = params(&id, target.region, target.service, time)?;
    let request = SignableRequest::new(
        method,
        url,
        headers.iter().copied(),
        SignableBody::Bytes(body),
    )
    .map_err(|e| format!("the request cannot be signed: {e}"))?;
    let (instructions, _) = aws_sign(request, &params)
        .map_err(|e| format!("signing: {e}"))?
        .into_parts();
    let (headers, _) = instructions.into_parts();
    Ok(headers
        .into_iter()
        .map(|h| (h.name().to_string(), h.value().to_string()))
        .collect())
}

/// Whether `auth` is a valid signature of the request by `secret` at `time` (the request's
/// `X-Amz-Date`). `uri` is the path and query as received; `headers` are the request's
/// headers named in `SignedHeaders` other than `x-amz-date`, with their values as received.
pub fn verify(
    auth: &Authorization,
    method: &str,
    uri: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    secret: &str,
    time: SystemTime,
) -> Result<bool, String> {
    let creds = Credentials {
        access_key_id: auth.access_key_id.clone(),
        secret_access_key: secret.to_string(),
    };
    let id = identity(&creds, None);
    let params = params(&id, &auth.region, &auth.service, time)?;
    // The signer wants an absolute URL; only its path and query enter the signature (the
    // host is a header like any other).
    let url = format!("http://signed{uri}");
    let request = SignableRequest::new(
        method,
        &url,
        headers.iter().copied(),
        SignableBody::Bytes(body),
    )
    .map_err(|e| format!("the request cannot be checked: {e}"))?;
    let output = aws_sign(request, &params).map_err(|e| format!("checking: {e}"))?;
    let expected = output.signature().as_bytes();
    Ok(expected.ct_eq(auth.signature.as_bytes()).into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn creds() -> Credentials {
        Credentials {
            access_key_id: "QMAKTEST".into(),
            secret_access_key: "secret".into(),
        }
    }

    fn signed(time: SystemTime) -> (Authorization, String) {
        let out = sign(
            "POST",
            "http://127.0.0.1:7611/v1/submitservicejob?x=1",
            &[
                ("host", "127.0.0.1:7611"),
                ("content-type", "application/json"),
            ],
            b"{}",
            &creds(),
            "us-east-1",
            time,
        )
        .unwrap();
        let get = |n: &str| out.iter().find(|(k, _)| k == n).unwrap().1.clone();
        (
            parse_authorization(&get("authorization")).unwrap(),
            get("x-amz-date"),
        )
    }

    #[test]
    fn a_signed_request_verifies_and_a_changed_one_does_not() {
        let t = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let (auth, date) = signed(t);
        assert_eq!(auth.access_key_id, "QMAKTEST");
        assert_eq!(
            (auth.region.as_str(), auth.service.as_str()),
            ("us-east-1", SERVICE)
        );
        assert_eq!(auth.signed_headers, ["content-type", "host", "x-amz-date"]);
        assert_eq!(parse_amz_date(&date), Some(t));
        let headers = [
            ("content-type", "application/json"),
            ("host", "127.0.0.1:7611"),
        ];
        let uri = "/v1/submitservicejob?x=1";
        assert!(verify(&auth, "POST", uri, &headers, b"{}", "secret", t).unwrap());
        assert!(!verify(&auth, "POST", uri, &headers, b"{}", "wrong", t).unwrap());
        assert!(!verify(&auth, "POST", uri, &headers, b"{ }", "secret", t).unwrap());
        assert!(!verify(&auth, "POST", "/v1/other?x=1", &headers, b"{}", "secret", t).unwrap());
        let later = t + Duration::from_secs(1);
        assert!(!verify(&auth, "POST", uri, &headers, b"{}", "secret", later).unwrap());
    }

    #[test]
    fn malformed_headers_say_what_is_wrong() {
        assert!(parse_authorization("Basic abc")
            .unwrap_err()
            .contains("AWS4-HMAC-SHA256"));
        let e = parse_authorization("AWS4-HMAC-SHA256 Credential=AK/2026/r/s/aws4_request, SignedHeaders=host, Signature=00").unwrap_err();
        assert!(e.contains("KEY/YYYYMMDD"), "{e}");
        assert_eq!(parse_amz_date("20261302T000000Z"), None);
        assert_eq!(parse_amz_date("garbage"), None);
    }
}
