use carillon_executor::{JobContext, job};

#[job]
async fn report(_ctx: JobContext) -> String {
    String::new()
}

fn main() {}
