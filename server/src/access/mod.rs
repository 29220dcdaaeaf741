//! Who may do what: the roles of a namespace, the callers the API knows, and the decision
//! whether a caller may do what an operation needs (plain rules, here). The API's
//! `permissions` module reads the need of each operation and the namespace it touches;
//! [`tokens`] finds the service token a bearer belongs to, [`oidc`] checks a person's JWT
//! and [`grants`] gives the person the roles of its groups.

pub mod executor_owners;
pub mod grants;
pub mod jwt;
pub mod oidc;
mod snapshot;
pub mod tokens;

use std::collections::BTreeMap;
use std::fmt;

use crate::store::NamespaceId;

/// The role name of a service token that speaks the executor protocol for its namespace's
/// apps (it is no [`Role`]: it opens nothing of the admin API).
pub const EXECUTOR_ROLE: &str = "executor";

/// What a service token or a group of people may do in one namespace. Each role
/// may do everything the ones before it may.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// Reads everything of the namespace; changes nothing.
    Viewer,
    /// Runs what is there: start, stop, trigger, cancel, re-run, backfill, enqueue tasks.
    Operator,
    /// Creates, edits and deletes jobs, workflows and calendars.
    Editor,
    /// Also the namespace's own settings and its service tokens.
    Admin,
}

impl Role {
    pub const ALL: [Role; 4] = [Role::Viewer, Role::Operator, Role::Editor, Role::Admin];

    pub fn name(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
            Role::Editor => "editor",
            Role::Admin => "admin",
        }
    }

    pub fn parse(name: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|role| role.name() == name)
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What an operation needs of its caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Any caller but an executor: the cluster's shape, the API's document, the namespaces
    /// the caller can see.
    SignedIn,
    /// At least this role in the namespace the request works in.
    Role(Role),
    /// Reads across the whole cluster (executors, statistics, metrics).
    ClusterViewer,
    /// Changes to the whole cluster (namespaces, executors, purges).
    ClusterAdmin,
    /// The executor protocol.
    Executor,
}

impl Need {
    /// How the API's document names it (`x-carillon-permission`).
    pub fn name(self) -> &'static str {
        match self {
            Need::SignedIn => "signed-in",
            Need::Role(role) => role.name(),
            Need::ClusterViewer => "cluster-viewer",
            Need::ClusterAdmin => "cluster-admin",
            Need::Executor => "executor",
        }
    }
}

/// A service token's grant, as a caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceGrant {
    pub token_id: i64,
    pub name: String,
    pub namespace: NamespaceId,
    pub role: Role,
}

/// A person signed in with the identity provider's JWT, and the roles its groups carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Person {
    /// The token's `sub`.
    pub subject: String,
    /// As the audit trail names it (`[auth.oidc] name_claim`).
    pub name: String,
    pub groups: Vec<String>,
    /// Its role in each namespace a group of its has one in.
    pub roles: BTreeMap<NamespaceId, Role>,
    /// `Admin`: the cluster's administrator, in every namespace; `Viewer`: reads the cluster
    /// and every namespace.
    pub cluster: Option<Role>,
}

impl Person {
    fn role_in(&self, namespace: NamespaceId) -> Option<Role> {
        self.roles.get(&namespace).copied().max(self.cluster)
    }

    fn best_role(&self) -> Option<Role> {
        self.roles.values().copied().max().max(self.cluster)
    }

    fn decide(&self, need: Need, namespace: Option<NamespaceId>) -> Decision {
        let cluster_needed = |what: &str| {
            Decision::Refuse(format!(
                "this needs a {what} of the cluster: a group of [auth.oidc] cluster_{what}_groups"
            ))
        };
        match need {
            Need::SignedIn => Decision::Allow,
            Need::Executor => Decision::Refuse("people do not speak the executor protocol".into()),
            Need::ClusterAdmin if self.cluster == Some(Role::Admin) => Decision::Allow,
            Need::ClusterAdmin => cluster_needed("admin"),
            Need::ClusterViewer if self.cluster.is_some() => Decision::Allow,
            Need::ClusterViewer => cluster_needed("viewer"),
            Need::Role(needed) => match namespace.and_then(|ns| self.role_in(ns)) {
                None => Decision::Hide,
                Some(role) if role >= needed => Decision::Allow,
                Some(role) => Decision::Refuse(format!(
                    "your role in this namespace is {role}; this needs {needed}"
                )),
            },
        }
    }

