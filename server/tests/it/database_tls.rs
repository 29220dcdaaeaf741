//! TLS to the database, against private PostgreSQL and MariaDB servers that accept TLS only
//! (certificates made by the test): a node connects with full verification; a wrong trust root
//! or host name is refused with an error that says so; a plain connection is refused by the
//! server. PostgreSQL also requires a client certificate here.
#![allow(
    clippy::unwrap_used,
    reason = "a test fails loudly on any unexpected error"
)]

use crate::support;

use std::time::Duration;

use carillon_server::store::{self, DatabaseUrl, PoolOptions};
use support::db::Engine;
use support::node::{NodeProcess, NodeSpec};
use support::pki::TestPki;
use support::private_server::PrivateServer;

async fn connect(url: &str) -> Result<(), String> {
    let options = PoolOptions {
        max_connections: 1,
        acquire_timeout: Duration::from_secs(10),
        statement_timeout: Duration::from_secs(10),
        transaction_pooler: false,
    };
    let parsed = DatabaseUrl::parse(url).map_err(|e| e.to_string())?;
    let store = store::connect(&parsed, &options)
        .await
        .map_err(|e| e.to_string())?;
    store.now_ms().await.map_err(|e| e.to_string())?;
    Ok(())
}

async fn refused(url: &str, says: &[&str]) {
    let err = connect(url)
        .await
        .expect_err(&format!("{url} must be refused"));
    assert!(
        says.iter()
            .any(|s| err.to_lowercase().contains(&s.to_lowercase())),
        "{url}: the error should say one of {says:?}: {err}"
    );
}

/// A real node on `url`: it connects, migrates and becomes a member.
async fn a_node_runs_on(url: &str) {
    let dir = tempfile::tempdir().unwrap();
    let node = NodeProcess::start(NodeSpec::fast("tls-1", url, dir.path())).await;
    support::wait_for(Duration::from_secs(20), "the node to join", || async {
        node.cluster().await.filter(|c| c.this_node.member)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_over_tls_verifies_the_server_and_presents_a_client_certificate() {
    let pki = TestPki::new();
    let Some(server) = PrivateServer::start_tls(Engine::Postgres, &pki).await else {
        return;
    };
    let client = format!(
        "sslcert={}&sslkey={}",
        pki.client_cert().display(),
        pki.client_key().display()
    );
    let ca = pki.ca().display().to_string();
    let good = server.url_with(&format!("sslmode=verify-full&sslrootcert={ca}&{client}"));
    connect(&good).await.unwrap();
    a_node_runs_on(&good).await;

    let other = pki.other_ca().display().to_string();
    refused(
        &server.url_with(&format!("sslmode=verify-full&sslrootcert={other}&{client}")),
        &["certificate", "UnknownIssuer"],
    )
    .await;
    // The certificate names 127.0.0.1, not localhost: verify-full refuses, verify-ca (which
    // does not check the name) connects.
    let by_name = |mode: &str| {
        server
            .url_with(&format!("sslmode={mode}&sslrootcert={ca}&{client}"))
            .replace("127.0.0.1", "localhost")
    };
    refused(
        &by_name("verify-full"),
        &["NotValidForName", "not valid for"],
    )
    .await;
    connect(&by_name("verify-ca")).await.unwrap();
    // The server refuses a plain connection, and one without a client certificate.
    refused(
        &server.url_with("sslmode=disable"),
        &["pg_hba.conf", "reject"],
    )
    .await;
    refused(
        &server.url_with(&format!("sslmode=verify-full&sslrootcert={ca}")),
        &["certificate"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_over_tls_verifies_the_server() {
    let pki = TestPki::new();
    let Some(server) = PrivateServer::start_tls(Engine::Mysql, &pki).await else {
        return;
    };
    let ca = pki.ca().display().to_string();
    let good = server.url_with(&format!("ssl-mode=VERIFY_IDENTITY&ssl-ca={ca}"));
    connect(&good).await.unwrap();
    a_node_runs_on(&good).await;

    let other = pki.other_ca().display().to_string();
    refused(
        &server.url_with(&format!("ssl-mode=VERIFY_IDENTITY&ssl-ca={other}")),
        &["certificate", "UnknownIssuer"],
    )
    .await;
    let by_name = |mode: &str| {
        server
            .url_with(&format!("ssl-mode={mode}&ssl-ca={ca}"))
            .replace("127.0.0.1", "localhost")
    };
    refused(
        &by_name("VERIFY_IDENTITY"),
        &["NotValidForName", "not valid for"],
    )
    .await;
    connect(&by_name("VERIFY_CA")).await.unwrap();
    // MariaDB 10.11 answers a plain login under `require_secure_transport` with "access
    // denied"; the same login over TLS (PREFERRED) is let in, so TLS is what it refused.
    refused(
        &server.url_with("ssl-mode=DISABLED"),
        &["insecure transport", "access denied"],
    )
    .await;
    connect(&server.url_with("ssl-mode=PREFERRED"))
        .await
        .unwrap();
}
