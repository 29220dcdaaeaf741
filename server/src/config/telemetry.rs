//! `[telemetry]`: where a node's traces go (`observe::traces`), and what it refuses there.

use serde::Deserialize;

use super::{ConfigError, Secret, invalid};

/// `[telemetry]`: OpenTelemetry traces of the fire path and the API, over OTLP/HTTP
/// (protobuf). Off unless `otlp_endpoint` is set.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetryConfig {
    /// The collector: `http://collector:4318` (`/v1/traces` is added) or the traces URL.
    pub otlp_endpoint: Option<String>,
    /// Headers sent with every export (a vendor's API key): `{ "x-api-key" = "…" }`.
    pub otlp_headers: std::collections::BTreeMap<String, Secret>,
    /// `service.name` of the spans.
    pub service_name: String,
    /// The share of runs' and unsampled requests' traces exported, 0 to 1.
    pub sample_ratio: f64,
    /// How long one export may take before its spans are dropped.
    pub export_timeout_ms: u64,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            otlp_endpoint: None,
            otlp_headers: std::collections::BTreeMap::new(),
            service_name: "carillon".to_owned(),
            sample_ratio: 1.0,
            export_timeout_ms: 10_000,
        }
    }
}

impl TelemetryConfig {
    /// Refuses settings that cannot work, naming the field.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if let Some(endpoint) = &self.otlp_endpoint {
            let url = reqwest::Url::parse(endpoint).map_err(|e| {
                invalid(
                    "telemetry.otlp_endpoint",
                    format!("{endpoint:?} is not a URL: {e}"),
                )
            })?;
            if !matches!(url.scheme(), "http" | "https") {
                return Err(invalid(
                    "telemetry.otlp_endpoint",
                    format!(
                        "{endpoint:?}: use http:// or https:// (OTLP over HTTP; gRPC is not spoken)"
                    ),
                ));
            }
        }
        for (name, value) in &self.otlp_headers {
            let valid_name = !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_".contains(&b));
            if !valid_name || value.expose().is_empty() {
                return Err(invalid(
                    "telemetry.otlp_headers",
                    format!(
                        "{name:?}: a header needs a name of letters, digits, '-' or '_' and a value"
                    ),
                ));
            }
        }
        if !(0.0..=1.0).contains(&self.sample_ratio) {
            return Err(invalid(
                "telemetry.sample_ratio",
                format!("{} is outside 0..=1", self.sample_ratio),
            ));
        }
        if self.service_name.trim().is_empty() {
            return Err(invalid("telemetry.service_name", "must not be empty"));
        }
        if !(100..=600_000).contains(&self.export_timeout_ms) {
            return Err(invalid(
                "telemetry.export_timeout_ms",
                format!("{} is outside 100..=600000", self.export_timeout_ms),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Config, ConfigError};

    fn parse(text: &str) -> Result<Config, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: "test.toml".into(),
            message: e.to_string(),
        })?;
        config.validate()?;
        Ok(config)
    }

    #[test]
    fn telemetry_settings_that_cannot_work_are_refused_by_name() {
        for (text, field) in [
            (
                "otlp_endpoint = \"collector:4317\"",
                "telemetry.otlp_endpoint",
            ),
            (
                "otlp_endpoint = \"grpc://c:4317\"",
                "telemetry.otlp_endpoint",
            ),
            ("sample_ratio = 1.5", "telemetry.sample_ratio"),
            (
                "otlp_headers = { \"bad name\" = \"v\" }",
                "telemetry.otlp_headers",
            ),
            ("otlp_headers = { key = \"\" }", "telemetry.otlp_headers"),
            ("service_name = \" \"", "telemetry.service_name"),
        ] {
            let err = parse(&format!("[telemetry]\n{text}\n"))
                .unwrap_err()
                .to_string();
            assert!(err.contains(field), "{text}: {err}");
        }
        let on = parse("[telemetry]\notlp_endpoint = \"http://c:4318\"\nsample_ratio = 0.25\n");
        assert!(on.is_ok());
        assert!(
            !format!(
                "{:?}",
                parse("[telemetry]\notlp_headers = { k = \"sekrit\" }\n")
            )
            .contains("sekrit")
        );
    }
}
