//! Principals: who may call the server, with their access keys.
//!
//! They live in their own table, outside the event log: the log's batches are replayed,
//! exported and shown (decisions, audit), and a secret must never travel with them. The server
//! keeps them in memory and writes through this table; nothing else reads it. A backup of the
//! store holds the secrets too, so it is as sensitive as the data directory itself.

use std::path::Path;

use rusqlite::{params, Connection};

use crate::StoreError;

/// A principal as stored.
#[derive(Clone, PartialEq, Eq)]
pub struct PrincipalRecord {
    /// Its name (what audit entries and job owners show).
    pub name: String,
    /// Groups it belongs to (permissions name `group:<g>`).
    pub groups: Vec<String>,
    /// Whether it may do everything (the first one, `qm-admin`, is).
    pub admin: bool,
    /// Its access key id.
    pub access_key_id: String,
    /// Its secret access key.
    pub secret: String,
    /// When it was created (epoch milliseconds).
    pub created_ms: i64,
}

impl std::fmt::Debug for PrincipalRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrincipalRecord")
            .field("name", &self.name)
            .field("groups", &self.groups)
            .field("admin", &self.admin)
            .field("access_key_id", &self.access_key_id)
            .field("secret", &"<redacted>")
            .field("created_ms", &self.created_ms)
            .finish()
    }
}

/// The principals table of one store, through a connection of its own.
pub struct Principals {
    conn: Connection,
}

impl Principals {
    /// Opens the principals of the store at `path` (the store must have been opened by
    /// [`crate::SqliteLog::open`] first, which creates the table).
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let conn = Connection::open(path)?;
        conn.busy_timeout(std::time::Duration::from_secs(60))?;
        Ok(Principals { conn })
    }

    /// Every principal, by name.
    pub fn list(&self) -> Result<Vec<PrincipalRecord>, StoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT name, groups, admin, access_key_id, secret, created_ms
             FROM principals ORDER BY name",
        )?;
        let rows = stmt.query_map([], |r| {
            let groups: String = r.get(1)?;
            Ok(PrincipalRecord {
                name: r.get(0)?,
                groups: groups
                    .split(',')
                    .filter(|g| !g.is_empty())
                    .map(String::from)
                    .collect(),
                admin: r.get(2)?,
                access_key_id: r.get(3)?,
                secret: r.get(4)?,
                created_ms: r.get(5)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Adds a principal (its name and key must be new).
    pub fn insert(&mut self, p: &PrincipalRecord) -> Result<(), StoreError> {
        self.conn.execute(
            "INSERT INTO principals (name, groups, admin, access_key_id, secret, created_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                p.name,
                p.groups.join(","),
                p.admin,
                p.access_key_id,
                p.secret,
                p.created_ms
            ],
        )?;
        Ok(())
    }

    /// Removes a principal; whether it existed.
    pub fn delete(&mut self, name: &str) -> Result<bool, StoreError> {
        Ok(self
            .conn
            .execute("DELETE FROM principals WHERE name = ?1", params![name])?
            > 0)
    }

    /// Gives a principal a new key pair (the old one stops working); whether it existed.
    pub fn rotate(&mut self, name: &str, key: &str, secret: &str) -> Result<bool, StoreError> {
        Ok(self.conn.execute(
            "UPDATE principals SET access_key_id = ?2, secret = ?3 WHERE name = ?1",
            params![name, key, secret],
        )? > 0)
    }
}

impl Principals {
    /// The server's admins beyond the principals created as admins: names and `group:<g>`
    /// entries (the cluster file's `admins`), kept in the store's `meta` table.
    pub fn admins(&self) -> Result<Vec<String>, StoreError> {
        let v: Option<String> = rusqlite::OptionalExtension::optional(self.conn.query_row(
            "SELECT value FROM meta WHERE key = 'admins'",
            [],
            |r| r.get(0),
        ))?;
        Ok(v.unwrap_or_default()
            .split(',')
            .filter(|e| !e.is_empty())
            .map(String::from)
            .collect())
    }

    /// Replaces the admins list.
    pub fn set_admins(&mut self, admins: &[String]) -> Result<(), StoreError> {
        self.conn.execute(
            "INSERT INTO meta (key, value) VALUES ('admins', ?1)
             ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            params![admins.join(",")],
        )?;
        Ok(())
    }
}

/// The table, created by the store's migration (schema 3).
pub(crate) const TABLE: &str = "CREATE TABLE IF NOT EXISTS principals (
    name TEXT PRIMARY KEY,
    groups TEXT NOT NULL,
    admin INTEGER NOT NULL,
    access_key_id TEXT NOT NULL UNIQUE,
    secret TEXT NOT NULL,
    created_ms INTEGER NOT NULL
);";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn principals_are_kept_renamed_keys_replace_old_ones_and_deletes_stick() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("qm.sqlite3");
        drop(crate::SqliteLog::open(&db).unwrap());
        let mut p = Principals::open(&db).unwrap();
        let alice = PrincipalRecord {
            name: "alice".into(),
            groups: vec!["research".into(), "ml".into()],
            admin: false,
            access_key_id: "QMAK1".into(),
            secret: "s1".into(),
            created_ms: 5,
        };
        p.insert(&alice).unwrap();
        assert!(p.insert(&alice).is_err(), "a name is unique");
        assert!(p.rotate("alice", "QMAK2", "s2").unwrap());
        let again = Principals::open(&db).unwrap().list().unwrap();
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].groups, ["research", "ml"]);
        assert_eq!(
            (again[0].access_key_id.as_str(), again[0].secret.as_str()),
            ("QMAK2", "s2")
        );
        assert!(
            !format!("{:?}", again[0]).contains("s2"),
            "Debug hides the secret"
        );
        assert!(p.delete("alice").unwrap());
        assert!(!p.delete("alice").unwrap());
        assert!(p.list().unwrap().is_empty());
        assert!(p.admins().unwrap().is_empty());
        p.set_admins(&["ops".into(), "group:platform".into()])
            .unwrap();
        assert_eq!(
            Principals::open(&db).unwrap().admins().unwrap(),
            ["ops", "group:platform"]
        );
    }
}
