//! The shapes every HTTP answer takes, for the router and for the layers in front of it (the
//! connection limits, the authentication guard): an AWS error body with its headers, a JSON
//! answer with AWS's request id, the bound on a body. It imports nothing of the server, so
//! those layers need not import the router.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use qm_api::ApiError;

/// Largest request body accepted (a training payload with 100 hyperparameters of 2,500
/// characters fits many times over).
pub const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

fn request_id() -> HeaderValue {
    HeaderValue::from_str(&uuid::Uuid::new_v4().to_string()).expect("uuid is a valid header")
}

/// The AWS error shape.
pub fn error_response(e: &ApiError) -> Response {
    let status = StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::BAD_REQUEST);
    let body = serde_json::json!({"__type": e.error_type(), "message": e.message()}).to_string();
    let mut r = (status, body).into_response();
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert("x-amzn-ErrorType", HeaderValue::from_static(e.error_type()));
    h.insert("x-amzn-RequestId", request_id());
    r
}

/// A JSON answer (an encoded body: an empty answer is `{}`, `reply::Reply::Empty`), with AWS's
/// request id.
pub fn ok_response(body: Vec<u8>) -> Response {
    let mut r = (StatusCode::OK, body).into_response();
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert("x-amzn-RequestId", request_id());
    r
}
