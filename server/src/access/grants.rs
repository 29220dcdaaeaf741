//! The roles people get from their groups: the `role_grants` table (a namespace's role given
//! to a group), kept by the node as a [`Snapshot`], and the cluster's groups of `[auth.oidc]`.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::jwt::Identity;
use super::oidc::OidcConfig;
use super::snapshot::Snapshot;
use super::{Person, Role};
use crate::store::{self, GrantRecord, GrantStore, NamespaceId};

/// The node's copy of the role grants.
#[derive(Debug)]
pub struct RoleGrants {
    store: Arc<dyn GrantStore>,
    copy: Snapshot<Vec<GrantRecord>>,
}

impl RoleGrants {
    pub fn new(store: Arc<dyn GrantStore>) -> Self {
        Self {
            store,
            copy: Snapshot::default(),
        }
    }

    /// Makes the next use read the grants again (after this node changed them).
    pub fn forget(&self) {
        self.copy.forget();
    }

    /// Every grant, from the node's copy.
    pub async fn all(&self) -> Result<Arc<Vec<GrantRecord>>, store::Error> {
        self.copy
            .current("role grants", || self.store.grants_all())
            .await
    }

    /// The person `identity` names, with the roles of its groups.
    pub async fn person(
        &self,
        identity: Identity,
        settings: &OidcConfig,
    ) -> Result<Person, store::Error> {
        let grants = self.all().await?;
        Ok(person_of(identity, &grants, settings))
    }
}

/// The person of `identity`: in each namespace the highest role granted to one of its groups;
/// cluster admin or viewer when a group is among `[auth.oidc]`'s.
pub fn person_of(identity: Identity, grants: &[GrantRecord], settings: &OidcConfig) -> Person {
    let member = |group: &String| identity.groups.contains(group);
    let mut roles: BTreeMap<NamespaceId, Role> = BTreeMap::new();
    for grant in grants.iter().filter(|grant| member(&grant.group_name)) {
        let Some(role) = Role::parse(&grant.role) else {
            continue;
        };
        let held = roles.entry(grant.namespace_id).or_insert(role);
        *held = (*held).max(role);
    }
    let cluster = if settings.cluster_admin_groups.iter().any(member) {
        Some(Role::Admin)
    } else if settings.cluster_viewer_groups.iter().any(member) {
        Some(Role::Viewer)
    } else {
        None
    };
    Person {
        subject: identity.subject,
        name: identity.name,
        groups: identity.groups,
        roles,
        cluster,
    }
}
