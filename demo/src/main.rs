//! The demo executor app. It will register several kinds of `#[job]` handler with the admin
//! nodes once the executor SDK exists; until then it says so and exits, rather than pretend.

use std::process::ExitCode;

fn main() -> ExitCode {
    eprintln!(
        "carillon-demo: the executor SDK (protocol v{}) is not implemented yet; \
         there are no jobs to serve",
        carillon_executor::PROTOCOL_VERSION
    );
    ExitCode::from(2)
}
