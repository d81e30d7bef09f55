//! The HTTP face: botocore's REST-JSON routes (`POST /v1/<operation>`, the tag routes) and the
//! qm endpoints. Answers take their shape in [`crate::respond`] (the AWS error shape: status,
//! the `x-amzn-ErrorType` header and the `{"__type", "message"}` body).
//!
//! Handlers only parse and encode: the request is decoded (with field paths in errors) on the
//! HTTP worker threads and handed to the driver, which answers once the batch is durable, in
//! typed replies this layer encodes to JSON.

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, Path, RawQuery, State as AxState};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Router};
use percent_encoding::percent_decode_str;
use qm_api::qm::MAX_AUDIT_PAGE;
use qm_api::*;
use serde::Deserialize;
use tokio::sync::{mpsc, oneshot};

use std::sync::{Arc, Mutex};
use std::time::Instant;

use qm_executor::{log_file_name, LogStream};

use crate::auth::Principal;
use crate::command::{AuditEntry, Command};
use crate::driver::Envelope;
use crate::exec::Executor;
use crate::metrics::ApiLatency;
use crate::request::{Answer, LogInfo, Query, Request};
use crate::respond::{error_response, ok_response, MAX_BODY_BYTES};

/// What handlers share.
#[derive(Clone)]
pub struct App {
    /// The driver's inbox.
    pub requests: mpsc::Sender<Envelope>,
    /// API latency per operation, for `/metrics`.
    pub latency: ApiLatency,
    /// The recent past, for `/qm/v1/history` (`history.rs`).
    pub history: Arc<Mutex<crate::history::Ring>>,
    /// The executor, which knows where attempts' logs are.
    pub executor: Executor,
    /// The archive of retired jobs, read by usage reports. (Behind an `Arc`, as `gpus`: the
    /// state is cloned for every request.)
    pub archive: Arc<crate::archive::Archive>,
    /// GPUs per instance, per instance type (from the executor's pools; a reload adds the
    /// types it brings).
    pub gpus: Arc<std::sync::RwLock<BTreeMap<String, u32>>>,
    /// Principals, sessions and the request guard's settings.
    pub auth: Arc<crate::auth::Auth>,
    /// `[limits]`, which the door applies.
    pub limits: crate::limits::Limits,
    /// `POST /qm/v1/reload` (and SIGHUP) reload the config file through it.
    pub reloader: Arc<crate::reload::Reloader>,
    /// Attempts' credentials of their job's role, where the server hands them out.
    pub credentials: Option<Arc<crate::credentials::Broker>>,
}

