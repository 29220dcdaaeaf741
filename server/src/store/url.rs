//! Database URLs: which backend they name, and how to print them without their password.

use std::fmt;

use super::Error;

/// The three supported database servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Postgres,
    Mysql,
    Sqlite,
}

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Postgres => "postgres",
            Backend::Mysql => "mysql",
            Backend::Sqlite => "sqlite",
        }
    }
}

/// A database URL whose backend is known. Displays with its password hidden.
#[derive(Clone, PartialEq, Eq)]
pub struct DatabaseUrl {
    url: String,
    backend: Backend,
}

impl DatabaseUrl {
    pub fn parse(url: &str) -> Result<Self, Error> {
        let scheme = url
            .split(':')
            .next()
            .unwrap_or_default()
            .to_ascii_lowercase();
        let backend = match scheme.as_str() {
            "postgres" | "postgresql" => Backend::Postgres,
            "mysql" | "mariadb" => Backend::Mysql,
            "sqlite" => Backend::Sqlite,
            _ => {
                return Err(Error::UnsupportedUrl { url: redact(url) });
            }
        };
        // sqlx knows MariaDB by its MySQL scheme.
        let url = match url.strip_prefix("mariadb:") {
            Some(rest) => format!("mysql:{rest}"),
            None => url.to_owned(),
        };
        Ok(Self { url, backend })
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The URL with its password; only for handing to the driver.
    pub fn expose(&self) -> &str {
        &self.url
    }
}

impl fmt::Display for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&redact(&self.url))
    }
}

impl fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DatabaseUrl({self})")
    }
}

/// Replaces the password of `scheme://user:password@host` with `***`.
fn redact(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_owned();
    };
    let authority_start = scheme_end + 3;
    let rest = &url[authority_start..];
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    match (authority.rfind('@'), authority.find(':')) {
        (Some(at), Some(colon)) if colon < at => format!(
            "{}{}:***{}",
            &url[..authority_start],
            &authority[..colon],
            &url[authority_start + at..]
        ),
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_hides_the_password() {
        let url = DatabaseUrl::parse("postgres://carillon:s3cret@db:5432/carillon").unwrap();
        assert_eq!(url.to_string(), "postgres://carillon:***@db:5432/carillon");
        assert!(!format!("{url:?}").contains("s3cret"));
    }

    #[test]
    fn mariadb_scheme_is_handed_to_the_mysql_driver() {
        let url = DatabaseUrl::parse("mariadb://root@127.0.0.1/test").unwrap();
        assert_eq!(url.backend(), Backend::Mysql);
        assert_eq!(url.expose(), "mysql://root@127.0.0.1/test");
    }

    #[test]
    fn unknown_schemes_are_named_in_the_error() {
        let err = DatabaseUrl::parse("oracle://u:pw@h/db").unwrap_err();
        let text = err.to_string();
        assert!(text.contains("oracle://u:***@h/db"), "{text}");
        assert!(!text.contains("pw@"), "{text}");
    }
}
