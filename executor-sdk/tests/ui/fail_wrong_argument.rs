use carillon_executor::{JobError, job};

#[job]
async fn report(count: u32) -> Result<u32, JobError> {
    Ok(count)
}

fn main() {}