impl App {
    /// GPUs per instance type, as of now.
    fn gpus(&self) -> BTreeMap<String, u32> {
        self.gpus
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// The router.
pub fn router(app: App) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        // A wildcard: botocore sends the ARN as one percent-encoded segment, curl users often
        // send it raw, with its slashes.
        .route("/v1/tags/{*arn}", get(list_tags).post(tag).delete(untag))
        .route("/v1/{operation}", post(operation))
        .route(
            "/",
            get(|| async { asset("text/html; charset=utf-8", INDEX_HTML) }),
        )
        .route(
            "/assets/app.js",
            get(|| async { asset("text/javascript; charset=utf-8", APP_JS) }),
        )
        .route(
            "/assets/style.css",
            get(|| async { asset("text/css; charset=utf-8", STYLE_CSS) }),
        )
        .route("/metrics", get(metrics))
        .route("/qm/v1/usage", get(usage))
        .route("/qm/v1/history", get(history))
        .route("/qm/v1/usage/report", get(usage_report))
        .route("/qm/v1/workload", get(workload))
        .route("/qm/v1/review", get(review))
        .route("/qm/v1/audit", get(audit_list).post(audit_add))
        .route("/qm/v1/jobs/{job}/logs", get(logs))
        .route("/qm/v1/jobs/{job}/attempt", get(running_attempt))
        .route("/qm/v1/jobs/{job}/preempt", post(preempt))
        .route("/qm/v1/drain", get(drain_status).post(drain))
        .route("/qm/v1/reload", post(reload))
        .route("/qm/v1/what-if", post(what_if))
        .route(
            "/qm/v1/queues/{queue}/groups",
            get(queue_groups).put(put_queue_groups),
        )
        .route(
            "/qm/v1/attempt-credentials/{attempt}",
            get(attempt_credentials),
        )
        .merge(crate::auth::routes().with_state(app.auth.clone()))
        .fallback(unknown_route)
        .method_not_allowed_fallback(wrong_method)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        // Nothing is routed, parsed or answered for a request the guard refuses.
        .layer(axum::middleware::from_fn_with_state(
            app.auth.clone(),
            crate::auth::guard,
        ))
        // Outside the guard: limits before signatures, so that a slow or huge request costs
        // nothing but its connection.
        .layer(axum::middleware::from_fn_with_state(
            app.limits,
            crate::limits::door,
        ))
        .with_state(app)
}

/// The dashboard, embedded so that the binary is all there is to deploy.
const INDEX_HTML: &str = include_str!("../assets/index.html");
const APP_JS: &str = include_str!("../assets/app.js");
const STYLE_CSS: &str = include_str!("../assets/style.css");

fn asset(content_type: &'static str, body: &'static str) -> Response {
    let mut r = (StatusCode::OK, body).into_response();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

/// Hands a request to the driver and waits for its answer (sent once the batch is durable).
async fn send(app: &App, request: Request) -> Result<Answer, ApiError> {
    let (tx, rx) = oneshot::channel();
    app.requests
        .send(Envelope { request, reply: tx })
        .await
        .map_err(|_| ApiError::server("the server is shutting down; retry shortly"))?;
    rx.await.map_err(|_| {
        ApiError::server(
            "the request was not completed because the server is stopping; retry shortly",
        )
    })?
}

/// A request answered in the JSON / AWS-error shape: the driver's typed reply is encoded
/// here, off the driver thread.
async fn dispatch(app: &App, request: Request) -> Response {
    match send(app, request)
        .await
        .and_then(Answer::into_reply)
        .and_then(|r| r.to_json())
    {
        Ok(body) => ok_response(body),
        Err(e) => error_response(&e),
    }
}

/// Bounds checked only at the door, not when the log is replayed: a request accepted by an
/// earlier build must still apply.
fn within_bounds(request: &Request) -> Result<(), ApiError> {
    match request {
        Request::Command(Command::TerminateServiceJob(r)) => validate_reason(&r.reason),
        Request::Command(Command::TerminateServiceJobs(r)) => validate_reason(&r.reason),
        _ => Ok(()),
    }
}

/// The body, or the AWS-shaped error for one that could not be read (too large, say).
fn read_body(body: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    body.map_err(|e| {
        ApiError::client(format!(
            "the request body could not be read ({e}); bodies are limited to {} MiB",
            MAX_BODY_BYTES / (1024 * 1024)
        ))
    })
}

async fn operation(
    AxState(app): AxState<App>,
    Path(operation): Path<String>,
    Extension(caller): Extension<Principal>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let started = Instant::now();
    let body = match read_body(body) {
        Ok(b) => b,
        Err(e) => return error_response(&e),
    };
    let request = parse_operation(&operation, &body)
        .and_then(|r| within_bounds(&r).map(|()| r))
        .map(|r| match r {
            Request::Command(Command::SubmitServiceJob {
                job_id,
                request,
                principal: _,
            }) => Request::Command(as_caller(
                &caller,
                Command::SubmitServiceJob {
                    job_id,
                    request,
                    principal: Some(caller.name.clone()),
                },
            )),
            // Every change but a submit leaves an entry that names who made it: the signer.
            Request::Command(c) => Request::Command(audited(
                &caller,
                c,
                &operation,
                &String::from_utf8_lossy(&body),
            )),
            query => query,
        });
    let response = match request {
        Ok(r) => dispatch(&app, r).await,
        Err(e) => return error_response(&e),
    };
    // The request id the client saw is the exemplar: a slow bucket leads to its request.
    let request_id = response
        .headers()
        .get("x-amzn-RequestId")
        .and_then(|v| v.to_str().ok());
    app.latency
        .observe(&operation, started.elapsed().as_secs_f64(), request_id);
    response
}

/// `command` as `caller` sends it, with the audit entry that records who made the change
/// and what they sent: applied together, so the change and its entry are in one batch.
fn audited(caller: &Principal, command: Command, action: &str, body: &str) -> Command {
    let entry = AuditEntry {
        at: 0,
        actor: caller.name.clone(),
        action: action.to_string(),
        summary: clip(body, AUDIT_SUMMARY),
        details: clip(body, AUDIT_DETAILS),
        tags: None,
    };
    as_caller_audited(caller, command, Some(entry))
}

/// `POST /qm/v1/jobs/{job}/preempt` (`qm preempt`): a drill. The status reason names who
/// asked; the audit log keeps it with the job and the reason.
async fn preempt(
    AxState(app): AxState<App>,
    Path(job_id): Path<String>,
    Extension(caller): Extension<Principal>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let request = read_body(body).and_then(|b| {
        let r: qm_api::qm::PreemptRequest = parse_request(&b)?;
        validate_reason(r.reason.as_deref().unwrap_or(""))?;
        Ok(r)
    });
    let r = match request {
        Ok(r) => r,
        Err(e) => return error_response(&e),
    };
    let reason = signed_reason("qm preempt", &caller, r.reason.as_deref());
    let command = Command::PreemptServiceJob {
        job_id: job_id.clone(),
        reason: reason.clone(),
    };
    let summary = serde_json::json!({"jobId": job_id, "reason": reason}).to_string();
    let command = audited(&caller, command, "preempt", &summary);
    dispatch(&app, Request::Command(command)).await
}

/// `POST /qm/v1/drain` (`qm drain`, admins): see [`qm_api::qm::DrainRequest`]. The reason
/// names who asked; the audit log keeps it.
async fn drain(
    AxState(app): AxState<App>,
    Extension(caller): Extension<Principal>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let request = read_body(body).and_then(|b| {
        let r: qm_api::qm::DrainRequest = parse_request(&b)?;
        validate_reason(r.reason.as_deref().unwrap_or(""))?;
        if r.cancel && r.requeue {
            return Err(ApiError::client(
                "requeue: a cancel ends the drain and requeues nothing; send one of the two"
                    .to_string(),
            ));
        }
        Ok(r)
    });
    let r = match request {
        Ok(r) => r,
        Err(e) => return error_response(&e),
    };
    let (command, action) = if r.cancel {
        (Command::EndDrain, "drain-cancel")
    } else {
        let reason = signed_reason("qm drain", &caller, r.reason.as_deref());
        (
            Command::Drain {
                reason,
                requeue: r.requeue,
            },
            "drain",
        )
    };
    let summary = serde_json::to_string(&r).unwrap_or_default();
    let command = audited(&caller, command, action, &summary);
    dispatch(&app, Request::Command(command)).await
}

/// `POST /qm/v1/reload` (`qm reload`, admins): reads the config file again and applies what
/// can change while running ([`crate::reload`]); a failed reload changes nothing and says why.
async fn reload(AxState(app): AxState<App>, Extension(caller): Extension<Principal>) -> Response {
    if !caller.admin {
        return error_response(&ApiError::forbidden(
            "AccessDeniedException",
            format!(
                "{} may not reload the server's configuration: that is for admins",
                caller.name
            ),
        ));
    }
    match app.reloader.reload(&caller.name).await {
        Ok(r) => match crate::reply::encode(&r) {
            Ok(body) => ok_response(body),
            Err(e) => error_response(&e),
        },
        Err(e) => error_response(&e),
    }
}

/// `GET /qm/v1/drain`: whether the executor is drained ([`qm_api::qm::DrainStatus`]).
async fn drain_status(AxState(app): AxState<App>) -> Response {
    dispatch(&app, Request::Query(Query::Drain)).await
}

/// `what by NAME`, with `: why` when the client gave a reason: what a drill's or a drain's
/// status reason and audit entry say.
fn signed_reason(what: &str, caller: &Principal, why: Option<&str>) -> String {
    match why.filter(|r| !r.trim().is_empty()) {
        Some(why) => format!("{what} by {}: {why}", caller.name),
        None => format!("{what} by {}", caller.name),
    }
}

/// A client's command as logged: with who sent it, for the permission check (`ops::permit`).
fn as_caller(p: &Principal, command: Command) -> Command {
    as_caller_audited(p, command, None)
}

/// `command` as `p` sends it, with its audit entry if it has one.
fn as_caller_audited(p: &Principal, command: Command, audit: Option<AuditEntry>) -> Command {
    Command::As {
        caller: crate::command::Caller {
            name: p.name.clone(),
            groups: p.groups.clone(),
            admin: p.admin,
        },
        command: Box::new(command),
        audit,
    }
}

/// Characters of a request body an audit entry's summary and details keep.
const AUDIT_SUMMARY: usize = 200;
const AUDIT_DETAILS: usize = 4096;

/// At most `max` characters of `s`, on one line, with an ellipsis when cut.
fn clip(s: &str, max: usize) -> String {
    let one_line: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if one_line.chars().count() <= max {
        return one_line;
    }
    let mut cut: String = one_line.chars().take(max).collect();
    cut.push('…');
    cut
}

async fn metrics(AxState(app): AxState<App>, headers: axum::http::HeaderMap) -> Response {
    let mut registry = match send(&app, Request::Query(Query::Metrics)).await {
        Ok(Answer::Metrics(r)) => r,
        Ok(other) => return error_response(&unexpected(&other)),
        Err(e) => return error_response(&e),
    };
    app.latency.register(&mut registry);
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    match crate::metrics::encode(&registry, accept) {
        Ok((text, content_type)) => {
            let mut r = (StatusCode::OK, text).into_response();
            r.headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
            r
        }
        Err(_) => error_response(&ApiError::server("internal: encoding the metrics failed")),
    }
}

#[derive(Deserialize)]
struct HistoryParams {
    #[serde(rename = "jobQueue")]
    job_queue: String,
    window: Option<String>,
}

/// `GET /qm/v1/history?jobQueue=&window=hour|day`: a [`qm_api::qm::History`] from the ring the
/// server samples (`history.rs`).
async fn history(
    AxState(app): AxState<App>,
    params: Result<axum::extract::Query<HistoryParams>, QueryRejection>,
) -> Response {
    let params = match query_params(params) {
        Ok(p) => p,
        Err(e) => return error_response(&e),
    };
    let window = match params.window.as_deref() {
        None => qm_api::qm::HistoryWindow::Hour,
        Some(w) => match qm_api::qm::HistoryWindow::parse("window", w) {
            Ok(w) => w,
            Err(e) => return error_response(&e),
        },
    };
    // A name or an ARN, as the AWS API takes; a queue the ring never saw has no points.
    let queue = params
        .job_queue
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .to_string();
    let now = crate::clock::now_ms();
    let history = match app.history.lock() {
        Ok(ring) => ring.history(&queue, window, now),
        Err(_) => return error_response(&ApiError::server("internal: the history is unavailable")),
    };
    match crate::reply::encode(&history) {
        Ok(b) => ok_response(b),
        Err(e) => error_response(&e),
    }
}

async fn usage(AxState(app): AxState<App>) -> Response {
    dispatch(&app, Request::Query(Query::Usage)).await
}

/// `GET /qm/v1/attempt-credentials/{attempt}`: the AWS SDKs' container credentials endpoint
/// of one attempt (`credentials.rs`). Not signed: the attempt's token, in `Authorization`, is
/// its key, and it opens this attempt's credentials only, while it holds capacity.
async fn attempt_credentials(
    AxState(app): AxState<App>,
    Path(attempt): Path<String>,
    headers: axum::http::HeaderMap,
) -> Response {
    match role_credentials(&app, &attempt, &headers).await {
        Ok(body) => ok_response(body),
        Err(e) => error_response(&e),
    }
}

async fn role_credentials(
    app: &App,
    attempt: &str,
    headers: &axum::http::HeaderMap,
) -> Result<Vec<u8>, ApiError> {
    let denied = |why: &str| ApiError::forbidden("AccessDeniedException", why.to_string());
    let broker = app.credentials.as_ref().ok_or_else(|| {
        ApiError::Http(404, "this server hands out no credentials: [credentials] is not configured (docs/security.md)".into())
    })?;
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let attempt = qm_core::AttemptId(
        attempt
            .parse()
            .map_err(|_| denied("not an attempt's credentials endpoint"))?,
    );
    if !broker.verify(attempt, token) {
        return Err(denied("the Authorization header is not this attempt's token (AWS_CONTAINER_AUTHORIZATION_TOKEN)"));
    }
    let role = match send(app, Request::Query(Query::AttemptRole { attempt })).await? {
        Answer::AttemptRole(Some(role)) => role,
        Answer::AttemptRole(None) => {
            return Err(denied(
                "the attempt holds no capacity any more: its credentials are gone with it",
            ))
        }
        other => return Err(unexpected(&other)),
    };
    let arn = role
        .role_arn
        .ok_or_else(|| denied("the job names no RoleArn, so it has no role to act as"))?;
    if !broker.allows(&role.share, &arn) {
        return Err(denied(&format!(
            "jobs of quota share '{}' may not act as {arn}: an admin allows it in [credentials.shares]",
            role.share
        )));
    }
    let issued = broker
        .issue(&arn, &role.job_id, &role.job_name, crate::clock::now_ms())
        .await
        .map_err(|e| {
            tracing::warn!(attempt = attempt.0, error = %e, "cannot issue an attempt's credentials");
            ApiError::server(e.to_string())
        })?;
    Ok(crate::credentials::Broker::answer(&issued, &arn))
}

/// `GET /qm/v1/jobs/{job}/attempt`: see [`qm_api::qm::JobAttemptNow`].
async fn running_attempt(AxState(app): AxState<App>, Path(job_id): Path<String>) -> Response {
    dispatch(&app, Request::Query(Query::RunningAttempt { job_id })).await
}

/// A query string that does not decode, as a ClientException in the AWS shape (the web
/// framework's own answer is plain text).
fn query_params<T>(params: Result<axum::extract::Query<T>, QueryRejection>) -> Result<T, ApiError> {
    params.map(|q| q.0).map_err(|e| {
        ApiError::client(format!(
            "the query string: {}; see docs/server.md for this endpoint's parameters",
            e.body_text()
        ))
    })
}

/// A typed answer of the wrong kind: a bug in this layer, said as a server error.
fn unexpected(answer: &Answer) -> ApiError {
    ApiError::server(format!("internal: unexpected answer {answer:?}"))
}

#[derive(Deserialize)]
struct ReviewQuery {
    since: Option<i64>,
    until: Option<i64>,
    share: Option<String>,
}

/// `GET /qm/v1/review?since=&until=&share=`: a [`qm_api::review::ReviewReport`] from the
/// state's jobs and audit entries and the archive's (`review.rs`). Readable by whoever may
/// read the usage report.
async fn review(
    AxState(app): AxState<App>,
    params: Result<axum::extract::Query<ReviewQuery>, QueryRejection>,
) -> Response {
    let now = crate::clock::now_ms();
    let params = query_params(params).and_then(|q| {
        let p = report_params(
            ReportParams {
                since: q.since,
                until: q.until,
                by: None,
                every: None,
            },
            now,
        )?;
        Ok(crate::review::ReviewParams {
            since: p.since,
            until: p.until,
            share: q.share.filter(|s| !s.is_empty()),
            gpus: app.gpus(),
        })
    })
    .and_then(|p| {
        // A week per chart column: a careless window must not make thousands of them.
        if p.until - p.since > crate::review::MAX_WINDOW_MS {
            return Err(ApiError::client(format!(
                "since: the window from {} to {} is longer than {} days; review at most that much at once",
                p.since,
                p.until,
                crate::review::MAX_WINDOW_MS / 86_400_000
            )));
        }
        Ok(p)
    });
    let params = match params {
        Ok(p) => p,
        Err(e) => return error_response(&e),
    };
    let since = params.since;
    let facts = match send(&app, Request::Query(Query::ReviewFacts { since })).await {
        Ok(Answer::ReviewFacts(f)) => f,
        Ok(other) => return error_response(&unexpected(&other)),
        Err(e) => return error_response(&e),
    };
    let archive = app.archive.clone();
    let report = tokio::task::spawn_blocking(move || {
        crate::review::review_with_archive(&archive, *facts, &params)
    })
    .await
    .map_err(|e| ApiError::server(format!("computing the review: {e}")))
    .and_then(|r| r);
    match report.and_then(|r| crate::reply::encode(&r)) {
        Ok(body) => ok_response(body),
        Err(e) => error_response(&e),
    }
}

#[derive(Deserialize)]
struct ReportParams {
    since: Option<i64>,
    until: Option<i64>,
    by: Option<String>,
    every: Option<String>,
}

/// `GET /qm/v1/usage/report?since=&until=&by=&every=`: a [`qm_api::qm::UsageReport`] from the
/// state's jobs and the archive's. The state is asked first: a job retired meanwhile is in
/// the archive by then (it is archived before its retirement is logged).
async fn usage_report(
    AxState(app): AxState<App>,
    params: Result<axum::extract::Query<ReportParams>, QueryRejection>,
) -> Response {
    let params = match query_params(params) {
        Ok(p) => p,
        Err(e) => return error_response(&e),
    };
    let query = match report_params(params, crate::clock::now_ms()) {
        Ok(p) => p,
        Err(e) => return error_response(&e),
    };
    let facts = match send(
        &app,
        Request::Query(Query::UsageFacts { since: query.since }),
    )
    .await
    {
        Ok(Answer::UsageFacts(f)) => f,
        Ok(other) => return error_response(&unexpected(&other)),
        Err(e) => return error_response(&e),
    };
    let archive = app.archive.clone();
    let gpus = app.gpus();
    let report = tokio::task::spawn_blocking(move || {
        let mut query = query;
        query.now = facts.now;
        query.gpus = gpus;
        crate::usage::report_with_archive(&archive, *facts, &query)
    })
    .await
    .map_err(|e| ApiError::server(format!("computing the report: {e}")))
    .and_then(|r| r);
    match report.and_then(|r| crate::reply::encode(&r)) {
        Ok(body) => ok_response(body),
        Err(e) => error_response(&e),
    }
}

/// A window `[since, until)` of epoch milliseconds, by default the 7 days before now.
fn window(since: Option<i64>, until: Option<i64>, now: i64) -> Result<(i64, i64), ApiError> {
    // Epoch milliseconds from 1970 to the end of year 9999: no arithmetic on a window can
    // overflow, whatever a client sends.
    const LATEST: i64 = 253_402_300_800_000;
    let in_range = |field: &str, t: i64| {
        if (0..=LATEST).contains(&t) {
            Ok(t)
        } else {
            Err(ApiError::client(format!(
                "{field}: {t} is not a time between 1970 and 9999; give epoch milliseconds"
            )))
        }
    };
    let until = in_range("until", until.unwrap_or(now))?;
    let since = in_range("since", since.unwrap_or((until - 7 * 86_400_000).max(0)))?;
    if since >= until {
        return Err(ApiError::client(format!(
            "since: {since} is not before until ({until}); both are epoch milliseconds"
        )));
    }
    Ok((since, until))
}

/// Checks a report's parameters: the window defaults to the last 7 days.
fn report_params(p: ReportParams, now: i64) -> Result<crate::usage::UsageParams, ApiError> {
    use qm_api::qm::{UsageBy, UsageEvery};
    let (since, until) = window(p.since, p.until, now)?;
    let by =
        p.by.as_deref()
            .map_or(Ok(UsageBy::Share), |b| UsageBy::parse("by", b))?;
    let every = p
        .every
        .as_deref()
        .map(|e| UsageEvery::parse("every", e))
        .transpose()?;
    let n = crate::usage::period_count(since, until, every);
    if n > crate::usage::MAX_PERIODS {
        return Err(ApiError::client(format!(
            "every: the window has {n} periods, more than the {} a report may have; use a longer period or a shorter window",
            crate::usage::MAX_PERIODS
        )));
    }
    Ok(crate::usage::UsageParams {
        since,
        until,
        now,
        by,
        every,
        gpus: BTreeMap::new(),
    })
}

#[derive(Deserialize)]
struct WorkloadParams {
    since: Option<i64>,
    until: Option<i64>,
    queue: Option<String>,
}

/// `GET /qm/v1/workload?since=&until=&queue=`: the finished jobs submitted in the window
/// (to one queue, if named) as the
/// simulator's workload CSV (`crate::workload`), with how many jobs are in it, unfinished
/// and never ran in the `x-qm-workload-*` headers. Asks the state first, as the usage report
/// does.
async fn workload(
    AxState(app): AxState<App>,
    params: Result<axum::extract::Query<WorkloadParams>, QueryRejection>,
) -> Response {
    let p = match query_params(params) {
        Ok(p) => p,
        Err(e) => return error_response(&e),
    };
    let (since, until) = match window(p.since, p.until, crate::clock::now_ms()) {
        Ok(w) => w,
        Err(e) => return error_response(&e),
    };
    // A name or an ARN, as the AWS API takes.
    let queue = p
        .queue
        .map(|q| q.rsplit('/').next().unwrap_or_default().to_string());
    let query = Query::WorkloadFacts {
        since,
        until,
        queue: queue.clone(),
    };
    let facts = match send(&app, Request::Query(query)).await {
        Ok(Answer::WorkloadFacts(f)) => f,
        Ok(other) => return error_response(&unexpected(&other)),
        Err(e) => return error_response(&e),
    };
    let archive = app.archive.clone();
    let csv = tokio::task::spawn_blocking(move || {
        let export = crate::workload::export_with_archive(
            &archive,
            *facts,
            (since, until),
            queue.as_deref(),
        )?;
        let mut body = Vec::with_capacity(export.rows.len() * 128 + 256);
        crate::workload::write_csv(&export.rows, &mut body, crate::workload::Columns::All)
            .map_err(|e| ApiError::server(format!("writing the workload: {e}")))?;
        Ok::<_, ApiError>((export, body))
    })
    .await
    .map_err(|e| ApiError::server(format!("computing the workload: {e}")))
    .and_then(|r| r);
    let (export, body) = match csv {
        Ok(c) => c,
        Err(e) => return error_response(&e),
    };
    let mut r = (StatusCode::OK, body).into_response();
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/csv; charset=utf-8"),
    );
    for (name, n) in [
        ("x-qm-workload-jobs", export.rows.len() as u64),
        ("x-qm-workload-unfinished", export.unfinished),
        ("x-qm-workload-never-ran", export.never_ran),
    ] {
        h.insert(name, HeaderValue::from(n));
    }
    r
}

/// `GET /qm/v1/queues/{queue}/groups`: see [`qm_api::qm::QueueGroups`].
async fn queue_groups(AxState(app): AxState<App>, Path(queue): Path<String>) -> Response {
    dispatch(&app, Request::Query(Query::QueueGroups { queue })).await
}

/// `PUT /qm/v1/queues/{queue}/groups {groups: [{name, limits, weight}]}`: replaces the
/// queue's group definitions (admins only, as every configuration change; audited).
async fn put_queue_groups(
    AxState(app): AxState<App>,
    Path(queue): Path<String>,
    Extension(caller): Extension<Principal>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let request = read_body(body).and_then(|b| {
        let r: qm_api::qm::QueueGroups = parse_request(&b)?;
        r.checked(qm_core::MAX_SHARES_PER_QUEUE)
    });
    let groups = match request {
        Ok(g) => g,
        Err(e) => return error_response(&e),
    };
    let summary = serde_json::json!({"jobQueue": queue, "groups": groups.groups}).to_string();
    let command = Command::PutQueueGroups { queue, groups };
    let command = audited(&caller, command, "put-groups", &summary);
    dispatch(&app, Request::Command(command)).await
}

/// `POST /qm/v1/what-if`: see [`qm_api::qm::WhatIfRequest`].
async fn what_if(AxState(app): AxState<App>, body: Result<Bytes, BytesRejection>) -> Response {
    match read_body(body).and_then(|b| parse_request(&b)) {
        Ok(r) => dispatch(&app, Request::Query(Query::WhatIf(r))).await,
        Err(e) => error_response(&e),
    }
}

#[derive(Deserialize)]
struct AuditParams {
    #[serde(rename = "maxResults")]
    max_results: Option<usize>,
    #[serde(rename = "nextToken")]
    next_token: Option<String>,
}

/// `GET /qm/v1/audit?maxResults=&nextToken=`: a page of the audit log, oldest first.
async fn audit_list(
    AxState(app): AxState<App>,
    params: Result<axum::extract::Query<AuditParams>, QueryRejection>,
) -> Response {
    let page = query_params(params).and_then(|p| {
        let max = p.max_results.unwrap_or(MAX_AUDIT_PAGE);
        if max == 0 || max > MAX_AUDIT_PAGE {
            return Err(ApiError::client(format!(
                "maxResults is {max}: give 1 to {MAX_AUDIT_PAGE}"
            )));
        }
        let start = match p.next_token.as_deref() {
            None => 0,
            Some(t) => t.parse::<usize>().map_err(|_| {
                ApiError::client(format!(
                    "nextToken '{}' is not a token this endpoint returned: pass the nextToken of the previous page",
                    printable_token(t)
                ))
            })?,
        };
        Ok(Query::Audit { start, max })
    });
    match page {
        Ok(q) => dispatch(&app, Request::Query(q)).await,
        Err(e) => error_response(&e),
    }
}

/// A client's token, short and printable, for an error message.
fn printable_token(t: &str) -> String {
    t.chars().filter(|c| !c.is_control()).take(64).collect()
}

async fn audit_add(
    AxState(app): AxState<App>,
    Extension(caller): Extension<Principal>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let mut entry: AuditEntry = match read_body(body).and_then(|b| parse_request(&b)) {
        Ok(e) => e,
        Err(e) => return error_response(&e),
    };
    // Who acted is who signed, whatever the client says: an audit entry cannot be forged.
    // Nor can a change of tags it did not make: only the server records those.
    entry.actor = caller.name.clone();
    entry.tags = None;
    if let Err(e) = entry.check() {
        return error_response(&e);
    }
    dispatch(&app, Request::Command(Command::Audit(entry))).await
}

#[derive(Deserialize)]
struct LogParams {
    attempt: Option<u32>,
    stream: Option<String>,
    offset: Option<u64>,
}

/// A slice of an attempt's log, from `offset`; the client follows with `x-qm-next-offset`
/// until `x-qm-finished` says the attempt has ended.
async fn logs(
    AxState(app): AxState<App>,
    Path(job): Path<String>,
    params: Result<axum::extract::Query<LogParams>, QueryRejection>,
) -> Response {
    let params = match query_params(params) {
        Ok(p) => p,
        Err(e) => return error_response(&e),
    };
    let stream = match params.stream.as_deref().unwrap_or("stdout") {
        "stdout" => LogStream::Stdout,
        "stderr" => LogStream::Stderr,
        other => {
            return error_response(&ApiError::client(format!(
                "stream: '{other}' is not a log stream; use stdout or stderr"
            )))
        }
    };
    let info = send(
        &app,
        Request::Query(Query::LogInfo {
            job_id: job.clone(),
            attempt: params.attempt,
        }),
    )
    .await;
    let LogInfo {
        job_id,
        attempt,
        finished,
    } = match info {
        Ok(Answer::LogInfo(info)) => info,
        Ok(other) => return error_response(&unexpected(&other)),
        Err(e) => return error_response(&e),
    };
    let path = app
        .executor
        .log_dir(&job_id, attempt)
        .join(log_file_name(stream, 1));
    let offset = params.offset.unwrap_or(0);
    let (offset, bytes) =
        tokio::task::spawn_blocking(move || read_from(&path, offset, MAX_LOG_CHUNK))
            .await
            .unwrap_or_default();
    let next = offset + bytes.len() as u64;
    let mut r = (StatusCode::OK, bytes).into_response();
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    for (k, v) in [
        ("x-qm-attempt", attempt.to_string()),
        ("x-qm-next-offset", next.to_string()),
        ("x-qm-finished", finished.to_string()),
    ] {
        if let Ok(v) = HeaderValue::from_str(&v) {
            h.insert(k, v);
        }
    }
    r
}

/// Most bytes of log one request returns.
const MAX_LOG_CHUNK: u64 = 1024 * 1024;

/// At most `max` bytes of the log from `offset`, and the offset they start at: 0 when the log
/// is shorter than `offset`, because it was rotated under the reader (its first line says
/// so) and starts again.
fn read_from(path: &std::path::Path, offset: u64, max: u64) -> (u64, Vec<u8>) {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut f) = std::fs::File::open(path) else {
        return (offset, Vec::new());
    };
    let len = f.metadata().map_or(0, |m| m.len());
    let offset = if offset > len { 0 } else { offset };
    if f.seek(SeekFrom::Start(offset)).is_err() {
        return (offset, Vec::new());
    }
    let mut buf = Vec::new();
    let _ = f.take(max).read_to_end(&mut buf);
    (offset, buf)
}

