//! Principals: who may call the server, each with one access key pair. The `/qm/v1/principals`,
//! `/qm/v1/whoami` and `/qm/v1/admins` endpoints through the one [`Client`], their answers,
//! and the tables `qm principal list` and `qm whoami` print.
//!
//! A secret access key crosses the wire once, in the answer to create or rotate; it is kept
//! out of `Debug` so that no log or panic message shows it.

use serde::{Deserialize, Serialize};

use super::format::table;
use super::http::{encode_path_segment, Client, ClientError};
use super::time::utc;
use qm_api::sigv4::Credentials;

/// The collection path.
const PRINCIPALS: &str = "/qm/v1/principals";

/// The server's admin list (besides the principals created as admins).
const ADMINS: &str = "/qm/v1/admins";

/// The body and answer of `/qm/v1/admins`.
#[derive(Serialize, Deserialize)]
struct AdminList {
    admins: Vec<String>,
}

/// A principal with its new key pair: the answer to create and rotate.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IssuedKey {
    /// The principal.
    pub name: String,
    /// Its groups.
    #[serde(default)]
    pub groups: Vec<String>,
    /// The new access key id.
    pub access_key_id: String,
    /// The new secret: shown once, never again.
    pub secret_access_key: String,
    /// When the principal was created, epoch milliseconds.
    pub created_at: i64,
}

impl IssuedKey {
    /// The key pair, to sign with or to write to a credentials file.
    pub fn credentials(&self) -> Credentials {
        Credentials {
            access_key_id: self.access_key_id.clone(),
            secret_access_key: self.secret_access_key.clone(),
        }
    }
}

impl std::fmt::Debug for IssuedKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IssuedKey")
            .field("name", &self.name)
            .field("groups", &self.groups)
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"<redacted>")
            .field("created_at", &self.created_at)
            .finish()
    }
}

/// A principal as listed (no secret).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Principal {
    /// Its name.
    pub name: String,
    /// Its groups.
    #[serde(default)]
    pub groups: Vec<String>,
    /// Its access key id.
    pub access_key_id: String,
    /// When it was created, epoch milliseconds.
    pub created_at: i64,
    /// Whether it may manage principals.
    #[serde(default)]
    pub admin: bool,
}

#[derive(Deserialize)]
struct PrincipalList {
    principals: Vec<Principal>,
}

/// Who the server takes the caller for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WhoAmI {
    /// The principal (`anonymous` under `--no-auth`).
    pub name: String,
    /// Its groups.
    #[serde(default)]
    pub groups: Vec<String>,
    /// Whether it is an admin.
    #[serde(default)]
    pub admin: bool,
}

#[derive(Serialize)]
struct CreateRequest<'a> {
    name: &'a str,
    groups: &'a [String],
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    admin: bool,
}

fn principal_path(name: &str) -> String {
    format!("{PRINCIPALS}/{}", encode_path_segment(name))
}

impl Client {
    /// Creates principal `name` in `groups` (an admin when `admin`); the answer holds its key
    /// pair.
    pub fn create_principal(
        &self,
        name: &str,
        groups: &[String],
        admin: bool,
    ) -> Result<IssuedKey, ClientError> {
        self.post(
            PRINCIPALS,
            &CreateRequest {
                name,
                groups,
                admin,
            },
        )
    }

    /// Every principal, by name.
    pub fn list_principals(&self) -> Result<Vec<Principal>, ClientError> {
        let mut list: PrincipalList = self.get_typed(PRINCIPALS)?;
        list.principals.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(list.principals)
    }

    /// Deletes principal `name`; its key stops working.
    pub fn delete_principal(&self, name: &str) -> Result<(), ClientError> {
        let _: serde_json::Value = self.delete_typed(&principal_path(name))?;
        Ok(())
    }

    /// Gives principal `name` a new key pair; the old one stops working at once.
    pub fn rotate_principal(&self, name: &str) -> Result<IssuedKey, ClientError> {
        self.post(
            &format!("{}/rotate", principal_path(name)),
            &serde_json::json!({}),
        )
    }

