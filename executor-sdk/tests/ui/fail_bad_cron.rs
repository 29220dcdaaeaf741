use carillon_executor::{JobContext, JobError, job};

#[job(cron = "61 * * * *")]
async fn report(_ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

fn main() {}
