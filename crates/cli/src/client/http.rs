//! The one HTTP client of `qm`: AWS Batch operations as `POST /v1/<operation>` (typed with the
//! `qm-api` wire types, or as plain JSON for the policy commands), tags under `/v1/tags/<arn>`,
//! plus the Quartermaster endpoints under `/qm/v1` (usage, logs, the audit log, principals,
//! whoami, admins, the what-if).
//!
//! This is the only place that builds the HTTP agent and reads answers. Every request is signed
//! with AWS SigV4 (service `batch`), as boto3 signs it, when the credentials chain
//! ([`super::credentials`]) finds a key; without one it goes unsigned, for a server run with
//! `--no-auth`. Every failure becomes a [`ClientError`]: the server's own message for an
//! AWS-shaped API error, which credentials a refused signature came from, how to point `qm` at
//! credentials when the server wants some and there are none, and a hint to start the server
//! when nothing listens at the endpoint.

use std::time::{Duration, SystemTime};

use qm_api::{
    DescribeJobQueuesRequest, DescribeJobQueuesResponse, DescribeServiceEnvironmentsRequest,
    DescribeServiceEnvironmentsResponse, DescribeServiceJobRequest, DescribeServiceJobResponse,
    KeyValuesPair, ListServiceJobsRequest, ListServiceJobsResponse, ServiceJobStatus,
    ServiceJobSummary, SubmitServiceJobRequest, SubmitServiceJobResponse, TagResourceResponse,
    TerminateServiceJobRequest, UntagResourceResponse, UpdateServiceJobRequest,
};
use serde::de::DeserializeOwned;

use super::credentials::{self, CredentialsError, Signing};
use super::format::JobRow;
use serde::{Deserialize, Serialize};

/// The HTTP agent: answers of every status are read (not errors), one minute per request,
/// and the CA roots of `tls` when given.
fn agent(tls: Option<ureq::tls::TlsConfig>) -> ureq::Agent {
    let builder = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(60)));
    match tls {
        Some(tls) => builder.tls_config(tls).build().into(),
        None => builder.build().into(),
    }
}

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
    /// The credentials the user chose cannot be used.
    #[error(transparent)]
    Credentials(#[from] CredentialsError),
    /// The server wants signed requests and the credentials chain found no key.
    #[error(
        "the server at {endpoint} accepts only signed requests, and qm found no credentials; \
         point it at the server's admin key (`qm serve` prints the line when it starts):\n    \
         export AWS_SHARED_CREDENTIALS_FILE=<data-dir>/credentials\n    \
         export AWS_PROFILE=qm-admin\n\
         (<data-dir> is the server's --data-dir), or set AWS_ACCESS_KEY_ID and \
         AWS_SECRET_ACCESS_KEY"
    )]
    NoCredentials {
        /// The endpoint asked.
        endpoint: String,
    },
    /// The server did not accept the signature: unknown key, wrong secret, clock skew, wrong
    /// region.
    #[error("authentication failed ({kind}): {message} (signed with {signed_with})")]
    Unauthenticated {
        /// `__type`: `InvalidSignatureException`, `UnrecognizedClientException`, ...
        kind: String,
        /// The server's message.
        message: String,
        /// The key and where it came from (or that there was none).
        signed_with: String,
    },
    /// The server knows who asks, and does not allow it.
    #[error("access denied: {message}")]
    AccessDenied {
        /// The server's message: principal, action, resource.
        message: String,
    },
}

/// The `__type`s of a 403 that say the request's identity was not established (as opposed to
/// `AccessDeniedException`: established, and not allowed).
const AUTHENTICATION_ERRORS: [&str; 4] = [
    "MissingAuthenticationTokenException",
    "IncompleteSignatureException",
    "UnrecognizedClientException",
    "InvalidSignatureException",
];

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
    /// The key requests are signed with; `None`: unsigned.
    signing: Option<Signing>,
    /// The region signed for, and named in profiles written for new keys.
    region: String,
}

pub(super) struct Answer {
    status: u16,
    pub(super) headers: ureq::http::HeaderMap,
    pub(super) body: Vec<u8>,
}

