//! The secrets a delivery pass's offers carry: an HTTP job's header values, and the secrets an
//! executor's job names (its `secrets`, sent in the dispatch). Read once per namespace per
//! pass, and only for offers that name any, so the fire path of other jobs reads nothing.

use std::collections::HashMap;

use super::Dispatcher;
use super::http_jobs::open_named;
use super::plan::Offer;
use crate::secret::Secret;
use crate::store::{self, ExecutorRecord, NamespaceId};

impl Dispatcher {
    /// Opens the secrets the offers of a pass name, HTTP jobs' and executors' jobs' alike. An
    /// executor's offer whose secrets do not open is marked refused, naming why.
    pub(super) async fn open_offer_secrets(
        &self,
        offers: &mut [Offer],
    ) -> Result<(), store::Error> {
        let mut needed: HashMap<NamespaceId, Vec<usize>> = HashMap::new();
        for (i, offer) in offers.iter().enumerate() {
            let names_any = match &offer.http {
                Some(http) => http.names_secrets(),
                None => !offer.policy.secrets.is_empty(),
            };
            if names_any {
                needed.entry(offer.namespace).or_default().push(i);
            }
        }
        let keys = self.http_jobs.as_ref().and_then(|h| h.keys());
        for (namespace, indices) in needed {
            let stored = self.store.secrets_list(namespace).await?;
            for i in indices {
                let offer = &mut offers[i];
                if let Some(http) = offer.http.as_mut() {
                    if let Some(http_jobs) = &self.http_jobs {
                        http_jobs.open_secrets(http, namespace, &stored);
                    }
                    continue;
                }
                match open_named(keys, namespace, &offer.policy.secrets, &stored) {
                    Ok(opened) => {
                        offer.request.secrets.0 = opened
                            .into_iter()
                            .map(|(name, value)| (name, Secret::expose(&value).to_owned()))
                            .collect();
                    }
                    Err(why) => offer.refused = Some(why),
                }
            }
        }
        Ok(())
    }
}

/// Whether an executor may be sent secrets: over TLS, or on this machine's loopback, and
/// speaking Carillon's protocol (XXL-JOB's has no place for them).
pub(super) fn carries_secrets(executor: &ExecutorRecord) -> bool {
    !executor.is_xxl() && safe_address(&executor.address)
}

/// Whether `address` is over TLS or on this machine's loopback.
fn safe_address(address: &str) -> bool {
    let Ok(url) = reqwest::Url::parse(address) else {
        return false;
    };
    if url.scheme() == "https" {
        return true;
    }
    let Some(host) = url.host_str() else {
        return false;
    };
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    match bare.parse::<std::net::IpAddr>() {
        Ok(ip) => ip.to_canonical().is_loopback(),
        Err(_) => bare.eq_ignore_ascii_case("localhost"),
    }
}

#[cfg(test)]
mod tests {
    use super::safe_address;

    #[test]
    fn secrets_go_over_tls_or_to_loopback_only() {
        for safe in [
            "https://exec.example.com:9000",
            "http://127.0.0.1:9100",
            "http://127.8.0.1:9100",
            "http://[::1]:9100",
            "http://localhost:9100",
        ] {
            assert!(safe_address(safe), "{safe}");
        }
        for unsafe_ in [
            "http://10.0.0.7:9100",
            "http://exec.example.com",
            "not a url",
        ] {
            assert!(!safe_address(unsafe_), "{unsafe_}");
        }
    }
}
