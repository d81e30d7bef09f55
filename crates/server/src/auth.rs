//! Who may talk to the server: SigV4 authentication of every request, the principals and
//! their keys, dashboard sessions, and the checks that keep a web page from acting through a
//! browser on the same host (content type, `Origin`, `Host`).
//!
//! The guard ([`guard`]) runs before every handler. It refuses what no handler should see,
//! then works out the [`Principal`] and hands it to the handler as a request extension; a
//! handler never looks at credentials itself. Signatures are recomputed with the AWS SDK's
//! own signer (`qm_api::sigv4`), so what boto3, the AWS CLI or an SDK signed verifies here as
//! it would at AWS.
//!
//! Principals live in the store's own table (`qm_store::Principals`) and, for lookups on
//! every request, in memory. With `--no-auth` (loopback only) every request acts as the
//! admin `anonymous`.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use axum::body::Body;
use axum::extract::{Request, State as AxState};
use axum::http::{header, HeaderMap, Method};
use axum::middleware::Next;
use axum::response::Response;
use qm_api::sigv4;
use qm_api::ApiError;
use qm_store::{PrincipalRecord, Principals};

use crate::error::ServerError;
use crate::respond::{error_response, MAX_BODY_BYTES};
use crate::secret::random_bytes;

/// The principal the first start creates, whose keys go to `<data-dir>/credentials`.
pub const ADMIN: &str = qm_api::qm::ADMIN;
/// The principal every request acts as under `--no-auth`.
pub const ANONYMOUS: &str = "anonymous";
/// The dashboard's session cookie.
pub const SESSION_COOKIE: &str = "qm_session";
/// How long a dashboard session lasts.
const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);

/// Who sent a request, as the guard established it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Principal {
    /// Its name.
    pub name: String,
    /// Its groups.
    pub groups: Vec<String>,
    /// Whether it may do everything.
    pub admin: bool,
}

impl From<&PrincipalRecord> for Principal {
    fn from(r: &PrincipalRecord) -> Self {
        Principal {
            name: r.name.clone(),
            groups: r.groups.clone(),
            admin: r.admin,
        }
    }
}

/// What the guard needs to know about the server.
pub struct Settings {
    /// Whether requests must be signed (off only with `--no-auth`).
    pub enabled: bool,
    /// The region signatures must be scoped to.
    pub region: String,
    /// Host names (beyond loopback names and IP literals) requests may address.
    pub hosts: Vec<String>,
    /// Whether `/metrics` may be read without signing.
    pub public_metrics: bool,
    /// The data directory (for the credentials file and messages).
    pub data_dir: PathBuf,
}

/// The guard's state: settings, principals by access key, dashboard sessions.
pub struct Auth {
    settings: Settings,
    inner: Mutex<Inner>,
}

struct Inner {
    store: Option<Principals>,
    by_key: HashMap<String, PrincipalRecord>,
    sessions: HashMap<String, (String, Instant)>,
    /// Names and `group:<g>` entries that are admins besides the principals created so
    /// (the cluster file's `admins`).
    admins: Vec<String>,
}

impl Inner {
    /// The principal a record authenticates, admin when created so or listed in `admins`.
    fn principal(&self, r: &PrincipalRecord) -> Principal {
        let listed = self.admins.iter().any(|e| match e.strip_prefix("group:") {
            Some(g) => r.groups.iter().any(|m| m == g),
            None => *e == r.name,
        });
        Principal {
            admin: r.admin || listed,
            ..Principal::from(r)
        }
    }
}

