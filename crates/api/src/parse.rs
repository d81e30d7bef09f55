//! Turning a request body into a wire type. botocore sends every member it was given and
//! nothing else, so a body that does not fit the shape is a client mistake; the message names
//! the member by its wire path (`capacityLimits[0].maxCapacity`) so the caller can find it.

use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// Parses a request body into `T`. An empty body counts as `{}` (operations without required
/// members may be sent bare); unknown members are ignored.
pub fn parse_request<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let body: &[u8] = if body.iter().all(u8::is_ascii_whitespace) {
        b"{}"
    } else {
        body
    };
    // serde would also read a struct from a JSON array, by position; botocore never sends one.
    if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(ApiError::client(
            "invalid request body: it is not a JSON object; send the request members as one \
             JSON object"
                .to_string(),
        ));
    }
    let mut de = serde_json::Deserializer::from_slice(body);
    let value: T = serde_path_to_error::deserialize(&mut de).map_err(|err| {
        let path = err.path().to_string();
        describe(&path, err.inner())
    })?;
    de.end().map_err(|err| {
        ApiError::client(format!(
            "invalid request body: {}; send one JSON object",
            without_position(&err)
        ))
    })?;
    Ok(value)
}

/// Words a serde error for the caller: which member, what is wrong, what to do.
fn describe(path: &str, err: &serde_json::Error) -> ApiError {
    let message = without_position(err);
    let top_level = path == "." || path.is_empty();
    if err.is_syntax() || err.is_eof() {
        return ApiError::client(format!(
            "invalid request body: it is not valid JSON ({message}); send one JSON object"
        ));
    }
    if let Some(member) = missing_member(&message) {
        let field = if top_level {
            member.to_string()
        } else {
            format!("{path}.{member}")
        };
        return ApiError::client(format!(
            "invalid request: {field} is required but missing; add it and retry"
        ));
    }
    if top_level {
        return ApiError::client(format!(
            "invalid request body: {message}; send one JSON object"
        ));
    }
    ApiError::client(format!(
        "invalid request: {path}: {message}; fix that field and retry"
    ))
}

/// The member named by serde's "missing field `x`".
fn missing_member(message: &str) -> Option<&str> {
    message
        .strip_prefix("missing field `")
        .and_then(|rest| rest.strip_suffix('`'))
}

/// serde_json appends " at line L column C"; the wire path says more, so drop it.
fn without_position(err: &serde_json::Error) -> String {
    let text = err.to_string();
    match text.rfind(" at line ") {
        Some(cut) if err.line() > 0 => text[..cut].to_string(),
        _ => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::*;

    #[test]
    fn an_empty_body_counts_as_an_empty_object() {
        let req: ListSchedulingPoliciesRequest = parse_request(b"").unwrap();
        assert_eq!(req, ListSchedulingPoliciesRequest::default());
        let req: DescribeJobQueuesRequest = parse_request(b"  \n").unwrap();
        assert_eq!(req, DescribeJobQueuesRequest::default());
    }

    #[test]
    fn a_wrongly_typed_nested_member_is_named_by_its_wire_path() {
        let body = br#"{"quotaShareName":"qs","jobQueue":"jq",
            "capacityLimits":[{"capacityUnit":"ml.g5.xlarge","maxCapacity":"x"}],
            "resourceSharingConfiguration":{"strategy":"LEND"},
            "preemptionConfiguration":{"inSharePreemption":"DISABLED"}}"#;
        let err = parse_request::<CreateQuotaShareRequest>(body).unwrap_err();
        assert_eq!(
            err.message(),
            "invalid request: capacityLimits[0].maxCapacity: invalid type: string \"x\", \
             expected i32; fix that field and retry"
        );
    }

    #[test]
    fn a_missing_required_member_is_named() {
        let err = parse_request::<SubmitServiceJobRequest>(br#"{"jobName":"j"}"#).unwrap_err();
        assert!(
            err.message()
                .starts_with("invalid request: jobQueue is required"),
            "{err}"
        );
    }

    #[test]
    fn a_missing_nested_required_member_is_named_with_its_parent() {
        let body = br#"{"quotaShareName":"qs","jobQueue":"jq",
            "capacityLimits":[{"capacityUnit":"ml.g5.xlarge","maxCapacity":1}],
            "resourceSharingConfiguration":{"strategy":"LEND"},
            "preemptionConfiguration":{}}"#;
        let err = parse_request::<CreateQuotaShareRequest>(body).unwrap_err();
        assert_eq!(
            err.message(),
            "invalid request: preemptionConfiguration.inSharePreemption is required but \
             missing; add it and retry"
        );
    }

    #[test]
    fn an_unknown_enum_value_lists_the_known_ones() {
        let body = br#"{"quotaShareArn":"a","state":"PAUSED"}"#;
        let err = parse_request::<UpdateQuotaShareRequest>(body).unwrap_err();
        assert!(
            err.message().contains("state: unknown variant `PAUSED`"),
            "{err}"
        );
        assert!(
            err.message().contains("expected `ENABLED` or `DISABLED`"),
            "{err}"
        );
    }

    #[test]
    fn invalid_json_is_refused_as_a_body_error() {
        let err = parse_request::<DescribeServiceJobRequest>(b"{\"jobId\":").unwrap_err();
        assert!(
            err.message()
                .starts_with("invalid request body: it is not valid JSON"),
            "{err}"
        );
        let err = parse_request::<DescribeServiceJobRequest>(b"[1]").unwrap_err();
        assert!(err
            .message()
            .starts_with("invalid request body: it is not a JSON object"));
        let err = parse_request::<DescribeServiceJobRequest>(br#"{"jobId":"a"} x"#).unwrap_err();
        assert!(err.message().starts_with("invalid request body"), "{err}");
    }

    #[test]
    fn unknown_members_from_newer_clients_are_ignored() {
        let req: DescribeServiceJobRequest =
            parse_request(br#"{"jobId":"a","someFutureMember":{"x":1}}"#).unwrap();
        assert_eq!(req.job_id, "a");
    }
}
