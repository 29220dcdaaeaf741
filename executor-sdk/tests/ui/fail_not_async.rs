use carillon_executor::{JobContext, JobError, job};

#[job]
fn report(_ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

fn main() {}
