//! The database a PostgreSQL gallery lives in: its DSN read from the
//! environment variable the model names (never from config.pbtxt, where a
//! password would be in plain sight), with timeouts so that an unreachable
//! database fails a call instead of hanging it.

use std::time::Duration;

use ::postgres::config::Host;
use ::postgres::{Client, Config, NoTls};

use crate::error::{Error, Result};

/// A dead peer is noticed within about this long (connect, keepalives).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const KEEPALIVE_IDLE: Duration = Duration::from_secs(10);
const TCP_USER_TIMEOUT: Duration = Duration::from_secs(15);
/// Sessions say who they are in `pg_stat_activity`, unless the DSN does.
const APPLICATION_NAME: &str = "triton-face";

#[derive(Clone)]
pub struct Target {
    config: Config,
    /// "postgres@db:5432/face (DSN from $FACE_GALLERY_DSN)": never the password.
    shown: String,
}

impl Target {
    /// The DSN in environment variable `var`.
    pub fn from_env(var: &str) -> Result<Self> {
        let dsn = std::env::var(var).map_err(|_| {
            Error::invalid(format!(
                "gallery_store \"postgres\": the environment variable {var} (model parameter \
                 `gallery_dsn_env`) is not set; set it to the database's DSN, e.g. \
                 postgresql://user:password@host:5432/dbname"
            ))
        })?;
        Self::parse(&dsn, var)
    }

    /// `dsn` (a URL or key=value pairs) with this backend's timeouts.
    pub fn parse(dsn: &str, var: &str) -> Result<Self> {
        // The parser's message never quotes the DSN (it may hold a password).
        let mut config: Config = dsn.parse().map_err(|e| {
            Error::invalid(format!(
                "gallery_store \"postgres\": the DSN in {var} is not valid: {}",
                why(&e)
            ))
        })?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        if config.get_tcp_user_timeout().is_none() {
            config.tcp_user_timeout(TCP_USER_TIMEOUT);
        }
        config.keepalives(true).keepalives_idle(KEEPALIVE_IDLE);
        if config.get_application_name().is_none() {
            config.application_name(APPLICATION_NAME);
        }
        let shown = format!("{} (DSN from ${var})", where_(&config));
        Ok(Target { config, shown })
    }

    /// A new session. Plain TCP or a Unix socket: TLS is not built in.
    pub fn connect(&self) -> std::result::Result<Client, ::postgres::Error> {
        self.config.connect(NoTls)
    }

    /// The database whatever the DSN's spelling (a URL or key=value pairs,
    /// hosts in any order or case, the default port written or not): its
    /// hosts, ports and database. No user, no password.
    pub fn database(&self) -> String {
        let c = &self.config;
        let mut hosts: Vec<String> = (c.get_hosts().iter())
            .map(|h| match h {
                Host::Tcp(h) => h.to_ascii_lowercase(),
                Host::Unix(p) => p.canonicalize().unwrap_or(p.clone()).display().to_string(),
            })
            .collect();
        if hosts.is_empty() {
            hosts.push("localhost".into());
        }
        hosts.sort();
        let mut ports = c.get_ports().to_vec();
        if ports.is_empty() {
            ports.push(5432);
        }
        ports.sort();
        let db = c.get_dbname().or(c.get_user()).unwrap_or("");
        format!("{hosts:?} {ports:?} {db}")
    }

    /// For messages: user, host, port and database.
    pub fn shown(&self) -> &str {
        &self.shown
    }
}

/// An error with its causes: the crate's own text stops at "db error",
/// leaving the server's message (e.g. "terminating connection due to
/// administrator command") in its source.
pub fn why(e: &::postgres::Error) -> String {
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        let more = c.to_string();
        if !text.contains(&more) {
            text = format!("{text}: {more}");
        }
        cause = c.source();
    }
    text
}

fn where_(c: &Config) -> String {
    let host = match c.get_hosts().first() {
        Some(Host::Tcp(h)) => h.clone(),
        Some(Host::Unix(p)) => p.display().to_string(),
        None => "localhost".into(),
    };
    let port = c.get_ports().first().copied().unwrap_or(5432);
    let user = c.get_user().unwrap_or("(default user)");
    let db = c.get_dbname().unwrap_or(user);
    format!("{user}@{host}:{port}/{db}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_password_is_never_shown() {
        let t = Target::parse("postgresql://face:s3cret@db:5433/gallery", "X").unwrap();
        assert_eq!(t.shown(), "face@db:5433/gallery (DSN from $X)");
        let t = Target::parse("host=db user=face password=s3cret dbname=g", "X").unwrap();
        assert!(!t.shown().contains("s3cret"), "{}", t.shown());
        let e = Target::parse("postgresql://face:s3cret@db:notaport/g", "X")
            .err()
            .unwrap();
        assert!(!e.message().contains("s3cret"), "{e}");
    }

    #[test]
    fn one_database_whatever_its_spelling() {
        let one = |dsn: &str| Target::parse(dsn, "X").unwrap().database();
        let url = one("postgresql://face:s3cret@DB:5432/f");
        assert_eq!(url, one("host=db dbname=f user=other"));
        assert_eq!(url, one("postgresql://db/f"));
        assert_ne!(url, one("postgresql://db/g"));
        assert_ne!(url, one("postgresql://db:5433/f"));
        assert!(!url.contains("s3cret") && !url.contains("face"), "{url}");
    }

    #[test]
    fn an_unset_variable_is_named() {
        let e = Target::from_env("FACE_TEST_SURELY_UNSET_DSN")
            .err()
            .unwrap();
        assert!(e.message().contains("FACE_TEST_SURELY_UNSET_DSN"), "{e}");
        assert!(e.message().contains("not set"), "{e}");
    }
}