impl Auth {
    /// Opens the principals of the store at `db`. With authentication on and no admin yet
    /// (a first start), creates [`ADMIN`] and writes its keys to `<data-dir>/credentials`;
    /// returns the lines the banner prints about credentials.
    pub fn open(db: &Path, settings: Settings) -> Result<(Auth, Vec<String>), ServerError> {
        let store = Principals::open(db)?;
        let records = store.list()?;
        let admins = store.admins()?;
        let by_key = records
            .iter()
            .map(|r| (r.access_key_id.clone(), r.clone()))
            .collect();
        let auth = Auth {
            settings,
            inner: Mutex::new(Inner {
                store: Some(store),
                by_key,
                sessions: HashMap::new(),
                admins,
            }),
        };
        let mut lines = Vec::new();
        if !auth.settings.enabled {
            lines.push(
                "auth:     OFF (--no-auth): every request acts as the admin 'anonymous'; loopback only"
                    .to_string(),
            );
            return Ok((auth, lines));
        }
        if !records.iter().any(|r| r.admin) {
            let created = auth.create(ADMIN, Vec::new(), true)?;
            auth.write_credentials(&created)?;
            lines.push(format!(
                "auth:     created the admin principal '{ADMIN}'; its keys are in {}",
                auth.credentials_path().display()
            ));
        }
        lines.push(format!(
            "          export AWS_SHARED_CREDENTIALS_FILE={} AWS_PROFILE={ADMIN}",
            auth.credentials_path().display()
        ));
        Ok((auth, lines))
    }

    fn credentials_path(&self) -> PathBuf {
        let dir = &self.settings.data_dir;
        std::path::absolute(dir)
            .unwrap_or_else(|_| dir.clone())
            .join("credentials")
    }

