//! The `#[job]` attribute of the Carillon executor SDK. Use it through `carillon-executor`,
//! which re-exports it; this crate is an implementation detail pinned to the SDK's version.
//!
//! ```text
//! #[job(name = "report", description = "nightly report", cron = "0 30 2 * * ?", tz = "Asia/Shanghai")]
//! async fn report(ctx: JobContext) -> Result<String, JobError> { … }
//! ```
//!
//! Misuse is a compile error pointing at the fault, and the function is still emitted, so the
//! rest of the crate (and the IDE) keeps working.

mod expand;
mod parse;

use proc_macro::TokenStream;

/// Marks an `async fn(JobContext) -> Result<T, E>` as a job handler, collected at link time.
///
/// Arguments: `name` (default: the function's name), `description`, and optionally a schedule
/// declared in code, `cron = "…"` or `rrule = "…"`, with `tz = "…"`.
#[proc_macro_attribute]
pub fn job(attr: TokenStream, item: TokenStream) -> TokenStream {
    let item = proc_macro2::TokenStream::from(item);
    match expand::expand(attr.into(), item.clone()) {
        Ok(expanded) => expanded.into(),
        Err(err) => {
            let mut out = item;
            out.extend(err.to_compile_error());
            out.into()
        }
    }
}
