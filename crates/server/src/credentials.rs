//! Credentials of the job's own role (issue 40): an attempt's processes and its transfers act
//! as the job's `RoleArn`, never as the server.
//!
//! The server serves each attempt the AWS SDKs' container credentials endpoint
//! (`GET /qm/v1/attempt-credentials/{attempt}`, what `AWS_CONTAINER_CREDENTIALS_FULL_URI`
//! names), answering only the attempt's own token (`AWS_CONTAINER_AUTHORIZATION_TOKEN`) and
//! only while the attempt holds capacity. The token is an HMAC of the attempt id under a key
//! kept in the data dir, so a restart answers the tokens of adopted attempts and nothing
//! secret is logged. The credentials come from `[credentials] source`:
//!
//! - `assume_role`: STS `AssumeRole` of the job's `RoleArn`, signed with the server's own
//!   keys, session name `qm-<job name>`; cached per (role, job) and assumed again when less
//!   than `REFRESH_BEFORE` (15 minutes) is left, so a job that runs for days keeps valid credentials.
//! - `profiles`: a profile of the server's shared credentials file per role ARN (an
//!   on-premises S3 without STS). A role no entry names is refused.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use qm_storage::Keys;

use crate::error::ServerError;
use serde::Serialize;

/// Credentials are assumed again when less than this is left of them: the SDKs refresh a
/// few minutes before expiry, and must then get new ones.
const REFRESH_BEFORE: Duration = Duration::from_secs(15 * 60);

/// The path of the endpoint, the attempt id follows.
pub const PATH: &str = "/qm/v1/attempt-credentials/";

/// `[credentials]`, resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Where the credentials come from.
    pub source: Source,
    /// Quota share (or `*`) to the role ARN patterns its jobs may act as.
    pub shares: BTreeMap<String, Vec<String>>,
}

/// Where the credentials come from (`[credentials] source`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// STS `AssumeRole` of the job's role, signed for the region of the server's storage.
    AssumeRole {
        /// STS's endpoint; `None`: AWS's in that region.
        endpoint: Option<String>,
        /// `DurationSeconds` (1,800 to 43,200).
        duration_seconds: u32,
    },
    /// Role ARN to a profile of `file`.
    Profiles {
        /// The shared credentials file.
        file: PathBuf,
        /// Role ARN to profile name.
        roles: BTreeMap<String, String>,
    },
}

/// Credentials handed to an attempt (`Debug` shows the key id only).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Issued {
    /// The key pair and, for temporary ones, the session token.
    pub keys: Keys,
    /// When they expire (epoch ms).
    pub expiration_ms: i64,
}

/// The endpoint's answer, in the shape the AWS SDKs read.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct Answer<'a> {
    access_key_id: &'a str,
    secret_access_key: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    token: Option<&'a str>,
    expiration: String,
    role_arn: &'a str,
}

/// Issues and serves attempts' credentials.
pub struct Broker {
    settings: Settings,
    /// STS's endpoint (`source = "assume_role"`).
    sts: String,
    key: ring::hmac::Key,
    server_keys: Option<Keys>,
    http: reqwest::Client,
    base: String,
    region: String,
    s3_endpoint: Option<String>,
    cache: tokio::sync::Mutex<BTreeMap<(String, String), Issued>>,
}