    fn decide_anywhere(&self, need: Need) -> Decision {
        let Need::Role(needed) = need else {
            return self.decide(need, None);
        };
        match self.best_role() {
            None => Decision::Refuse(format!(
                "none of your groups ({}) has a role in any namespace: ask a namespace's admin \
                 to grant one",
                if self.groups.is_empty() {
                    "none".to_owned()
                } else {
                    self.groups.join(", ")
                }
            )),
            Some(best) if best >= needed => Decision::Allow,
            Some(best) => {
                Decision::Refuse(format!("your highest role is {best}; this needs {needed}"))
            }
        }
    }
}

/// Who is calling, decided from the bearer token; handlers read it as a request extension.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// The admin token: the cluster's administrator, in every namespace. It is read from the
    /// node's settings, never the database, so it still opens everything when the database's
    /// tokens (or, later, the identity provider) cannot be read: the break-glass token.
    Admin,
    /// The read-only token: a viewer of every namespace and of the cluster.
    ReadOnly,
    /// An executor, by the token it presented.
    Executor(ExecutorToken),
    /// A service token: one role in one namespace.
    Service(ServiceGrant),
    /// A person, signed in with the identity provider.
    Person(Box<Person>),
}

/// The token an executor presented: what it may act for, and who owns what it registers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecutorToken {
    /// The cluster's executor token (`[auth] executor_token`): apps of `default`.
    Cluster,
    /// An app token of the settings (`[auth] app_tokens`): that app's executors only.
    App(String),
    /// A namespace's service token of role `executor`: that namespace's apps only.
    Service {
        token_id: i64,
        name: String,
        namespace: NamespaceId,
    },
}

impl ExecutorToken {
    /// The namespace it registers apps into; `None`: `default`, or the app's own.
    pub fn namespace(&self) -> Option<NamespaceId> {
        match self {
            ExecutorToken::Service { namespace, .. } => Some(*namespace),
            ExecutorToken::Cluster | ExecutorToken::App(_) => None,
        }
    }

    /// The one app it is limited to.
    pub fn app(&self) -> Option<&str> {
        match self {
            ExecutorToken::App(app) => Some(app),
            ExecutorToken::Cluster | ExecutorToken::Service { .. } => None,
        }
    }

    /// How an executor it registered records its owner (`executors.registered_by`): stable
    /// across restarts and nodes, and never the token itself.
    pub fn owner_key(&self) -> String {
        match self {
            ExecutorToken::Cluster => "cluster".to_owned(),
            ExecutorToken::App(app) => format!("app:{app}"),
            ExecutorToken::Service { token_id, .. } => format!("token:{token_id}"),
        }
    }
}

/// The owner key of an executor the admin token registered.
pub const ADMIN_OWNER: &str = "admin";

/// How a view and an error name the owner key `key` of [`ExecutorToken::owner_key`].
pub fn describe_owner(key: &str) -> String {
    match key.split_once(':') {
        Some(("app", app)) => format!("the app token of {app}"),
        Some(("token", id)) => format!("service token #{id}"),
        _ if key == ADMIN_OWNER => "the admin token".to_owned(),
        _ if key == "cluster" => "the cluster's executor token".to_owned(),
        _ => key.to_owned(),
    }
}

/// What a caller gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allow,
    /// The caller has no role in the namespace: it is answered as if nothing were there, so
    /// ids and names cannot be probed across namespaces.
    Hide,
    /// Refused (`403`), saying why.
    Refuse(String),
}

impl Principal {
    /// Its role in `namespace`, if it has one.
    pub fn role_in(&self, namespace: NamespaceId) -> Option<Role> {
        match self {
            Principal::Admin => Some(Role::Admin),
            Principal::ReadOnly => Some(Role::Viewer),
            Principal::Service(grant) if grant.namespace == namespace => Some(grant.role),
            Principal::Person(person) => person.role_in(namespace),
            Principal::Service(_) | Principal::Executor(_) => None,
        }
    }

    /// The one app an executor's token is limited to, if it is.
    pub fn executor_app(&self) -> Option<&str> {
        match self {
            Principal::Executor(token) => token.app(),
            _ => None,
        }
    }