    /// Writes (or rewrites) the admin's profile file, readable by the server's user only.
    fn write_credentials(&self, admin: &PrincipalRecord) -> Result<(), ServerError> {
        use std::io::Write;
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        let path = self.credentials_path();
        let io = |source| ServerError::Io {
            context: format!("writing {}", path.display()),
            source,
        };
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&path)
            .map_err(io)?;
        // A file that existed keeps its mode through open: set it again.
        f.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(io)?;
        write!(
            f,
            "# Quartermaster admin keys for this server: export AWS_SHARED_CREDENTIALS_FILE={} AWS_PROFILE={ADMIN}\n\
             [{ADMIN}]\naws_access_key_id = {}\naws_secret_access_key = {}\nregion = {}\n",
            path.display(),
            admin.access_key_id,
            admin.secret,
            self.settings.region
        )
        .map_err(io)?;
        f.sync_all().map_err(io)
    }

    /// A new principal with a fresh key pair, stored and usable at once.
    fn create(
        &self,
        name: &str,
        groups: Vec<String>,
        admin: bool,
    ) -> Result<PrincipalRecord, ServerError> {
        let record = PrincipalRecord {
            name: name.to_string(),
            groups,
            admin,
            access_key_id: new_access_key(),
            secret: new_secret(),
            created_ms: crate::clock::now_ms(),
        };
        let mut inner = self.inner.lock().expect("auth lock");
        inner.store.as_mut().expect("store").insert(&record)?;
        inner
            .by_key
            .insert(record.access_key_id.clone(), record.clone());
        Ok(record)
    }

    /// Establishes who sent the request (its body already read, for the signature).
    fn authenticate(
        &self,
        method: &Method,
        uri: &str,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<Principal, ApiError> {
        let Some(auth) = headers.get(header::AUTHORIZATION) else {
            return self.unsigned(method, uri, headers);
        };
        let (auth, date, time) = parse_signature(auth, headers)?;
        let (record, principal) = self.key_owner(&auth.access_key_id)?;
        self.check_scope(&auth, date, time)?;
        let signed = signed_headers(&auth, headers)?;
        let pairs: Vec<(&str, &str)> = signed.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let ok = sigv4::verify(
            &auth,
            method.as_str(),
            uri,
            &pairs,
            body,
            &record.secret,
            time,
        )
        .map_err(incomplete)?;
        if !ok {
            return Err(ApiError::forbidden(
                "InvalidSignatureException",
                format!(
                    "the request signature does not match: the secret access key is not the one of access key '{}', or the request changed after it was signed",
                    record.access_key_id
                ),
            ));
        }
        Ok(principal)
    }

    /// A request without an `Authorization` header: a dashboard session's read, or refused.
    fn unsigned(
        &self,
        method: &Method,
        uri: &str,
        headers: &HeaderMap,
    ) -> Result<Principal, ApiError> {
        if reads_only(method, uri) {
            if let Some(p) = self.session_principal(headers) {
                return Ok(p);
            }
        }
        Err(ApiError::forbidden(
            "MissingAuthenticationTokenException",
            format!(
                "the request is not signed: sign it with AWS Signature Version 4 (boto3, the AWS CLI and qm do), with keys of a principal of this server; the admin's are in {}: export AWS_SHARED_CREDENTIALS_FILE={} AWS_PROFILE={ADMIN}",
                self.credentials_path().display(),
                self.credentials_path().display()
            ),
        ))
    }

    /// The principal whose access key id `key` is, with its record (for the secret).
    fn key_owner(&self, key: &str) -> Result<(PrincipalRecord, Principal), ApiError> {
        let found = {
            let inner = self.inner.lock().expect("auth lock");
            inner
                .by_key
                .get(key)
                .map(|r| (r.clone(), inner.principal(r)))
        };
        found.ok_or_else(|| {
            ApiError::forbidden(
                "UnrecognizedClientException",
                format!(
                    "the access key id '{}' is not a principal's key on this server (deleted, rotated, or from another server): use the keys `qm principal create` or `rotate` printed, or the admin's in {}",
                    printable(key),
                    self.credentials_path().display()
                ),
            )
        })
    }

    /// AWS's checks on the credential scope and the time.
    fn check_scope(
        &self,
        auth: &sigv4::Authorization,
        date: &str,
        time: SystemTime,
    ) -> Result<(), ApiError> {
        let invalid = |m: String| ApiError::forbidden("InvalidSignatureException", m);
        if auth.service != sigv4::SERVICE || auth.region != self.settings.region {
            return Err(invalid(format!(
                "the credential scope is {}/{}, this server takes {}/{}: sign for region {} and service {}",
                printable(&auth.region),
                printable(&auth.service),
                self.settings.region,
                sigv4::SERVICE,
                self.settings.region,
                sigv4::SERVICE
            )));
        }
        if !date.starts_with(&auth.date) {
            return Err(invalid(format!(
                "the credential scope's date {} is not the date of X-Amz-Date {date}",
                printable(&auth.date)
            )));
        }
        let now = SystemTime::now();
        let skew = now
            .duration_since(time)
            .or_else(|_| time.duration_since(now))
            .unwrap_or_default();
        if skew > sigv4::MAX_SKEW {
            return Err(invalid(format!(
                "the request was signed at {date}, {} min from the server's clock: signatures are valid for 15 minutes; check the clock skew between client and server (or resend a freshly signed request)",
                skew.as_secs() / 60
            )));
        }
        Ok(())
    }

    fn session_principal(&self, headers: &HeaderMap) -> Option<Principal> {
        let token = session_cookie(headers)?;
        let mut inner = self.inner.lock().expect("auth lock");
        let now = Instant::now();
        inner.sessions.retain(|_, (_, until)| *until > now);
        let name = inner.sessions.get(token)?.0.clone();
        let record = inner.by_key.values().find(|r| r.name == name)?;
        Some(inner.principal(record))
    }
}

/// The value of the session cookie, if the request carries one.
fn session_cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|c| c.trim().strip_prefix(SESSION_COOKIE)?.strip_prefix('='))
}

fn incomplete(m: String) -> ApiError {
    ApiError::forbidden("IncompleteSignatureException", m)
}

