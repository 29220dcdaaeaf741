//! Who may act for an executor: the token that registered it (its owner), or the cluster's
//! admin token. An executor's id, once registered, cannot be registered again, moved to another
//! app or namespace, sent heartbeats, results or log lines for, or deregistered by another
//! token; an operator's removal frees it.

use super::{ADMIN_OWNER, ExecutorToken, Principal};
use crate::store::{ExecutorOwner, NamespaceId};

/// Why a caller may not act for an executor: what the caller is told (nothing of the owner),
/// and what the audit trail records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotYours {
    pub answer: String,
    pub why: String,
}

/// The owner key a registration by `principal` records; `None` for a caller that does not
/// register executors.
pub fn owner_key_of(principal: &Principal) -> Option<String> {
    match principal {
        Principal::Admin => Some(ADMIN_OWNER.to_owned()),
        Principal::Executor(token) => Some(token.owner_key()),
        _ => None,
    }
}

/// Whether `principal` may act for executor `executor_id`, which `owner` describes.
pub fn may_act_for(
    principal: &Principal,
    executor_id: &str,
    owner: &ExecutorOwner,
) -> Result<(), NotYours> {
    let token = match principal {
        Principal::Admin => return Ok(()),
        Principal::Executor(token) => token,
        other => {
            return Err(NotYours {
                answer: "this token does not act for executors".to_owned(),
                why: format!("{} does not act for executors", other.describe()),
            });
        }
    };
    let allowed = match owner.registered_by.as_deref() {
        // Removed by an operator: its id is free.
        Some("") => true,
        Some(key) => key == token.owner_key(),
        // Registered before owners were kept: acted for under its app's namespace, as then,
        // until it registers again and so gets an owner.
        None => match token {
            ExecutorToken::Cluster => owner.namespace_id == NamespaceId::DEFAULT,
            ExecutorToken::App(app) => owner.app_name == *app,
            ExecutorToken::Service { namespace, .. } => owner.namespace_id == *namespace,
        },
    };
    if allowed {
        return Ok(());
    }
    let registered_by = owner.registered_by.as_deref().map_or_else(
        || format!("a token of app {}'s namespace", owner.app_name),
        super::describe_owner,
    );
    Err(NotYours {
        answer: format!(
            "executor {executor_id:?} is not one this token registered: use another executor id, \
             or ask the cluster's admin to remove it"
        ),
        why: format!(
            "executor {executor_id:?} (app {}) belongs to {registered_by}; {} may not act for it",
            owner.app_name,
            principal.describe()
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEAM_A: NamespaceId = NamespaceId(2);
    const TEAM_B: NamespaceId = NamespaceId(3);

    fn service(token_id: i64, namespace: NamespaceId) -> Principal {
        Principal::Executor(ExecutorToken::Service {
            token_id,
            name: "runners".to_owned(),
            namespace,
        })
    }

    fn owned(by: Option<&str>, app: &str, namespace: NamespaceId) -> ExecutorOwner {
        ExecutorOwner {
            app_name: app.to_owned(),
            namespace_id: namespace,
            registered_by: by.map(str::to_owned),
        }
    }

    #[test]
    fn only_the_registering_token_or_the_admin_acts_for_an_executor() {
        let b_1 = owned(Some("token:8"), "bapp", TEAM_B);
        assert_eq!(may_act_for(&service(8, TEAM_B), "exec-b-1", &b_1), Ok(()));
        assert_eq!(may_act_for(&Principal::Admin, "exec-b-1", &b_1), Ok(()));
        for other in [
            service(7, TEAM_A),
            service(9, TEAM_B),
            Principal::Executor(ExecutorToken::Cluster),
            Principal::Executor(ExecutorToken::App("bapp".to_owned())),
        ] {
            let refused = may_act_for(&other, "exec-b-1", &b_1).unwrap_err();
            assert!(!refused.answer.contains("token:8"), "{}", refused.answer);
            assert!(!refused.answer.contains("bapp"), "{}", refused.answer);
            assert!(refused.why.contains("service token #8"), "{}", refused.why);
        }
        assert!(may_act_for(&Principal::ReadOnly, "exec-b-1", &b_1).is_err());
        let shared = owned(Some("cluster"), "shared", NamespaceId::DEFAULT);
        assert!(may_act_for(&service(7, TEAM_A), "s-1", &shared).is_err());
        assert_eq!(
            may_act_for(&Principal::Executor(ExecutorToken::Cluster), "s-1", &shared),
            Ok(())
        );
        let removed = owned(Some(""), "bapp", TEAM_B);
        assert_eq!(
            may_act_for(&service(7, TEAM_A), "exec-b-1", &removed),
            Ok(())
        );
    }

    #[test]
    fn an_executor_registered_before_owners_is_its_apps_namespaces() {
        let old = owned(None, "bapp", TEAM_B);
        assert_eq!(may_act_for(&service(9, TEAM_B), "b-1", &old), Ok(()));
        assert!(may_act_for(&service(7, TEAM_A), "b-1", &old).is_err());
        assert!(may_act_for(&Principal::Executor(ExecutorToken::Cluster), "b-1", &old).is_err());
        let app = Principal::Executor(ExecutorToken::App("bapp".to_owned()));
        assert_eq!(may_act_for(&app, "b-1", &old), Ok(()));
        let default_app = owned(None, "shared", NamespaceId::DEFAULT);
        assert_eq!(
            may_act_for(
                &Principal::Executor(ExecutorToken::Cluster),
                "s-1",
                &default_app
            ),
            Ok(())
        );
    }
}
