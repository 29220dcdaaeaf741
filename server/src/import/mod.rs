//! Jobs brought over from other schedulers. `xxl_source` reads XXL-JOB's tables (2.3/2.4
//! schema) from its MySQL database; `xxl_mapping` turns each of its jobs into a Carillon job
//! document, or says why it cannot come across. The CLI (`cli/import.rs`) makes the plan true
//! through the REST API, as `apply` does.

pub mod xxl_mapping;
pub mod xxl_source;