/// Decodes the body of `POST /v1/<operation>`.
pub fn parse_operation(operation: &str, body: &[u8]) -> Result<Request, ApiError> {
    use Command as C;
    use Query as Q;
    let c = |c: Command| Ok(Request::Command(c));
    let q = |q: Query| Ok(Request::Query(q));
    match operation {
        "createserviceenvironment" => c(C::CreateServiceEnvironment(parse_request(body)?)),
        "updateserviceenvironment" => c(C::UpdateServiceEnvironment(parse_request(body)?)),
        "deleteserviceenvironment" => c(C::DeleteServiceEnvironment(parse_request(body)?)),
        "describeserviceenvironments" => q(Q::DescribeServiceEnvironments(parse_request(body)?)),
        "createjobqueue" => c(C::CreateJobQueue(parse_request(body)?)),
        "updatejobqueue" => c(C::UpdateJobQueue(parse_request(body)?)),
        "deletejobqueue" => c(C::DeleteJobQueue(parse_request(body)?)),
        "describejobqueues" => q(Q::DescribeJobQueues(parse_request(body)?)),
        "createschedulingpolicy" => c(C::CreateSchedulingPolicy(parse_request(body)?)),
        "updateschedulingpolicy" => c(C::UpdateSchedulingPolicy(parse_request(body)?)),
        "deleteschedulingpolicy" => c(C::DeleteSchedulingPolicy(parse_request(body)?)),
        "describeschedulingpolicies" => q(Q::DescribeSchedulingPolicies(parse_request(body)?)),
        "listschedulingpolicies" => q(Q::ListSchedulingPolicies(parse_request(body)?)),
        "createquotashare" => c(C::CreateQuotaShare(parse_request(body)?)),
        "updatequotashare" => c(C::UpdateQuotaShare(parse_request(body)?)),
        "deletequotashare" => c(C::DeleteQuotaShare(parse_request(body)?)),
        "describequotashare" => q(Q::DescribeQuotaShare(parse_request(body)?)),
        "listquotashares" => q(Q::ListQuotaShares(parse_request(body)?)),
        "submitservicejob" => c(C::SubmitServiceJob {
            job_id: uuid::Uuid::new_v4().to_string(),
            request: parse_request(body)?,
            principal: None,
        }),
        "describeservicejob" => q(Q::DescribeServiceJob(parse_request(body)?)),
        "listservicejobs" => q(Q::ListServiceJobs(parse_request(body)?)),
        "updateservicejob" => c(C::UpdateServiceJob(parse_request(body)?)),
        "terminateservicejob" => c(C::TerminateServiceJob(parse_request(body)?)),
        "terminateservicejobs" => c(C::TerminateServiceJobs(parse_request(body)?)),
        "getjobqueuesnapshot" => q(Q::GetJobQueueSnapshot(parse_request(body)?)),
        other => Err(ApiError::client(format!(
            "unknown operation '{other}': this server implements the AWS Batch operations for service environments, job queues, scheduling policies, quota shares and service jobs"
        ))),
    }
}