    /// The namespace a request of this caller works in when it names none: a service
    /// token's own, a person's only one; `None` for the cluster's tokens (`default`).
    pub fn home(&self) -> Option<NamespaceId> {
        match self {
            Principal::Service(grant) => Some(grant.namespace),
            Principal::Person(person) if person.cluster.is_none() && person.roles.len() == 1 => {
                person.roles.keys().next().copied()
            }
            _ => None,
        }
    }

    /// Whether it may do what `need` says in `namespace` (`None` for cluster-wide needs).
    pub fn decide(&self, need: Need, namespace: Option<NamespaceId>) -> Decision {
        let refuse = |why: &str| Decision::Refuse(why.to_owned());
        match (self, need) {
            (Principal::Executor(_), Need::Executor) | (Principal::Admin, _) => Decision::Allow,
            (Principal::Person(person), _) => person.decide(need, namespace),
            (Principal::Executor(_), _) | (_, Need::Executor) => {
                refuse("this token does not open this endpoint")
            }
            (_, Need::SignedIn) | (Principal::ReadOnly, Need::ClusterViewer) => Decision::Allow,
            (Principal::ReadOnly, Need::Role(Role::Viewer)) => Decision::Allow,
            (Principal::ReadOnly, _) => refuse("the read-only token cannot change anything"),
            (Principal::Service(_), Need::ClusterViewer | Need::ClusterAdmin) => refuse(
                "a service token works in its own namespace; this needs the cluster's admin \
                 token",
            ),
            (Principal::Service(grant), Need::Role(needed)) => match namespace {
                Some(namespace) if namespace == grant.namespace => {
                    if grant.role >= needed {
                        Decision::Allow
                    } else {
                        Decision::Refuse(format!(
                            "this token's role is {}; this needs {needed}",
                            grant.role
                        ))
                    }
                }
                _ => Decision::Hide,
            },
        }
    }

    /// Whether it may do what `need` says in some namespace: a role too weak for an
    /// operation is refused before anything is looked up, whichever namespace it names.
    pub fn decide_anywhere(&self, need: Need) -> Decision {
        match self {
            Principal::Person(person) => person.decide_anywhere(need),
            _ => self.decide(need, Some(self.home().unwrap_or(NamespaceId::DEFAULT))),
        }
    }

    /// How the audit trail and `created_by` name it.
    pub fn describe(&self) -> String {
        match self {
            Principal::Admin => "admin token".to_owned(),
            Principal::ReadOnly => "read-only token".to_owned(),
            Principal::Executor(ExecutorToken::App(app)) => format!("app token of {app}"),
            Principal::Executor(ExecutorToken::Cluster) => "cluster executor token".to_owned(),
            Principal::Executor(ExecutorToken::Service { token_id, name, .. }) => {
                format!("executor token {name} (#{token_id})")
            }
            Principal::Service(grant) => format!("token {} (#{})", grant.name, grant.token_id),
            // Both come from the token: cut, so that the trail's column always takes them.
            Principal::Person(person) if person.name == person.subject => {
                format!("user {}", cut(&person.name))
            }
            Principal::Person(person) => {
                format!("user {} (sub {})", cut(&person.name), cut(&person.subject))
            }
        }
    }
}

