use carillon_executor::{JobContext, JobError, job};

#[job(name = "report")]
async fn first(_ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

#[job(name = "report")]
async fn second(_ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

fn main() {}
