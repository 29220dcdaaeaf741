use carillon_executor::{JobContext, JobError, job};

#[job]
async fn plain(_ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

#[job(name = "nightly.report", description = "a report", cron = "0 30 2 * * ?", tz = "Asia/Shanghai")]
async fn report(ctx: JobContext) -> Result<String, String> {
    Ok(format!("shard {}", ctx.shard().index))
}

// Quartz's start/step form, which the admin nodes accept too.
#[job(cron = "0 0/5 * * * ?")]
async fn every_five_minutes(_ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

#[job(rrule = "DTSTART:20260101T090000Z\nRRULE:FREQ=DAILY")]
async fn daily(_ctx: carillon_executor::JobContext) -> Result<u32, std::io::Error> {
    Ok(1)
}

fn main() {
    let names: Vec<&str> = carillon_executor::registered_jobs().iter().map(|j| j.name).collect();
    assert!(names.contains(&"plain") && names.contains(&"nightly.report") && names.contains(&"daily"));
}