    /// Who the server takes this client's key for.
    pub fn whoami(&self) -> Result<WhoAmI, ClientError> {
        self.get_typed("/qm/v1/whoami")
    }

    /// Who is an admin besides the principals created as admins: principal names and
    /// `group:NAME` entries, in the order they were set.
    pub fn admins(&self) -> Result<Vec<String>, ClientError> {
        let list: AdminList = self.get_typed(ADMINS)?;
        Ok(list.admins)
    }

    /// Replaces the admin list (admins only); the answer is the list as the server keeps it.
    pub fn set_admins(&self, admins: &[String]) -> Result<Vec<String>, ClientError> {
        let list: AdminList = self.put(
            ADMINS,
            &AdminList {
                admins: admins.to_vec(),
            },
        )?;
        Ok(list.admins)
    }
}

fn groups_cell(groups: &[String]) -> String {
    if groups.is_empty() {
        "-".to_string()
    } else {
        groups.join(",")
    }
}

/// `qm principal list`: name, groups, access key id, created, admin; rows in the order given.
pub fn principals_table(principals: &[Principal]) -> String {
    if principals.is_empty() {
        return "no principals\n".to_string();
    }
    let rows: Vec<Vec<String>> = principals
        .iter()
        .map(|p| {
            vec![
                p.name.clone(),
                groups_cell(&p.groups),
                p.access_key_id.clone(),
                utc(p.created_at),
                if p.admin { "yes" } else { "no" }.to_string(),
            ]
        })
        .collect();
    table(
        &["name", "groups", "access-key-id", "created", "admin"],
        &rows,
    )
}

/// `qm whoami`: the principal, its groups and whether it is an admin, one per line.
pub fn whoami_text(me: &WhoAmI) -> String {
    format!(
        "name    {}\ngroups  {}\nadmin   {}\n",
        me.name,
        groups_cell(&me.groups),
        if me.admin { "yes" } else { "no" }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn principal(name: &str, groups: &[&str], admin: bool) -> Principal {
        Principal {
            name: name.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            access_key_id: format!("QMAK{}", name.to_ascii_uppercase()),
            created_at: 1_767_225_600_000,
            admin,
        }
    }

    #[test]
    fn the_principals_table_shows_groups_keys_creation_and_admins() {
        let table = principals_table(&[
            principal("alice", &["research", "ops"], false),
            principal("qm-admin", &[], true),
        ]);
        assert_eq!(
            table,
            "NAME      GROUPS        ACCESS-KEY-ID  CREATED               ADMIN\n\
             alice     research,ops  QMAKALICE      2026-01-01T00:00:00Z  no\n\
             qm-admin  -             QMAKQM-ADMIN   2026-01-01T00:00:00Z  yes\n"
        );
        assert_eq!(principals_table(&[]), "no principals\n");
    }

    #[test]
    fn whoami_names_the_principal_its_groups_and_whether_it_is_an_admin() {
        let me = WhoAmI {
            name: "alice".into(),
            groups: vec!["research".into()],
            admin: false,
        };
        assert_eq!(
            whoami_text(&me),
            "name    alice\ngroups  research\nadmin   no\n"
        );
    }

    #[test]
    fn an_issued_key_reads_the_wire_shape_and_hides_its_secret_from_debug() {
        let key: IssuedKey = serde_json::from_str(
            r#"{"name":"alice","groups":["research"],"accessKeyId":"QMAK1",
                "secretAccessKey":"s3cret","createdAt":5}"#,
        )
        .unwrap();
        assert_eq!(key.credentials().secret_access_key, "s3cret");
        assert!(!format!("{key:?}").contains("s3cret"));
    }

    #[test]
    fn a_principal_name_is_encoded_for_the_path() {
        assert_eq!(principal_path("a@b.c"), "/qm/v1/principals/a%40b.c");
    }
}