impl Broker {
    /// A broker for a server listening on `listen`, with `secret` (the data dir's key) and the
    /// server's own storage settings (its keys sign AssumeRole; its region and endpoint are
    /// the attempts'). Refuses an address the SDKs would not fetch credentials from over
    /// plain HTTP (they allow loopback only).
    pub fn new(
        settings: Settings,
        secret: &[u8],
        listen: SocketAddr,
        storage: &qm_storage::Settings,
    ) -> Result<Broker, String> {
        let ip = listen.ip();
        let host = match ip {
            std::net::IpAddr::V4(v4) if v4.is_unspecified() => "127.0.0.1".to_string(),
            std::net::IpAddr::V4(v4) if v4.is_loopback() => v4.to_string(),
            std::net::IpAddr::V6(v6) if v6.is_unspecified() || v6.is_loopback() => "[::1]".to_string(),
            other => return Err(format!(
                "jobs fetch their credentials from this server over plain HTTP on loopback, as the AWS SDKs allow, but it listens on {other} only: listen on 0.0.0.0 or 127.0.0.1 as well"
            )),
        };
        // reqwest is built without a default TLS provider: the server's is ring.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let sts = match &settings.source {
            Source::AssumeRole {
                endpoint: Some(e), ..
            } => e.clone(),
            _ => format!("https://sts.{}.amazonaws.com", storage.region),
        };
        Ok(Broker {
            settings,
            sts,
            key: ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret),
            server_keys: storage.keys.clone(),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(20))
                .build()
                .map_err(|e| format!("an HTTP client for STS: {e}"))?,
            base: format!("http://{host}:{}{PATH}", listen.port()),
            region: storage.region.clone(),
            s3_endpoint: storage.endpoint.clone(),
            cache: tokio::sync::Mutex::new(BTreeMap::new()),
        })
    }

    /// One line for the banner.
    pub fn describe(&self) -> String {
        match &self.settings.source {
            Source::AssumeRole { .. } => format!(
                "credentials: each attempt gets its job's RoleArn, assumed with STS at {}, through {}<attempt> (AWS_CONTAINER_CREDENTIALS_FULL_URI); its transfers use it too",
                self.sts, self.base
            ),
            Source::Profiles { file, roles, .. } => format!(
                "credentials: each attempt gets the profile of {} its job's RoleArn maps to ({} role(s)), through {}<attempt>; its transfers use it too",
                file.display(),
                roles.len(),
                self.base
            ),
        }
    }

    /// What attempt `attempt` is told: the endpoint and its token.
    pub fn for_attempt(&self, attempt: qm_core::AttemptId) -> qm_executor::RoleCredentials {
        qm_executor::RoleCredentials {
            url: format!("{}{attempt}", self.base),
            token: crate::secret::hex(
                ring::hmac::sign(&self.key, &attempt.0.to_be_bytes()).as_ref(),
            ),
            region: self.region.clone(),
            s3_endpoint: self.s3_endpoint.clone(),
        }
    }

    /// Whether `token` is attempt `attempt`'s (in constant time).
    pub fn verify(&self, attempt: qm_core::AttemptId, token: &str) -> bool {
        crate::secret::unhex(token.trim()).is_some_and(|tag| {
            ring::hmac::verify(&self.key, &attempt.0.to_be_bytes(), &tag).is_ok()
        })
    }

    /// Whether jobs of `share` may act as `role` (`[credentials.shares]`).
    pub fn allows(&self, share: &str, role: &str) -> bool {
        [share, "*"]
            .iter()
            .filter_map(|s| self.settings.shares.get(*s))
            .flatten()
            .any(|pattern| qm_core::glob::matches(pattern, role))
    }

    /// Credentials of `role` for the job `job_id` (named `job_name`), cached while more than
    /// `REFRESH_BEFORE` (15 minutes) is left of them.
    pub async fn issue(
        &self,
        role: &str,
        job_id: &str,
        job_name: &str,
        now_ms: i64,
    ) -> Result<Issued, ServerError> {
        let key = (role.to_string(), job_id.to_string());
        let fresh = |i: &Issued| i.expiration_ms - now_ms > REFRESH_BEFORE.as_millis() as i64;
        {
            let mut cache = self.cache.lock().await;
            if let Some(i) = cache.get(&key).filter(|i| fresh(i)) {
                return Ok(i.clone());
            }
            // What ended jobs were issued goes as it expires: the cache holds at most one
            // lifetime of credentials per role and job, however long the server runs.
            cache.retain(|_, i| i.expiration_ms > now_ms);
        }
        let issued = match &self.settings.source {
            Source::Profiles { file, roles, .. } => {
                let profile = roles
                    .get(role)
                    .ok_or_else(|| ServerError::Credentials(format!(
                        "no profile is configured for role '{role}' ([credentials.roles] of the server's config)"
                    )))?;
                let keys = qm_storage::settings::profile_keys(file, profile).ok_or_else(|| {
                    ServerError::Credentials(format!(
                        "profile '{profile}' of {} has no aws_access_key_id and aws_secret_access_key",
                        file.display()
                    ))
                })?;
                // Static keys: read again once an hour, so a rotated file is picked up.
                Issued {
                    keys,
                    expiration_ms: now_ms + 3_600_000,
                }
            }
            Source::AssumeRole {
                duration_seconds, ..
            } => {
                self.assume_role(*duration_seconds, role, &session_name(job_name))
                    .await?
            }
        };
        self.cache.lock().await.insert(key, issued.clone());
        Ok(issued)
    }

    /// The endpoint's JSON for `issued` of `role`.
    pub fn answer(issued: &Issued, role: &str) -> Vec<u8> {
        serde_json::to_vec(&Answer {
            access_key_id: &issued.keys.access_key_id,
            secret_access_key: &issued.keys.secret_access_key,
            token: issued.keys.session_token.as_deref(),
            expiration: qm_core::time::utc(issued.expiration_ms),
            role_arn: role,
        })
        .unwrap_or_default()
    }

    /// STS `AssumeRole`, signed with the server's keys.
    async fn assume_role(
        &self,
        duration_seconds: u32,
        role: &str,
        session: &str,
    ) -> Result<Issued, ServerError> {
        let sts = |why: String| {
            ServerError::Credentials(format!("STS AssumeRole of '{role}' failed: {why}"))
        };
        let keys = self
            .server_keys
            .as_ref()
            .ok_or_else(|| ServerError::Credentials("the server has no keys of its own to call STS AssumeRole with: give it some ([storage] profile, or AWS_ACCESS_KEY_ID)".into()))?;
        let body = form(&[
            ("Action", "AssumeRole"),
            ("Version", "2011-06-15"),
            ("RoleArn", role),
            ("RoleSessionName", session),
            ("DurationSeconds", &duration_seconds.to_string()),
        ]);
        let url = self.sts.trim_end_matches('/').to_string() + "/";
        let headers = sts_headers(&url, &self.region, keys, &body).map_err(sts)?;
        let mut request = self.http.post(&url).body(body);
        for (name, value) in headers {
            request = request.header(name, value);
        }
        let response = request.send().await.map_err(|e| sts(e.to_string()))?;
        let status = response.status();
        let text = response.text().await.map_err(|e| sts(e.to_string()))?;
        if !status.is_success() {
            let why = match (tag(&text, "Code"), tag(&text, "Message")) {
                (Some(code), Some(message)) => format!("{code}: {message}"),
                _ => format!("HTTP {status}"),
            };
            return Err(sts(why));
        }
        parse_assumed(&text).ok_or_else(|| sts("its answer holds no credentials".into()))
    }
}