/// The `Authorization` header parsed, with the request's `X-Amz-Date` as sent and as a time.
fn parse_signature<'h>(
    auth: &header::HeaderValue,
    headers: &'h HeaderMap,
) -> Result<(sigv4::Authorization, &'h str, SystemTime), ApiError> {
    let auth = auth
        .to_str()
        .map_err(|_| incomplete("the Authorization header is not ASCII".into()))
        .and_then(|a| sigv4::parse_authorization(a).map_err(incomplete))?;
    let date = headers
        .get("x-amz-date")
        .and_then(|d| d.to_str().ok())
        .ok_or_else(|| incomplete("the signed request has no X-Amz-Date header; sign it with SigV4 (YYYYMMDDTHHMMSSZ)".into()))?;
    let time = sigv4::parse_amz_date(date).ok_or_else(|| {
        incomplete(format!(
            "X-Amz-Date '{date}' is not a time in YYYYMMDDTHHMMSSZ"
        ))
    })?;
    Ok((auth, date, time))
}

/// The headers the signature names (but `X-Amz-Date`), each with its values joined.
fn signed_headers<'a>(
    auth: &'a sigv4::Authorization,
    headers: &HeaderMap,
) -> Result<Vec<(&'a str, String)>, ApiError> {
    let mut signed: Vec<(&str, String)> = Vec::new();
    for name in auth.signed_headers.iter().filter(|h| *h != "x-amz-date") {
        let values: Vec<&str> = headers
            .get_all(name.as_str())
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect();
        if values.is_empty() {
            return Err(incomplete(format!(
                "SignedHeaders names '{}', which the request does not have",
                printable(name)
            )));
        }
        signed.push((name.as_str(), values.join(",")));
    }
    Ok(signed)
}

/// A value quoted in a message: printable ASCII only, at most 128 characters.
fn printable(s: &str) -> String {
    s.chars()
        .take(128)
        .map(|c| if c.is_ascii_graphic() { c } else { '?' })
        .collect()
}

/// `QMAK` and 16 characters of base32: the shape of an AWS access key id (`AKIA...`).
fn new_access_key() -> String {
    const ALPHABET: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    let tail: String = random_bytes(16)
        .iter()
        .map(|b| ALPHABET[usize::from(b & 31)] as char)
        .collect();
    format!("QMAK{tail}")
}

/// 40 characters from a 64-character alphabet, like an AWS secret access key (about 234
/// random bits: uuid v4 fixes 6 bits of each 16 bytes).
fn new_secret() -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    random_bytes(40)
        .iter()
        .map(|b| ALPHABET[usize::from(b & 63)] as char)
        .collect()
}

/// Whether `host` (a `Host` header's value) may be addressed: loopback names and IP
/// literals always (DNS rebinding needs a name that resolves to this host), other names only
/// when configured.
fn host_allowed(host: &str, extra: &[String]) -> bool {
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(h, port)| {
            if port.bytes().all(|b| b.is_ascii_digit()) {
                h
            } else {
                host
            }
        }),
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    name == "localhost"
        || name.ends_with(".localhost")
        || name.parse::<IpAddr>().is_ok()
        || extra.iter().any(|h| h.eq_ignore_ascii_case(&name))
}

/// Whether the request's body is in a content type the API takes. Bodies a web page can
/// send without a CORS preflight (text/plain, forms) are exactly what must be refused.
fn json_content(headers: &HeaderMap, body_len: Option<u64>) -> bool {
    match headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    {
        None => body_len == Some(0),
        Some(ct) => {
            let essence = ct
                .split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase();
            essence == "application/json" || essence.starts_with("application/x-amz-json-")
        }
    }
}

/// Whether a request only reads: what a dashboard session may send. The AWS API reads with
/// `POST` too (`/v1/describe*`, `/v1/list*`, `/v1/get*`); a cross-site page cannot send them
/// with the cookie (SameSite=Strict), nor as JSON without a preflight, nor with a foreign
/// `Origin`.
fn reads_only(method: &Method, uri: &str) -> bool {
    if method == Method::GET {
        return true;
    }
    let path = uri.split('?').next().unwrap_or("");
    method == Method::POST
        && path.strip_prefix("/v1/").is_some_and(|op| {
            !op.contains('/')
                && ["describe", "list", "get"]
                    .iter()
                    .any(|p| op.to_ascii_lowercase().starts_with(p))
        })
}

