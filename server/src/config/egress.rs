//! The node's egress policy as the settings give it: `[egress]`, and the lists that came before
//! it (`dispatch.allowed_networks`, `http_jobs.allowed_networks`, `http_jobs.allowed_hosts`),
//! still read, each with a notice at start saying what to set instead.

use super::Config;
use crate::egress::{Egress, EgressConfig};

/// The policy to apply, and a notice for each setting read in an older place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgressSettings {
    pub config: EgressConfig,
    pub notices: Vec<String>,
}

impl Config {
    /// `[egress]`, with the older lists' entries joined to it. At its default (`["public"]`,
    /// written or not), `[egress]` does not add `public` to an older list: a node that listed
    /// its executors' networks keeps reaching those only.
    pub fn egress(&self) -> EgressSettings {
        let mut notices = Vec::new();
        let older = [
            (
                "dispatch.allowed_networks",
                self.dispatch.allowed_networks.as_ref(),
            ),
            (
                "http_jobs.allowed_networks",
                self.http_jobs.allowed_networks.as_ref(),
            ),
        ];
        let mut networks: Vec<String> = Vec::new();
        for (setting, list) in older {
            let Some(list) = list else { continue };
            // An empty executors' list allowed any address.
            let entries = if list.is_empty() && setting.starts_with("dispatch") {
                vec!["0.0.0.0/0".to_owned(), "::/0".to_owned()]
            } else {
                list.clone()
            };
            notices.push(format!(
                "{setting} is read into egress.allowed_networks, one list for executors, HTTP \
                 jobs and alert webhooks: set egress.allowed_networks = {entries:?} (with \
                 \"public\" for public addresses) and remove {setting}"
            ));
            networks.extend(entries);
        }
        let mut config = self.egress.clone();
        if !networks.is_empty() {
            if config.allowed_networks == EgressConfig::default().allowed_networks {
                config.allowed_networks.clear();
            }
            for network in networks {
                if !config.allowed_networks.contains(&network) {
                    config.allowed_networks.push(network);
                }
            }
        }
        if let Some(hosts) = &self.http_jobs.allowed_hosts {
            notices.push(format!(
                "http_jobs.allowed_hosts is read into egress.allowed_hosts: set \
                 egress.allowed_hosts = {hosts:?} and remove http_jobs.allowed_hosts"
            ));
            config.allowed_hosts.extend(hosts.iter().cloned());
        }
        EgressSettings { config, notices }
    }

    /// The egress policy, parsed; the error names the setting at fault.
    pub fn egress_policy(&self) -> Result<Egress, super::ConfigError> {
        Egress::new(&self.egress().config)
            .map_err(|(field, reason)| super::ConfigError::Invalid { field, reason })
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    fn parse(text: &str) -> Config {
        toml::from_str(text).unwrap_or_else(|e| panic!("{e}\n{text}"))
    }

    #[test]
    fn the_default_is_public_only_and_says_nothing() {
        let settings = Config::default().egress();
        assert_eq!(settings.config.allowed_networks, ["public"]);
        assert!(settings.notices.is_empty());
    }

    #[test]
    fn an_older_list_is_kept_as_it_was_and_named_with_what_to_set() {
        let settings = parse("[dispatch]\nallowed_networks = [\"10.0.0.0/8\"]\n").egress();
        assert_eq!(settings.config.allowed_networks, ["10.0.0.0/8"]);
        assert!(settings.notices[0].contains("egress.allowed_networks"));
        let settings = parse("[dispatch]\nallowed_networks = []\n").egress();
        assert_eq!(settings.config.allowed_networks, ["0.0.0.0/0", "::/0"]);
        let settings = parse(
            "[egress]\nallowed_networks = [\"public\", \"loopback\"]\n[http_jobs]\n\
             allowed_networks = [\"192.168.0.0/16\"]\nallowed_hosts = [\"api.example.com\"]\n",
        )
        .egress();
        assert_eq!(
            settings.config.allowed_networks,
            ["public", "loopback", "192.168.0.0/16"],
            "an [egress] set on purpose keeps its own"
        );
        assert_eq!(settings.config.allowed_hosts, ["api.example.com"]);
        assert_eq!(settings.notices.len(), 2);
        let bad = parse("[egress]\nallowed_networks = [\"10.0.0.0/40\"]\n")
            .egress_policy()
            .unwrap_err()
            .to_string();
        assert!(bad.starts_with("egress.allowed_networks"), "{bad}");
    }
}
