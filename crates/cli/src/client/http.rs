//! The one HTTP client of `qm`: AWS Batch operations as `POST /v1/<operation>` (typed with the
//! `qm-api` wire types, or as plain JSON for the policy commands), plus the Quartermaster
//! endpoints under `/qm/v1` (usage, logs, the audit log).
//!
//! This is the only place that builds the HTTP agent and reads answers. Every failure becomes a
//! [`ClientError`]: the server's own message for an AWS-shaped API error, and a hint to start the
//! server when nothing listens at the endpoint.

use std::time::Duration;

use qm_api::{
    DescribeJobQueuesRequest, DescribeJobQueuesResponse, DescribeServiceJobRequest,
    DescribeServiceJobResponse, KeyValuesPair, ListServiceJobsRequest, ListServiceJobsResponse,
    ServiceJobStatus, ServiceJobSummary, SubmitServiceJobRequest, SubmitServiceJobResponse,
    TerminateServiceJobRequest, UpdateServiceJobRequest,
};
use serde::de::DeserializeOwned;

use super::format::JobRow;
use serde::{Deserialize, Serialize};

/// The endpoint used when neither `--endpoint` nor `QM_ENDPOINT` is given.
pub const DEFAULT_ENDPOINT: &str = "http://127.0.0.1:7611";

/// Page size asked of ListServiceJobs; the listing follows `nextToken` to the end.
const PAGE_SIZE: i32 = 100;

/// Upper bound on pages followed by one listing, so a server bug cannot loop us forever.
const MAX_PAGES: usize = 1_000;

/// Upper bound on a response body (a log chunk is the largest).
const MAX_BODY_BYTES: u64 = 64 * 1024 * 1024;

/// Every status a job can have, in the order `qm jobs` asks for them.
pub const ALL_STATUSES: [ServiceJobStatus; 8] = [
    ServiceJobStatus::Submitted,
    ServiceJobStatus::Pending,
    ServiceJobStatus::Runnable,
    ServiceJobStatus::Scheduled,
    ServiceJobStatus::Starting,
    ServiceJobStatus::Running,
    ServiceJobStatus::Succeeded,
    ServiceJobStatus::Failed,
];

/// Why a request to the server failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server answered with an AWS-shaped error.
    #[error("{message}")]
    Server {
        /// `__type`: `ClientException` or `ServerException`.
        kind: String,
        /// The server's message, which says what to fix.
        message: String,
    },
    /// Nothing listens at the endpoint.
    #[error(
        "cannot connect to the qm server at {endpoint}: start it with `qm serve` \
         (or point --endpoint / QM_ENDPOINT at a running one)"
    )]
    NotRunning {
        /// The endpoint tried.
        endpoint: String,
    },
    /// Any other transport failure.
    #[error("request to {url} failed: {detail}")]
    Transport {
        /// The URL requested.
        url: String,
        /// What went wrong.
        detail: String,
    },
    /// The server answered something this client does not understand.
    #[error("unexpected answer from {url}: {detail}")]
    Protocol {
        /// The URL requested.
        url: String,
        /// What was wrong with it.
        detail: String,
    },
    /// The user's request cannot be served (e.g. no queue to pick).
    #[error("{0}")]
    Usage(String),
}

pub use qm_api::qm::{QueueUsage, ShareUsage, Usage};

/// Which log of an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogStream {
    /// `stdout.log`.
    Stdout,
    /// `stderr.log`.
    Stderr,
}

impl LogStream {
    fn as_str(self) -> &'static str {
        match self {
            LogStream::Stdout => "stdout",
            LogStream::Stderr => "stderr",
        }
    }
}

/// A piece of an attempt's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogChunk {
    /// The attempt it belongs to.
    pub attempt: u32,
    /// The bytes from the requested offset.
    pub bytes: Vec<u8>,
    /// The offset to ask for next.
    pub next_offset: u64,
    /// Whether the attempt has ended (no more bytes will come).
    pub finished: bool,
}

/// A connection to one `qm serve`.
pub struct Client {
    endpoint: String,
    agent: ureq::Agent,
}

struct Answer {
    status: u16,
    headers: ureq::http::HeaderMap,
    body: Vec<u8>,
}

