//! The crate's one error type, and the only place that knows how an error looks to an AWS
//! client: botocore recognises exactly two modeled Batch errors, `ClientException` (HTTP 400)
//! and `ServerException` (HTTP 500), so every refusal is one of the two, with a message that
//! names the wire field and says what to change.

/// An error as the AWS Batch API reports it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// The request cannot succeed as sent (bad field, unknown resource, wrong state). HTTP 400.
    #[error("{0}")]
    Client(String),
    /// The server failed; the same request may succeed later. HTTP 500, which clients retry.
    #[error("{0}")]
    Server(String),
    /// Who sent the request is unknown, or may not do what it asks: HTTP 403, with the code
    /// AWS uses for the same case (`MissingAuthenticationTokenException`,
    /// `InvalidSignatureException`, `AccessDeniedException`, ...), which the SDKs report as is.
    #[error("{1}")]
    Forbidden(&'static str, String),
    /// A body in a content type the API does not take (what a web page can send without a
    /// CORS preflight): HTTP 415.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// Refused by a limit of the HTTP layer before it was looked at (408, 413, 414, 431,
    /// 503): that status, as a `ClientException` (a `ServerException` for 503, which the
    /// SDKs retry) so that the SDKs raise their modeled errors.
    #[error("{1}")]
    Http(u16, String),
}

impl ApiError {
    /// A `ClientException` with this message.
    pub fn client(msg: impl Into<String>) -> Self {
        ApiError::Client(msg.into())
    }

    /// A `ServerException` with this message.
    pub fn server(msg: impl Into<String>) -> Self {
        ApiError::Server(msg.into())
    }

    /// An HTTP 403 with AWS's `code` and this message.
    pub fn forbidden(code: &'static str, msg: impl Into<String>) -> Self {
        ApiError::Forbidden(code, msg.into())
    }

    /// The HTTP status code: 400 for client errors, 500 for server errors, 403, 415 and the
    /// HTTP layer's own for refusals before the request is looked at.
    pub fn http_status(&self) -> u16 {
        match self {
            ApiError::Client(_) => 400,
            ApiError::Server(_) => 500,
            ApiError::Forbidden(..) => 403,
            ApiError::UnsupportedMediaType(_) => 415,
            ApiError::Http(status, _) => *status,
        }
    }

    /// The modeled error name, for the `x-amzn-ErrorType` header and the body's `__type`.
    pub fn error_type(&self) -> &'static str {
        match self {
            ApiError::Client(_) => "ClientException",
            ApiError::Server(_) => "ServerException",
            ApiError::Forbidden(code, _) => code,
            ApiError::UnsupportedMediaType(_) => "UnsupportedMediaTypeException",
            ApiError::Http(status, _) if *status >= 500 => "ServerException",
            ApiError::Http(..) => "ClientException",
        }
    }

    /// The message, for the body's `message`.
    pub fn message(&self) -> &str {
        match self {
            ApiError::Client(m)
            | ApiError::Server(m)
            | ApiError::Forbidden(_, m)
            | ApiError::UnsupportedMediaType(m)
            | ApiError::Http(_, m) => m,
        }
    }
}

/// The core refuses inputs only for reasons the caller can fix (unknown share, disabled share,
/// ...), and its messages already say what to change, so they pass through as client errors.
impl From<qm_core::CoreError> for ApiError {
    fn from(err: qm_core::CoreError) -> Self {
        ApiError::Client(err.to_string())
    }
}

/// A user-supplied value quoted for a message: in single quotes, control characters escaped,
/// cut after 100 characters so that a huge field cannot flood a log or a response.
pub(crate) fn shown(value: &str) -> String {
    const MAX_CHARS: usize = 100;
    let mut out = String::from("'");
    for (i, c) in value.chars().enumerate() {
        if i == MAX_CHARS {
            out.push_str("...");
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out.push('\'');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_errors_are_http_400_client_exceptions() {
        let err = ApiError::client("capacityLimits[0].maxCapacity must be at least 1");
        assert_eq!(err.http_status(), 400);
        assert_eq!(err.error_type(), "ClientException");
        assert_eq!(
            err.message(),
            "capacityLimits[0].maxCapacity must be at least 1"
        );
        assert_eq!(err.to_string(), err.message());
    }

    #[test]
    fn server_errors_are_http_500_server_exceptions() {
        let err = ApiError::server("the store is unavailable: retry");
        assert_eq!(err.http_status(), 500);
        assert_eq!(err.error_type(), "ServerException");
        assert_eq!(err.message(), "the store is unavailable: retry");
    }

    #[test]
    fn core_errors_become_client_errors_with_the_core_message() {
        let core = qm_core::CoreError::UnknownQueue("jq".into());
        let err = ApiError::from(core.clone());
        assert_eq!(err, ApiError::Client(core.to_string()));
    }

    #[test]
    fn values_in_messages_are_quoted_escaped_and_cut() {
        assert_eq!(shown("a\nb"), "'a\\nb'");
        let long = "x".repeat(500);
        assert_eq!(shown(&long).len(), 100 + 2 + 3);
    }
}