/// Routes any client may reach without signing.
fn open_route(method: &Method, path: &str) -> bool {
    let get = method == Method::GET;
    (get && (path == "/healthz" || path == "/" || path.starts_with("/assets/")))
        || path == "/qm/v1/session"
        // An attempt's own token is its key (`credentials.rs`): its SDK cannot sign.
        || (get && path.starts_with(crate::credentials::PATH))
}

/// The guard of every request (see the module docs).
pub async fn guard(AxState(auth): AxState<Arc<Auth>>, req: Request, next: Next) -> Response {
    match check(&auth, req).await {
        Ok(req) => next.run(req).await,
        Err(e) => error_response(&e),
    }
}

async fn check(auth: &Auth, mut req: Request) -> Result<Request, ApiError> {
    host_from_authority(&mut req);
    let headers = req.headers();
    check_host_and_origin(headers, &auth.settings.hosts)?;
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let with_body = !matches!(method, Method::GET | Method::HEAD | Method::OPTIONS);
    check_declared_json(headers, with_body)?;
    let open = open_route(&method, &path)
        || (auth.settings.public_metrics && method == Method::GET && path == "/metrics");
    if open && path != "/qm/v1/session" {
        return Ok(req);
    }
    if !auth.settings.enabled {
        // Nothing to verify: the body goes to the handler as it came. Every request acts as
        // the admin `anonymous`.
        let mut req = req;
        req.extensions_mut().insert(Principal {
            name: ANONYMOUS.into(),
            groups: Vec::new(),
            admin: true,
        });
        return Ok(req);
    }
    let (parts, body) = req.into_parts();
    let bytes = axum::body::to_bytes(body, MAX_BODY_BYTES)
        .await
        .map_err(|e| {
            ApiError::client(format!(
                "the request body could not be read ({e}); bodies are limited to {} MiB",
                MAX_BODY_BYTES / (1024 * 1024)
            ))
        })?;
    // A body that came without a Content-Length (chunked) still needs its JSON type.
    if with_body && !json_content(&parts.headers, Some(bytes.len() as u64)) {
        return Err(ApiError::UnsupportedMediaType(
            "send the body as JSON with Content-Type: application/json".into(),
        ));
    }
    if path == "/qm/v1/session" {
        // Logging in is how a browser gets a session: the handler checks the key pair.
        return Ok(Request::from_parts(parts, Body::from(bytes)));
    }
    let uri = parts
        .uri
        .path_and_query()
        .map_or("/", |pq| pq.as_str())
        .to_string();
    let principal = auth.authenticate(&parts.method, &uri, &parts.headers, &bytes)?;
    let mut req = Request::from_parts(parts, Body::from(bytes));
    req.extensions_mut().insert(principal);
    Ok(req)
}

/// HTTP/2 (which TLS clients negotiate) names the host in the URI's authority, not in a Host
/// header: the checks of [`check`], and a signature over `host`, read it as one.
fn host_from_authority(req: &mut Request) {
    if !req.headers().contains_key(header::HOST) {
        let authority = req.uri().authority().map(|a| a.as_str().to_string());
        if let Some(v) = authority.and_then(|a| a.parse().ok()) {
            req.headers_mut().insert(header::HOST, v);
        }
    }
}

/// Refuses a host that is not this server's (DNS rebinding) and an `Origin` of another site.
fn check_host_and_origin(headers: &HeaderMap, hosts: &[String]) -> Result<(), ApiError> {
    let denied = |m: String| ApiError::forbidden("AccessDeniedException", m);
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    if !host_allowed(host, hosts) {
        return Err(denied(format!(
            "requests for host '{}' are refused (DNS rebinding): address the server by IP, localhost, or a name listed in [auth] hosts of its config file",
            printable(host)
        )));
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let own = [format!("http://{host}"), format!("https://{host}")];
        if !own.iter().any(|o| origin.as_bytes() == o.as_bytes()) {
            return Err(denied(format!(
                "cross-origin requests are refused: Origin '{}' is not this server ({})",
                printable(origin.to_str().unwrap_or("?")),
                own[0]
            )));
        }
    }
    Ok(())
}

