//! The leader's watch over apps: which lost every healthy executor, and which came back.

use std::collections::HashMap;

use super::AlertEvent;

/// What one look saw of an app's executors.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AppLook {
    /// Registered and not left.
    pub executors: usize,
    pub healthy: usize,
    /// One of its executors heartbeated within the lease and three looks.
    pub heard_lately: bool,
}

/// The leader's memory of each app's health between looks. An app is reported unhealthy
/// when two looks in a row find no healthy executor (a restart within one look is not an
/// outage), if it was healthy before or was heard from lately; and recovered when a look
/// finds a healthy executor again after that report.
#[derive(Debug, Default)]
pub struct AppWatch {
    apps: HashMap<String, AppState>,
}

#[derive(Debug, Default)]
struct AppState {
    seen_healthy: bool,
    looks_down: u32,
    reported: bool,
}

impl AppWatch {
    /// Takes in one look at every app; returns the alerts it calls for.
    pub fn look(&mut self, looks: HashMap<String, AppLook>) -> Vec<AlertEvent> {
        let mut events = Vec::new();
        let mut names: Vec<&String> = looks.keys().collect();
        names.sort();
        for app in names {
            let look = looks[app];
            let state = self.apps.entry(app.clone()).or_default();
            if look.healthy > 0 {
                if state.reported {
                    events.push(AlertEvent::AppRecovered {
                        app: app.clone(),
                        healthy: look.healthy,
                    });
                }
                *state = AppState {
                    seen_healthy: true,
                    ..AppState::default()
                };
                continue;
            }
            state.looks_down += 1;
            if state.looks_down >= 2 && !state.reported && (state.seen_healthy || look.heard_lately)
            {
                state.reported = true;
                events.push(AlertEvent::AppUnhealthy {
                    app: app.clone(),
                    executors: look.executors,
                });
            }
        }
        self.apps.retain(|app, _| looks.contains_key(app));
        events
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn looks(apps: &[(&str, usize, usize, bool)]) -> HashMap<String, AppLook> {
        apps.iter()
            .map(|(app, executors, healthy, heard_lately)| {
                (
                    (*app).to_owned(),
                    AppLook {
                        executors: *executors,
                        healthy: *healthy,
                        heard_lately: *heard_lately,
                    },
                )
            })
            .collect()
    }

    #[test]
    fn an_app_is_reported_down_after_two_looks_and_up_again_once() {
        let mut watch = AppWatch::default();
        assert!(watch.look(looks(&[("billing", 2, 2, true)])).is_empty());
        assert!(
            watch.look(looks(&[("billing", 2, 0, true)])).is_empty(),
            "one look down may be a restart"
        );
        assert_eq!(
            watch.look(looks(&[("billing", 2, 0, true)])),
            vec![AlertEvent::AppUnhealthy {
                app: "billing".to_owned(),
                executors: 2
            }]
        );
        assert!(
            watch.look(looks(&[("billing", 2, 0, false)])).is_empty(),
            "reported once"
        );
        assert_eq!(
            watch.look(looks(&[("billing", 2, 1, true)])),
            vec![AlertEvent::AppRecovered {
                app: "billing".to_owned(),
                healthy: 1
            }]
        );
        assert!(watch.look(looks(&[("billing", 2, 1, true)])).is_empty());
    }

    #[test]
    fn a_new_leader_reports_an_app_that_went_down_lately_but_not_one_long_gone() {
        let mut watch = AppWatch::default();
        let down = looks(&[("lately", 1, 0, true), ("long-gone", 1, 0, false)]);
        assert!(watch.look(down.clone()).is_empty());
        assert_eq!(
            watch.look(down.clone()),
            vec![AlertEvent::AppUnhealthy {
                app: "lately".to_owned(),
                executors: 1
            }]
        );
        // An app never reported down is not reported recovered.
        assert!(
            watch
                .look(looks(&[("lately", 1, 0, false), ("long-gone", 1, 1, true)]))
                .is_empty()
        );
    }
}
