//! The exporter: spans queued by [`Traces`](super::Traces) go to the OTLP endpoint over
//! HTTP/protobuf in batches, from one task of their own, so a slow or absent collector costs
//! the fire path nothing but the spans it drops.

use std::collections::HashMap;
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SpanData, SpanExporter as _};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::warn;

/// Most spans in one export request.
const MAX_BATCH: usize = 512;

/// A span waits at most this long for others to go with it.
const FLUSH_AFTER: Duration = Duration::from_secs(1);

/// A failing collector is reported at most this often.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// What exporting needs, from `[telemetry]`.
#[derive(Debug, Clone)]
pub struct ExportSettings {
    /// The OTLP/HTTP endpoint: a base (`http://collector:4318`, `/v1/traces` is added) or the
    /// traces URL itself.
    pub endpoint: String,
    pub headers: HashMap<String, String>,
    pub service_name: String,
    pub node_id: String,
    pub timeout: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("telemetry.otlp_endpoint {endpoint:?}: {why}")]
    Build { endpoint: String, why: String },
}

/// The task sending a node's spans.
#[derive(Debug)]
pub struct TraceExport {
    spans: mpsc::Receiver<SpanData>,
    exporter: opentelemetry_otlp::SpanExporter,
    endpoint: String,
}

impl TraceExport {
    pub fn new(
        settings: &ExportSettings,
        spans: mpsc::Receiver<SpanData>,
    ) -> Result<Self, ExportError> {
        let endpoint = traces_url(&settings.endpoint);
        let build_error = |why: String| ExportError::Build {
            endpoint: settings.endpoint.clone(),
            why,
        };
        // The node's own client: its TLS setup, with the system's roots.
        let http = carillon_tls::http_client_builder()
            .build()
            .map_err(|e| build_error(carillon_tls::with_causes(&e)))?;
        let mut exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(http)
            .with_endpoint(endpoint.clone())
            .with_headers(settings.headers.clone())
            .with_timeout(settings.timeout)
            .build()
            .map_err(|e| build_error(e.to_string()))?;
        exporter.set_resource(
            &Resource::builder_empty()
                .with_service_name(settings.service_name.clone())
                .with_attributes([
                    KeyValue::new("service.instance.id", settings.node_id.clone()),
                    KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
                ])
                .build(),
        );
        Ok(Self {
            spans,
            exporter,
            endpoint,
        })
    }

    /// Sends batches until `stop`, then what is queued.
    pub async fn run(mut self, stop: CancellationToken) {
        let mut last_warning: Option<tokio::time::Instant> = None;
        loop {
            let mut batch = Vec::with_capacity(MAX_BATCH);
            tokio::select! {
                () = stop.cancelled() => break,
                got = self.spans.recv_many(&mut batch, MAX_BATCH) => if got == 0 { break },
            }
            let flush_at = tokio::time::Instant::now() + FLUSH_AFTER;
            while batch.len() < MAX_BATCH {
                let room = MAX_BATCH - batch.len();
                tokio::select! {
                    () = stop.cancelled() => break,
                    () = tokio::time::sleep_until(flush_at) => break,
                    got = self.spans.recv_many(&mut batch, room) => if got == 0 { break },
                }
            }
            self.send(batch, &mut last_warning).await;
        }
        // What the node's last moments queued.
        self.spans.close();
        let mut rest = Vec::new();
        while let Ok(span) = self.spans.try_recv() {
            rest.push(span);
        }
        while !rest.is_empty() {
            let tail = rest.split_off(rest.len().min(MAX_BATCH));
            let batch = std::mem::replace(&mut rest, tail);
            self.send(batch, &mut last_warning).await;
        }
    }

    async fn send(&self, batch: Vec<SpanData>, last_warning: &mut Option<tokio::time::Instant>) {
        let count = batch.len();
        if let Err(err) = self.exporter.export(batch).await {
            let now = tokio::time::Instant::now();
            if last_warning.is_none_or(|at| now.duration_since(at) >= WARN_EVERY) {
                *last_warning = Some(now);
                warn!(endpoint = %self.endpoint, spans = count, error = %err, "cannot export traces; these spans are lost");
            }
        }
    }
}

/// The traces URL of an OTLP/HTTP endpoint, as `OTEL_EXPORTER_OTLP_ENDPOINT` is read: a base
/// gets `/v1/traces`; a URL that already names it is kept.
fn traces_url(endpoint: &str) -> String {
    let trimmed = endpoint.trim_end_matches('/');
    if trimmed.ends_with("/v1/traces") {
        trimmed.to_owned()
    } else {
        format!("{trimmed}/v1/traces")
    }
}

#[cfg(test)]
mod tests {
    use super::traces_url;

    #[test]
    fn a_base_endpoint_gets_the_traces_path() {
        assert_eq!(traces_url("http://c:4318"), "http://c:4318/v1/traces");
        assert_eq!(traces_url("http://c:4318/"), "http://c:4318/v1/traces");
        assert_eq!(
            traces_url("https://c/otlp/v1/traces"),
            "https://c/otlp/v1/traces"
        );
    }
}