/// A body-less request may say nothing about it (no Content-Length, no Content-Type); one
/// that declares a body must declare JSON. The body's real length is checked once read.
fn check_declared_json(headers: &HeaderMap, with_body: bool) -> Result<(), ApiError> {
    let declared_len = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if with_body && !json_content(headers, Some(declared_len.unwrap_or(0))) {
        return Err(ApiError::UnsupportedMediaType(format!(
            "Content-Type '{}' is not accepted: send the body as JSON with Content-Type: application/json",
            printable(
                headers
                    .get(header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("(none)")
            )
        )));
    }
    Ok(())
}

/// Whether the listen address lets `--no-auth` run: loopback only.
pub fn no_auth_allowed(listen: SocketAddr) -> bool {
    listen.ip().is_loopback()
}

pub mod api;

pub(crate) use api::routes;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_loopback_names_ip_literals_or_configured_names() {
        let extra = vec!["gpu-box.example".to_string()];
        for ok in [
            "localhost:7611",
            "127.0.0.1:7611",
            "[::1]:7611",
            "10.0.0.5",
            "app.localhost",
            "GPU-box.example:80",
        ] {
            assert!(host_allowed(ok, &extra), "{ok}");
        }
        for bad in [
            "evil.example",
            "evil.example:7611",
            "",
            "127.0.0.1.evil.example",
        ] {
            assert!(!host_allowed(bad, &extra), "{bad}");
        }
    }

    #[test]
    fn only_json_bodies_pass() {
        let mut h = HeaderMap::new();
        assert!(json_content(&h, Some(0)), "no body, no type");
        assert!(!json_content(&h, Some(2)), "a body needs a type");
        for (ct, ok) in [
            ("application/json", true),
            ("application/json; charset=utf-8", true),
            ("application/x-amz-json-1.1", true),
            ("text/plain", false),
            ("application/x-www-form-urlencoded", false),
            ("multipart/form-data; boundary=x", false),
        ] {
            h.insert(header::CONTENT_TYPE, ct.parse().unwrap());
            assert_eq!(json_content(&h, Some(2)), ok, "{ct}");
        }
    }

    #[test]
    fn keys_look_like_aws_keys_and_differ() {
        let (a, b) = (new_access_key(), new_access_key());
        assert!(a.starts_with("QMAK") && a.len() == 20 && a != b);
        let s = new_secret();
        assert_eq!(s.len(), 40);
        assert_ne!(s, new_secret());
    }

    #[test]
    fn a_session_may_read_through_the_aws_api_but_not_change_anything() {
        for (m, uri, ok) in [
            (Method::GET, "/qm/v1/usage", true),
            (Method::POST, "/v1/describejobqueues", true),
            (Method::POST, "/v1/listservicejobs?x=1", true),
            (Method::POST, "/v1/getjobqueuesnapshot", true),
            (Method::POST, "/v1/submitservicejob", false),
            (Method::POST, "/v1/updatequotashare", false),
            (Method::POST, "/v1/tags/arn", false),
            (Method::POST, "/qm/v1/principals", false),
            (Method::DELETE, "/qm/v1/principals/a", false),
        ] {
            assert_eq!(reads_only(&m, uri), ok, "{m} {uri}");
        }
    }

    #[test]
    fn the_session_cookie_is_found_among_others() {
        let mut h = HeaderMap::new();
        h.insert(header::COOKIE, "a=1; qm_session=tok; b=2".parse().unwrap());
        assert_eq!(session_cookie(&h), Some("tok"));
        h.insert(header::COOKIE, "qm_sessionx=tok".parse().unwrap());
        assert_eq!(session_cookie(&h), None);
    }
}
