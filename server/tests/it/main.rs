//! The integration suites that need no `#[job]` handler of their own, in one test binary: each
//! file is one suite (its module doc says what it proves), and `support` is compiled once for
//! all of them. Suites whose executors link `#[job]` handlers stay binaries of their own, since
//! an SDK executor serves every handler linked into its process.
#![allow(
    clippy::unwrap_used,
    reason = "a test fails loudly on any unexpected error"
)]

#[path = "../support/mod.rs"]
#[macro_use]
mod support;

mod api_fuzz;
mod audit;
mod auth_scopes;
mod boundary_walk;
mod child_conformance;
mod child_jobs_e2e;
mod claim_conformance;
mod cli;
mod cli_apply;
mod cli_offline;
mod cluster_exactly_once;
mod cluster_failover;
mod cluster_start;
mod console_browser;
mod database_tls;
mod deploy_compose;
mod deploy_debian;
mod deploy_image;
mod deploy_kubernetes;
mod deploy_monitoring;
mod dispatch_failover;
mod egress;
mod executor_trust;
mod executors_e2e;
mod flow_control;
mod history_conformance;
mod http_jobs;
mod job_store_conformance;
mod jobs_api;
mod jobs_running;
mod login;
mod namespace_conformance;
mod namespace_executors;
mod namespace_quotas;
mod namespaces_api;
mod observability;
mod oidc;
mod retention;
mod roles;
mod schedule_policies;
mod schedule_reference;
mod scripts_e2e;
mod secrets_api;
mod self_fencing;
mod settle_conformance;
mod single_node;
mod skip_alerts;
mod store_conformance;
mod upgrade;
mod workflows_e2e;
mod xxl_admin_api;
mod xxl_executors;
mod xxl_import;
