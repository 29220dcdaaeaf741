//! The one door to a namespace: the namespace the permission check admitted a call in, which
//! every handler that works in a namespace takes, rather than reading `?namespace=` itself.
//! Each list, filter, search and count then applies inside it, so no other parameter
//! (`job_id`, `key`, a cursor) can widen what a caller sees.

use super::{ApiError, ApiState};
use crate::access::{Decision, Need, Principal};
use crate::store::NamespaceId;

/// A namespace a request works in, with its name.
#[derive(Debug, Clone)]
pub(super) struct Namespace {
    pub(super) id: NamespaceId,
    pub(super) name: String,
}

/// Where [`super::permissions::authorize`] found the caller's role: the `namespace` query
/// parameter, the caller's home, `default`, `/namespaces/{name}` or the namespace of the
/// resource whose id is in the path; none for a cluster-wide operation.
#[derive(Debug, Clone, Copy)]
pub(super) struct Admitted {
    namespace: Option<NamespaceId>,
    /// The caller named it (`?namespace=`, a name or an id in the path), rather than leaving
    /// it to its home or `default`.
    named: bool,
}

impl Admitted {
    pub(super) fn new(namespace: Option<NamespaceId>, named: bool) -> Self {
        Self { namespace, named }
    }

    /// The namespace as the audit trail records it.
    pub(super) fn recorded(self) -> Option<NamespaceId> {
        self.namespace
    }

    /// The namespace, for an operation that works in one.
    pub(super) fn namespace(self) -> Result<NamespaceId, ApiError> {
        self.namespace.ok_or_else(|| {
            ApiError::Internal("an operation in a namespace was admitted without one".to_owned())
        })
    }

    /// The namespace with its name, for a view that shows it.
    pub(super) async fn named(self, state: &ApiState) -> Result<Namespace, ApiError> {
        let id = self.namespace()?;
        let name = state.namespaces.name_of(id).await?;
        // Deleted between the check and now.
        let name = name.ok_or_else(|| ApiError::missing(format!("namespace #{id}")))?;
        Ok(Namespace { id, name })
    }

    /// The namespace a listing that may span the cluster shows: none (every one) for a
    /// caller `every` opens to that named none; else the one it was admitted in.
    pub(super) fn listing(
        self,
        principal: &Principal,
        every: Need,
    ) -> Result<Option<NamespaceId>, ApiError> {
        if !self.named && principal.decide(every, None) == Decision::Allow {
            return Ok(None);
        }
        self.namespace().map(Some)
    }
}

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Admitted {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _: &S,
    ) -> Result<Self, Self::Rejection> {
        parts.extensions.get::<Admitted>().copied().ok_or_else(|| {
            ApiError::Internal("a handler ran without the permission check".to_owned())
        })
    }
}