/// The headers of an STS request of `body` to `url`: its content type and its SigV4
/// signature by `keys` (with their session token, for temporary ones).
fn sts_headers(
    url: &str,
    region: &str,
    keys: &Keys,
    body: &str,
) -> Result<Vec<(String, String)>, String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("the endpoint '{url}': {e}"))?;
    let host = match (parsed.host_str(), parsed.port()) {
        (Some(h), Some(port)) => format!("{h}:{port}"),
        (Some(h), None) => h.to_string(),
        (None, _) => return Err(format!("the endpoint '{url}' names no host")),
    };
    let content_type = "application/x-www-form-urlencoded; charset=utf-8";
    let creds = qm_api::sigv4::Credentials {
        access_key_id: keys.access_key_id.clone(),
        secret_access_key: keys.secret_access_key.clone(),
    };
    let mut headers = qm_api::sigv4::sign_for(
        qm_api::sigv4::Target {
            service: "sts",
            region,
        },
        qm_api::sigv4::Caller {
            creds: &creds,
            session_token: keys.session_token.as_deref(),
        },
        "POST",
        url,
        &[("host", &host), ("content-type", content_type)],
        body.as_bytes(),
        SystemTime::now(),
    )?;
    headers.push(("content-type".into(), content_type.into()));
    Ok(headers)
}