impl Client {
    /// A client of `endpoint` if given, else of `$QM_ENDPOINT` (when set and not empty), else
    /// of [`DEFAULT_ENDPOINT`], signing with the key the credentials chain finds in the process
    /// environment: the lookup every `qm` client command makes.
    pub fn for_endpoint(endpoint: Option<&str>) -> Result<Client, ClientError> {
        let env = credentials::process_env;
        let from_env = env("QM_ENDPOINT").filter(|e| !e.is_empty());
        let mut client = Client::new(endpoint.or(from_env.as_deref()).unwrap_or(DEFAULT_ENDPOINT));
        if let Some(bundle) = env("AWS_CA_BUNDLE").filter(|b| !b.is_empty()) {
            client = client.trusting(std::path::Path::new(&bundle))?;
        }
        Ok(match credentials::resolve(&env)? {
            Some(signing) => client.signed(signing),
            None => client.in_region(credentials::region(&env, None)),
        })
    }

    /// An unsigned client for `endpoint` (e.g. `http://127.0.0.1:7611`); no request is made
    /// yet.
    pub fn new(endpoint: &str) -> Client {
        Client {
            endpoint: endpoint.trim_end_matches('/').to_string(),
            agent: agent(None),
            signing: None,
            region: credentials::DEFAULT_REGION.to_string(),
        }
    }

    /// This client, trusting only the CA certificates of the PEM file `bundle` for HTTPS
    /// (`AWS_CA_BUNDLE`, as the AWS CLI and the SDKs read it): a server with a private CA.
    pub fn trusting(mut self, bundle: &std::path::Path) -> Result<Client, ClientError> {
        let bad = |detail: String| {
            ClientError::Usage(format!(
                "AWS_CA_BUNDLE={}: {detail}; point it at a PEM file of the CA that signed the server's certificate",
                bundle.display()
            ))
        };
        let pem = std::fs::read(bundle).map_err(|e| bad(format!("cannot read it ({e})")))?;
        let certs: Vec<ureq::tls::Certificate<'static>> = ureq::tls::parse_pem(&pem)
            .filter_map(|item| match item {
                Ok(ureq::tls::PemItem::Certificate(c)) => Some(c),
                _ => None,
            })
            .collect();
        if certs.is_empty() {
            return Err(bad("it holds no PEM certificate".into()));
        }
        let tls = ureq::tls::TlsConfig::builder()
            .root_certs(ureq::tls::RootCerts::new_with_certs(&certs))
            .build();
        self.agent = agent(Some(tls));
        Ok(self)
    }

    /// This client, signing every request with `signing`'s key for its region.
    pub fn signed(mut self, signing: Signing) -> Client {
        self.region = signing.region.clone();
        self.signing = Some(signing);
        self
    }

    /// This client, unsigned, taking `region` as the server's.
    pub fn in_region(mut self, region: String) -> Client {
        self.region = region;
        self
    }

    /// The endpoint this client talks to.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The key requests are signed with, if any.
    pub fn signing(&self) -> Option<&Signing> {
        self.signing.as_ref()
    }

    /// The region requests are signed for (the server's, when they are accepted).
    pub fn region(&self) -> &str {
        &self.region
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
        limit: u64,
    ) -> Result<Answer, ClientError> {
        let mut response = result.map_err(|e| self.transport_error(url, e))?;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = response
            .body_mut()
            .with_config()
            .limit(limit)
            .read_to_vec()
            .map_err(|e| self.transport_error(url, e))?;
        let answer = Answer {
            status,
            headers,
            body,
        };
        if answer.status >= 400 {
            return Err(self.api_error(url, &answer));
        }
        Ok(answer)
    }

    /// Sends one request, signed when there is a key: `host`, and `content-type` with a body,
    /// are signed, over the body bytes exactly as sent. The `host` header is set here, not by
    /// the agent, so that the value signed is the value sent.
    fn send(&self, method: &str, url: &str, body: Option<&[u8]>) -> Result<Answer, ClientError> {
        self.send_limited(method, url, body, MAX_BODY_BYTES)
    }

    /// `GET` an answer that may be larger than [`MAX_BODY_BYTES`] (a workload export: about
    /// 120 bytes a job), up to `limit` bytes.
    pub(super) fn get_large(&self, path: &str, limit: u64) -> Result<Answer, ClientError> {
        self.send_limited("GET", &self.url(path), None, limit)
    }