fn arn_of(raw: &str) -> String {
    percent_decode_str(raw).decode_utf8_lossy().into_owned()
}

async fn list_tags(AxState(app): AxState<App>, Path(arn): Path<String>) -> Response {
    let r = ListTagsForResourceRequest {
        resource_arn: arn_of(&arn),
    };
    dispatch(&app, Request::Query(Query::ListTagsForResource(r))).await
}

#[derive(Deserialize)]
struct TagBody {
    tags: BTreeMap<String, String>,
}

async fn tag(
    AxState(app): AxState<App>,
    Path(arn): Path<String>,
    Extension(caller): Extension<Principal>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let body = match read_body(body) {
        Ok(b) => b,
        Err(e) => return error_response(&e),
    };
    let b: TagBody = match parse_request(&body) {
        Ok(b) => b,
        Err(e) => return error_response(&e),
    };
    let r = TagResourceRequest {
        resource_arn: arn_of(&arn),
        tags: b.tags,
    };
    let summary = String::from_utf8_lossy(&body).into_owned();
    let command = audited(&caller, Command::TagResource(r), "TagResource", &summary);
    dispatch(&app, Request::Command(command)).await
}

async fn untag(
    AxState(app): AxState<App>,
    Path(arn): Path<String>,
    Extension(caller): Extension<Principal>,
    RawQuery(query): RawQuery,
) -> Response {
    let keys: Vec<String> = query
        .unwrap_or_default()
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .filter(|(k, _)| *k == "tagKeys")
        .map(|(_, v)| arn_of(&v.replace('+', " ")))
        .collect();
    let r = UntagResourceRequest {
        resource_arn: arn_of(&arn),
        tag_keys: keys,
    };
    let summary = serde_json::json!({"tagKeys": r.tag_keys}).to_string();
    let command = audited(
        &caller,
        Command::UntagResource(r),
        "UntagResource",
        &summary,
    );
    dispatch(&app, Request::Command(command)).await
}

