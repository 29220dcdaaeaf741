//! `#[job]` misuse is a compile error with a clear message (the `.stderr` files are the
//! messages users see).

#[test]
fn misuse_of_job_is_a_compile_error() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/pass_*.rs");
    cases.compile_fail("tests/ui/fail_*.rs");
}
