mod e2e_support;
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn panics_after_start() {
    let pg = e2e_support::E2e::start(1, |_| {}).await;
    assert!(pg.is_external());
    panic!("deliberate");
}
