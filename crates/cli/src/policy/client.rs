//! The server's HTTP API as the policy commands use it: `POST /v1/<operation>` with a JSON body
//! (AWS Batch REST-JSON) and the audit log under `/qm/v1/audit`. Every answer that is not a
//! success is mapped to an [`Error`] here and nowhere else.

use std::time::Duration;

use serde_json::Value;

use super::Error;

/// The default server when neither `--endpoint` nor `QM_ENDPOINT` is given.
pub const DEFAULT_ENDPOINT: &str = "http://127.0.0.1:7611";

/// Longest a single request may take (connect, send and read).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Largest answer read (a page of 100 jobs is far below it).
const MAX_BODY_BYTES: u64 = 16 * 1024 * 1024;

/// A connection to one server.
pub struct Client {
    endpoint: String,
    agent: ureq::Agent,
}

impl Client {
    /// A client for `endpoint` (`http://host:port`, a trailing `/` is ignored).
    pub fn new(endpoint: &str) -> Client {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(REQUEST_TIMEOUT))
            .build()
            .into();
        Client {
            endpoint: endpoint.trim_end_matches('/').to_string(),
            agent,
        }
    }

    /// The base URL.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Calls an AWS Batch operation (`operation` in lower case, as in the URL).
    pub fn call(&self, operation: &str, body: &Value) -> Result<Value, Error> {
        let url = format!("{}/v1/{operation}", self.endpoint);
        let sent = self
            .agent
            .post(&url)
            .header("content-type", "application/json")
            .send(body.to_string());
        self.answer(operation, sent)
    }

    /// Appends an entry to the server's audit log.
    pub fn post_audit(&self, entry: &Value) -> Result<(), Error> {
        let url = format!("{}/qm/v1/audit", self.endpoint);
        let sent = self
            .agent
            .post(&url)
            .header("content-type", "application/json")
            .send(entry.to_string());
        self.answer("audit", sent).map(|_| ())
    }

    /// Reads the server's audit log.
    pub fn get_audit(&self) -> Result<Value, Error> {
        let url = format!("{}/qm/v1/audit", self.endpoint);
        let sent = self.agent.get(&url).call();
        self.answer("audit", sent)
    }

    fn answer(
        &self,
        operation: &str,
        sent: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> Result<Value, Error> {
        let transport = |message: String| Error::Transport {
            endpoint: self.endpoint.clone(),
            message,
        };
        let mut response = sent.map_err(|e| {
            transport(format!(
                "cannot reach the server ({e}); start it with `qm serve` or pass --endpoint"
            ))
        })?;
        let status = response.status().as_u16();
        let text = response
            .body_mut()
            .with_config()
            .limit(MAX_BODY_BYTES)
            .read_to_string()
            .map_err(|e| transport(format!("reading the answer to {operation}: {e}")))?;
        let value: Option<Value> = serde_json::from_str(&text).ok();
        if (200..300).contains(&status) {
            return match value {
                Some(v) => Ok(v),
                None if text.trim().is_empty() => Ok(Value::Object(Default::default())),
                None => Err(Error::Shape {
                    operation: operation.into(),
                    message: format!("HTTP {status} with a body that is not JSON"),
                }),
            };
        }
        let field = |k: &str| {
            value
                .as_ref()
                .and_then(|v| v.get(k))
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        match field("message") {
            Some(message) => Err(Error::Api {
                operation: operation.into(),
                kind: field("__type").unwrap_or_else(|| format!("HTTP {status}")),
                message,
            }),
            None if status == 404 => Err(transport(format!(
                "{operation}: HTTP 404; is this a Quartermaster server recent enough for it?"
            ))),
            None => Err(transport(format!(
                "{operation}: HTTP {status}: {}",
                text.chars().take(200).collect::<String>()
            ))),
        }
    }
}