async fn wrong_method(method: axum::http::Method, uri: axum::http::Uri) -> Response {
    error_response(&ApiError::client(format!(
        "{method} is not allowed on '{}': operations are POST /v1/<operation>; tags use GET, POST and DELETE on /v1/tags/<percent-encoded ARN>",
        uri.path()
    )))
}

async fn unknown_route(uri: axum::http::Uri) -> Response {
    error_response(&ApiError::client(format!(
        "no operation at '{}': AWS Batch operations are POST /v1/<operation> (point the AWS CLI or boto3 at this server with --endpoint-url / endpoint_url)",
        uri.path()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(since: Option<i64>, until: Option<i64>, every: Option<&str>) -> ReportParams {
        ReportParams {
            since,
            until,
            by: None,
            every: every.map(str::to_string),
        }
    }

    #[test]
    fn report_windows_are_checked_before_any_arithmetic() {
        let now = 1_796_000_000_000;
        let p = report_params(params(None, None, None), now).unwrap();
        assert_eq!((p.since, p.until), (now - 7 * 86_400_000, now));
        for (since, until) in [
            (Some(i64::MIN), Some(0)),
            (Some(0), Some(i64::MAX)),
            (None, Some(i64::MIN)),
            (Some(-1), None),
        ] {
            let e = report_params(params(since, until, None), now).unwrap_err();
            assert!(e.message().contains("between 1970 and 9999"), "{e}");
        }
        let e = report_params(params(Some(now), Some(now), None), now).unwrap_err();
        assert!(e.message().contains("not before"), "{e}");
        // A year of hours is allowed; ten years of hours are not.
        let year = 365 * 86_400_000;
        assert!(report_params(params(Some(now - year), Some(now), Some("hour")), now).is_ok());
        let e =
            report_params(params(Some(now - 10 * year), Some(now), Some("hour")), now).unwrap_err();
        assert!(e.message().contains("periods"), "{e}");
        let e = report_params(params(None, None, Some("month")), now).unwrap_err();
        assert!(e.message().contains("hour, day or week"), "{e}");
    }
}