impl Client {
    /// A client of `endpoint` if given, else of `$QM_ENDPOINT` (when set and not empty), else
    /// of [`DEFAULT_ENDPOINT`]: the lookup every `qm` client command makes.
    pub fn for_endpoint(endpoint: Option<&str>) -> Client {
        let from_env = std::env::var("QM_ENDPOINT").ok().filter(|e| !e.is_empty());
        Client::new(endpoint.or(from_env.as_deref()).unwrap_or(DEFAULT_ENDPOINT))
    }

    /// A client for `endpoint` (e.g. `http://127.0.0.1:7611`); no request is made yet.
    pub fn new(endpoint: &str) -> Client {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(60)))
            .build()
            .into();
        Client {
            endpoint: endpoint.trim_end_matches('/').to_string(),
            agent,
        }
    }

    /// The endpoint this client talks to.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    fn transport_error(&self, url: &str, e: ureq::Error) -> ClientError {
        let refused = match &e {
            ureq::Error::Io(io) => matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::NotFound
            ),
            ureq::Error::ConnectionFailed | ureq::Error::HostNotFound => true,
            _ => false,
        };
        if refused {
            ClientError::NotRunning {
                endpoint: self.endpoint.clone(),
            }
        } else {
            ClientError::Transport {
                url: url.to_string(),
                detail: e.to_string(),
            }
        }
    }

    fn finish(
        &self,
        url: &str,
        result: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> Result<Answer, ClientError> {
        let mut response = result.map_err(|e| self.transport_error(url, e))?;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = response
            .body_mut()
            .with_config()
            .limit(MAX_BODY_BYTES)
            .read_to_vec()
            .map_err(|e| self.transport_error(url, e))?;
        let answer = Answer {
            status,
            headers,
            body,
        };
        if answer.status >= 400 {
            return Err(api_error(url, &answer));
        }
        Ok(answer)
    }

    /// Calls an AWS Batch operation: `POST /v1/<operation>` with `request` as JSON.
    pub fn call<Req: Serialize, Resp: DeserializeOwned>(
        &self,
        operation: &str,
        request: &Req,
    ) -> Result<Resp, ClientError> {
        self.post(&format!("/v1/{}", operation.to_ascii_lowercase()), request)
    }

    /// [`Client::call`] with untyped JSON, for callers that read answers field by field.
    pub fn call_json(
        &self,
        operation: &str,
        request: &serde_json::Value,
    ) -> Result<serde_json::Value, ClientError> {
        self.call(operation, request)
    }

    /// `GET` a Quartermaster endpoint (`/qm/v1/...`) and read its JSON answer.
    pub fn get_json(&self, path: &str) -> Result<serde_json::Value, ClientError> {
        let answer = self.get(path)?;
        decode(&self.url(path), &answer)
    }

    /// `POST` JSON to a Quartermaster endpoint (`/qm/v1/...`) and read its JSON answer.
    pub fn post_json(
        &self,
        path: &str,
        body: &serde_json::Value,
    ) -> Result<serde_json::Value, ClientError> {
        self.post(path, body)
    }

    fn url(&self, path_and_query: &str) -> String {
        format!("{}{}", self.endpoint, path_and_query)
    }

    fn post<Req: Serialize, Resp: DeserializeOwned>(
        &self,
        path: &str,
        request: &Req,
    ) -> Result<Resp, ClientError> {
        let url = self.url(path);
        let body = serde_json::to_vec(request).map_err(|e| ClientError::Protocol {
            url: url.clone(),
            detail: format!("cannot encode the request: {e}"),
        })?;
        let result = self
            .agent
            .post(&url)
            .header("content-type", "application/json")
            .send(&body[..]);
        let answer = self.finish(&url, result)?;
        decode(&url, &answer)
    }

    fn get(&self, path_and_query: &str) -> Result<Answer, ClientError> {
        let url = self.url(path_and_query);
        let result = self.agent.get(&url).call();
        self.finish(&url, result)
    }

    /// Submits a job.
    pub fn submit(
        &self,
        request: &SubmitServiceJobRequest,
    ) -> Result<SubmitServiceJobResponse, ClientError> {
        self.call("SubmitServiceJob", request)
    }

    /// Describes one job.
    pub fn describe(&self, job_id: &str) -> Result<DescribeServiceJobResponse, ClientError> {
        self.call(
            "DescribeServiceJob",
            &DescribeServiceJobRequest {
                job_id: job_id.to_string(),
            },
        )
    }

    /// Lists the jobs of `queue` with one of `statuses` (and of `share`, if given), following
    /// `nextToken` to the end; newest first (by creation time, then id).
    pub fn list_jobs(
        &self,
        queue: &str,
        share: Option<&str>,
        statuses: &[ServiceJobStatus],
    ) -> Result<Vec<ServiceJobSummary>, ClientError> {
        let mut jobs = Vec::new();
        for status in statuses {
            let mut next_token = None;
            for _ in 0..MAX_PAGES {
                let request = ListServiceJobsRequest {
                    job_queue: Some(queue.to_string()),
                    job_status: Some(*status),
                    max_results: Some(PAGE_SIZE),
                    next_token: next_token.take(),
                    filters: share.map(|s| {
                        vec![KeyValuesPair {
                            name: Some("QUOTA_SHARE_NAME".to_string()),
                            values: Some(vec![s.to_string()]),
                        }]
                    }),
                };
                let page: ListServiceJobsResponse = self.call("ListServiceJobs", &request)?;
                jobs.extend(page.job_summary_list);
                match page.next_token {
                    Some(token) if !token.is_empty() => next_token = Some(token),
                    _ => break,
                }
            }
        }
        jobs.sort_by(|a, b| {
            b.created_at
                .cmp(&a.created_at)
                .then_with(|| b.job_id.cmp(&a.job_id))
        });
        jobs.dedup_by(|a, b| a.job_id == b.job_id);
        Ok(jobs)
    }

    /// The table rows of the jobs [`Client::list_jobs`] finds. A qm server's listing carries
    /// each job's priority; from a server whose listing lacks it, each job is described for
    /// it (a job deleted in between is left out).
    pub fn job_rows(
        &self,
        queue: &str,
        share: Option<&str>,
        statuses: &[ServiceJobStatus],
    ) -> Result<Vec<JobRow>, ClientError> {
        let mut rows = Vec::new();
        for summary in self.list_jobs(queue, share, statuses)? {
            if let Some(row) = JobRow::from_summary(&summary) {
                rows.push(row);
                continue;
            }
            match self.describe(&summary.job_id) {
                Ok(job) => rows.push(JobRow::from_job(&job)),
                Err(ClientError::Server { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(rows)
    }

    /// Changes a job's scheduling priority.
    pub fn set_priority(&self, job_id: &str, priority: i32) -> Result<(), ClientError> {
        let request = UpdateServiceJobRequest {
            job_id: job_id.to_string(),
            scheduling_priority: priority,
        };
        let _: serde_json::Value = self.call("UpdateServiceJob", &request)?;
        Ok(())
    }

    /// Terminates a job.
    pub fn terminate(&self, job_id: &str, reason: &str) -> Result<(), ClientError> {
        let request = TerminateServiceJobRequest {
            job_id: job_id.to_string(),
            reason: reason.to_string(),
        };
        let _: serde_json::Value = self.call("TerminateServiceJob", &request)?;
        Ok(())
    }

    /// The names of every job queue.
    pub fn queue_names(&self) -> Result<Vec<String>, ClientError> {
        let mut names = Vec::new();
        let mut next_token = None;
        for _ in 0..MAX_PAGES {
            let request = DescribeJobQueuesRequest {
                job_queues: None,
                max_results: Some(PAGE_SIZE),
                next_token: next_token.take(),
            };
            let page: DescribeJobQueuesResponse = self.call("DescribeJobQueues", &request)?;
            names.extend(
                page.job_queues
                    .unwrap_or_default()
                    .into_iter()
                    .map(|q| q.job_queue_name),
            );
            match page.next_token {
                Some(token) if !token.is_empty() => next_token = Some(token),
                _ => break,
            }
        }
        names.sort();
        Ok(names)
    }

    /// The queue to use: `given`, or the only queue there is.
    pub fn resolve_queue(&self, given: Option<&str>) -> Result<String, ClientError> {
        if let Some(queue) = given {
            return Ok(queue.to_string());
        }
        let names = self.queue_names()?;
        match names.as_slice() {
            [only] => Ok(only.clone()),
            [] => Err(ClientError::Usage(
                "the server has no job queue yet: create one (CreateJobQueue, or `qm apply`)"
                    .to_string(),
            )),
            many => Err(ClientError::Usage(format!(
                "the server has {} job queues ({}): pick one with --queue",
                many.len(),
                many.join(", ")
            ))),
        }
    }

    /// Capacity per queue, share and instance type.
    pub fn usage(&self) -> Result<Usage, ClientError> {
        let path = "/qm/v1/usage";
        let answer = self.get(path)?;
        decode(&self.url(path), &answer)
    }

    /// A usage report (`GET /qm/v1/usage/report`) for `[since, until)` (epoch ms).
    pub fn usage_report(
        &self,
        since: i64,
        until: i64,
        by: qm_api::qm::UsageBy,
        every: Option<qm_api::qm::UsageEvery>,
    ) -> Result<qm_api::qm::UsageReport, ClientError> {
        let mut path = format!(
            "/qm/v1/usage/report?since={since}&until={until}&by={}",
            by.as_str()
        );
        if let Some(e) = every {
            path.push_str(&format!("&every={}", e.as_str()));
        }
        let answer = self.get(&path)?;
        decode(&self.url(&path), &answer)
    }

    /// The log of an attempt (`None`: the latest) from byte `offset`.
    pub fn logs(
        &self,
        job_id: &str,
        attempt: Option<u32>,
        stream: LogStream,
        offset: u64,
    ) -> Result<LogChunk, ClientError> {
        let mut query = format!("stream={}&offset={offset}", stream.as_str());
        if let Some(n) = attempt {
            query.push_str(&format!("&attempt={n}"));
        }
        let path = format!("/qm/v1/jobs/{}/logs?{query}", encode_path_segment(job_id));
        let answer = self.get(&path)?;
        let header = |name: &str| {
            answer
                .headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::trim)
                .map(String::from)
        };
        let protocol = |detail: String| ClientError::Protocol {
            url: self.url(&path),
            detail,
        };
        let attempt = header("x-qm-attempt")
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| protocol("missing or invalid x-qm-attempt header".to_string()))?;
        let next_offset = match header("x-qm-next-offset") {
            Some(v) => v
                .parse()
                .map_err(|_| protocol(format!("invalid x-qm-next-offset header {v:?}")))?,
            None => offset + answer.body.len() as u64,
        };
        let finished = header("x-qm-finished").is_some_and(|v| v.eq_ignore_ascii_case("true"));
        Ok(LogChunk {
            attempt,
            bytes: answer.body,
            next_offset,
            finished,
        })
    }
}

/// A successful answer's JSON body; an empty body reads as `{}` (some operations answer
/// nothing).
fn decode<Resp: DeserializeOwned>(url: &str, answer: &Answer) -> Result<Resp, ClientError> {
    let body = if answer.body.is_empty() {
        &b"{}"[..]
    } else {
        &answer.body[..]
    };
    serde_json::from_slice(body).map_err(|e| ClientError::Protocol {
        url: url.to_string(),
        detail: format!("invalid JSON: {e}"),
    })
}

/// Percent-encodes everything but unreserved characters (job ids are UUIDs, but a user may
/// type anything).
fn encode_path_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The AWS error shape `{"__type", "message"}`, or the raw body when it is not that.
fn api_error(url: &str, answer: &Answer) -> ClientError {
    #[derive(Deserialize)]
    struct Shape {
        #[serde(rename = "__type", default)]
        kind: String,
        #[serde(default, alias = "Message")]
        message: String,
    }
    match serde_json::from_slice::<Shape>(&answer.body) {
        Ok(shape) if !shape.message.is_empty() => ClientError::Server {
            kind: shape.kind,
            message: shape.message,
        },
        _ => {
            let text = String::from_utf8_lossy(&answer.body);
            let text = text.trim();
            ClientError::Protocol {
                url: url.to_string(),
                detail: if text.is_empty() {
                    format!("HTTP {}", answer.status)
                } else {
                    format!("HTTP {}: {text}", answer.status)
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_id_is_encoded_for_the_path() {
        assert_eq!(encode_path_segment("ab-12"), "ab-12");
        assert_eq!(encode_path_segment("a/b c"), "a%2Fb%20c");
    }
}