    fn send_limited(
        &self,
        method: &str,
        url: &str,
        body: Option<&[u8]>,
        limit: u64,
    ) -> Result<Answer, ClientError> {
        let protocol = |detail: String| ClientError::Protocol {
            url: url.to_string(),
            detail,
        };
        let host = host_of(url).ok_or_else(|| protocol("the URL has no host".to_string()))?;
        let mut headers = vec![("host", host.as_str())];
        if body.is_some() {
            headers.push(("content-type", "application/json"));
        }
        let bytes = body.unwrap_or_default();
        let mut signature = Vec::new();
        if let Some(signing) = &self.signing {
            signature = qm_api::sigv4::sign(
                method,
                url,
                &headers,
                bytes,
                &signing.credentials,
                &signing.region,
                SystemTime::now(),
            )
            .map_err(|e| protocol(format!("cannot sign the request: {e}")))?;
        }
        let mut request = ureq::http::Request::builder().method(method).uri(url);
        for (name, value) in headers.iter().copied() {
            request = request.header(name, value);
        }
        for (name, value) in &signature {
            request = request.header(name.as_str(), value.as_str());
        }
        if body.is_none() && method != "GET" {
            // The server reads a DELETE without Content-Length as a body of unknown type.
            request = request.header("content-length", "0");
        }
        let result = match body {
            Some(bytes) => request
                .body(bytes)
                .map(|r| self.agent.run(r))
                .map_err(|e| protocol(format!("cannot build the request: {e}")))?,
            None => request
                .body(())
                .map(|r| self.agent.run(r))
                .map_err(|e| protocol(format!("cannot build the request: {e}")))?,
        };
        self.finish(url, result, limit)
    }

    /// The AWS error shape `{"__type", "message"}`, or the raw body when it is not that. A
    /// 403 is told apart: no credentials, credentials refused (naming where they came from),
    /// or not allowed.
    fn api_error(&self, url: &str, answer: &Answer) -> ClientError {
        #[derive(Deserialize)]
        struct Shape {
            #[serde(rename = "__type", default)]
            kind: String,
            #[serde(default, alias = "Message")]
            message: String,
        }
        let shape = match serde_json::from_slice::<Shape>(&answer.body) {
            Ok(shape) if !shape.message.is_empty() || !shape.kind.is_empty() => shape,
            _ => {
                let text = String::from_utf8_lossy(&answer.body);
                let text = text.trim();
                return ClientError::Protocol {
                    url: url.to_string(),
                    detail: if text.is_empty() {
                        format!("HTTP {}", answer.status)
                    } else {
                        format!("HTTP {}: {text}", answer.status)
                    },
                };
            }
        };
        // `x-amzn-ErrorType` may carry `Code:namespace`; the body's `__type` may too.
        let kind = shape.kind.split(':').next().unwrap_or_default().to_string();
        let message = if shape.message.is_empty() {
            kind.clone()
        } else {
            shape.message
        };
        if answer.status != 403 {
            return ClientError::Server { kind, message };
        }
        if !AUTHENTICATION_ERRORS.contains(&kind.as_str()) {
            return ClientError::AccessDenied { message };
        }
        match &self.signing {
            None if kind == "MissingAuthenticationTokenException" => ClientError::NoCredentials {
                endpoint: self.endpoint.clone(),
            },
            None => ClientError::Unauthenticated {
                kind,
                message,
                signed_with: "no key: qm found no credentials".to_string(),
            },
            Some(signing) => ClientError::Unauthenticated {
                kind,
                message,
                signed_with: format!(
                    "{} from {}, region {}",
                    signing.credentials.access_key_id, signing.source, signing.region
                ),
            },
        }
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
        self.get_typed(path)
    }

    /// `GET` a Quartermaster endpoint and read its JSON answer as `Resp`.
    pub(super) fn get_typed<Resp: DeserializeOwned>(
        &self,
        path: &str,
    ) -> Result<Resp, ClientError> {
        let answer = self.get(path)?;
        decode(&self.url(path), &answer)
    }