/// The instance metadata service, which answers with the machine's role.
const METADATA_V4: &str = "169.254.169.254";
/// Its IPv6 address (EC2's Nitro instances).
const METADATA_V6: &str = "fd00:ec2::254";

/// Keeps processes of `uids` from the instance metadata service: a REJECT rule per address
/// family by uid owner (`iptables -m owner --uid-owner FIRST-LAST`), added once (checked
/// with `-C` first). Where no rule can be added (no iptables, no CAP_NET_ADMIN) it looks
/// whether a metadata service answers here: none is fine (said in the banner), one is
/// refused with how to fix it. Returns the banner's line.
pub fn fence_metadata(uids: qm_executor::JobUids) -> Result<String, String> {
    let owner = format!("{}-{}", uids.first, uids.last);
    let rule = |dest: &str| -> Vec<String> {
        [
            "OUTPUT",
            "-d",
            dest,
            "-m",
            "owner",
            "--uid-owner",
            &owner,
            "-j",
            "REJECT",
        ]
        .map(String::from)
        .to_vec()
    };
    let v4 = ensure_rule("iptables", &rule(&format!("{METADATA_V4}/32")));
    match v4 {
        Ok(()) => {
            // IPv6 may be off on the machine (then no job reaches the v6 address either): a
            // failed rule matters only where a metadata service answers there.
            if let Err(e) = ensure_rule("ip6tables", &rule(&format!("{METADATA_V6}/128"))) {
                if answers(&format!("[{METADATA_V6}]:80")) {
                    return Err(format!(
                        "a metadata service answers at {METADATA_V6} and jobs cannot be kept from it (ip6tables: {e}): make ip6tables work here, or set [credentials] metadata = \"allow\""
                    ));
                }
                tracing::warn!("ip6tables: {e}; no metadata service answers at {METADATA_V6} here");
            }
            Ok(format!("metadata: attempts under uids {owner} cannot reach {METADATA_V4} (an iptables REJECT rule by uid owner); [credentials] metadata = \"allow\" lets them"))
        }
        // No firewall to be had: fine only where no metadata service answers.
        Err(e) => {
            let why = match e.kind() {
                std::io::ErrorKind::NotFound => "iptables is not installed".to_string(),
                _ => format!("iptables: {e}"),
            };
            if answers(&format!("{METADATA_V4}:80")) {
                Err(format!(
                    "a metadata service answers at {METADATA_V4}, which would hand jobs this machine's role, and jobs cannot be kept from it ({why}): install iptables and run the server where it may add firewall rules (CAP_NET_ADMIN), or set [credentials] metadata = \"allow\""
                ))
            } else {
                Ok(format!("metadata: no service answers at {METADATA_V4} here; none is fenced should one appear ({why})"))
            }
        }
    }
}

/// Whether something accepts a TCP connection at `addr` (`host:port`) within 300 ms.
fn answers(addr: &str) -> bool {
    addr.parse::<SocketAddr>()
        .is_ok_and(|a| std::net::TcpStream::connect_timeout(&a, Duration::from_millis(300)).is_ok())
}

/// Adds `rule` with `program` (`iptables`, `ip6tables`) unless it is there.
fn ensure_rule(program: &str, rule: &[String]) -> std::io::Result<()> {
    let run = |op: &str| {
        std::process::Command::new(program)
            .arg("-w")
            .arg(op)
            .args(rule)
            .stdin(std::process::Stdio::null())
            .output()
    };
    if run("-C")?.status.success() {
        return Ok(());
    }
    let added = run("-I")?;
    if added.status.success() {
        return Ok(());
    }
    Err(std::io::Error::other(
        String::from_utf8_lossy(&added.stderr).trim().to_string(),
    ))
}

