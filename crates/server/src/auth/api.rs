//! `/qm/v1/principals`, `/qm/v1/whoami` and `/qm/v1/session`: managing principals (admins
//! only) and the dashboard's login. Secrets are returned once, by create and rotate, and never
//! logged.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::{Path, State as AxState};
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::Response;
use axum::routing::{delete, get, post};
use axum::{Extension, Router};
use qm_api::ApiError;
use qm_store::PrincipalRecord;
use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq;

use super::{Auth, Principal, ADMIN, ANONYMOUS, SESSION_COOKIE, SESSION_TTL};
use crate::respond::{error_response, ok_response};

/// The routes of this module.
pub(crate) fn routes() -> Router<Arc<Auth>> {
    Router::new()
        .route("/qm/v1/principals", get(list).post(create))
        .route("/qm/v1/principals/{name}", delete(remove))
        .route("/qm/v1/principals/{name}/rotate", post(rotate))
        .route("/qm/v1/whoami", get(whoami))
        .route("/qm/v1/admins", get(admins).put(set_admins))
        .route("/qm/v1/session", post(login).delete(logout))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateRequest {
    name: String,
    #[serde(default)]
    groups: Vec<String>,
    #[serde(default)]
    admin: bool,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Created {
    name: String,
    groups: Vec<String>,
    access_key_id: String,
    secret_access_key: String,
    created_at: i64,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Listed {
    name: String,
    groups: Vec<String>,
    access_key_id: String,
    created_at: i64,
    admin: bool,
}

#[derive(Serialize)]
struct WhoAmI<'a> {
    name: &'a str,
    groups: &'a [String],
    admin: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct LoginRequest {
    access_key_id: String,
    secret_access_key: String,
}

fn json<T: Serialize>(v: &T) -> Response {
    match crate::reply::encode(v) {
        Ok(body) => ok_response(body),
        Err(e) => error_response(&e),
    }
}

fn created(r: &PrincipalRecord) -> Response {
    json(&Created {
        name: r.name.clone(),
        groups: r.groups.clone(),
        access_key_id: r.access_key_id.clone(),
        secret_access_key: r.secret.clone(),
        created_at: r.created_ms,
    })
}

fn admin_only(p: &Principal, action: &str, resource: &str) -> Result<(), ApiError> {
    if p.admin {
        return Ok(());
    }
    Err(ApiError::forbidden(
        "AccessDeniedException",
        format!(
            "{} may not {action} {resource}: managing principals is for admins",
            p.name
        ),
    ))
}

/// A principal's name: what audit entries and job owners show, so plain and short.
fn check_name(field: &str, name: &str) -> Result<(), ApiError> {
    if !qm_api::validate::is_principal_name(name) {
        return Err(ApiError::client(format!(
            "{field}: '{}' is not a principal name; use 1-64 letters, digits and _ . @ -",
            name.chars().take(64).collect::<String>()
        )));
    }
    if name == ANONYMOUS {
        return Err(ApiError::client(format!(
            "{field}: '{ANONYMOUS}' is reserved for requests under --no-auth; choose another name"
        )));
    }
    Ok(())
}

fn parse<T: serde::de::DeserializeOwned>(body: &Bytes) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError::client(format!("the body: {e}")))
}

async fn list(AxState(auth): AxState<Arc<Auth>>, Extension(p): Extension<Principal>) -> Response {
    if let Err(e) = admin_only(&p, "list", "the principals") {
        return error_response(&e);
    }
    let rows: Vec<Listed> = auth
        .records()
        .into_iter()
        .map(|r| Listed {
            name: r.name,
            groups: r.groups,
            access_key_id: r.access_key_id,
            created_at: r.created_ms,
            admin: r.admin,
        })
        .collect();
    json(&serde_json::json!({ "principals": rows }))
}

async fn create(
    AxState(auth): AxState<Arc<Auth>>,
    Extension(p): Extension<Principal>,
    body: Bytes,
) -> Response {
    let result = (|| {
        let req: CreateRequest = parse(&body)?;
        admin_only(&p, "create", &format!("principal {}", req.name))?;
        check_name("name", &req.name)?;
        for (i, g) in req.groups.iter().enumerate() {
            check_name(&format!("groups[{i}]"), g)?;
        }
        if auth.records().iter().any(|r| r.name == req.name) {
            return Err(ApiError::client(format!(
                "name: principal '{}' exists already; `qm principal rotate {}` gives it new keys",
                req.name, req.name
            )));
        }
        auth.create(&req.name, req.groups, req.admin)
            .map_err(|e| ApiError::server(format!("storing the principal: {e}")))
    })();
    match result {
        Ok(r) => {
            tracing::info!(principal = %r.name, by = %p.name, "principal created");
            created(&r)
        }
        Err(e) => error_response(&e),
    }
}

async fn remove(
    AxState(auth): AxState<Arc<Auth>>,
    Extension(p): Extension<Principal>,
    Path(name): Path<String>,
) -> Response {
    let result =
        admin_only(&p, "delete", &format!("principal {name}")).and_then(|()| auth.delete(&name));
    match result {
        Ok(()) => {
            tracing::info!(principal = %name, by = %p.name, "principal deleted");
            json(&serde_json::json!({}))
        }
        Err(e) => error_response(&e),
    }
}

async fn rotate(
    AxState(auth): AxState<Arc<Auth>>,
    Extension(p): Extension<Principal>,
    Path(name): Path<String>,
) -> Response {
    let result = admin_only(&p, "rotate the keys of", &format!("principal {name}"))
        .and_then(|()| auth.rotate(&name));
    match result {
        Ok(r) => {
            tracing::info!(principal = %name, by = %p.name, "principal keys rotated");
            created(&r)
        }
        Err(e) => error_response(&e),
    }
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Admins {
    admins: Vec<String>,
}

/// `GET /qm/v1/admins`: who is an admin besides the principals created as admins.
async fn admins(AxState(auth): AxState<Arc<Auth>>) -> Response {
    let admins = auth.inner.lock().expect("auth lock").admins.clone();
    json(&Admins { admins })
}

/// `PUT /qm/v1/admins {admins: [name | group:name]}` (admins only; what `qm apply` sets from
/// the cluster file's `admins`). The principals created as admins stay admins whatever the
/// list says, so no list locks everyone out.
async fn set_admins(
    AxState(auth): AxState<Arc<Auth>>,
    Extension(p): Extension<Principal>,
    body: Bytes,
) -> Response {
    let result = (|| {
        admin_only(&p, "change", "the admins")?;
        let req: Admins = parse(&body)?;
        for (i, e) in req.admins.iter().enumerate() {
            check_name(
                &format!("admins[{i}]"),
                e.strip_prefix("group:").unwrap_or(e),
            )?;
        }
        let mut inner = auth.inner.lock().expect("auth lock");
        inner
            .store
            .as_mut()
            .expect("store")
            .set_admins(&req.admins)
            .map_err(|e| ApiError::server(format!("storing the admins: {e}")))?;
        inner.admins = req.admins.clone();
        Ok(req)
    })();
    match result {
        Ok(req) => {
            tracing::info!(admins = %req.admins.join(","), by = %p.name, "admins set");
            json(&req)
        }
        Err(e) => error_response(&e),
    }
}

async fn whoami(Extension(p): Extension<Principal>) -> Response {
    json(&WhoAmI {
        name: &p.name,
        groups: &p.groups,
        admin: p.admin,
    })
}

async fn login(AxState(auth): AxState<Arc<Auth>>, body: Bytes) -> Response {
    let result = parse::<LoginRequest>(&body).and_then(|req| auth.login(&req));
    match result {
        Ok((token, name)) => {
            let mut r = json(&serde_json::json!({ "name": name }));
            let cookie = format!(
                "{SESSION_COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}",
                SESSION_TTL.as_secs()
            );
            if let Ok(v) = HeaderValue::from_str(&cookie) {
                r.headers_mut().insert(header::SET_COOKIE, v);
            }
            r
        }
        Err(e) => error_response(&e),
    }
}

async fn logout(AxState(auth): AxState<Arc<Auth>>, headers: HeaderMap) -> Response {
    if let Some(token) = super::session_cookie(&headers) {
        auth.inner.lock().expect("auth lock").sessions.remove(token);
    }
    let mut r = json(&serde_json::json!({}));
    let gone = format!("{SESSION_COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0");
    if let Ok(v) = HeaderValue::from_str(&gone) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}

impl Auth {
    fn records(&self) -> Vec<PrincipalRecord> {
        let inner = self.inner.lock().expect("auth lock");
        let mut v: Vec<PrincipalRecord> = inner.by_key.values().cloned().collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    fn delete(&self, name: &str) -> Result<(), ApiError> {
        let mut inner = self.inner.lock().expect("auth lock");
        let Some(target) = inner.by_key.values().find(|r| r.name == name).cloned() else {
            return Err(ApiError::client(format!(
                "name: there is no principal '{name}'; `qm principal list` shows them"
            )));
        };
        let admins = inner.by_key.values().filter(|r| r.admin).count();
        if target.admin && admins == 1 {
            return Err(ApiError::client(format!(
                "name: '{name}' is the last admin; deleting it would leave nobody able to manage the server"
            )));
        }
        inner
            .store
            .as_mut()
            .expect("store")
            .delete(name)
            .map_err(|e| ApiError::server(format!("deleting the principal: {e}")))?;
        inner.by_key.remove(&target.access_key_id);
        inner.sessions.retain(|_, (n, _)| n != name);
        Ok(())
    }

    fn rotate(&self, name: &str) -> Result<PrincipalRecord, ApiError> {
        let record = {
            let mut inner = self.inner.lock().expect("auth lock");
            let Some(old) = inner.by_key.values().find(|r| r.name == name).cloned() else {
                return Err(ApiError::client(format!(
                    "name: there is no principal '{name}'; `qm principal list` shows them"
                )));
            };
            let new = PrincipalRecord {
                access_key_id: super::new_access_key(),
                secret: super::new_secret(),
                ..old.clone()
            };
            inner
                .store
                .as_mut()
                .expect("store")
                .rotate(name, &new.access_key_id, &new.secret)
                .map_err(|e| ApiError::server(format!("storing the new keys: {e}")))?;
            inner.by_key.remove(&old.access_key_id);
            inner.by_key.insert(new.access_key_id.clone(), new.clone());
            inner.sessions.retain(|_, (n, _)| n != name);
            new
        };
        if name == ADMIN {
            self.write_credentials(&record).map_err(|e| {
                ApiError::server(format!(
                    "the keys were rotated but the credentials file was not rewritten ({e}); use the keys in this answer"
                ))
            })?;
        }
        Ok(record)
    }

    /// Checks a key pair (the dashboard's login) and opens a session for its principal.
    fn login(&self, req: &LoginRequest) -> Result<(String, String), ApiError> {
        if !self.settings.enabled {
            return Ok((
                crate::secret::hex(&crate::secret::random_bytes(32)),
                ANONYMOUS.into(),
            ));
        }
        let mut inner = self.inner.lock().expect("auth lock");
        let Some(record) = inner.by_key.get(&req.access_key_id).cloned() else {
            return Err(ApiError::forbidden(
                "UnrecognizedClientException",
                "that access key id is not a principal's key on this server",
            ));
        };
        let same: bool = record
            .secret
            .as_bytes()
            .ct_eq(req.secret_access_key.as_bytes())
            .into();
        if !same {
            return Err(ApiError::forbidden(
                "InvalidSignatureException",
                "the secret access key is not the one of that access key id",
            ));
        }
        let token = crate::secret::hex(&crate::secret::random_bytes(32));
        inner.sessions.insert(
            token.clone(),
            (record.name.clone(), Instant::now() + SESSION_TTL),
        );
        Ok((token, record.name))
    }
}
