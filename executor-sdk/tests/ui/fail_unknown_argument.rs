use carillon_executor::{JobContext, JobError, job};

#[job(schedule = "0 * * * *")]
async fn report(_ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

fn main() {}