/// The credentials of an `AssumeRoleResponse`.
fn parse_assumed(xml: &str) -> Option<Issued> {
    Some(Issued {
        keys: Keys {
            access_key_id: tag(xml, "AccessKeyId")?,
            secret_access_key: tag(xml, "SecretAccessKey")?,
            session_token: tag(xml, "SessionToken"),
        },
        expiration_ms: qm_core::time::parse_utc(&tag(xml, "Expiration")?)?,
    })
}

/// The text of the first `<name>...</name>` of `xml` (STS's values hold no markup).
fn tag(xml: &str, name: &str) -> Option<String> {
    let open = format!("<{name}>");
    let start = xml.find(&open)? + open.len();
    let end = start + xml[start..].find(&format!("</{name}>"))?;
    Some(xml[start..end].trim().to_string())
}

/// A session name STS accepts (`[\w+=,.@-]{2,64}`): `qm-` and the job's name.
fn session_name(job_name: &str) -> String {
    let mut name: String = "qm-"
        .chars()
        .chain(job_name.chars())
        .map(|c| {
            if c.is_ascii_alphanumeric() || "_+=,.@-".contains(c) {
                c
            } else {
                '-'
            }
        })
        .collect();
    name.truncate(64);
    name
}

/// `application/x-www-form-urlencoded` of `pairs`, every byte but RFC 3986's unreserved ones
/// percent-encoded, as the AWS SDKs write it: a service that checks the signature over the
/// form it parsed and encoded again (moto does) gets the bytes that were signed.
fn form(pairs: &[(&str, &str)]) -> String {
    use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
    const ENCODED: &AsciiSet = &NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'.')
        .remove(b'_')
        .remove(b'~');
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={}", utf8_percent_encode(v, ENCODED)))
        .collect::<Vec<_>>()
        .join("&")
}

#[cfg(test)]
mod tests {
    use super::*;
    use qm_core::AttemptId;

    #[test]
    fn a_form_encodes_every_byte_but_the_unreserved_ones_as_the_sdks_do() {
        assert_eq!(
            form(&[
                ("RoleArn", "arn:aws:iam::1:role/team-a"),
                ("RoleSessionName", "qm-x_y.z~ é"),
            ]),
            "RoleArn=arn%3Aaws%3Aiam%3A%3A1%3Arole%2Fteam-a&RoleSessionName=qm-x_y.z~%20%C3%A9"
        );
    }

    fn broker(listen: &str) -> Result<Broker, String> {
        let storage = qm_storage::Settings::resolve(&Default::default(), &BTreeMap::new());
        Broker::new(
            Settings {
                source: Source::Profiles {
                    file: PathBuf::from("/nonexistent"),
                    roles: BTreeMap::new(),
                },
                shares: BTreeMap::new(),
            },
            b"0123456789abcdef0123456789abcdef",
            listen.parse().unwrap(),
            &storage,
        )
    }

    #[test]
    fn an_attempt_s_token_opens_its_own_endpoint_only() {
        let b = broker("0.0.0.0:7611").unwrap();
        let c = b.for_attempt(AttemptId(42));
        assert_eq!(c.url, "http://127.0.0.1:7611/qm/v1/attempt-credentials/42");
        assert!(b.verify(AttemptId(42), &c.token));
        assert!(!b.verify(AttemptId(43), &c.token));
        assert!(!b.verify(AttemptId(42), ""));
        assert!(!b.verify(AttemptId(42), "zz"));
        // Another server's key (another data dir) makes other tokens.
        let other = Broker::new(
            Settings {
                source: Source::Profiles {
                    file: PathBuf::new(),
                    roles: BTreeMap::new(),
                },
                shares: BTreeMap::new(),
            },
            b"another key, another data dir!!!",
            "127.0.0.1:7611".parse().unwrap(),
            &qm_storage::Settings::resolve(&Default::default(), &BTreeMap::new()),
        )
        .unwrap();
        assert!(!other.verify(AttemptId(42), &c.token));
    }

