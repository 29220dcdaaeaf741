//! The secrets a delivery pass's offers carry: an HTTP job's header values, and the secrets an
//! executor's job names (its `secrets`, sent in the dispatch). Read once per namespace per
//! pass, and only for offers that name any, so the fire path of other jobs reads nothing.

use std::collections::HashMap;

use super::Dispatcher;
use super::http_jobs::open_named;
use super::plan::Offer;
use crate::secret::Secret;
use crate::store::{self, NamespaceId};

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
