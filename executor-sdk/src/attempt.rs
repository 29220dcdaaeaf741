//! An attempt as an executor tells the nodes of it: by its id and the handle its dispatch
//! carried, which its result and log lines quote.

/// An attempt's id and handle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AttemptRef {
    pub(crate) id: i64,
    pub(crate) handle: Option<String>,
}

impl AttemptRef {
    pub(crate) fn of(dispatch: &carillon_protocol::Dispatch) -> Self {
        Self {
            id: dispatch.attempt_id,
            handle: dispatch.handle.clone(),
        }
    }
}