    /// `DELETE` a Quartermaster resource and read its JSON answer as `Resp`.
    pub(super) fn delete_typed<Resp: DeserializeOwned>(
        &self,
        path: &str,
    ) -> Result<Resp, ClientError> {
        let url = self.url(path);
        let answer = self.send("DELETE", &url, None)?;
        decode(&url, &answer)
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

    /// `POST` `request` as JSON to `path` and read the JSON answer as `Resp`.
    pub(super) fn post<Req: Serialize, Resp: DeserializeOwned>(
        &self,
        path: &str,
        request: &Req,
    ) -> Result<Resp, ClientError> {
        self.send_json("POST", path, request)
    }

    /// `PUT` `request` as JSON to `path` and read the JSON answer as `Resp`.
    pub(super) fn put<Req: Serialize, Resp: DeserializeOwned>(
        &self,
        path: &str,
        request: &Req,
    ) -> Result<Resp, ClientError> {
        self.send_json("PUT", path, request)
    }

    fn send_json<Req: Serialize, Resp: DeserializeOwned>(
        &self,
        method: &str,
        path: &str,
        request: &Req,
    ) -> Result<Resp, ClientError> {
        let url = self.url(path);
        let body = serde_json::to_vec(request).map_err(|e| ClientError::Protocol {
            url: url.clone(),
            detail: format!("cannot encode the request: {e}"),
        })?;
        let answer = self.send(method, &url, Some(&body))?;
        decode(&url, &answer)
    }

    fn get(&self, path_and_query: &str) -> Result<Answer, ClientError> {
        let url = self.url(path_and_query);
        self.send("GET", &url, None)
    }

    /// Submits a job.
    pub fn submit(
        &self,
        request: &SubmitServiceJobRequest,
    ) -> Result<SubmitServiceJobResponse, ClientError> {
        self.call("SubmitServiceJob", request)
    }

    /// A drill (`POST /qm/v1/jobs/{job}/preempt`): the running job is stopped as a reclaim
    /// would stop it, and goes back to the queue.
    pub fn preempt(
        &self,
        job_id: &str,
        reason: Option<&str>,
    ) -> Result<qm_api::qm::PreemptResponse, ClientError> {
        let path = format!("/qm/v1/jobs/{}/preempt", encode_path_segment(job_id));
        let request = qm_api::qm::PreemptRequest {
            reason: reason.map(str::to_string),
        };
        self.post(&path, &request)
    }

    /// Drains the executor, or ends the drain (`POST /qm/v1/drain`, admins).
    pub fn drain(
        &self,
        request: &qm_api::qm::DrainRequest,
    ) -> Result<qm_api::qm::DrainStatus, ClientError> {
        self.post("/qm/v1/drain", request)
    }

    /// Makes the server read its config file again (`POST /qm/v1/reload`, admins).
    pub fn reload(&self) -> Result<qm_api::qm::ReloadResponse, ClientError> {
        self.post("/qm/v1/reload", &serde_json::json!({}))
    }

    /// Whether the executor is drained (`GET /qm/v1/drain`).
    pub fn drain_status(&self) -> Result<qm_api::qm::DrainStatus, ClientError> {
        self.get_typed("/qm/v1/drain")
    }

    /// The attempt holding the job's capacity now and how the attempts after its preemptions
    /// resumed (`GET /qm/v1/jobs/{job}/attempt`); empty from a server older than that
    /// endpoint.
    pub fn attempt_now(&self, job_id: &str) -> Result<qm_api::qm::JobAttemptNow, ClientError> {
        let path = format!("/qm/v1/jobs/{}/attempt", encode_path_segment(job_id));
        match self.get_typed::<qm_api::qm::JobAttemptNow>(&path) {
            Ok(now) => Ok(now),
            // A server older than the endpoint routes it nowhere.
            Err(ClientError::Server { message, .. }) if message.starts_with("no operation at") => {
                Ok(qm_api::qm::JobAttemptNow::default())
            }
            Err(e) => Err(e),
        }
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

    /// The id of the job `id_or_name` names: a job id as it is, else the one job of that name
    /// in any queue. No such job, or several, is a usage error that says which exist.
    pub fn resolve_job(&self, id_or_name: &str) -> Result<String, ClientError> {
        if looks_like_job_id(id_or_name) {
            return Ok(id_or_name.to_string());
        }
        let mut found: Vec<(String, ServiceJobSummary)> = Vec::new();
        for queue in self.queue_names()? {
            let request = ListServiceJobsRequest {
                job_queue: Some(queue.clone()),
                job_status: None,
                max_results: Some(PAGE_SIZE),
                next_token: None,
                filters: Some(vec![KeyValuesPair {
                    name: Some("JOB_NAME".to_string()),
                    values: Some(vec![id_or_name.to_string()]),
                }]),
            };
            let page: ListServiceJobsResponse = self.call("ListServiceJobs", &request)?;
            found.extend(
                page.job_summary_list
                    .into_iter()
                    .map(|j| (queue.clone(), j)),
            );
        }
        match found.as_slice() {
            [(_, only)] => Ok(only.job_id.clone()),
            [] => Err(ClientError::Usage(format!(
                "no job is named '{id_or_name}' (and it is not a job id): `qm jobs` lists the jobs"
            ))),
            many => {
                let lines: Vec<String> = many
                    .iter()
                    .map(|(queue, j)| {
                        let at = j
                            .created_at
                            .map_or_else(String::new, crate::client::time::utc);
                        format!("  {}  queue {queue}  submitted {at}", j.job_id)
                    })
                    .collect();
                Err(ClientError::Usage(format!(
                    "{} jobs are named '{id_or_name}': name one by its id\n{}",
                    many.len(),
                    lines.join("\n")
                )))
            }
        }
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

    /// TagResource: adds `tags` to the resource `arn`, replacing the values of keys it has
    /// (`POST /v1/tags/{resourceArn}` with `{"tags": {...}}`, the ARN percent-encoded as
    /// botocore sends it).
    pub fn tag_resource(
        &self,
        arn: &str,
        tags: &std::collections::BTreeMap<String, String>,
    ) -> Result<(), ClientError> {
        let path = format!("/v1/tags/{}", encode_path_segment(arn));
        let _: TagResourceResponse = self.post(&path, &serde_json::json!({ "tags": tags }))?;
        Ok(())
    }

    /// UntagResource: removes the tags `keys` from the resource `arn`
    /// (`DELETE /v1/tags/{resourceArn}?tagKeys=k1&tagKeys=k2`).
    pub fn untag_resource(&self, arn: &str, keys: &[String]) -> Result<(), ClientError> {
        let query: Vec<String> = keys
            .iter()
            .map(|k| format!("tagKeys={}", encode_path_segment(k)))
            .collect();
        let path = format!("/v1/tags/{}?{}", encode_path_segment(arn), query.join("&"));
        let _: UntagResourceResponse = self.delete_typed(&path)?;
        Ok(())
    }

    /// What the queue's service environments allow per instance type (the largest
    /// `maxCapacity` among them, since a job runs within one environment).
    pub fn environment_limits(
        &self,
        queue: &str,
    ) -> Result<std::collections::BTreeMap<String, u32>, ClientError> {
        let request = DescribeJobQueuesRequest {
            job_queues: Some(vec![queue.to_string()]),
            max_results: None,
            next_token: None,
        };
        let page: DescribeJobQueuesResponse = self.call("DescribeJobQueues", &request)?;
        let environments: Vec<String> = page
            .job_queues
            .unwrap_or_default()
            .into_iter()
            .flat_map(|q| q.service_environment_order.unwrap_or_default())
            .map(|o| o.service_environment)
            .collect();
        let mut limits = std::collections::BTreeMap::new();
        if environments.is_empty() {
            return Ok(limits);
        }
        let request = DescribeServiceEnvironmentsRequest {
            service_environments: Some(environments),
            max_results: None,
            next_token: None,
        };
        let page: DescribeServiceEnvironmentsResponse =
            self.call("DescribeServiceEnvironments", &request)?;
        for limit in page
            .service_environments
            .unwrap_or_default()
            .into_iter()
            .flat_map(|e| e.capacity_limits)
        {
            if let (Some(unit), Some(max)) = (limit.capacity_unit, limit.max_capacity) {
                let max = u32::try_from(max).unwrap_or(0);
                let entry = limits.entry(unit).or_insert(0);
                *entry = (*entry).max(max);
            }
        }
        Ok(limits)
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

    /// A job queue's group definitions (`GET /qm/v1/queues/{queue}/groups`).
    pub fn queue_groups(&self, queue: &str) -> Result<qm_api::qm::QueueGroups, ClientError> {
        self.get_typed(&groups_path(queue))
    }

    /// Replaces a job queue's group definitions (admins only); the answer is the list as the
    /// server keeps it.
    pub fn set_queue_groups(
        &self,
        queue: &str,
        groups: &qm_api::qm::QueueGroups,
    ) -> Result<qm_api::qm::QueueGroups, ClientError> {
        self.put(&groups_path(queue), groups)
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

    /// The policy review of `[since, until)`, of one share's jobs or all
    /// (`GET /qm/v1/review`).
    pub fn review(
        &self,
        since: i64,
        until: i64,
        share: Option<&str>,
    ) -> Result<qm_api::review::ReviewReport, ClientError> {
        let mut path = format!("/qm/v1/review?since={since}&until={until}");
        if let Some(s) = share {
            path.push_str(&format!("&share={}", encode_path_segment(s)));
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

/// The `host` header for `url`: its authority without any `user@`, as the agent would send it.
fn host_of(url: &str) -> Option<String> {
    let uri: ureq::http::Uri = url.parse().ok()?;
    let authority = uri.authority()?.as_str();
    let host = authority.rsplit('@').next().unwrap_or(authority);
    (!host.is_empty()).then(|| host.to_string())
}

/// The path of a job queue's groups.
fn groups_path(queue: &str) -> String {
    format!("/qm/v1/queues/{}/groups", encode_path_segment(queue))
}

/// Percent-encodes everything but unreserved characters (job ids are UUIDs, but a user may
/// type anything).
pub(super) fn encode_path_segment(s: &str) -> String {
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

/// Whether `s` reads as a job id (a UUID), not a name. Names can hold letters, digits, `-` and
/// `_`, so only the exact 8-4-4-4-12 hex shape counts as an id.
pub fn looks_like_job_id(s: &str) -> bool {
    let parts: Vec<&str> = s.split('-').collect();
    parts.len() == 5
        && parts
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(p, n)| p.len() == n && p.bytes().all(|b| b.is_ascii_hexdigit()))
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::TcpListener;
    use std::path::PathBuf;

    use qm_api::sigv4::{parse_amz_date, parse_authorization, verify, Credentials};

    use super::credentials::Source;
    use super::*;

    #[test]
    fn a_job_id_is_encoded_for_the_path() {
        assert_eq!(encode_path_segment("ab-12"), "ab-12");
        assert_eq!(encode_path_segment("a/b c"), "a%2Fb%20c");
    }

    #[test]
    fn the_host_header_is_the_urls_authority() {
        assert_eq!(
            host_of("http://127.0.0.1:7611/v1/x").as_deref(),
            Some("127.0.0.1:7611")
        );
        assert_eq!(
            host_of("http://u:p@qm.example/x").as_deref(),
            Some("qm.example")
        );
        assert_eq!(host_of("http://[::1]:80/").as_deref(), Some("[::1]:80"));
    }

    /// What the fake server received.
    struct Received {
        method: String,
        uri: String,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    }

    impl Received {
        fn header(&self, name: &str) -> Option<&str> {
            self.headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
        }

        /// Whether the request carries a valid signature by `secret`, checked as the server
        /// checks it.
        fn verifies_with(&self, secret: &str) -> bool {
            let auth = parse_authorization(self.header("authorization").expect("signed"))
                .expect("a well-formed Authorization header");
            let time = parse_amz_date(self.header("x-amz-date").expect("x-amz-date"))
                .expect("a well-formed X-Amz-Date");
            let signed: Vec<(&str, &str)> = auth
                .signed_headers
                .iter()
                .filter(|h| *h != "x-amz-date")
                .map(|h| (h.as_str(), self.header(h).unwrap_or_default()))
                .collect();
            verify(
                &auth,
                &self.method,
                &self.uri,
                &signed,
                &self.body,
                secret,
                time,
            )
            .expect("verifiable")
        }
    }

    /// A server on a free port that reads one request and answers `status` with `body`.
    fn serve_once(status: u16, body: &'static str) -> (String, std::thread::JoinHandle<Received>) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a free port");
        let endpoint = format!("http://{}", listener.local_addr().expect("an address"));
        let handle = std::thread::spawn(move || {
            let (stream, _) = listener.accept().expect("a connection");
            let mut reader = BufReader::new(stream.try_clone().expect("clone"));
            let mut line = String::new();
            reader.read_line(&mut line).expect("a request line");
            let mut parts = line.split_whitespace();
            let method = parts.next().unwrap_or_default().to_string();
            let uri = parts.next().unwrap_or_default().to_string();
            let mut headers = Vec::new();
            loop {
                let mut line = String::new();
                reader.read_line(&mut line).expect("a header line");
                let line = line.trim_end();
                if line.is_empty() {
                    break;
                }
                let (name, value) = line.split_once(':').expect("name: value");
                headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
            }
            let length = headers
                .iter()
                .find(|(n, _)| n == "content-length")
                .map_or(0, |(_, v)| v.parse().expect("a length"));
            let mut request_body = vec![0; length];
            reader.read_exact(&mut request_body).expect("the body");
            let mut stream = stream;
            write!(
                stream,
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n\
                 content-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            )
            .expect("answer");
            Received {
                method,
                uri,
                headers,
                body: request_body,
            }
        });
        (endpoint, handle)
    }

    fn signing() -> Signing {
        Signing {
            credentials: Credentials {
                access_key_id: "QMAKTEST".into(),
                secret_access_key: "s3cret/+=".into(),
            },
            region: "eu-west-1".into(),
            source: Source::Profile {
                file: PathBuf::from("/home/a/.aws/credentials"),
                profile: "alice".into(),
            },
        }
    }

    #[test]
    fn a_post_is_signed_over_host_content_type_and_the_body_as_sent() {
        let (endpoint, server) = serve_once(200, r#"{"jobId":"j1"}"#);
        let client = Client::new(&endpoint).signed(signing());
        let answer = client
            .call_json("SubmitServiceJob", &serde_json::json!({"jobName": "a b"}))
            .expect("an answer");
        assert_eq!(answer["jobId"], "j1");
        let got = server.join().expect("the server thread");
        assert_eq!(got.uri, "/v1/submitservicejob");
        assert_eq!(got.body, br#"{"jobName":"a b"}"#);
        let auth = parse_authorization(got.header("authorization").unwrap()).unwrap();
        assert_eq!(auth.access_key_id, "QMAKTEST");
        assert_eq!(
            (auth.region.as_str(), auth.service.as_str()),
            ("eu-west-1", "batch")
        );
        assert_eq!(auth.signed_headers, ["content-type", "host", "x-amz-date"]);
        assert!(got.verifies_with("s3cret/+="));
        assert!(!got.verifies_with("another"));
    }

    #[test]
    fn a_get_with_a_query_is_signed_over_host_alone() {
        let (endpoint, server) = serve_once(200, "{}");
        let client = Client::new(&endpoint).signed(signing());
        client
            .get_json("/qm/v1/jobs/a%2Fb/logs?stream=stdout&offset=0")
            .expect("an answer");
        let got = server.join().expect("the server thread");
        let auth = parse_authorization(got.header("authorization").unwrap()).unwrap();
        assert_eq!(auth.signed_headers, ["host", "x-amz-date"]);
        assert!(got.verifies_with("s3cret/+="));
    }

    #[test]
    fn a_delete_is_signed_and_says_it_has_no_body() {
        let (endpoint, server) = serve_once(200, "{}");
        let client = Client::new(&endpoint).signed(signing());
        client.delete_principal("alice").expect("an answer");
        let got = server.join().expect("the server thread");
        assert_eq!(
            (got.method.as_str(), got.uri.as_str()),
            ("DELETE", "/qm/v1/principals/alice")
        );
        assert_eq!(got.header("content-length"), Some("0"));
        assert_eq!(got.header("content-type"), None);
        assert!(got.verifies_with("s3cret/+="));
    }

    #[test]
    fn tags_travel_in_the_path_and_query_as_botocore_sends_them() {
        let arn = "arn:aws:batch:us-east-1:000000000000:job-queue/q/quota-share/s";
        let encoded =
            "arn%3Aaws%3Abatch%3Aus-east-1%3A000000000000%3Ajob-queue%2Fq%2Fquota-share%2Fs";
        let (endpoint, server) = serve_once(200, "{}");
        let client = Client::new(&endpoint).signed(signing());
        let tags = [("qm:leads".to_string(), "alice,group:ops".to_string())].into();
        client.tag_resource(arn, &tags).expect("an answer");
        let got = server.join().expect("the server thread");
        assert_eq!(
            (got.method.as_str(), got.uri.as_str()),
            ("POST", format!("/v1/tags/{encoded}").as_str())
        );
        assert_eq!(got.body, br#"{"tags":{"qm:leads":"alice,group:ops"}}"#);
        assert!(got.verifies_with("s3cret/+="));

        let (endpoint, server) = serve_once(200, "{}");
        let client = Client::new(&endpoint).signed(signing());
        let keys = ["qm:leads".to_string(), "qm:max-priority".to_string()];
        client.untag_resource(arn, &keys).expect("an answer");
        let got = server.join().expect("the server thread");
        assert_eq!(
            (got.method.as_str(), got.uri.as_str()),
            (
                "DELETE",
                format!("/v1/tags/{encoded}?tagKeys=qm%3Aleads&tagKeys=qm%3Amax-priority").as_str()
            )
        );
        assert!(got.verifies_with("s3cret/+="));
    }

    #[test]
    fn without_a_key_requests_go_unsigned() {
        let (endpoint, server) = serve_once(200, "{}");
        Client::new(&endpoint).get_json("/qm/v1/usage").unwrap();
        let got = server.join().expect("the server thread");
        assert_eq!(got.header("authorization"), None);
        assert_eq!(got.header("x-amz-date"), None);
    }

    fn refusal(status: u16, body: &'static str, signed: bool) -> ClientError {
        let (endpoint, server) = serve_once(status, body);
        let mut client = Client::new(&endpoint);
        if signed {
            client = client.signed(signing());
        }
        let e = client.get_json("/qm/v1/whoami").unwrap_err();
        server.join().expect("the server thread");
        e
    }

    #[test]
    fn a_missing_signature_tells_how_to_point_qm_at_credentials() {
        let e = refusal(
            403,
            r#"{"__type":"MissingAuthenticationTokenException","message":"Missing Authentication Token"}"#,
            false,
        );
        assert!(matches!(e, ClientError::NoCredentials { .. }), "{e:?}");
        let msg = e.to_string();
        assert!(
            msg.contains("export AWS_SHARED_CREDENTIALS_FILE=<data-dir>/credentials\n"),
            "{msg}"
        );
        assert!(msg.contains("export AWS_PROFILE=qm-admin\n"), "{msg}");
    }

    #[test]
    fn a_refused_signature_names_the_key_and_where_it_came_from() {
        let e = refusal(
            403,
            r#"{"__type":"InvalidSignatureException","message":"clock skew: 20 minutes"}"#,
            true,
        );
        assert_eq!(
            e.to_string(),
            "authentication failed (InvalidSignatureException): clock skew: 20 minutes \
             (signed with QMAKTEST from profile [alice] of /home/a/.aws/credentials, region \
             eu-west-1)"
        );
    }

    #[test]
    fn a_principal_without_permission_is_denied_with_the_servers_words() {
        let e = refusal(
            403,
            r#"{"__type":"AccessDeniedException","message":"alice may not list the principals"}"#,
            true,
        );
        assert_eq!(
            e.to_string(),
            "access denied: alice may not list the principals"
        );
    }

    #[test]
    fn a_client_error_keeps_its_kind_and_message() {
        let e = refusal(
            400,
            r#"{"__type":"ClientException","message":"name: exists already"}"#,
            true,
        );
        match e {
            ClientError::Server { kind, message } => {
                assert_eq!(
                    (kind.as_str(), message.as_str()),
                    ("ClientException", "name: exists already")
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn only_the_uuid_shape_reads_as_a_job_id() {
        assert!(super::looks_like_job_id(
            "0b9d7c1e-3f3a-4c55-9a57-2f0f1d3c6a11"
        ));
        for name in [
            "train-2",
            "0b9d7c1e-3f3a-4c55-9a57",
            "deadbeef-dead-beef-dead-beefdeadbeefx",
            "",
        ] {
            assert!(!super::looks_like_job_id(name), "{name}");
        }
    }
}