    #[test]
    fn a_server_only_on_a_public_address_is_refused_saying_why() {
        let err = broker("10.1.2.3:7611").err().unwrap();
        assert!(
            err.contains("loopback") && err.contains("10.1.2.3"),
            "{err}"
        );
        assert!(broker("[::]:7611")
            .unwrap()
            .for_attempt(AttemptId(1))
            .url
            .starts_with("http://[::1]:7611/"));
    }

    #[test]
    fn an_assume_role_answer_is_read_and_an_error_s_code_kept() {
        let xml = r#"<AssumeRoleResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
          <AssumeRoleResult><Credentials>
            <SessionToken>FQoG+token/x</SessionToken>
            <SecretAccessKey>wJalr</SecretAccessKey>
            <Expiration>2026-12-07T06:42:01.500Z</Expiration>
            <AccessKeyId>ASIAEXAMPLE</AccessKeyId>
          </Credentials></AssumeRoleResult></AssumeRoleResponse>"#;
        let issued = parse_assumed(xml).unwrap();
        assert_eq!(issued.keys.access_key_id, "ASIAEXAMPLE");
        assert_eq!(issued.keys.session_token.as_deref(), Some("FQoG+token/x"));
        assert_eq!(
            qm_core::time::utc(issued.expiration_ms),
            "2026-12-07T06:42:01Z"
        );
        assert_eq!(issued.expiration_ms % 1000, 500);
        let err = "<ErrorResponse><Error><Code>AccessDenied</Code><Message>not allowed</Message></Error></ErrorResponse>";
        assert_eq!(tag(err, "Code").as_deref(), Some("AccessDenied"));
        assert!(parse_assumed(err).is_none());
    }

    #[test]
    fn session_names_keep_what_sts_accepts() {
        assert_eq!(session_name("train/run 1"), "qm-train-run-1");
        assert_eq!(session_name(&"x".repeat(100)).len(), 64);
    }

    #[tokio::test]
    async fn a_role_no_profile_names_is_refused_and_a_named_one_read_from_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("credentials");
        std::fs::write(
            &file,
            "[team-a]\naws_access_key_id = AKIATEAMA\naws_secret_access_key = s3cr3t\n",
        )
        .unwrap();
        let roles = BTreeMap::from([("arn:aws:iam::1:role/a".to_string(), "team-a".to_string())]);
        let storage = qm_storage::Settings::resolve(&Default::default(), &BTreeMap::new());
        let b = Broker::new(
            Settings {
                source: Source::Profiles { file, roles },
                shares: BTreeMap::from([
                    (
                        "team-a".to_string(),
                        vec!["arn:aws:iam::1:role/a".to_string()],
                    ),
                    (
                        "*".to_string(),
                        vec!["arn:aws:iam::1:role/shared-*".to_string()],
                    ),
                ]),
            },
            b"k",
            "127.0.0.1:1".parse().unwrap(),
            &storage,
        )
        .unwrap();
        let i = b.issue("arn:aws:iam::1:role/a", "j", "n", 0).await.unwrap();
        assert_eq!(i.keys.access_key_id, "AKIATEAMA");
        // A share acts only as the roles it is allowed, exactly or by pattern.
        assert!(b.allows("team-a", "arn:aws:iam::1:role/a"));
        assert!(!b.allows("team-b", "arn:aws:iam::1:role/a"));
        assert!(b.allows("team-b", "arn:aws:iam::1:role/shared-data"));
        assert!(!b.allows("team-a", "arn:aws:iam::1:role/admin"));
        // Cached per role and job; an expired entry goes with the next issue.
        b.issue("arn:aws:iam::1:role/a", "k", "n", 0).await.unwrap();
        assert_eq!(b.cache.lock().await.len(), 2);
        b.issue("arn:aws:iam::1:role/a", "k", "n", 7_200_000)
            .await
            .unwrap();
        assert_eq!(b.cache.lock().await.len(), 1);
        let err = b
            .issue("arn:aws:iam::1:role/b", "j", "n", 0)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("role/b"), "{err}");
    }
}