/// At most 100 characters of `text`, control characters escaped.
fn cut(text: &str) -> String {
    text.chars()
        .take(100)
        .flat_map(char::escape_debug)
        .take(200)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEAM: NamespaceId = NamespaceId(2);
    const OTHER: NamespaceId = NamespaceId(3);

    fn service(role: Role) -> Principal {
        Principal::Service(ServiceGrant {
            token_id: 7,
            name: "ci".to_owned(),
            namespace: TEAM,
            role,
        })
    }

    #[test]
    fn each_role_may_do_what_the_ones_before_it_may_in_its_own_namespace_only() {
        for (have_at, have) in Role::ALL.into_iter().enumerate() {
            for (need_at, need) in Role::ALL.into_iter().enumerate() {
                let decision = service(have).decide(Need::Role(need), Some(TEAM));
                assert_eq!(
                    decision == Decision::Allow,
                    have_at >= need_at,
                    "{have} doing what needs {need}: {decision:?}"
                );
                assert_eq!(
                    service(have).decide(Need::Role(need), Some(OTHER)),
                    Decision::Hide
                );
            }
        }
    }

    #[test]
    fn cluster_tokens_keep_what_they_opened_and_service_tokens_never_reach_the_cluster() {
        for need in [Need::ClusterViewer, Need::ClusterAdmin, Need::Executor] {
            assert!(matches!(
                service(Role::Admin).decide(need, None),
                Decision::Refuse(_)
            ));
        }
        assert_eq!(
            service(Role::Viewer).decide(Need::SignedIn, None),
            Decision::Allow
        );
        for need in [
            Need::SignedIn,
            Need::ClusterAdmin,
            Need::Executor,
            Need::Role(Role::Admin),
        ] {
            assert_eq!(Principal::Admin.decide(need, Some(OTHER)), Decision::Allow);
        }
        let read_only = Principal::ReadOnly;
        assert_eq!(
            read_only.decide(Need::Role(Role::Viewer), Some(OTHER)),
            Decision::Allow
        );
        assert_eq!(read_only.decide(Need::ClusterViewer, None), Decision::Allow);
        assert!(matches!(
            read_only.decide(Need::Role(Role::Operator), Some(TEAM)),
            Decision::Refuse(_)
        ));
        let executor = Principal::Executor(ExecutorToken::Service {
            token_id: 4,
            name: "runners".to_owned(),
            namespace: TEAM,
        });
        assert_eq!(executor.describe(), "executor token runners (#4)");
        assert_eq!(executor.decide(Need::Executor, None), Decision::Allow);
        assert!(matches!(
            executor.decide(Need::SignedIn, None),
            Decision::Refuse(_)
        ));
    }

    fn person(roles: &[(NamespaceId, Role)], cluster: Option<Role>) -> Principal {
        Principal::Person(Box::new(Person {
            subject: "u-1".to_owned(),
            name: "alice".to_owned(),
            groups: vec!["team-a".to_owned()],
            roles: roles.iter().copied().collect(),
            cluster,
        }))
    }

    #[test]
    fn a_person_has_its_groups_roles_where_they_were_granted_and_the_clusters_everywhere() {
        let editor = person(&[(TEAM, Role::Editor)], None);
        assert_eq!(
            editor.decide(Need::Role(Role::Editor), Some(TEAM)),
            Decision::Allow
        );
        assert!(matches!(
            editor.decide(Need::Role(Role::Admin), Some(TEAM)),
            Decision::Refuse(_)
        ));
        assert_eq!(
            editor.decide(Need::Role(Role::Viewer), Some(OTHER)),
            Decision::Hide
        );
        assert_eq!(editor.home(), Some(TEAM));
        assert_eq!(
            editor.decide_anywhere(Need::Role(Role::Editor)),
            Decision::Allow
        );
        for need in [Need::ClusterViewer, Need::ClusterAdmin, Need::Executor] {
            assert!(matches!(editor.decide(need, None), Decision::Refuse(_)));
        }
        assert_eq!(editor.describe(), "user alice (sub u-1)");

        let two = person(&[(TEAM, Role::Viewer), (OTHER, Role::Operator)], None);
        assert_eq!(two.home(), None);
        assert_eq!(
            two.decide_anywhere(Need::Role(Role::Operator)),
            Decision::Allow
        );
        assert!(matches!(
            two.decide_anywhere(Need::Role(Role::Editor)),
            Decision::Refuse(_)
        ));

        let nobody = person(&[], None);
        let Decision::Refuse(why) = nobody.decide_anywhere(Need::Role(Role::Viewer)) else {
            panic!("a person without roles is refused, saying its groups");
        };
        assert!(why.contains("team-a"), "{why}");
        assert_eq!(nobody.decide(Need::SignedIn, None), Decision::Allow);

        let viewer = person(&[(TEAM, Role::Editor)], Some(Role::Viewer));
        assert_eq!(viewer.decide(Need::ClusterViewer, None), Decision::Allow);
        assert_eq!(
            viewer.decide(Need::Role(Role::Viewer), Some(OTHER)),
            Decision::Allow
        );
        assert_eq!(
            viewer.decide(Need::Role(Role::Editor), Some(TEAM)),
            Decision::Allow
        );
        assert!(matches!(
            viewer.decide(Need::ClusterAdmin, None),
            Decision::Refuse(_)
        ));
        let admin = person(&[], Some(Role::Admin));
        assert_eq!(admin.decide(Need::ClusterAdmin, None), Decision::Allow);
        assert_eq!(
            admin.decide(Need::Role(Role::Admin), Some(OTHER)),
            Decision::Allow
        );
        assert_eq!(admin.role_in(OTHER), Some(Role::Admin));
    }
}
